/// The outcome of validating a set of manifests: what will be loaded, in which order,
/// and why anything else will not. Pure: computed before any library is opened.
public struct BootPlan: Sendable, Equatable {
    /// Features to load, dependencies first, then by `order`, then by id.
    public var ordered: [FeatureManifest]
    /// Features that will not load, each with the reason (one problem per feature).
    public var disabled: [FeatureProblem]
    /// Problems that stop boot: a permanent feature that cannot run.
    public var fatal: [FeatureProblem]
}

/// Validates manifests and computes the boot order.
///
/// Rules: unique ids; supported ABI; the library exists; contract ids are well formed and
/// unique; every contract and command lies in the feature's own namespace (`<id>.…`, a
/// command's first word is the id); a plugin takes no reserved id and is never permanent;
/// C schemas are readable; every required dependency exists and is enabled; no dependency
/// cycles; one provider per port; every required port has an enabled provider. A feature
/// that breaks a rule is disabled together with everything that requires it. A permanent
/// feature that ends up disabled — for any reason, even an entry that cannot be read — is
/// fatal.
public struct RegistryValidator: Sendable {
    public static let supportedABI = 1

    /// Ids no plugin may take: the kernel's own namespaces, the client's (`client.invoke@1`,
    /// which every command through serve uses), termind's built-in features (present and
    /// planned), the host's command words and the built-in features' (exec).
    public static let reservedIDs: Set<String> = hostCommands.union([
        "kernel", "termind", "ssh", "mcp", "client",
        "vault", "workspaces", "metrics", "assistant", "settings", "portforwarding", "sftp",
        "exec",
    ])

    /// The host's own command words, which no feature's command may start with.
    public static let hostCommands: Set<String> = ["features", "contracts", "call", "serve", "version", "bench", "plugins", "secrets", "help", "completion"]

    /// The features a one-shot command needs (nil: a command no feature declares, which
    /// boots them all to say so): the feature declaring the longest command that `words`
    /// begin with, and everything it reaches — its dependencies, the providers of the ports
    /// it requires or may use, the owners of the contracts and streams it calls (not those it
    /// calls only from contracts that neither the command nor any feature calls), and for the
    /// command's own feature the consumers of a port whose consumers its commands need
    /// (`commandsNeedConsumersOf`; of `settings.values`, only the feature whose
    /// `settingsRecords` holds the record the command names, when exactly one does) — and,
    /// for each of those, the same, except that a feature wanted only as such a consumer
    /// brings its required ports and dependencies, not its optional ones. Decided from the
    /// manifests alone: no feature's code runs to decide.
    public static func selection(forCommand words: [String], in manifests: [FeatureManifest]) -> Set<String>? {
        let leading = Array(words.prefix { !$0.hasPrefix("-") })
        var best: (manifest: FeatureManifest, command: FeatureManifest.Command)?
        for manifest in manifests {
            for command in manifest.commands {
                let name = command.words
                guard !name.isEmpty, name.count <= leading.count, Array(leading.prefix(name.count)) == name else { continue }
                if name.count > (best?.command.words.count ?? 0) { best = (manifest, command) }
            }
        }
        guard let (owner, command) = best else { return nil }
        var byID: [String: FeatureManifest] = [:]
        for manifest in manifests where byID[manifest.id] == nil { byID[manifest.id] = manifest }
        var operationOwner: [String: String] = [:]
        for manifest in manifests {
            for operation in manifest.contracts + manifest.streams where operationOwner[operation] == nil { operationOwner[operation] = manifest.id }
        }
        let calledByFeatures = Set(manifests.flatMap(\.calls))
        // Each feature wanted, and whether wholly (`true`) or only as a consumer the command's
        // feature needs (`commandsNeedConsumersOf`): such a feature registers into that port
        // (its settings records) and is not asked to work, so what it may use when present
        // (optional ports and dependencies) is not loaded for it.
        var wanted: [String: Bool] = [owner.id: true]
        var frontier = [owner.id]
        while let id = frontier.popLast() {
            guard let m = byID[id], let whole = wanted[id] else { continue }
            var next = m.dependencies.required + (whole ? m.dependencies.optional : [])
            for port in m.ports.requires + (whole ? m.ports.optional : []) {
                next += manifests.filter { $0.ports.provides.contains(port) }.map(\.id)
            }
            // A call made only from some contracts (`callsFrom`) counts when one of them can be
            // called: it is the command's (for its own feature), or a feature lists it in `calls`.
            next += m.calls.filter { call in
                m.callsFrom[call].map { from in from.contains { (id == owner.id && $0 == command.target) || calledByFeatures.contains($0) } } ?? true
            }.compactMap { operationOwner[$0] }
            var consumers: [String] = []
            // Only for the command's own feature: a feature reached on the way serves its port,
            // not its commands.
            for port in m.commandsNeedConsumersOf where id == owner.id {
                let all = manifests.filter { ($0.ports.requires + $0.ports.optional).contains(port) }
                // A settings command naming one record needs only the feature declaring it.
                if port == "settings.values", let key = recordKey(words, command: command),
                   case let declaring = all.filter({ $0.settingsRecords.contains(key) }), declaring.count == 1 {
                    consumers += declaring.map(\.id)
                } else {
                    consumers += all.map(\.id)
                }
            }
            for (dependency, wholly) in next.map({ ($0, true) }) + consumers.map({ ($0, false) }) {
                // New, or wanted as a consumer until now and now wholly: (again) its needs.
                guard wanted[dependency] == nil || (wholly && wanted[dependency] == false) else { continue }
                wanted[dependency] = wholly
                frontier.append(dependency)
            }
        }
        return Set(wanted.keys)
    }

