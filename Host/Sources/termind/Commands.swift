import Foundation
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
                Output.json(Listing(features: reply.features, problems: problems, server: session.isRemote))
                return .success
            }
            if reply.features.isEmpty && problems.isEmpty {
                Output.line("No features are declared. Registry: \(inv.resolvedRegistry() ?? "none found"); add plugins with --plugins DIR.")
                return .success
            }
            Output.table(["#", "ID", "VERSION", "KIND", "STATE", "REASON"], reply.features.enumerated().map { index, f in
                [String(index + 1), f.id + (f.permanent ? " (permanent)" : ""), f.version, f.kind.rawValue, f.state.rawValue, f.reason ?? ""]
            })
            for problem in problems { Output.line("problem: \(problem.message)") }
            return .success
        }
    }

    static func contracts(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.count <= 1 else { throw Invocation.UsageError(description: "contracts takes at most one PREFIX argument.") }
        return try await Session.with(inv) { session in
            let reply = try await session.call(KernelContracts.Contracts.self, .init(prefix: inv.arguments.first))
            if inv.json { Output.json(reply); return .success }
            for c in reply.contracts {
                let kind = c.stream == true ? (c.acceptsInput == true ? ", stream reading input" : ", stream") : ""
                Output.line("\(c.id)  (\(c.owner)\(kind))")
                Output.line("    \(c.summary)")
                Output.line("    request:  \(compact(c.request))")
                Output.line("    \(c.stream == true ? "result:  " : "response:") \(compact(c.response))")
                if let events = c.events, !events.isEmpty {
                    Output.line("    events:   " + events.keys.sorted().map { "\($0) \(compact(events[$0]!))" }.joined(separator: ", "))
                }
                if let questions = c.questions, !questions.isEmpty {
                    Output.line("    asks:     " + questions.keys.sorted().map { "\($0) (\(questions[$0]!))" }.joined(separator: ", "))
                }
            }
            if reply.contracts.isEmpty { Output.line("No contracts match '\(inv.arguments.first ?? "")'.") }
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
            body = inv.arguments[1] == "-" ? FileHandle.standardInput.readDataToEndOfFile() : Data(inv.arguments[1].utf8)
            do {
                _ = try JSONCoding.parse(body, source: inv.arguments[1] == "-" ? "The BODY read from standard input" : "The BODY argument")
            } catch let error as TermindError {
                throw Invocation.UsageError(description: error.message)
            }
        }
        return try await Session.with(inv) { session in
            Output.json(try await session.call(contract, body: body))
            return .success
        }
    }

    static func version(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.isEmpty else { throw Invocation.UsageError(description: "version takes no arguments.") }
        let kernel = Kernel(configuration: try inv.kernelConfiguration(), sink: .disabled())
        let reply = try await kernel.call(KernelContracts.Version.self, Empty())
        if inv.json { Output.json(reply); return .success }
        Output.line("termind \(reply.termind)")
        Output.line("build: \(reply.signature)")
        Output.line("plugin ABI: \(reply.pluginABI)")
        for (name, version) in reply.libraries.sorted(by: { $0.key < $1.key }) { Output.line("\(name): \(version)") }
        return .success
    }

    /// `termind secrets status` and `termind secrets protect [--passphrase -]`.
    static func secrets(_ inv: Invocation) async throws -> Invocation.Exit {
        let response: SecretStoreContracts.Status.Response
        switch inv.arguments {
        case ["status"]:
            response = try await Session.with(inv) { try await $0.call(SecretStoreContracts.Status.self, Empty()) }
        case ["protect", "--passphrase", "-"]:
            let first = try SecretInput.read(prompt: "New passphrase: ")
            if isatty(STDIN_FILENO) == 1 {
                guard try SecretInput.read(prompt: "Again: ") == first else {
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
        if inv.json { Output.json(response) } else {
            Output.line("protection  \(response.protection)")
            Output.line("store       \(response.path)")
            Output.line("secrets     \(response.secrets)")
            Output.line("key made    \(response.keyRotatedAt ?? "unknown (before termind recorded it)")")
        }
        return .success
    }

    static func plugins(_ inv: Invocation) async throws -> Invocation.Exit {
        guard inv.arguments.count == 2, inv.arguments[0] == "check" else {
            throw Invocation.UsageError(description: "usage: termind plugins check DIR")
        }
        let directory = Invocation.absolute(inv.arguments[1])
        let checks = await PluginConformance.check(pluginDirectory: directory)
        let passed = checks.allSatisfy(\.passed)
        if inv.json {
            struct Report: Encodable { let plugin: String; let passed: Bool; let checks: [PluginConformance.Check] }
            Output.json(Report(plugin: directory, passed: passed, checks: checks))
        } else {
            for check in checks { Output.line("\(check.passed ? "ok  " : "FAIL") \(check.name): \(check.detail)") }
            Output.line(passed ? "\(checks.count) passed, 0 failed" : "\(checks.filter(\.passed).count) passed, \(checks.filter { !$0.passed }.count) failed")
        }
        return passed ? .success : .failure
    }
}
