import Dispatch
import Foundation
import Synchronization
import TermindCore

/// `termind-plugin-host`: a C plugin whose manifest says `"isolation": "process"` runs here,
/// in a child of termind, instead of inside termind's process. termind starts it with one end
/// of a socketpair as standard input and sends the plugin's manifest (already validated);
/// the host loads the plugin exactly as termind loads one in process (`FeatureLoader`,
/// `CPluginFeature`: the same schemas, status codes, bounds and errors), starts it, and then
/// serves the calls termind forwards (`PluginWire` frames) until termind says stop or goes
/// away. A crash, a hang or unbounded memory here ends this process, not termind.
public enum PluginHostProcess {
    /// The host's entry: its exit status.
    public static func run(_ arguments: [String]) -> Int32 {
        signal(SIGPIPE, SIG_IGN)
        var info = stat()
        guard fstat(0, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else {
            FileHandle.standardError.write(Data("termind-plugin-host runs a plugin for termind (a manifest with \"isolation\": \"process\"); termind starts it, it is not run by hand.\n".utf8))
            return 2
        }
        let server = PluginHostServer(fd: 0)
        return server.run()
    }
}

/// The host's side of the socketpair: one plugin, its endpoints, and the calls in flight.
final class PluginHostServer: Sendable {
    let fd: Int32
    private let writing = Mutex<Void>(())
    private let sessions = Mutex<[Int64: StreamSession]>([:])
    /// Contract and function calls wait here for one of the plugin's call threads (as many
    /// as it has in termind's process); beyond the queue, `plugin.busy` at once.
    private let queue = Mutex<[@Sendable () -> Void]>([])
    private let ready = DispatchSemaphore(value: 0)

    init(fd: Int32) { self.fd = fd }

    private func startCallThreads() {
        for index in 0..<PluginLimits.callThreads {
            let thread = Thread { [self] in
                while true {
                    ready.wait()
                    guard let job = queue.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { continue }
                    job()
                }
            }
            thread.name = "termind.plugin.call.\(index)"
            thread.start()
        }
    }

    func send(_ object: [String: JSONValue]) {
        writing.withLock { _ in _ = PluginWire.write(fd, object) }
    }

    func run() -> Int32 {
        guard let load = try? PluginWire.read(fd), load["op"] == .string("load"), let manifestValue = load["manifest"],
              var manifest = try? JSONDecoder().decode(FeatureManifest.self, from: JSONCoding.encode(manifestValue)) else {
            return 2
        }
        manifest.isolation = .inline  // here, in this process: that is the point
        let level = LogLevel.allCases.first { $0.name == load["logLevel"]?.stringValue }
        let sink = level.map { LogSink.descriptor(2, level: $0) } ?? .disabled()
        let hostVersion = load["hostVersion"]?.stringValue ?? "unknown"
        let feature: any Feature
        let registrar = FeatureRegistrar(featureID: manifest.id)
        do {
            // Before any of the plugin's code runs (its library's constructors included).
            let report = try PluginSandbox.apply(manifest, protected: PluginWire.strings(load["protected"]))
            // Said before the plugin's code runs, so the plugin cannot say it instead.
            send(["op": .string("sandboxed"), "enforced": .array(report.enforced.map(JSONValue.string)),
                  "notEnforced": .array(report.notEnforced.map(JSONValue.string))])
            feature = try FeatureLoader.load(manifest, sink: sink, hostVersion: hostVersion)
            try feature.register(registrar)
        } catch {
            send(["op": .string("failed"), "error": PluginWire.encode(error)])
            return 1
        }
        let started: (any Error)? = Self.blocking { [manifest] in
            do {
                try await feature.start(Self.context(manifest.id, sink))
                return nil
            } catch {
                return TermindError.from(error)
            }
        }
        if let started {
            send(["op": .string("failed"), "error": PluginWire.encode(started)])
            return 1
        }
        let plugin = feature as? CPluginFeature
        if plugin != nil { startCallThreads() }
        let contracts = Dictionary(registrar.publishedEndpoints.map { ($0.id.description, $0) }, uniquingKeysWith: { a, _ in a })
        let streams = Dictionary(registrar.publishedStreams.map { ($0.id.description, $0) }, uniquingKeysWith: { a, _ in a })
        send(["op": .string("ready")])
        while let frame = try? PluginWire.read(fd) {
            switch frame["op"]?.stringValue {
            case "call": call(frame, contracts, plugin)
            case "stream": stream(frame, streams)
            case "to-stream":
                if case .integer(let id)? = frame["id"], case .object(let message)? = frame["message"] {
                    sessions.withLock { $0[id] }?.receive(message)
                }
            case "stop":
                _ = Self.blocking { await feature.stop(); return true }
                return 0
            default:
                continue
            }
        }
        // termind went away: nothing is left to serve.
        return 0
    }

