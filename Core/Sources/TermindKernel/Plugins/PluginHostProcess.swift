import CTermindSystem
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
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
            FileText.write("termind-plugin-host runs a plugin for termind (a manifest with \"isolation\": \"process\"); termind starts it, it is not run by hand.\n")
            return 2
        }
        let server = PluginHostServer(fd: 0)
        guard server.canServe else {
            FileText.write("termind-plugin-host: no epoll set or eventfd (\(String(cString: strerror(errno)))).\n")
            return 1
        }
        return server.run()
    }
}

/// The host's side of the socketpair: one plugin, its endpoints, and the calls in flight.
///
/// Its threads (one more than calls may run at once) wait together in `epoll_wait` on the
/// socket (one epoll set, edge-triggered), so the kernel wakes one idle thread when a frame arrives;
/// that thread reads what is there, and runs the call it found itself: a call reaches the
/// plugin with no second thread woken and no hand-off. Frames whose order matters (a new
/// stream, a stream's input) are handled in order while the reader holds `inbox`. Since one
/// thread is never running a call, a frame is always read (a cancel, credit, `plugin.busy`).
final class PluginHostServer: Sendable {
    let fd: Int32
    private let writing = Mutex<Void>(())
    private let sessions = Mutex<[Int64: StreamSession]>([:])
    /// Bytes read from the socket and not yet a whole frame, held by the thread reading.
    private let inbox: Mutex<PluginWire.Reader>
    /// Calls running (at most `callThreads`, as many as the plugin has in termind's process)
    /// and waiting (at most `queuedCalls`; beyond them, `plugin.busy` at once).
    private let work = Mutex<Work>(Work())
    /// The threads' epoll set: the socket, and `wake` for calls queued for an idle thread.
    private let poller: Int32
    private let wake: Int32

    struct Work {
        var running = 0
        var queued: [@Sendable () -> Void] = []
    }

    /// What handles the frames once the plugin is ready.
    struct Served: Sendable {
        let feature: any Feature
        let plugin: CPluginFeature?
        let contracts: [String: ContractEndpoint]
        let streams: [String: StreamEndpoint]
    }

    init(fd: Int32) {
        self.fd = fd
        inbox = Mutex(PluginWire.Reader(fd: fd))
        wake = termind_eventfd()
        poller = termind_edge_poller([fd, wake], 2)
    }

    /// Whether the threads can wait on the socket (an epoll set and an eventfd were made).
    var canServe: Bool { poller >= 0 && wake >= 0 }

    /// One thread of the pool: runs a queued call when one may run, else waits for the
    /// socket or a queued call, and reads what arrived (running the first call it finds).
    private func serveFrames(_ served: Served) -> Never {
        while true {
            if let job = nextQueued() {
                job()
                work.withLock { $0.running -= 1 }
                continue
            }
            let ready = termind_poller_wait(poller)
            if ready == fd, let job = readFrames(served) {
                job()
                work.withLock { $0.running -= 1 }
            } else if ready == wake {
                var count: UInt64 = 0
                _ = Glibc.read(wake, &count, 8)
                // More than one call may be waiting for a free thread: pass the wake on.
                if work.withLock({ $0.queued.count > 1 && $0.running + 1 < PluginLimits.callThreads }) {
                    var one: UInt64 = 1
                    _ = Glibc.write(wake, &one, 8)
                }
            }
        }
    }

    /// A queued call, counted as running, when fewer than `callThreads` run.
    private func nextQueued() -> (@Sendable () -> Void)? {
        work.withLock { work in
            guard !work.queued.isEmpty, work.running < PluginLimits.callThreads else { return nil }
            work.running += 1
            return work.queued.removeFirst()
        }
    }

