import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindKernel

/// The built-in commands. Each returns the process exit code.
enum Commands {
    static func features(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.isEmpty else { throw Invocation.UsageError(description: "features takes no arguments, got '\(inv.arguments[0])'.") }
        return try await Session.with(inv) { session in
            let reply = try await session.call(KernelContracts.Features.self, Empty())
            let problems = await session.unattributedProblems()
            if inv.json {
                struct Listing: Encodable { let features: [FeatureStatus]; let problems: [FeatureProblem]; let server: Bool }
                inv.console.json(Listing(features: reply.features, problems: problems, server: session.isRemote))
                return .success
            }
            if reply.features.isEmpty && problems.isEmpty {
                inv.console.line("No features are declared. Registry: \(inv.resolvedRegistry() ?? "none found"); add plugins with --plugins DIR.")
                return .success
            }
            inv.console.table(["#", "ID", "VERSION", "KIND", "STATE", "REASON"], reply.features.enumerated().map { index, f in
                [String(index + 1), f.id + (f.permanent ? " (permanent)" : ""), f.version, f.kind.rawValue, f.state.rawValue, f.reason ?? f.isolation ?? ""]
            })
            for problem in problems { inv.console.line("problem: \(problem.message)") }
            return .success
        }
    }

    static func contracts(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.count <= 1 else { throw Invocation.UsageError(description: "contracts takes at most one PREFIX argument.") }
        return try await Session.with(inv) { session in
            let reply = try await session.call(KernelContracts.Contracts.self, .init(prefix: inv.arguments.first))
            if inv.json { inv.console.json(reply); return .success }
            for c in reply.contracts {
                let kind = c.stream == true ? (c.acceptsInput == true ? ", stream reading input" : ", stream") : ""
                inv.console.line("\(c.id)  (\(c.owner)\(kind))")
                inv.console.line("    \(c.summary)")
                inv.console.line("    effect:   \(c.effect)\(c.effectDeclared ? "" : " (not declared: taken as the worst)")")
                inv.console.line("    request:  \(compact(c.request))")
                inv.console.line("    \(c.stream == true ? "result:  " : "response:") \(compact(c.response))")
                if let events = c.events, !events.isEmpty {
                    inv.console.line("    events:   " + events.keys.sorted().map { "\($0) \(compact(events[$0]!))" }.joined(separator: ", "))
                }
                if let questions = c.questions, !questions.isEmpty {
                    inv.console.line("    asks:     " + questions.keys.sorted().map { "\($0) (\(questions[$0]!))" }.joined(separator: ", "))
                }
            }
            if reply.contracts.isEmpty { inv.console.line("No contracts match '\(inv.arguments.first ?? "")'.") }
            return .success
        }
    }

    /// A one-line rendering of a schema: `{payload: string, port?: integer}`.
    static func compact(_ schema: JSONValue) -> String {
        switch schema["type"]?.stringValue {
        case "object"?:
            if case .object(let props)? = schema["properties"] {
                var required = Set<String>()
                if case .array(let r)? = schema["required"] { required = Set(r.compactMap(\.stringValue)) }
                return "{" + props.keys.sorted().map { "\($0)\(required.contains($0) ? "" : "?"): \(compact(props[$0]!))" }.joined(separator: ", ") + "}"
            }
            if let values = schema["additionalProperties"], case .object = values { return "{string: \(compact(values))}" }
            return "object"
        case "array"?: return "[\(schema["items"].map(compact) ?? "any")]"
        case "string"?:
            if case .array(let cases)? = schema["enum"] { return cases.compactMap(\.stringValue).joined(separator: "|") }
            return "string"
        case let type?: return type
        case nil: return "any"
        }
    }

    static func call(_ inv: Invocation) async throws -> Invocation.Exit {
        guard let contract = inv.arguments.first, inv.arguments.count <= 2 else {
            throw Invocation.UsageError(description: "call needs CONTRACT and optionally a JSON BODY (or '-' for standard input).")
        }
        guard ContractID(parsing: contract) != nil else {
            throw Invocation.UsageError(description: "'\(contract)' is not a contract id; expected name@version, e.g. kernel.features@1 (termind contracts lists them).")
        }
        var body = Data("{}".utf8)
        if inv.arguments.count == 2 {
            body = inv.arguments[1] == "-" ? try inv.console.readAll(limit: 16 << 20, what: "call CONTRACT -") : Data(inv.arguments[1].utf8)
            do {
                _ = try JSONCoding.parse(body, source: inv.arguments[1] == "-" ? "The BODY read from standard input" : "The BODY argument")
            } catch let error as TermindError {
                throw Invocation.UsageError(description: error.message)
            }
        }
        return try await Session.with(inv) { session in
            inv.console.json(try await session.call(contract, body: body))
            return .success
        }
    }