    private func call(_ frame: [String: JSONValue], _ contracts: [String: ContractEndpoint], _ plugin: CPluginFeature?) {
        guard case .integer(let id)? = frame["id"], let name = frame["contract"]?.stringValue else { return }
        guard let endpoint = contracts[name] else {
            send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(TermindError.unknownContract(name))])
            return
        }
        let body = Data((frame["body"]?.stringValue ?? "{}").utf8)
        let origin = PluginWire.origin(frame["origin"])
        if let plugin {
            // On one of the call threads, start to end: no task or executor hop.
            let job: @Sendable () -> Void = { [self] in
                do {
                    let reply = try plugin.blockingCall(name, body: body, origin: origin)
                    send(["op": .string("reply"), "id": .integer(id), "body": .string(String(decoding: reply, as: UTF8.self))])
                } catch {
                    send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(error)])
                }
            }
            let queued = queue.withLock { queue -> Bool in
                guard queue.count < PluginLimits.queuedCalls else { return false }
                queue.append(job)
                return true
            }
            if queued {
                ready.signal()
            } else {
                send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(TermindError(.pluginBusy,
                    "plugin '\(plugin.pluginID)' is busy: \(PluginLimits.callThreads) calls are running and \(PluginLimits.queuedCalls) are waiting; \(name) was not started. Try again shortly."))])
            }
            return
        }
        Task {
            do {
                let reply = try await endpoint.handler(body, origin)
                send(["op": .string("reply"), "id": .integer(id), "body": .string(String(decoding: reply, as: UTF8.self))])
            } catch {
                send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(error)])
            }
        }
    }

    /// A stream runs against a session whose events, questions and input grants go to
    /// termind as frames; what termind's client sends back (credit, answers, input, cancel)
    /// arrives as `to-stream` frames and is handed to the session as a socket client's is.
    private func stream(_ frame: [String: JSONValue], _ streams: [String: StreamEndpoint]) {
        guard case .integer(let id)? = frame["id"], let name = frame["contract"]?.stringValue else { return }
        guard let endpoint = streams[name] else {
            send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(TermindError.unknownContract(name))])
            return
        }
        let body = Data((frame["body"]?.stringValue ?? "{}").utf8)
        let session = StreamSession(id: .integer(id), grantsInput: endpoint.acceptsInput, endpoint: endpoint, origin: PluginWire.origin(frame["origin"]),
                                    sink: .local { [self] event, size in
            var message: [String: JSONValue] = ["op": .string("event"), "id": .integer(id), "fields": .object(event.fields), "size": .integer(Int64(size))]
            if let data = event.data { message["data"] = .string(data.base64EncodedString()) }
            send(message)
        })
        sessions.withLock { $0[id] = session }
        session.begin()
        let task = Task { [self] in
            let result: Result<Data, any Error>
            do { result = .success(try await endpoint.handler(body, session)) } catch { result = .failure(error) }
            let outcome = session.outcome(result)
            session.finish()
            sessions.withLock { $0[id] = nil }
            switch outcome {
            case .success(let reply): send(["op": .string("reply"), "id": .integer(id), "body": .string(String(decoding: reply, as: UTF8.self))])
            case .failure(let error): send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(error)])
            }
        }
        session.start(cancelling: task)
    }

    /// What `start` gets here: the plugin's logger; a C plugin reaches nothing else.
    private static func context(_ id: String, _ sink: LogSink) -> FeatureContext {
        FeatureContext(featureID: id, logger: Logger(label: id, sink: sink), ports: PortDirectory { _ in nil },
                       call: { contract, _ in throw TermindError.unknownContract(contract.description) },
                       runStream: { contract, _, _, _ in throw TermindError.unknownContract(contract.description) },
                       makeSession: { _ in (StreamSession(id: .null, sink: .local { _, _ in }), {}) })
    }

    /// Runs async work from this process's main thread and waits for it.
    private static func blocking<T: Sendable>(_ work: @escaping @Sendable () async -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<T?>(nil)
        Task {
            let value = await work()
            result.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        return result.withLock { $0! }
    }
}