    /// Reads all the socket holds (until `EAGAIN` or a short read: the epoll set is
    /// edge-triggered, so what is left would wake no one) and handles each whole frame in order; calls are queued, and the oldest one that may run is returned to run on
    /// this thread (counted as running) with an idle thread woken for any other. termind
    /// gone, or a frame out of bounds: exit.
    private func readFrames(_ served: Served) -> (@Sendable () -> Void)? {
        var queuedAny = false
        inbox.withLock { inbox in
            var more = true
            var rounds = 0
            var announced = false
            while more {
                rounds += 1
                switch inbox.receive(wait: false) {
                case .closed: exit(0)  // termind went away: nothing is left to serve.
                case .wouldBlock: more = false
                case .bytes:
                    // Input still flowing after the first read: calls queued so far go to idle
                    // threads now rather than after the drain (once; the usual drain, one
                    // read and then EAGAIN, wakes no one).
                    if rounds > 1, !announced, queuedAny, work.withLock({ !$0.queued.isEmpty && $0.running < PluginLimits.callThreads }) {
                        announced = true
                        var one: UInt64 = 1
                        _ = Glibc.write(wake, &one, 8)
                    }
                    // A short read emptied the socket: no second recv to hear EAGAIN (a
                    // system call per call); what arrives later is a new edge.
                    if inbox.drained { more = false }
                }
                while true {
                    let next: PluginWire.Frame?
                    do { next = try inbox.buffered() } catch { exit(0) }
                    guard let next else { break }
                    let frame: [String: JSONValue]
                    switch next {
                    case .call(let id, let contract, let chain, let body):
                        if call(id, contract, chain, body, served) { queuedAny = true }
                        continue
                    case .reply: continue  // termind sends none
                    case .object(let object): frame = object
                    }
                    switch frame["op"]?.stringValue {
                    case "stream": stream(frame, served.streams)
                    case "to-stream":
                        if case .integer(let id)? = frame["id"], case .object(let message)? = frame["message"] {
                            sessions.withLock { $0[id] }?.receive(message)
                        }
                    case "stop":
                        _ = Self.blocking { await served.feature.stop(); return true }
                        exit(0)
                    default:
                        continue
                    }
                }
            }
        }
        guard queuedAny else { return nil }
        let (mine, more) = work.withLock { work -> ((@Sendable () -> Void)?, Bool) in
            guard !work.queued.isEmpty, work.running < PluginLimits.callThreads else { return (nil, false) }
            work.running += 1
            let job = work.queued.removeFirst()
            return (job, !work.queued.isEmpty && work.running < PluginLimits.callThreads)
        }
        if more {
            var one: UInt64 = 1
            _ = Glibc.write(wake, &one, 8)
        }
        return mine
    }

    func send(_ object: [String: JSONValue]) {
        writing.withLock { _ in _ = PluginWire.write(fd, object) }
    }

    /// A call's successful reply, as a binary frame.
    func sendReply(_ id: Int64, _ body: Data) {
        writing.withLock { _ in _ = PluginWire.writeReply(fd, id: id, body: body) }
    }

    func run() -> Int32 {
        guard let load = try? inbox.withLock({ try $0.next() }), load["op"] == .string("load"), let manifestValue = load["manifest"],
              var manifest = try? JSONValueDecoder.decode(FeatureManifest.self, from: manifestValue) else {
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
        let served = Served(feature: feature, plugin: feature as? CPluginFeature,
                            contracts: Dictionary(registrar.publishedEndpoints.map { ($0.id.description, $0) }, uniquingKeysWith: { a, _ in a }),
                            streams: Dictionary(registrar.publishedStreams.map { ($0.id.description, $0) }, uniquingKeysWith: { a, _ in a }))
        send(["op": .string("ready")])
        for index in 0..<PluginLimits.callThreads {
            let thread = SystemThread.named("termind.plugin.call.\(index)") { [self] in serveFrames(served) }
            thread.start()
        }
        serveFrames(served)
    }

    /// A contract call: for a C plugin, queued for a call thread (true), or refused as busy;
    /// anything else runs as a task.
    private func call(_ id: Int64, _ name: String, _ chain: Data, _ body: Data, _ served: Served) -> Bool {
        guard let endpoint = served.contracts[name] else {
            send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(TermindError.unknownContract(name))])
            return false
        }
        guard let plugin = served.plugin else {
            let origin = chain.isEmpty ? CallOrigin.inProcess : PluginWire.origin(try? JSONCoding.parse(chain, source: "the caller chain"))
            Task {
                do {
                    let reply = try await endpoint.handler(body, origin)
                    sendReply(id, reply)
                } catch {
                    send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(error)])
                }
            }
            return false
        }
        // On the thread that read it (or the next free one), start to end: no task hop.
        let job: @Sendable () -> Void = { [self] in
            do {
                let reply = try plugin.blockingCall(name, body: body, chain: chain)
                sendReply(id, reply)
            } catch {
                send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(error)])
            }
        }
        let queued = work.withLock { work -> Bool in
            guard work.running + work.queued.count < PluginLimits.callThreads + PluginLimits.queuedCalls else { return false }
            work.queued.append(job)
            return true
        }
        if !queued {
            send(["op": .string("reply"), "id": .integer(id), "error": PluginWire.encode(TermindError(.pluginBusy,
                "plugin '\(plugin.pluginID)' is busy: \(PluginLimits.callThreads) calls are running and \(PluginLimits.queuedCalls) are waiting; \(name) was not started. Try again shortly."))])
        }
        return queued
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
            case .success(let reply): sendReply(id, reply)
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
