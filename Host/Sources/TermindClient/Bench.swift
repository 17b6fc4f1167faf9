import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// `termind bench`: boot time with the registry and every opted-in plugin, and contract
/// round trips (kernel.ping@1) in-process and over the control socket. The socket figures
/// are set against a raw Unix-socket line echo with the same framing in the same run, so
/// the ratio shows what the kernel (envelope parsing, routing, schema check, coding) adds;
/// stream events (stdout, 64 KiB and 1 KiB) are set against the same peer echoing lines of
/// the same size.
enum Bench {
    typealias Figure = BenchmarkFigure

    // The benchmark's own failures: a stream or peer that did not do its part.
    static let shortStream: ErrorCode = "bench.short"
    static let connectFailed: ErrorCode = "bench.connect"
    static let peerClosed: ErrorCode = "bench.closed"
    static let echoFailed: ErrorCode = "bench.echo"

    /// CPU seconds process `pid` (0: this one) has used, all its threads (its CPU clock:
    /// threads that ended count too).
    static func cpuSeconds(of pid: Int32 = 0) -> Double {
        var clock = clockid_t()
        var spec = timespec()
        guard clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &spec) == 0 else { return 0 }
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }

    /// The median time for 120 bytes to reach another process (`/bin/cat`, reading and
    /// writing one end of a socketpair) and come back: what any isolation boundary pays.
    static func crossProcessRoundTrip(iterations: Int) throws -> Double {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw TermindError(Bench.echoFailed, "no socketpair for the round-trip peer (\(String(cString: strerror(errno)))).")
        }
        defer { close(pair[0]) }
        let spawned = Result { try ChildProcess.spawn(["/bin/cat"], stdin: pair[1], stdout: pair[1]) }
        close(pair[1])
        let pid = try spawned.get()
        defer {
            var status: Int32 = 0
            shutdown(pair[0], Int32(SHUT_WR))
            waitpid(pid, &status, 0)
        }
        var message = [UInt8](repeating: 0x61, count: 120)
        var times: [Double] = []
        times.reserveCapacity(iterations)
        for index in 0..<(iterations + 100) {
            let t = now()
            guard Glibc.write(pair[0], message, message.count) == message.count else { throw TermindError(Bench.echoFailed, "the round-trip peer went away.") }
            var got = 0
            while got < message.count {
                let n = message.withUnsafeMutableBytes { Glibc.read(pair[0], $0.baseAddress! + got, $0.count - got) }
                guard n > 0 else { throw TermindError(Bench.peerClosed, "the round-trip peer closed.") }
                got += n
            }
            if index >= 100 { times.append(now() - t) }
        }
        return median(times)
    }

    static func run(_ inv: Invocation) async throws -> Invocation.Exit {
        let iterations = try parseIterations(inv.arguments)
        var configuration = try inv.kernelConfiguration()
        // Benchmarks never touch the user's store: the Vault gets a throwaway one.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("termind-bench-store-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        configuration.storePath = scratch + "/termind.sqlite"
        configuration.secretsPath = scratch + "/secrets.sqlite"
        configuration.secretsKey = .keyFile(scratch + "/secrets.key")
        if configuration.pluginDirectories.isEmpty {
            let examples = ExecutablePaths.executableDirectory() + "/plugins"
            if FileManager.default.fileExists(atPath: examples) { configuration.pluginDirectories = [examples] }
        }
        var figures: [Figure] = []

        // Boot: the first boot maps the libraries; later boots find them mapped.
        var boots: [Double] = []
        var loaded = 0
        for index in 0..<21 {
            let kernel = Kernel(configuration: configuration, sink: .disabled())
            let start = now()
            let statuses = try await kernel.boot()
            boots.append(now() - start)
            if index == 0 { loaded = statuses.filter { $0.state == .running }.count }
            await kernel.shutdown()
        }
        figures.append(Figure(name: "boot, first (dlopen of \(loaded) features/plugins)", value: boots[0] * 1e3, unit: "ms"))
        figures.append(Figure(name: "boot, median of 20 more", value: median(Array(boots.dropFirst())) * 1e3, unit: "ms"))

        let kernel = Kernel(configuration: configuration, sink: .disabled())
        try await kernel.boot()
        let body = try JSONCoding.encode(KernelContracts.Ping.Request(payload: "termind-benchmark"))

        // In-process round trips.
        var latencies: [Double] = []
        latencies.reserveCapacity(iterations)
        let sequentialStart = now()
        for _ in 0..<iterations {
            let t = now()
            _ = try await kernel.call(KernelContracts.Ping.id, body: body)
            latencies.append(now() - t)
        }
        let sequential = now() - sequentialStart
        figures.append(Figure(name: "in-process JSON round trip, median", value: median(latencies) * 1e6, unit: "µs"))
        figures.append(Figure(name: "in-process JSON round trip, p99", value: percentile(latencies, 0.99) * 1e6, unit: "µs"))
        figures.append(Figure(name: "in-process JSON throughput, 1 caller", value: Double(iterations) / sequential, unit: "calls/s"))
        let ping = KernelContracts.Ping.Request(payload: "termind-benchmark")
        var typedLatencies: [Double] = []
        typedLatencies.reserveCapacity(iterations)
        for _ in 0..<iterations {
            let t = now()
            _ = try await kernel.call(KernelContracts.Ping.self, ping)
            typedLatencies.append(now() - t)
        }
        figures.append(Figure(name: "in-process typed call (feature to feature, no JSON), median", value: median(typedLatencies) * 1e6, unit: "µs"))
        let concurrentStart = now()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask { for _ in 0..<(iterations / 8) { _ = try await kernel.call(KernelContracts.Ping.id, body: body) } }
            }
            try await group.waitForAll()
        }
        figures.append(Figure(name: "in-process JSON throughput, 8 callers", value: Double(iterations / 8 * 8) / (now() - concurrentStart), unit: "calls/s"))

        // Control socket vs raw echo.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("termind-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = ControlServer(path: directory + "/control.sock", kernel: kernel, logger: kernel.logger)
        try server.start()
        let echo = try EchoServer(path: directory + "/echo.sock")
        let line = Envelope.encodeRequest(id: .integer(1), contract: KernelContracts.Ping.id.description, body: body)
        let socketIterations = max(iterations / 4, 1)

        let socketSequential = try await blocking { try LineClient.sequential(path: directory + "/control.sock", line: line, count: socketIterations) }
        let echoSequential = try await blocking { try LineClient.sequential(path: directory + "/echo.sock", line: line, count: socketIterations) }
        figures.append(Figure(name: "socket round trip, median", value: median(socketSequential) * 1e6, unit: "µs", baseline: median(echoSequential) * 1e6))
        figures.append(Figure(name: "socket round trip, p99", value: percentile(socketSequential, 0.99) * 1e6, unit: "µs", baseline: percentile(echoSequential, 0.99) * 1e6))
        let pipelined = try await blocking { try LineClient.pipelined(path: directory + "/control.sock", line: line, count: socketIterations, window: 32) }
        let echoPipelined = try await blocking { try LineClient.pipelined(path: directory + "/echo.sock", line: line, count: socketIterations, window: 32) }
        figures.append(Figure(name: "socket throughput, 1 client, 32 in flight", value: Double(socketIterations) / pipelined, unit: "calls/s", baseline: Double(socketIterations) / echoPipelined))
        let clients = 8
        let perClient = max(socketIterations / clients, 1)
        let manyStart = now()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                group.addTask { _ = try await blocking { try LineClient.sequential(path: directory + "/control.sock", line: line, count: perClient) } }
            }
            try await group.waitForAll()
        }
        let many = now() - manyStart
        let echoManyStart = now()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<clients {
                group.addTask { _ = try await blocking { try LineClient.sequential(path: directory + "/echo.sock", line: line, count: perClient) } }
            }
            try await group.waitForAll()
        }
        let echoMany = now() - echoManyStart
        figures.append(Figure(name: "socket throughput, \(clients) clients", value: Double(perClient * clients) / many, unit: "calls/s", baseline: Double(perClient * clients) / echoMany))

        // Stream events over the socket (a binary client crediting as it reads) against the
        // echo peer moving lines of the same size through a raw socket.
        server.register(stream: "bench.events@1") { body, session in
            let request = try JSONCoding.parse(body, source: "body")
            guard case .integer(let count)? = request["count"], case .integer(let size)? = request["size"] else { return Data("{}".utf8) }
            let chunk = Data(repeating: 0x61, count: Int(size))
            for _ in 0..<count { await session.emit("stdout", data: chunk) }
            return Data("{}".utf8)
        }
        for (size, count) in [(64 << 10, max(iterations / 4, 64)), (1 << 10, max(iterations, 256))] {
            let streamed = try await blocking { () -> (seconds: Double, bytes: Int) in
                let client = try ControlClient(path: directory + "/control.sock")
                var bytes = 0
                let start = now()
                _ = try client.stream("bench.events@1", body: Data(#"{"count": \#(count), "size": \#(size)}"#.utf8)) { event in
                    bytes += event.data?.count ?? 0
                    return nil
                }
                return (now() - start, bytes)
            }
            guard streamed.bytes == size * count else { throw TermindError(Bench.shortStream, "the bench stream delivered \(streamed.bytes) of \(size * count) bytes") }
            let echoLine = Data(repeating: 0x61, count: size - 1) + Data([10])
            let echoed = try await blocking { try LineClient.streamed(path: directory + "/echo.sock", line: echoLine, count: count) }
            let label = size >= 1 << 20 ? "\(size >> 20) MiB" : "\(size >> 10) KiB"
            figures.append(Figure(name: "stream stdout events of \(label), socket", value: Double(size * count) / streamed.seconds / 1_048_576, unit: "MiB/s",
                                  baseline: Double(size * count) / echoed / 1_048_576))
            figures.append(Figure(name: "stream stdout events of \(label), socket, rate", value: Double(count) / streamed.seconds, unit: "events/s",
                                  baseline: Double(count) / echoed))
        }
        server.stop()
        echo.stop()
        await kernel.shutdown()

        // A C plugin's call in termind's process against the same call to the plugin in a
        // sandboxed process of its own (the Digest example's crc32 through libffi).
        if !configuration.pluginDirectories.isEmpty {
            let fn = ContractID(name: "digest.fn.crc32", version: 1)
            let request = Data(#"{"args": ["termind-benchmark"]}"#.utf8)
            var medians: [FeatureManifest.Isolation: Double] = [:]
            var resident: Double?
            var cpu: [FeatureManifest.Isolation: (termind: Double, plugin: Double)] = [:]
            // Both kernels at once, each with its own scratch store, and their calls in
            // alternating blocks: a change in the machine's speed during the run (this VM's
            // varies by half) falls on both modes alike instead of on whichever ran second.
            var booted: [PluginKernel] = []
            // A call that fails midway still ends both kernels (and the plugin's own process).
            do {
                for isolation in [FeatureManifest.Isolation.inline, .process] {
                    var plugins = configuration
                    plugins.pluginIsolation = isolation
                    plugins.storePath = scratch + "/plugin-\(isolation.rawValue).sqlite"
                    let kernel = Kernel(configuration: plugins, sink: .disabled())
                    let statuses = try await kernel.boot()
                    guard statuses.contains(where: { $0.id == "digest" && $0.state == .running }) else { await kernel.shutdown(); break }
                    let note = await kernel.featureStatuses().first(where: { $0.id == "digest" })?.isolation
                    let pid = isolation == .process ? note?.split(separator: " ").dropFirst(2).first.flatMap({ Int32($0.trimming { $0.isPunctuation }) }) : nil
                    booted.append((isolation, kernel, pid))
                }
                if booted.count == 2 {
                    (medians, cpu, resident) = try await alternatingPluginCalls(booted, fn: fn, request: request, iterations: iterations)
                }
            } catch {
                for entry in booted { await entry.kernel.shutdown() }
                throw error
            }
            for entry in booted { await entry.kernel.shutdown() }
            let calls = Double(max(1, iterations / 50) * 50)
            if let inline = medians[.inline], let isolated = medians[.process] {
                figures.append(Figure(name: "C plugin call (digest.fn.crc32), in its own process vs in termind's, median", value: isolated * 1e6, unit: "µs", baseline: inline * 1e6))
                // The floor: one round trip to another process and back, with nothing else.
                let floor = try? crossProcessRoundTrip(iterations: iterations)
                figures.append(Figure(name: "C plugin call, added by process isolation, median (peer: a bare round trip to /bin/cat over a socketpair)",
                                      value: (isolated - inline) * 1e6, unit: "µs", baseline: floor.map { $0 * 1e6 }))
            }
            if let inline = cpu[.inline], let isolated = cpu[.process] {
                // What does not depend on this machine's two vCPUs waking each other: CPU time per call.
                figures.append(Figure(name: "C plugin call, CPU per call, isolated: termind + the plugin's process vs in termind's",
                                      value: (isolated.termind + isolated.plugin) / calls * 1e6, unit: "µs",
                                      baseline: (inline.termind + inline.plugin) / calls * 1e6))
                figures.append(Figure(name: "C plugin call, CPU per call, isolated: of it in the plugin's process", value: isolated.plugin / calls * 1e6, unit: "µs"))
            }
            if let resident { figures.append(Figure(name: "a plugin's own process, resident", value: resident, unit: "MiB")) }
        }

        if inv.json {
            struct Report: Encodable { let iterations: Int; let peer: String; let figures: [Figure] }
            inv.console.json(Report(iterations: iterations, peer: "raw Unix-socket line echo (same framing, no kernel)", figures: figures))
        } else {
            inv.console.line("termind bench — \(iterations) in-process calls, \(socketIterations) socket calls; peer: raw Unix-socket line echo")
            inv.console.table(Figure.header, figures.map(\.row))
        }
        return .success
    }

    typealias PluginKernel = (isolation: FeatureManifest.Isolation, kernel: Kernel, pid: Int32?)

    /// The same call to each kernel in alternating blocks of 50 (the first kernel alternating
    /// too), after 100 to warm up: each mode's median, CPU (termind's and the plugin process's)
    /// and the isolated plugin process's resident memory.
    private static func alternatingPluginCalls(_ booted: [PluginKernel], fn: ContractID, request: Data, iterations: Int) async throws
        -> (medians: [FeatureManifest.Isolation: Double], cpu: [FeatureManifest.Isolation: (termind: Double, plugin: Double)], resident: Double?) {
        for entry in booted { for _ in 0..<100 { _ = try await entry.kernel.call(fn, body: request) } }
        let block = 50
        var times: [FeatureManifest.Isolation: [Double]] = [:]
        var cpu: [FeatureManifest.Isolation: (termind: Double, plugin: Double)] = [:]
        for round in 0..<max(1, iterations / block) {
            for entry in round % 2 == 0 ? booted : booted.reversed() {
                let (before, childBefore) = (cpuSeconds(), entry.pid.map { cpuSeconds(of: $0) } ?? 0)
                for _ in 0..<block {
                    let t = now()
                    _ = try await entry.kernel.call(fn, body: request)
                    times[entry.isolation, default: []].append(now() - t)
                }
                cpu[entry.isolation, default: (0, 0)].termind += cpuSeconds() - before
                cpu[entry.isolation, default: (0, 0)].plugin += (entry.pid.map { cpuSeconds(of: $0) } ?? 0) - childBefore
            }
        }
        var resident: Double?
        if let pid = booted.last?.pid, let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
           let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
           let kib = Double(line.split(separator: " ").dropFirst().first ?? "") {
            resident = kib / 1024
        }
        return (times.mapValues(median), cpu, resident)
    }

    static func parseIterations(_ arguments: [String]) throws -> Int {
        var iterations = 20_000
        var args = arguments[...]
        while let arg = args.popFirst() {
            guard arg == "--iterations", let v = args.popFirst().flatMap(Int.init), v >= 8 else {
                throw Invocation.UsageError(description: "bench takes only --iterations N (N ≥ 8).")
            }
            iterations = v
        }
        return iterations
    }

    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    static func median(_ values: [Double]) -> Double { percentile(values, 0.5) }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p))]
    }


    /// Runs blocking socket code on its own thread, off the cooperative pool.
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            SystemThread { continuation.resume(with: Result { try body() }) }.start()
        }
    }
}

