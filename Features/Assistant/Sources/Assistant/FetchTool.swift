import AssistantAPI
import AssistantRules
import CurlHTTP
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// `fetch`: one public HTTP(S) GET for the model (docs/assistant.md, "fetch"). Every hop —
/// the first and each redirect — has its host resolved here and every address checked
/// (FetchRules: no loopback, private, link-local, metadata, multicast …); the connection is
/// then pinned to a checked address, so the name cannot answer differently to curl (DNS
/// rebinding), and no proxy is used. Credentials and cookies are neither sent nor shown.
/// It asks like an action that changes something (what the model puts in a URL leaves this
/// machine): the person, the Guardian or full access decide.
extension HostTools {
    static let fetchSchema: JSONSchema = .object([
        JSONSchema.Property(name: "url", schema: .string(), required: true),
        JSONSchema.Property(name: "headers", schema: .dictionary(.string()), required: false),
    ])
    /// The most of a body read.
    static let fetchLimit = 1 << 20

    static var fetchSpec: ToolSpec {
        ToolSpec(name: "fetch", description: """
            GET a public http(s) URL: the status, the final URL, the headers (credentials redacted) and up to \(fetchLimit) bytes of the body \
            (\(answerBytes) shown; the rest in the scratch folder). Private, loopback and metadata addresses are refused at every redirect.
            """, parameters: fetchSchema.json)
    }

    /// The address to connect to for `url`: every address its host resolves to must be
    /// public; the first is used.
    static func pin(_ url: HTTPURL) async throws -> String {
        // An internationalised name is decoded here but looked up in its xn-- form by curl:
        // the address checked would not be the one used. ASCII names only.
        guard url.host.unicodeScalars.allSatisfy(\.isASCII), !url.host.lowercased().contains("xn--") else {
            throw TermindError(.policyDenied, "\(url.host) is an internationalised name; fetch takes ASCII host names only.")
        }
        let addresses = try await resolve(url.host)
        guard let first = addresses.first else { throw TermindError(.policyDenied, "\(url.host) resolves to no address.") }
        for address in addresses {
            if let problem = FetchRules.addressProblem(address), !testAllowed(address, port: url.port) {
                throw TermindError(.policyDenied, "\(url.host) resolves to \(address), and \(problem): fetch reaches public addresses only; nothing was sent there.")
            }
        }
        return first
    }

    /// Debug builds only: `TERMIND_TEST_FETCH_PUBLIC=ADDRESS:PORT` counts that one address and
    /// port as public, so the tests' loopback server can play the internet. Release builds
    /// have no such switch.
    private static func testAllowed(_ address: String, port: Int) -> Bool {
        #if DEBUG
        return ProcessInfo.processInfo.environment["TERMIND_TEST_FETCH_PUBLIC"] == "\(address):\(port)"
        #else
        return false
        #endif
    }

    /// The numeric addresses of `host` (itself when it is one).
    private static func resolve(_ host: String) async throws -> [String] {
        let name = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return try await Task.detached {
            var hints = addrinfo()
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
            var list: UnsafeMutablePointer<addrinfo>?
            let status = getaddrinfo(name, nil, &hints, &list)
            guard status == 0, let list else {
                throw TermindError(.policyDenied, "\(name) could not be resolved (\(String(cString: gai_strerror(status)))).")
            }
            defer { freeaddrinfo(list) }
            var found: [String] = []
            var cursor: UnsafeMutablePointer<addrinfo>? = list
            while let entry = cursor {
                var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
                if getnameinfo(entry.pointee.ai_addr, entry.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    if !found.contains(text) { found.append(text) }
                }
                cursor = entry.pointee.ai_next
            }
            return found
        }.value
    }

