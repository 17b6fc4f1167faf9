import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// Where contract calls go: the running server (over the control socket, or directly when
/// this run is inside it) or a kernel booted in this process.
final class Session {
    private let client: ControlClient?
    private let kernel: Kernel?
    /// The kernel is the server's (this run is a launcher's command inside it): not ours to shut down.
    private let borrowed: Bool
    /// The calls go to a running server.
    let isRemote: Bool

    private init(client: ControlClient?, kernel: Kernel?, borrowed: Bool = false) {
        self.client = client
        self.kernel = kernel
        self.borrowed = borrowed
        isRemote = client != nil || borrowed
    }

    /// Inside a server, its kernel; else the server at the socket unless `--local` or
    /// boot-shaping options were given; otherwise boots in-process. Throws `BootFailure`
    /// when a local boot cannot proceed.
    static func open(_ inv: Invocation) async throws -> Session {
        if let server = inv.server { return Session(client: nil, kernel: server, borrowed: true) }
        if !inv.local && !inv.shapesBoot, let client = try? ControlClient(path: inv.socketPath) {
            return Session(client: client, kernel: nil)
        }
        var configuration = try inv.kernelConfiguration()
        // A feature's command loads only what it needs; termind's own commands (features,
        // contracts, call, completion, the general help) see every feature.
        if inv.selection == nil, let command = inv.command {
            if command == "help", !inv.arguments.isEmpty {
                configuration.commandWords = inv.arguments
            } else if !RegistryValidator.hostCommands.contains(command) {
                configuration.commandWords = [command] + inv.arguments
            }
        }
        let kernel = Kernel(configuration: configuration, sink: try inv.logSink())
        let statuses = try await kernel.boot()
        let disabled = statuses.filter { $0.state == .disabled }
        let unattributed = await kernel.unattributed
        if !disabled.isEmpty || !unattributed.isEmpty {
            let count = disabled.count + unattributed.count
            inv.console.error("\(count) feature problem\(count == 1 ? "" : "s") (run 'termind features' for details).")
        }
        return Session(client: nil, kernel: kernel)
    }

    /// Opens a session, runs `body`, and always shuts a local kernel down afterwards.
    static func with<T>(_ inv: Invocation, _ body: (Session) async throws -> T) async throws -> T {
        let session = try await open(inv)
        do {
            let result = try await body(session)
            await session.close()
            return result
        } catch {
            await session.close()
            throw error
        }
    }

    func call(_ contract: String, body: Data) async throws -> Data {
        if let client { return try client.call(contract, body: body) }
        return try await kernel!.call(contract, body: body)
    }

    /// A typed call: in-process (a kernel of ours, or the server's for a launcher's command)
    /// the values cross without JSON; over the socket they are encoded and decoded.
    func call<C: Contract>(_ contract: C.Type, _ request: C.Request) async throws -> C.Response {
        if let kernel { return try await kernel.call(C.self, request) }
        let reply = try await call(C.id.description, body: JSONCoding.encode(request))
        return try JSONDecoder().decode(C.Response.self, from: reply)
    }

    /// Runs stream `name` (see Kernel.runStream for `onOpen` and `onEvent`): over the socket,
    /// or in this process through the same endpoint and session code.
    /// `descriptors`: this process's own standard streams for a stream that takes them —
    /// sent to the server (which holds copies), or copied for the stream in this process.
    func stream(_ name: String, body: Data, descriptors: StreamDescriptors? = nil, onOpen: @escaping (StreamControl) -> Void,
                onEvent: @escaping @Sendable (StreamEvent) -> JSONValue?) async throws -> Data {
        if let client {
            return try client.stream(name, body: body, descriptors: descriptors, onOpen: { id in
                onOpen(StreamControl(send: { client.streamMessage(id: id, $0) },
                                     input: { client.streamInput(id: id, $0) }))
            }, onEvent: onEvent)
        }
        let copies = descriptors.map { given in
            StreamDescriptors(stdin: given.stdin.map { fcntl($0, F_DUPFD_CLOEXEC, 3) }, stdout: given.stdout.map { fcntl($0, F_DUPFD_CLOEXEC, 3) },
                              stderr: given.stderr.map { fcntl($0, F_DUPFD_CLOEXEC, 3) })
        }
        return try await kernel!.runStream(name, body: body, descriptors: copies, onOpen: onOpen, onEvent: onEvent)
    }

    /// Problems not tied to a loaded feature (local boots only).
    func unattributedProblems() async -> [FeatureProblem] {
        guard let kernel, !borrowed else { return [] }
        return await kernel.unattributed
    }

    func close() async {
        if let kernel, !borrowed { await kernel.shutdown() }
    }
}