/// Minimal line client for the benchmark (both peers speak newline-framed lines).
enum LineClient {
    static func connect(_ path: String) throws -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let ok = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard fd >= 0, ok == 0 else { throw TermindError(Bench.connectFailed, "cannot connect to \(path)") }
        return fd
    }

    static func sequential(path: String, line: Data, count: Int) throws -> [Double] {
        let fd = try connect(path)
        defer { close(fd) }
        var reader = Lines(fd: fd)
        var latencies: [Double] = []
        latencies.reserveCapacity(count)
        for _ in 0..<count {
            let t = Bench.now()
            write(fd, line)
            guard reader.next() else { throw TermindError(Bench.peerClosed, "peer closed") }
            latencies.append(Bench.now() - t)
        }
        return latencies
    }

    static func pipelined(path: String, line: Data, count: Int, window: Int) throws -> Double {
        let fd = try connect(path)
        defer { close(fd) }
        var reader = Lines(fd: fd)
        let start = Bench.now()
        var sent = 0, received = 0
        while received < count {
            while sent < count && sent - received < window { write(fd, line); sent += 1 }
            guard reader.next() else { throw TermindError(Bench.peerClosed, "peer closed") }
            received += 1
        }
        return Bench.now() - start
    }

    /// `count` lines sent by a thread of their own while this one reads the echoes back (a
    /// large line cannot wait in flight: the echo would block sending to a client that is
    /// still sending). Returns the seconds until the last echo arrived.
    static func streamed(path: String, line: Data, count: Int) throws -> Double {
        let fd = try connect(path)
        defer { close(fd) }
        var reader = Lines(fd: fd)
        let start = Bench.now()
        SystemThread { for _ in 0..<count { write(fd, line) } }.start()
        for _ in 0..<count {
            guard reader.next() else { throw TermindError(Bench.peerClosed, "peer closed") }
        }
        return Bench.now() - start
    }

    static func write(_ fd: Int32, _ data: Data) {
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n <= 0 { return }
                offset += n
            }
        }
    }

    /// Counts newline-terminated lines.
    struct Lines {
        let fd: Int32
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending = 0 // newlines already read but not yet consumed
        mutating func next() -> Bool {
            while pending == 0 {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
                guard n > 0 else { return false }
                pending += buffer.withUnsafeBytes { raw in
                    var count = 0, from = raw.baseAddress!
                    let end = from + n
                    while from < end, let hit = memchr(from, 10, end - from) {
                        count += 1
                        from = UnsafeRawPointer(hit) + 1
                    }
                    return count
                }
            }
            pending -= 1
            return true
        }
    }
}

/// The benchmark's peer: echoes each line back on a thread per connection.
final class EchoServer: Sendable {
    private let fd: Int32
    private let path: String

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8)
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else { throw TermindError(Bench.echoFailed, "cannot start the echo peer") }
        let listener = fd
        SystemThread {
            while true {
                let client = accept(listener, nil, nil)
                guard client >= 0 else { return }
                SystemThread {
                    var buffer = [UInt8](repeating: 0, count: 65_536)
                    while true {
                        let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress!, $0.count, 0) }
                        guard n > 0 else { break }
                        LineClient.write(client, Data(buffer[0..<n]))
                    }
                    close(client)
                }.start()
            }
        }.start()
    }

    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        unlink(path)
    }
}