    /// A settings record's key as the Settings feature takes it: two or more dot-separated
    /// words of letters and digits, each starting lowercase.
    public static func isValidRecordKey(_ key: String) -> Bool {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false)
        return key.utf8.count <= 128 && parts.count >= 2
            && parts.allSatisfy { $0.first.map { $0 >= "a" && $0 <= "z" } == true && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } }
    }

    /// The settings record a command names: the word for its argument `key`, given after the
    /// command's own words or as `--key KEY`; nil when it names none.
    static func recordKey(_ words: [String], command: FeatureManifest.Command) -> String? {
        guard let position = command.arguments.firstIndex(of: "key") else { return nil }
        if let flag = words.firstIndex(of: "--key"), flag + 1 < words.count { return words[flag + 1] }
        var positional: [String] = []
        var index = command.words.count
        while index < words.count {
            let word = words[index]
            if word == "--" { positional += words[(index + 1)...]; break }
            // An option's value is never positional (every command option takes one).
            if word.hasPrefix("--") { index += word.contains("=") ? 1 : 2; continue }
            positional.append(word)
            index += 1
        }
        return position < positional.count ? positional[position] : nil
    }

    public var libraryExists: @Sendable (String) -> Bool
    /// Ports the kernel provides itself (the store, the secret store): always available
    /// to require, never to provide.
    public var kernelPorts: Set<String>
    public var reservedIDs: Set<String>

    public init(libraryExists: @escaping @Sendable (String) -> Bool, kernelPorts: Set<String> = [],
                reservedIDs: Set<String> = RegistryValidator.reservedIDs) {
        self.libraryExists = libraryExists
        self.kernelPorts = kernelPorts
        self.reservedIDs = reservedIDs
    }

    /// Whether `name` (a contract or stream name, without `@version`) lies in feature `id`'s namespace.
    public static func isInNamespace(_ name: String, of id: String) -> Bool {
        name.hasPrefix(id + ".") && name.count > id.count + 1
    }

    /// - Parameters:
    ///   - manifests: everything declared, in declaration order (registry first, then plugins).
    ///   - rejected: entries that could not even be read.
    ///   - selection: when set, only these ids plus what they require (and permanent features).
    public func plan(_ manifests: [FeatureManifest], rejected: [FeatureProblem] = [], selection: Set<String>? = nil) throws -> BootPlan {
        var disabled: [String: FeatureProblem] = [:]
        var anonymous: [FeatureProblem] = []
        var byID: [String: FeatureManifest] = [:]
        var declared: [String] = []
        var recordOwner: [String: String] = [:]

        func disable(_ id: String, field: String?, code: ErrorCode, _ message: String) {
            guard disabled[id] == nil else { return }
            disabled[id] = FeatureProblem(featureID: id, field: field, code: code, message: message)
        }

        // Entries that could not be read never become candidates; report each as is. One that
        // declared itself permanent stops boot.
        anonymous += rejected
        var fatal = rejected.filter(\.permanent).map { problem in
            FeatureProblem(featureID: problem.featureID, field: problem.field, code: .featurePermanentFailed,
                           message: "Permanent feature \(problem.featureID.map { "'\($0)'" } ?? "entry") cannot run, so termind cannot start: \(problem.message)")
        }

        // Identity, ABI, library, declarations.
        for m in manifests {
            let name = "feature '\(m.id)' (\(m.source))"
            guard Self.isValidID(m.id) else {
                let problem = FeatureProblem(featureID: nil, field: "id", code: .manifestInvalidID,
                                             message: "\(m.source): field \"id\" '\(m.id)' must be 1–64 characters of a–z, 0–9, '-' or '_', starting with a letter.")
                anonymous.append(problem)
                if m.isPermanent {
                    fatal.append(FeatureProblem(featureID: nil, field: "id", code: .featurePermanentFailed,
                                                message: "Permanent feature '\(m.id)' cannot run, so termind cannot start: \(problem.message)"))
                }
                continue
            }
            if (m.origin == .plugin && reservedIDs.contains(m.id)) || m.id == "kernel" {
                let problem = FeatureProblem(featureID: nil, field: "id", code: .manifestReservedID,
                                             message: "\(name) is not loaded: field \"id\": '\(m.id)' is reserved for termind itself\(m.origin == .plugin ? " (reserved: \(reservedIDs.sorted().joined(separator: ", ")))" : ""); choose another id.")
                anonymous.append(problem)
                if m.isPermanent {
                    fatal.append(FeatureProblem(featureID: nil, field: "id", code: .featurePermanentFailed,
                                                message: "Permanent feature '\(m.id)' cannot run, so termind cannot start: \(problem.message)"))
                }
                continue
            }
            if let first = byID[m.id] {
                anonymous.append(FeatureProblem(featureID: m.id, field: "id", code: .registryDuplicateID,
                                                message: "\(name): field \"id\" duplicates '\(m.id)' already declared in \(first.source); this copy is ignored."))
                continue
            }
            byID[m.id] = m
            declared.append(m.id)
            // A settings record belongs to the first manifest declaring it.
            for key in m.settingsRecords where recordOwner[key] == nil { recordOwner[key] = m.id }
            if m.abi != Self.supportedABI {
                disable(m.id, field: "abi", code: .manifestABI, "\(name): field \"abi\" is \(m.abi), but this termind speaks plugin ABI \(Self.supportedABI).")
            } else if !libraryExists(m.libraryPath) {
                disable(m.id, field: "library", code: .manifestLibraryMissing, "\(name): field \"library\": no file at \(m.libraryPath).")
            } else if let bad = m.contracts.first(where: { ContractID(parsing: $0) == nil }) {
                disable(m.id, field: "contracts", code: .manifestContractID, "\(name): field \"contracts\": '\(bad)' is not of the form name@version (e.g. vault.host.list@1).")
            } else if let bad = (m.ports.provides + m.ports.requires + m.ports.optional).first(where: { !Self.isValidPortID($0) }) {
                disable(m.id, field: "ports", code: .manifestPortID, "\(name): field \"ports\": '\(bad)' is not a valid port id (lowercase words separated by dots).")
            } else if let bad = m.calls.first(where: { ContractID(parsing: $0) == nil }) {
                disable(m.id, field: "calls", code: .manifestContractID, "\(name): field \"calls\": '\(bad)' is not of the form name@version (e.g. vault.host.list@1).")
            } else if let bad = m.contracts.first(where: { !Self.isInNamespace(ContractID(parsing: $0)!.name, of: m.id) }) {
                disable(m.id, field: "contracts", code: .manifestNamespace, "\(name): field \"contracts\": '\(bad)' is outside the feature's namespace; its contracts must be named '\(m.id).…'.")
            } else if let bad = m.streams.first(where: { ContractID(parsing: $0) == nil }) {
                disable(m.id, field: "streams", code: .manifestContractID, "\(name): field \"streams\": '\(bad)' is not of the form name@version (e.g. workspaces.exec@1).")
            } else if let bad = m.streams.first(where: { !Self.isInNamespace(ContractID(parsing: $0)!.name, of: m.id) }) {
                disable(m.id, field: "streams", code: .manifestNamespace, "\(name): field \"streams\": '\(bad)' is outside the feature's namespace; its streams must be named '\(m.id).…'.")
            } else if m.origin == .plugin && m.ports.provides.contains("kernel.policy") {
                disable(m.id, field: "ports.provides", code: .manifestInvalidField,
                        "\(name): field \"ports.provides\": 'kernel.policy' (what decides on an agent's calls) is provided only by a feature of termind's own registry, never a plugin.")
            } else if m.origin == .plugin && m.permanent {
                disable(m.id, field: "permanent", code: .pluginPermanent, "\(name): field \"permanent\": a plugin can never be permanent (only Registry.json features are); remove the field.")
            } else if (m.access != nil || m.limits != nil) && m.isolation != .process {
                disable(m.id, field: m.access != nil ? "access" : "limits", code: .manifestInvalidField,
                        "\(name): fields \"access\" and \"limits\" apply to a plugin with \"isolation\": \"process\" (in termind's own process nothing can enforce them).")
            } else if let bad = ((m.access?.read ?? []) + (m.access?.write ?? [])).first(where: { !$0.hasPrefix("/") }) {
                disable(m.id, field: "access", code: .manifestInvalidField, "\(name): field \"access\": '\(bad)' is not an absolute path.")
            } else if let limits = m.limits, [limits.memoryMiB.map { !(64...65_536).contains($0) }, limits.openFiles.map { !(16...65_536).contains($0) },
                                               limits.callSeconds.map { !(1...3_600).contains($0) }].contains(true) {
                disable(m.id, field: "limits", code: .manifestInvalidField, "\(name): field \"limits\": memoryMiB is 64 to 65536, openFiles 16 to 65536, callSeconds 1 to 3600.")
            } else if m.isolation != nil && m.kind != .c {
                disable(m.id, field: "isolation", code: .manifestInvalidField, "\(name): field \"isolation\" applies to C plugins only (a Swift feature runs in termind's process).")
            } else if m.origin != .plugin && m.libraryOutsidePlugin {
                disable(m.id, field: "libraryOutsidePlugin", code: .manifestInvalidField, "\(name): field \"libraryOutsidePlugin\" applies to plugins only.")
            } else if let problem = Self.callsFromProblem(m) {
                disable(m.id, field: "callsFrom", code: .manifestInvalidField, "\(name): field \"callsFrom\": \(problem).")
            } else if let problem = Self.functionProblem(m) {
                disable(m.id, field: "functions", code: .manifestFunction, "\(name): field \"functions\": \(problem).")
            } else if let problem = Self.commandProblem(m) {
                disable(m.id, field: "commands", code: .manifestCommand, "\(name): field \"commands\": \(problem).")
            } else if let problem = Self.schemaProblem(m) {
                disable(m.id, field: "schemas", code: .manifestSchema, "\(name): field \"schemas\": \(problem).")
            } else if let problem = Self.effectProblem(m) {
                disable(m.id, field: "effects", code: .manifestInvalidField, "\(name): field \"effects\": \(problem).")
            } else if let bad = m.settingsRecords.first(where: { !Self.isValidRecordKey($0) }) {
                disable(m.id, field: "settingsRecords", code: .manifestInvalidField,
                        "\(name): field \"settingsRecords\": '\(bad)' is not a settings key (dotted words starting lowercase, e.g. sftp.limits).")
            } else if let bad = m.settingsRecords.first(where: { recordOwner[$0] != m.id }) {
                disable(m.id, field: "settingsRecords", code: .manifestInvalidField,
                        "\(name): field \"settingsRecords\": '\(bad)' is declared by another feature already; a record has one owner.")
            }
        }

        // Selection: the chosen ids, what they require, and permanent features.
        var active = Set(declared)
        if let selection {
            let unknown = selection.subtracting(declared).sorted()
            guard unknown.isEmpty else {
                throw TermindError(.featuresUnknown, "Unknown feature\(unknown.count == 1 ? "" : "s") \(unknown.map { "'\($0)'" }.joined(separator: ", ")) in --features / TERMIND_FEATURES. Known: \(declared.sorted().joined(separator: ", ")).")
            }
            var wanted = selection.union(declared.filter { byID[$0]!.isPermanent })
            var frontier = Array(wanted)
            while let id = frontier.popLast() {
                guard let m = byID[id] else { continue }
                var next = m.dependencies.required
                for port in m.ports.requires {
                    next += declared.filter { byID[$0]!.ports.provides.contains(port) }
                }
                for dep in next where !wanted.contains(dep) { wanted.insert(dep); frontier.append(dep) }
            }
            active = wanted
        }

        let sortKey: (String) -> (Int, String) = { (byID[$0]!.order, $0) }
        let candidates = declared.filter { active.contains($0) }.sorted { sortKey($0) < sortKey($1) }

        // Unknown required dependencies.
        for id in candidates {
            let m = byID[id]!
            if let missing = m.dependencies.required.first(where: { byID[$0] == nil }) {
                disable(id, field: "dependencies.required", code: .manifestDependencyUnknown,
                        "feature '\(id)' (\(m.source)): field \"dependencies.required\" names '\(missing)', which no registry entry or plugin declares.")
            }
        }

        // Cycles over required dependencies.
        for cycle in Self.cycles(candidates, edges: { byID[$0]?.dependencies.required.filter { byID[$0] != nil } ?? [] }) {
            let path = (cycle + [cycle[0]]).map { "'\($0)'" }.joined(separator: " → ")
            for id in cycle {
                disable(id, field: "dependencies.required", code: .registryDependencyCycle,
                        "feature '\(id)' (\(byID[id]!.source)): field \"dependencies.required\" forms a cycle \(path).")
            }
        }

        // Unique contracts and ports: the first in boot order keeps them.
        var contractOwner: [String: String] = [:]
        var portOwner: [String: String] = [:]
        var commandOwner: [String: String] = [:]
        for port in kernelPorts { portOwner[port] = "kernel" }
        for id in candidates where disabled[id] == nil {
            let m = byID[id]!
            if let clash = m.contracts.first(where: { contractOwner[$0] != nil }) {
                disable(id, field: "contracts", code: .registryContractConflict,
                        "feature '\(id)' (\(m.source)): field \"contracts\": '\(clash)' is already handled by '\(contractOwner[clash]!)'.")
                continue
            }
            if let clash = m.ports.provides.first(where: { portOwner[$0] != nil }) {
                disable(id, field: "ports.provides", code: .registryPortConflict,
                        "feature '\(id)' (\(m.source)): field \"ports.provides\": port '\(clash)' already has a provider, '\(portOwner[clash]!)'; a port has exactly one.")
                continue
            }
            if let clash = m.commands.first(where: { commandOwner[$0.name] != nil }) {
                disable(id, field: "commands", code: .registryCommandConflict,
                        "feature '\(id)' (\(m.source)): field \"commands\": 'termind \(clash.name)' is already a command of '\(commandOwner[clash.name]!)'.")
                continue
            }
            for c in m.contracts { contractOwner[c] = id }
            for c in m.commands { commandOwner[c.name] = id }
            for p in m.ports.provides { portOwner[p] = id }
        }

        // Propagate: a feature whose required dependency or port provider is disabled is disabled.
        var changed = true
        while changed {
            changed = false
            for id in candidates where disabled[id] == nil {
                let m = byID[id]!
                if let dep = m.dependencies.required.first(where: { disabled[$0] != nil || !active.contains($0) }) {
                    disable(id, field: "dependencies.required", code: .featureDependencyDisabled,
                            "feature '\(id)' (\(m.source)): requires '\(dep)', which is disabled: \(disabled[dep]?.message ?? "not selected").")
                    changed = true
                } else if let port = m.ports.requires.first(where: { p in portOwner[p].map { $0 != "kernel" && disabled[$0] != nil } ?? true }) {
                    let declaredBy = candidates.first { byID[$0]!.ports.provides.contains(port) }
                    let reason = (portOwner[port].flatMap { $0 == "kernel" ? nil : $0 } ?? declaredBy).map { "its provider '\($0)' is disabled" } ?? "no feature provides it"
                    disable(id, field: "ports.requires", code: .featurePortUnprovided,
                            "feature '\(id)' (\(m.source)): requires port '\(port)', but \(reason).")
                    changed = true
                }
            }
        }

        // Order the survivors: dependencies (required, present optional, port providers) first, then order, then id.
        let enabled = candidates.filter { disabled[$0] == nil }
        let enabledSet = Set(enabled)
        var incoming: [String: Set<String>] = [:]
        for id in enabled {
            let m = byID[id]!
            var before = Set(m.dependencies.required + m.dependencies.optional).intersection(enabledSet)
            for port in m.ports.requires + m.ports.optional { if let p = portOwner[port], enabledSet.contains(p) { before.insert(p) } }
            before.remove(id)
            incoming[id] = before
        }
        // Optional dependencies must not create cycles: drop optional edges that would.
        var ordered: [String] = []
        var placed = Set<String>()
        while ordered.count < enabled.count {
            let ready = enabled.filter { !placed.contains($0) && incoming[$0]!.isSubset(of: placed) }
            let next: String
            if let first = ready.min(by: { sortKey($0) < sortKey($1) }) {
                next = first
            } else {
                // Only optional edges can remain in a cycle here; break it deterministically.
                next = enabled.filter { !placed.contains($0) }.min(by: { sortKey($0) < sortKey($1) })!
            }
            ordered.append(next)
            placed.insert(next)
        }

        let disabledList = declared.compactMap { disabled[$0] } + anonymous
        fatal += declared.compactMap { id -> FeatureProblem? in
            guard byID[id]!.isPermanent, let problem = disabled[id] else { return nil }
            return FeatureProblem(featureID: id, field: problem.field, code: .featurePermanentFailed,
                                  message: "Permanent feature '\(id)' cannot run, so termind cannot start: \(problem.message)")
        }
        return BootPlan(ordered: ordered.map { byID[$0]! }, disabled: disabledList, fatal: fatal)
    }

    // MARK: - Rules

    public static func isValidID(_ id: String) -> Bool {
        guard let first = id.utf8.first, (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first), id.utf8.count <= 64 else { return false }
        return id.utf8.allSatisfy { isLowerAlnum($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }
    }

    /// Dot-separated ids (`vault.hosts`), each as `isValidID` takes it: read in one pass
    /// over the bytes, since every manifest's contracts and ports go through here at boot.
    public static func isValidPortID(_ id: String) -> Bool {
        var length = 0
        for byte in id.utf8 {
            if byte == UInt8(ascii: ".") {
                guard length > 0 else { return false }
                length = 0
                continue
            }
            guard length == 0 ? (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) : isLowerAlnum(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_"),
                  length < 64 else { return false }
            length += 1
        }
        return length > 0
    }

    private static func isLowerAlnum(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
    }

    private static func functionProblem(_ m: FeatureManifest) -> String? {
        if !m.functions.isEmpty && m.kind != .c { return "only C plugins (kind \"c\") declare functions" }
        var seen = Set<String>()
        for f in m.functions {
            guard isValidID(f.name) else { return "function name '\(f.name)' must be lowercase letters, digits, '-' or '_'" }
            guard seen.insert(f.name).inserted else { return "function '\(f.name)' is declared twice" }
            guard !f.symbol.isEmpty, f.symbol.utf8.allSatisfy({ isLowerAlnum($0) || $0 == UInt8(ascii: "_") || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) else {
                return "function '\(f.name)': symbol '\(f.symbol)' is not a C identifier"
            }
            if case .failure(let error) = FunctionSignature.parse(f.signature) { return "function '\(f.name)': \(error.message)" }
        }
        return nil
    }

    private static func commandProblem(_ m: FeatureManifest) -> String? {
        let hostCommands = Self.hostCommands
        let functionContracts = m.functions.map { "\(m.id).fn.\($0.name)@1" }
        for c in m.commands {
            let words = c.words
            guard !words.isEmpty, words.joined(separator: " ") == c.name, words.allSatisfy(isValidID) else {
                return "command name '\(c.name)' must be words of lowercase letters, digits, '-' or '_' separated by single spaces"
            }
            switch (c.contract, c.stream) {
            case (let contract?, nil):
                guard m.contracts.contains(contract) || functionContracts.contains(contract) else {
                    return "command '\(c.name)' maps to '\(contract)', which this feature does not declare"
                }
            case (nil, let stream?):
                guard m.streams.contains(stream) else {
                    return "command '\(c.name)' runs stream '\(stream)', which this feature does not declare under \"streams\""
                }
            default:
                return "command '\(c.name)' needs exactly one of \"contract\" and \"stream\""
            }
            if c.arguments.filter({ $0.hasSuffix("...") }).count > 1 {
                return "command '\(c.name)': only one argument may take several words (\(c.arguments.filter { $0.hasSuffix("...") }.joined(separator: ", ")))"
            }
            for letter in (c.flags ?? [:]).keys.sorted() where letter.count != 1 || !(letter.first!.isLetter || letter.first!.isNumber) {
                return "command '\(c.name)': flag '\(letter)' must be one letter or digit (written -\(letter))"
            }
            for letter in (c.options ?? [:]).keys.sorted() {
                guard letter.count == 1, letter.first!.isLetter || letter.first!.isNumber else {
                    return "command '\(c.name)': option '\(letter)' must be one letter or digit (written -\(letter) VALUE)"
                }
                guard c.flags?[letter] == nil else { return "command '\(c.name)': -\(letter) is both a flag and an option" }
            }
            for (field, name) in (c.environment ?? [:]).sorted(by: { $0.key < $1.key }) {
                if let problem = environmentProblem(name) { return "command '\(c.name)': field '\(field)' from $\(name): \(problem)" }
            }
            // Built-in features (Registry.json) may give a command a top-level word of its own
            // (`termind exec`); a plugin's commands stay in its namespace.
            guard words[0] == m.id || m.origin == .registry else {
                return "command '\(c.name)' is outside the feature's namespace; its commands must start with '\(m.id)'"
            }
            guard words[0] == m.id || !hostCommands.contains(words[0]) else {
                return "command '\(c.name)' takes the word '\(words[0])' of one of termind's own commands"
            }
        }
        return nil
    }

    /// `callsFrom`: each call is one the feature lists under `calls`, made from one or more
    /// of its own contracts.
    private static func callsFromProblem(_ m: FeatureManifest) -> String? {
        // The kernel knows which contract a Swift handler serves; a C plugin's calls come back
        // through its own thread, where it does not.
        if !m.callsFrom.isEmpty && m.kind != .swift { return "applies to Swift features only; a C plugin lists its calls under \"calls\"" }
        for (call, contracts) in m.callsFrom.sorted(by: { $0.key < $1.key }) {
            guard m.calls.contains(call) else { return "'\(call)' is not among the feature's \"calls\"" }
            guard !contracts.isEmpty else { return "'\(call)' names no contract it is made from (list them, or remove it to allow it from anywhere)" }
            if let bad = contracts.first(where: { !m.contracts.contains($0) }) {
                return "'\(call)' is made from '\(bad)', which is not one of the feature's own contracts"
            }
        }
        return nil
    }

    /// What a command may take from the client's environment: a plain upper-case name,
    /// never one that may hold a secret or one of termind's own settings.
    static func environmentProblem(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= 64, name.first != "_" || name.count > 1,
              name.unicodeScalars.allSatisfy({ ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }),
              !("0"..."9").contains(name.unicodeScalars.first!) else {
            return "not an environment variable name (upper-case letters, digits, _)"
        }
        if name.hasPrefix("TERMIND_") { return "termind's own settings are not passed to features" }
        for word in ["KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH"] where name.contains(word) {
            return "a variable whose name holds \(word) may hold a secret, and is never passed"
        }
        return nil
    }

    /// A C plugin's `effects`: for its own operations only, each one an effect.
    private static func effectProblem(_ m: FeatureManifest) -> String? {
        if !m.effects.isEmpty && m.kind != .c { return "only C plugins (kind \"c\") declare effects here; a Swift feature's are declared beside its types" }
        let own = Set(m.contracts + m.streams + m.functions.map { "\(m.id).fn.\($0.name)@1" })
        for (id, text) in m.effects.sorted(by: { $0.key < $1.key }) {
            guard own.contains(id) else { return "'\(id)' is not one of the contracts, streams or functions this plugin declares" }
            if case .failure(let error) = Effect.parse(text) { return "'\(id)': \(error.message)" }
        }
        return nil
    }

    private static func schemaProblem(_ m: FeatureManifest) -> String? {
        if !m.schemas.isEmpty && m.kind != .c { return "only C plugins (kind \"c\") declare schemas; a Swift feature's come from its types" }
        for contract in m.schemas.keys.sorted() {
            guard m.contracts.contains(contract) || m.streams.contains(contract) else {
                return "'\(contract)' is not one of the contracts or streams this feature declares"
            }
            let declared = m.schemas[contract]!
            if (declared.acceptsInput != nil || declared.events != nil || declared.questions != nil) && !m.streams.contains(contract) {
                return "'\(contract)': only a stream declares acceptsInput, events and questions"
            }
            for (kind, value) in (declared.events ?? [:]).sorted(by: { $0.key < $1.key }) {
                if case .failure(let error) = JSONSchema.read(value, at: "\(contract).events.\(kind)") { return error.message }
            }
            if let (topic, kind) = (declared.questions ?? [:]).first(where: { !["choice", "confirm", "prompts"].contains($0.value) }) {
                return "'\(contract)': question '\(topic)' is of kind '\(kind)'; a question is a choice, confirm or prompts"
            }
            for (part, value) in [("request", declared.request), ("response", declared.response)] {
                guard let value else { continue }
                if case .failure(let error) = JSONSchema.read(value, at: "\(contract).\(part)") { return error.message }
            }
        }
        return nil
    }

    /// Strongly connected components with more than one member, or a self-loop (Tarjan).
    static func cycles(_ nodes: [String], edges: (String) -> [String]) -> [[String]] {
        var index = 0
        var indices: [String: Int] = [:], low: [String: Int] = [:]
        var stack: [String] = [], onStack = Set<String>()
        var result: [[String]] = []
        let nodeSet = Set(nodes)

        func connect(_ v: String) {
            indices[v] = index; low[v] = index; index += 1
            stack.append(v); onStack.insert(v)
            for w in edges(v) where nodeSet.contains(w) {
                if indices[w] == nil { connect(w); low[v] = min(low[v]!, low[w]!) }
                else if onStack.contains(w) { low[v] = min(low[v]!, indices[w]!) }
            }
            if low[v] == indices[v] {
                var component: [String] = []
                while let w = stack.popLast() { onStack.remove(w); component.append(w); if w == v { break } }
                if component.count > 1 || edges(v).contains(v) { result.append(component.reversed()) }
            }
        }
        for v in nodes where indices[v] == nil { connect(v) }
        return result
    }
}
