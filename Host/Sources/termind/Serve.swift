import Dispatch
import Foundation
import TermindCore
import TermindKernel

/// `termind serve`: boots the kernel once, listens on the control socket, and runs until
/// SIGINT or SIGTERM; then stops accepting, stops features in reverse order and removes
/// the socket.
enum Serve {
    static func run(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.isEmpty else { throw Invocation.UsageError(description: "serve takes no arguments.") }
        let kernel = Kernel(configuration: try inv.kernelConfiguration(), sink: try inv.logSink())
        let statuses = try await kernel.boot()
        // Features' contracts and streams (termind exec's among them) are served here; their
        // SSH connections are the kernel's one pool, shared between invocations.
        let server = ControlServer(path: inv.socketPath, kernel: kernel, logger: kernel.logger)
        do {
            try server.start()
        } catch {
            await kernel.shutdown()
            throw error
        }
        let running = statuses.filter { $0.state == .running }.count
        let disabled = statuses.filter { $0.state == .disabled }
        if inv.json {
            struct Ready: Encodable { let event = "ready"; let socket: String; let pid: Int32; let running: Int; let disabled: [String] }
            let data = (try? JSONCoding.encode(Ready(socket: inv.socketPath, pid: getpid(), running: running, disabled: disabled.map(\.id)))) ?? Data()
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        } else {
            Output.line("termind \(Invocation.version) serving on \(inv.socketPath): \(running) feature\(running == 1 ? "" : "s") running\(disabled.isEmpty ? "" : ", \(disabled.count) disabled (termind features)"). Stop with Ctrl-C or SIGTERM.")
        }
        let signal = await waitForTerminationSignal()
        server.stop()
        await kernel.shutdown()
        if !inv.json { Output.error("stopped (\(signal == SIGINT ? "SIGINT" : "SIGTERM")).") }
        return .success
    }

    private static func waitForTerminationSignal() async -> Int32 {
        await withCheckedContinuation { continuation in
            let queue = DispatchQueue(label: "termind.signals")
            let once = SignalLatch(continuation)
            for number in [SIGINT, SIGTERM] {
                Foundation.signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
                source.setEventHandler { once.fire(number) }
                source.resume()
                once.keep(source)
            }
        }
    }
}

/// Resumes the waiting task on the first signal only; keeps the sources alive.
private final class SignalLatch: @unchecked Sendable {
    private var continuation: CheckedContinuation<Int32, Never>?
    private var sources: [any DispatchSourceSignal] = []
    private let lock = NSLock()

    init(_ continuation: CheckedContinuation<Int32, Never>) { self.continuation = continuation }

    func keep(_ source: any DispatchSourceSignal) { lock.withLock { sources.append(source) } }

    func fire(_ number: Int32) {
        let c: CheckedContinuation<Int32, Never>? = lock.withLock {
            defer { continuation = nil }
            return continuation
        }
        c?.resume(returning: number)
    }
}