    static func version(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.isEmpty else { throw Invocation.UsageError(description: "version takes no arguments.") }
        let kernel = Kernel(configuration: try inv.kernelConfiguration(), sink: .disabled())
        let reply = try await kernel.call(KernelContracts.Version.self, Empty())
        if inv.json { inv.console.json(reply); return .success }
        inv.console.line("termind \(reply.termind)")
        inv.console.line("build: \(reply.signature)")
        inv.console.line("plugin ABI: \(reply.pluginABI)")
        for (name, version) in reply.libraries.sorted(by: { $0.key < $1.key }) { inv.console.line("\(name): \(version)") }
        return .success
    }

    /// `termind secrets status` and `termind secrets protect [--passphrase -]`.
    static func secrets(_ inv: Invocation) async throws -> Invocation.Exit {
        let response: SecretStoreContracts.Status.Response
        switch inv.arguments {
        case ["status"]:
            response = try await Session.with(inv) { try await $0.call(SecretStoreContracts.Status.self, Empty()) }
        case ["protect", "--passphrase", "-"]:
            let first = try SecretInput.read(prompt: "New passphrase: ", console: inv.console)
            if inv.console.isTerminal(inv.console.input) {
                guard try SecretInput.read(prompt: "Again: ", console: inv.console) == first else {
                    throw TermindError.badRequest("passphrase: the two entries differ; nothing was changed.")
                }
            }
            guard !first.isEmpty else { throw Invocation.UsageError(description: "The new passphrase is empty.") }
            response = try await Session.with(inv) { try await $0.call(SecretStoreContracts.Protect.self, .init(passphrase: Secret(first))) }
        case ["protect", "--key-file"]:
            response = try await Session.with(inv) { try await $0.call(SecretStoreContracts.Protect.self, .init()) }
        default:
            throw Invocation.UsageError(description: "usage: termind secrets status | termind secrets protect --passphrase - | termind secrets protect --key-file")
        }
        if inv.json { inv.console.json(response) } else {
            inv.console.line("protection  \(response.protection)")
            inv.console.line("store       \(response.path)")
            inv.console.line("secrets     \(response.secrets)")
            inv.console.line("key made    \(response.keyRotatedAt ?? "unknown (before termind recorded it)")")
        }
        return .success
    }

    static func plugins(_ inv: Invocation) async throws -> Invocation.Exit {
        if inv.arguments.count == 2, inv.arguments[0] == "enable" {
            // Crashes turn a plugin off inside the server that ran it; a new process starts
            // with every plugin on.
            guard let client = try? ControlClient(path: inv.socketPath) else {
                inv.console.line("No termind serve runs at \(inv.socketPath): a plugin is turned off after crashes only inside a running server, and every new termind starts with it on.")
                return .success
            }
            let reply = try client.call(KernelContracts.PluginEnable.id.description, body: try JSONCoding.encode(KernelContracts.PluginEnable.Request(id: inv.arguments[1])))
            let response = try JSONDecoder().decode(KernelContracts.PluginEnable.Response.self, from: reply)
            if inv.json { inv.console.json(response) } else { inv.console.line(response.message) }
            return .success
        }
        guard inv.arguments.count == 2, inv.arguments[0] == "check" else {
            throw Invocation.UsageError(description: "usage: termind plugins check DIR | termind plugins enable ID")
        }
        let directory = inv.console.absolute(inv.arguments[1])
        let console = inv.console, json = inv.json
        // Each check is printed as it is made, and each call announced before it is made (on
        // standard error with --json): a plugin that crashes termind leaves its last words.
        let checks = await PluginConformance.check(pluginDirectory: directory, calling: { contract in
            if json {
                console.write("{\"calling\": \"\(contract)\"}\n", to: console.errorOutput)
            } else {
                console.line("...  \(contract): calling it with an empty request")
            }
        }, checked: { check in
            if !json { console.line("\(check.passed ? "ok  " : "FAIL") \(check.name): \(check.detail)") }
        })
        let passed = checks.allSatisfy(\.passed)
        if inv.json {
            struct Report: Encodable { let plugin: String; let passed: Bool; let checks: [PluginConformance.Check] }
            inv.console.json(Report(plugin: directory, passed: passed, checks: checks))
        } else {
            inv.console.line(passed ? "\(checks.count) passed, 0 failed" : "\(checks.filter(\.passed).count) passed, \(checks.filter { !$0.passed }.count) failed")
        }
        return passed ? .success : .failure
    }
}