    func fetch(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        let problems = Self.fetchSchema.problems(in: call.arguments)
        guard problems.isEmpty else { return ToolOutcome(state: .failed, text: "The arguments do not fit fetch: \(problems.joined(separator: "; ")).") }
        let text = call.arguments["url"]?.stringValue ?? ""
        guard let url = URL(string: text) else { return ToolOutcome(state: .failed, text: "\(text.prefix(200)) is not a URL.") }
        if text.lowercased().contains("xn--") || !(url.host ?? "").unicodeScalars.allSatisfy(\.isASCII) {
            return ToolOutcome(state: .refused, text: "fetch refused \(text.prefix(200)): an internationalised host name (ASCII names only).")
        }
        if let problem = FetchRules.urlProblem(url) { return ToolOutcome(state: .refused, text: "fetch refused \(text.prefix(200)): \(problem).") }
        guard HTTPURL(text) != nil else { return ToolOutcome(state: .failed, text: "\(text.prefix(200)) is not an http(s) URL.") }
        var headers: [HTTPHeader] = []
        if case .object(let given)? = call.arguments["headers"] {
            for (name, value) in given.sorted(by: { $0.key < $1.key }) {
                guard !FetchRules.refusedHeaders.contains(name.lowercased()) else {
                    return ToolOutcome(state: .refused, text: "fetch does not send \(name): credentials, cookies and routing headers are not the model's to set.")
                }
                guard let value = value.stringValue, !value.contains(where: \.isNewline), !name.contains(where: { $0 == ":" || $0.isWhitespace }) else {
                    return ToolOutcome(state: .failed, text: "The header \(name) is not a header.")
                }
                headers.append(HTTPHeader(name, value))
            }
        }
        let assessment: Assessment
        do {
            assessment = try await policy.assess(tool: "fetch", conversation: conversation, call: call.id, host: nil, command: nil,
                                                 declared: Effect(.write, network: true))
        } catch {
            return ToolOutcome(state: .refused, text: "The policy could not decide (\(TermindError.from(error).message)); nothing was sent.")
        }
        // Nothing here passes through the kernel: no approval to grant for its hook.
        let refused = await settle(assessment, call: call, conversation: conversation, grant: nil,
                                   guardianAction: "fetch (an HTTP GET leaving this machine) of the URL \(text.prefix(2000))",
                                   notApproved: "The operator did not approve fetching this; nothing was sent.") {
            let reply = await ask(StreamQuestion.choice(topic: AssistantStreams.Run.approvalTopic,
                                                        "The assistant wants to fetch (GET):\n  \(text.prefix(2000))\nAllow it? [y]es once, or [n]o: ",
                                                        ["y": "yes", "yes": "yes", "n": "no", "no": "no"], default: "no",
                                                        details: .object(["tool": .string("fetch")]), personOnly: true))
            return reply?["answer"]?.stringValue == "yes" ? Approvals.Scope.once : nil
        }
        if let refused { return refused }
        do {
            let request = HTTPRequest(method: "GET", url: text, headers: headers, connectTimeout: 10, idleTimeout: 30, responseLimit: Self.fetchLimit + 1)
            let response = try await http.send(request, rule: { _, to in
                guard let url = URL(string: "\(to.scheme)://\(to.host)"), FetchRules.urlProblem(url) == nil else {
                    throw TermindError(.policyDenied, "A redirect to \(to.origin) is not a public http(s) URL.")
                }
            }, pin: { url in try await Self.pin(url) })
            var body = Data()
            var truncated = false
            while let piece = try await response.next() {
                body.append(piece.prefix(Self.fetchLimit - body.count))
                if body.count >= Self.fetchLimit {
                    truncated = true
                    response.cancel()
                    break
                }
            }
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: response.head.status < 400 ? "succeeded" : "failed",
                                       exitStatus: Int32(response.head.status), exitSignal: nil, stdoutBytes: body.count, stderrBytes: nil)
            let shown = response.head.headers.map { header in
                "\(header.name): \(FetchRules.sensitiveResponseHeaders.contains(header.name.lowercased()) || header.isSensitive ? "[redacted]" : header.value)"
            }
            let summary = "HTTP \(response.head.status) from \(response.head.url.prefix(500))\n" + shown.joined(separator: "\n") + "\n\n"
                + (truncated ? "(the body is longer than \(Self.fetchLimit) bytes; the first \(Self.fetchLimit) were read)\n" : "")
            return ToolOutcome(state: response.head.status < 400 ? .succeeded : .failed,
                               text: summary + bounded(String(decoding: body, as: UTF8.self), call: call.id, conversation: conversation, name: "fetch"))
        } catch {
            let failure = TermindError.from(error)
            try? await audit.execution(assessment, conversation: conversation, call: call.id, outcome: "failed", exitStatus: nil, exitSignal: nil,
                                       stdoutBytes: nil, stderrBytes: nil)
            let refused = failure.code == ErrorCode.policyDenied.rawValue
            return ToolOutcome(state: refused ? .refused : .failed, text: "fetch \(refused ? "refused" : "failed"): \(failure.message)")
        }
    }
}
