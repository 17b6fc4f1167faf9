import TermindCore
import XCTest

/// The boot plan is pure: these drive `RegistryValidator` directly with manifests.
final class RegistryValidatorTests: XCTestCase {
    private let validator = RegistryValidator(libraryExists: { !$0.contains("missing") })

    private func feature(_ id: String, order: Int = 100, requires: [String] = [], optional: [String] = [],
                         provides: [String] = [], needsPorts: [String] = [], contracts: [String] = [],
                         permanent: Bool = false, abi: Int = 1, library: String? = nil) -> FeatureManifest {
        FeatureManifest(id: id, abi: abi, library: library ?? "/lib/\(id).so", order: order, permanent: permanent,
                        dependencies: .init(required: requires, optional: optional),
                        ports: .init(provides: provides, requires: needsPorts), contracts: contracts, source: "Registry.json")
    }

    private func reason(_ plan: BootPlan, _ id: String) -> FeatureProblem? { plan.disabled.first { $0.featureID == id } }

    func testOrderIsDependenciesFirstThenOrderThenID() throws {
        let plan = try validator.plan([
            feature("sftp", order: 10, requires: ["vault"]),
            feature("vault", order: 50),
            feature("metrics", order: 10),
            feature("assistant", order: 10),
            feature("forwarding", order: 5, needsPorts: ["sftp.scheduler"]),
            feature("transfers", order: 90, provides: ["sftp.scheduler"]),
        ])
        XCTAssertEqual(plan.ordered.map(\.id), ["assistant", "metrics", "vault", "sftp", "transfers", "forwarding"])
        XCTAssertTrue(plan.disabled.isEmpty)
    }

    func testOrderIsDeterministicWhateverTheDeclarationOrder() throws {
        let features = [feature("b", order: 1), feature("a", order: 1), feature("c", order: 0, requires: ["a"])]
        let first = try validator.plan(features).ordered.map(\.id)
        let second = try validator.plan(features.reversed()).ordered.map(\.id)
        // c (order 0) becomes ready once a is placed, and then precedes b (order 1).
        XCTAssertEqual(first, ["a", "c", "b"])
        XCTAssertEqual(first, second)
    }

    func testDuplicateIDKeepsTheFirstAndNamesBothSources() throws {
        var copy = feature("vault")
        copy.source = "/plugins/evil/plugin.json"
        let plan = try validator.plan([feature("vault"), copy])
        XCTAssertEqual(plan.ordered.map(\.id), ["vault"])
        let problem = try XCTUnwrap(plan.disabled.first { $0.code == "registry.duplicate_id" })
        XCTAssertEqual(problem.field, "id")
        XCTAssertTrue(problem.message.contains("/plugins/evil/plugin.json"), problem.message)
        XCTAssertTrue(problem.message.contains("Registry.json"), problem.message)
    }

    func testMissingLibraryDisablesWithTheFieldAndPath() throws {
        let plan = try validator.plan([feature("vault", library: "/opt/missing/libVault.so"), feature("metrics")])
        XCTAssertEqual(plan.ordered.map(\.id), ["metrics"])
        let problem = try XCTUnwrap(reason(plan, "vault"))
        XCTAssertEqual(problem.field, "library")
        XCTAssertTrue(problem.message.contains("/opt/missing/libVault.so"), problem.message)
    }

    func testUnsupportedABIDisables() throws {
        let plan = try validator.plan([feature("future", abi: 2)])
        XCTAssertEqual(reason(plan, "future")?.field, "abi")
        XCTAssertTrue(reason(plan, "future")!.message.contains("ABI 1"))
    }

    func testDependencyCycleDisablesEveryMemberAndShowsTheCycle() throws {
        let plan = try validator.plan([
            feature("a", requires: ["b"]), feature("b", requires: ["c"]), feature("c", requires: ["a"]),
            feature("d", requires: ["a"]), feature("e"),
        ])
        XCTAssertEqual(plan.ordered.map(\.id), ["e"])
        for id in ["a", "b", "c"] {
            let problem = try XCTUnwrap(reason(plan, id))
            XCTAssertEqual(problem.code, "registry.dependency_cycle")
            XCTAssertTrue(problem.message.contains("'a' → 'b' → 'c' → 'a'"), problem.message)
        }
        XCTAssertEqual(reason(plan, "d")?.code, "feature.dependency_disabled")
    }

    func testSelfDependencyIsACycle() throws {
        let plan = try validator.plan([feature("a", requires: ["a"])])
        XCTAssertEqual(reason(plan, "a")?.code, "registry.dependency_cycle")
    }

    func testPortWithTwoProvidersDisablesTheLaterOne() throws {
        let plan = try validator.plan([feature("vault", order: 1, provides: ["vault.hosts"]), feature("other", order: 2, provides: ["vault.hosts"])])
        XCTAssertEqual(plan.ordered.map(\.id), ["vault"])
        let problem = try XCTUnwrap(reason(plan, "other"))
        XCTAssertEqual(problem.code, "registry.port_conflict")
        XCTAssertEqual(problem.field, "ports.provides")
        XCTAssertTrue(problem.message.contains("'vault'"))
    }

    func testAContractOrCommandOutsideTheFeaturesNamespaceDisablesIt() throws {
        // Two features can never handle the same contract: each owns only `<id>.…`.
        var wol = feature("wol", contracts: ["wol.wake@1"])
        wol.origin = .plugin
        wol.commands = [.init(name: "wake", contract: "wol.wake@1")]
        let plan = try validator.plan([
            feature("a", order: 1, contracts: ["a.y@1"]), feature("b", order: 2, contracts: ["a.y@1"]),
            feature("kernelish", contracts: ["kernel.shutdown@1"]), feature("ab", contracts: ["abc.x@1"]), wol,
            feature("fine", contracts: ["fine.x@1", "fine.deeper.y@2"]),
        ])
        XCTAssertEqual(plan.ordered.map(\.id), ["a", "fine"])
        XCTAssertEqual(reason(plan, "b")?.code, "manifest.namespace")
        XCTAssertEqual(reason(plan, "b")?.message, "feature 'b' (Registry.json): field \"contracts\": 'a.y@1' is outside the feature's namespace; its contracts must be named 'b.…'.")
        XCTAssertEqual(reason(plan, "kernelish")?.code, "manifest.namespace")
        XCTAssertEqual(reason(plan, "ab")?.code, "manifest.namespace", "a prefix of the id is not its namespace")
        XCTAssertEqual(reason(plan, "wol")?.field, "commands")
        XCTAssertTrue(reason(plan, "wol")?.message.contains("command 'wake' is outside the feature's namespace; its commands must start with 'wol'") ?? false)
    }

    func testStreamsAndTheCommandsThatRunThemAreDeclaredAndChecked() throws {
        func with(_ id: String, order: Int = 100, streams: [String], _ commands: [FeatureManifest.Command]) -> FeatureManifest {
            var m = feature(id, order: order)
            m.streams = streams
            m.commands = commands
            return m
        }
        let plan = try validator.plan([
            with("ws", order: 1, streams: ["ws.run@1"], [.init(name: "exec", stream: "ws.run@1", arguments: ["target", "command..."])]),
            with("other", streams: ["ws.run@2"], []),
            with("undeclared", streams: [], [.init(name: "undeclared go", stream: "undeclared.go@1")]),
            with("both", streams: ["both.go@1"], [.init(name: "both go", contract: "both.go@1", stream: "both.go@1")]),
            with("early", streams: ["early.go@1"], [.init(name: "early go", stream: "early.go@1", arguments: ["words...", "more...", "target"])]),
            with("flagged", streams: ["flagged.go@1"], [.init(name: "flagged go", stream: "flagged.go@1", arguments: [], flags: ["rf": "recursive"])]),
            with("optioned", streams: ["optioned.go@1"], [.init(name: "optioned go", stream: "optioned.go@1", arguments: [], options: ["-L": "localForward"])]),
            with("twice", streams: ["twice.go@1"], [.init(name: "twice go", stream: "twice.go@1", arguments: [], flags: ["L": "loud"], options: ["L": "localForward"])]),
            with("greedy", streams: ["greedy.go@1"], [.init(name: "serve", stream: "greedy.go@1")]),
            with("tmuxed", streams: ["tmuxed.go@1"], [.init(name: "tmuxed go", stream: "tmuxed.go@1", environment: ["tmux": "TMUX", "pane": "TMUX_PANE"])]),
            with("nosy", streams: ["nosy.go@1"], [.init(name: "nosy go", stream: "nosy.go@1", environment: ["token": "GITHUB_TOKEN"])]),
            with("inward", streams: ["inward.go@1"], [.init(name: "inward go", stream: "inward.go@1", environment: ["key": "TERMIND_SECRETS_KEY"])]),
            with("lower", streams: ["lower.go@1"], [.init(name: "lower go", stream: "lower.go@1", environment: ["home": "home"])]),
            with("second", order: 2, streams: ["second.run@1"], [.init(name: "exec", stream: "second.run@1")]),
        ])
        XCTAssertEqual(plan.ordered.map(\.id), ["ws", "tmuxed"])
        XCTAssertTrue(reason(plan, "nosy")?.message.contains("field 'token' from $GITHUB_TOKEN: a variable whose name holds TOKEN may hold a secret, and is never passed") ?? false)
        XCTAssertTrue(reason(plan, "inward")?.message.contains("termind's own settings are not passed to features") ?? false)
        XCTAssertTrue(reason(plan, "lower")?.message.contains("not an environment variable name") ?? false)
        XCTAssertEqual(reason(plan, "other")?.code, "manifest.namespace")
        XCTAssertEqual(reason(plan, "other")?.field, "streams")
        XCTAssertTrue(reason(plan, "undeclared")?.message.contains("runs stream 'undeclared.go@1', which this feature does not declare") ?? false)
        XCTAssertTrue(reason(plan, "both")?.message.contains("exactly one of \"contract\" and \"stream\"") ?? false)
        XCTAssertTrue(reason(plan, "early")?.message.contains("only one argument may take several words (words..., more...)") ?? false)
        XCTAssertTrue(reason(plan, "flagged")?.message.contains("flag 'rf' must be one letter or digit") ?? false)
        XCTAssertTrue(reason(plan, "optioned")?.message.contains("option '-L' must be one letter or digit") ?? false)
        XCTAssertTrue(reason(plan, "twice")?.message.contains("-L is both a flag and an option") ?? false)
        XCTAssertTrue(reason(plan, "greedy")?.message.contains("takes the word 'serve' of one of termind's own commands") ?? false)
        XCTAssertEqual(reason(plan, "second")?.code, "registry.command_conflict")
        XCTAssertTrue(reason(plan, "second")?.message.contains("'termind exec' is already a command of 'ws'") ?? false)
    }

    func testPluginsCannotTakeReservedIDsOrBePermanent() throws {
        func plugin(_ id: String, permanent: Bool = false) -> FeatureManifest {
            var m = feature(id, contracts: ["\(id).x@1"], permanent: permanent)
            m.origin = .plugin
            m.source = "/p/\(id)/plugin.json"
            return m
        }
        let plan = try validator.plan([plugin("kernel"), plugin("vault"), plugin("sftp"), plugin("call"), plugin("sticky", permanent: true), plugin("fine")])
        XCTAssertEqual(plan.ordered.map(\.id), ["fine"])
        XCTAssertTrue(plan.fatal.isEmpty, "a plugin is never fatal: \(plan.fatal)")
        for id in ["kernel", "vault", "sftp", "call"] {
            let problem = try XCTUnwrap(plan.disabled.first { $0.code == "manifest.reserved_id" && $0.message.contains("'\(id)' is reserved") }, id)
            XCTAssertEqual(problem.field, "id")
        }
        XCTAssertEqual(reason(plan, "sticky")?.code, "plugin.permanent")
        XCTAssertTrue(reason(plan, "sticky")?.message.contains("a plugin can never be permanent") ?? false)
        // Registry features may use built-in ids, never the kernel's.
        let builtIn = try validator.plan([feature("vault", contracts: ["vault.x@1"]), feature("kernel", contracts: ["kernel.x@1"], permanent: true)])
        XCTAssertEqual(builtIn.ordered.map(\.id), ["vault"])
        XCTAssertEqual(builtIn.fatal.first?.code, "feature.permanent_failed")
    }

    func testAPermanentFeatureWhoseEntryCannotBeReadOrHasABadIDIsFatal() throws {
        let unreadable = FeatureProblem(featureID: "vault", field: "extra", code: "manifest.invalid_field", message: "feature 'vault': field \"extra\": unknown field.", permanent: true)
        let plan = try validator.plan([feature("Bad ID", permanent: true), feature("other")], rejected: [unreadable])
        XCTAssertEqual(plan.fatal.count, 2, "\(plan.fatal)")
        XCTAssertTrue(plan.fatal[0].message.hasPrefix("Permanent feature 'vault' cannot run, so termind cannot start: feature 'vault': field \"extra\""), plan.fatal[0].message)
        XCTAssertTrue(plan.fatal[1].message.contains("'Bad ID' must be 1–64 characters"), plan.fatal[1].message)
        let notPermanent = FeatureProblem(featureID: "x", field: "extra", code: "manifest.invalid_field", message: "x")
        XCTAssertTrue(try validator.plan([], rejected: [notPermanent]).fatal.isEmpty)
    }

    func testMalformedContractIDDisables() throws {
        let plan = try validator.plan([feature("a", contracts: ["NotAContract"])])
        XCTAssertEqual(reason(plan, "a")?.field, "contracts")
    }

    func testRequiredPortWithoutProviderDisables() throws {
        let plan = try validator.plan([feature("sftp", needsPorts: ["vault.hosts"])])
        let problem = try XCTUnwrap(reason(plan, "sftp"))
        XCTAssertEqual(problem.code, "feature.port_unprovided")
        XCTAssertTrue(problem.message.contains("no feature provides it"))
    }

    func testDisabledDependencyDisablesDependentsTransitively() throws {
        let plan = try validator.plan([
            feature("vault", provides: ["vault.hosts"], library: "/missing.so"),
            feature("sftp", requires: ["vault"]),
            feature("assistant", requires: ["sftp"]),
            feature("metrics", needsPorts: ["vault.hosts"]),
            feature("settings"),
        ])
        XCTAssertEqual(plan.ordered.map(\.id), ["settings"])
        XCTAssertTrue(reason(plan, "assistant")!.message.contains("requires 'sftp'"))
        XCTAssertTrue(reason(plan, "metrics")!.message.contains("provider 'vault' is disabled"))
    }

    func testUnknownRequiredDependencyDisablesButUnknownOptionalDoesNot() throws {
        let plan = try validator.plan([feature("a", requires: ["ghost"]), feature("b", optional: ["ghost"])])
        XCTAssertEqual(plan.ordered.map(\.id), ["b"])
        XCTAssertEqual(reason(plan, "a")?.code, "manifest.dependency_unknown")
    }

    func testOptionalDependencyOrdersAfterItButAnOptionalCycleDoesNotDisable() throws {
        let plan = try validator.plan([feature("a", order: 1, optional: ["b"]), feature("b", order: 2, optional: ["a"]), feature("c", order: 0, optional: ["b"])])
        XCTAssertEqual(Set(plan.ordered.map(\.id)), ["a", "b", "c"])
        XCTAssertTrue(plan.disabled.isEmpty)
        let plan2 = try validator.plan([feature("a", order: 1, optional: ["b"]), feature("b", order: 2)])
        XCTAssertEqual(plan2.ordered.map(\.id), ["b", "a"])
    }

    func testPermanentFeatureThatCannotRunIsFatal() throws {
        let plan = try validator.plan([feature("vault", permanent: true, library: "/missing.so")])
        XCTAssertEqual(plan.fatal.count, 1)
        XCTAssertTrue(plan.fatal[0].message.contains("Permanent feature 'vault'"))
    }

    func testSelectionLoadsChosenPlusWhatTheyRequireAndPermanentOnes() throws {
        let plan = try validator.plan([
            feature("vault", provides: ["vault.hosts"], permanent: true),
            feature("settings"),
            feature("sftp", requires: ["settings"], needsPorts: ["vault.hosts"]),
            feature("metrics"),
        ], selection: ["sftp"])
        XCTAssertEqual(Set(plan.ordered.map(\.id)), ["vault", "settings", "sftp"])
        XCTAssertTrue(plan.disabled.isEmpty, "unselected features are simply not loaded")
    }

    func testUnknownSelectionIsAnErrorNamingIt() {
        XCTAssertThrowsError(try validator.plan([feature("vault")], selection: ["vault", "sfpt"])) { error in
            let e = error as? TermindError
            XCTAssertEqual(e?.code, "features.unknown")
            XCTAssertTrue(e?.message.contains("'sfpt'") ?? false)
            XCTAssertTrue(e?.message.contains("Known: vault") ?? false)
        }
    }

    func testInvalidIDAndFunctionSignatureAreReported() throws {
        var c = feature("digest")
        c.kind = .c
        c.functions = [.init(name: "crc", symbol: "crc", signature: "uint32(char*)")]
        let plan = try validator.plan([feature("Bad ID"), c])
        XCTAssertTrue(plan.disabled.contains { $0.field == "id" })
        XCTAssertEqual(reason(plan, "digest")?.field, "functions")
        XCTAssertTrue(reason(plan, "digest")!.message.contains("char*"))
    }

    func testCommandMustMapToADeclaredContract() throws {
        var m = feature("wol", contracts: ["wol.wake@1"])
        m.commands = [.init(name: "wol", contract: "wol.sleep@1", arguments: ["target"])]
        let plan = try validator.plan([m])
        XCTAssertEqual(reason(plan, "wol")?.field, "commands")
    }

    func testOnlyARegistryFeatureMayProvideThePolicyThatDecidesForAgents() throws {
        var plugin = feature("sneaky", provides: ["kernel.policy"])
        plugin.origin = .plugin
        let plan = try validator.plan([feature("assistant", provides: ["kernel.policy"]), plugin])
        XCTAssertEqual(plan.ordered.map(\.id), ["assistant"])
        XCTAssertTrue(reason(plan, "sneaky")?.message.contains("'kernel.policy' (what decides on an agent's calls) is provided only by a feature of termind's own registry") == true)
    }
}

extension RegistryValidatorTests {
    /// A settings record has one owner, named as Settings names keys.
    func testSettingsRecordsAreKeysAndHaveOneOwner() throws {
        func declaring(_ id: String, _ keys: [String], order: Int) -> FeatureManifest {
            var m = FeatureManifest(id: id, library: "/lib/\(id).so", order: order, source: "Registry.json")
            m.settingsRecords = keys
            return m
        }
        let plan = try validator.plan([declaring("sftp", ["sftp.limits", "sftp.topology"], order: 1), declaring("thief", ["sftp.limits"], order: 2),
                                       declaring("odd", ["Sftp.limits"], order: 3), declaring("flat", ["limits"], order: 4), declaring("metrics", ["metrics.preferences"], order: 5)])
        XCTAssertEqual(plan.ordered.map(\.id), ["sftp", "metrics"])
        XCTAssertEqual(plan.disabled.first { $0.featureID == "thief" }?.message,
                       "feature 'thief' (Registry.json): field \"settingsRecords\": 'sftp.limits' is declared by another feature already; a record has one owner.")
        XCTAssertTrue(plan.disabled.first { $0.featureID == "odd" }?.message.contains("'Sftp.limits' is not a settings key (dotted words starting lowercase") == true)
        XCTAssertEqual(plan.disabled.first { $0.featureID == "flat" }?.field, "settingsRecords")
        XCTAssertTrue(RegistryValidator.isValidRecordKey("assistant.mcpServers"))
        XCTAssertFalse(RegistryValidator.isValidRecordKey("assistant..policy"))
        XCTAssertFalse(RegistryValidator.isValidRecordKey("assistant.pol-icy"))
    }

    /// `callsFrom` names calls the feature lists and contracts of its own, each call from one
    /// or more; anything else disables the feature, naming what is wrong.
    func testCallsFromNamesListedCallsAndTheFeaturesOwnContracts() throws {
        func vault(_ callsFrom: [String: [String]], calls: [String] = ["forwarding.add@1"]) -> FeatureManifest {
            var m = FeatureManifest(id: "vault", library: "/lib/vault.so", contracts: ["vault.import.commit@1", "vault.host.list@1"], calls: calls,
                                    source: "Registry.json")
            m.callsFrom = callsFrom
            return m
        }
        XCTAssertEqual(try validator.plan([vault(["forwarding.add@1": ["vault.import.commit@1"]])]).ordered.map(\.id), ["vault"])
        for (callsFrom, calls, expected) in [
            (["forwarding.remove@1": ["vault.import.commit@1"]], ["forwarding.add@1"], "'forwarding.remove@1' is not among the feature's \"calls\""),
            (["forwarding.add@1": []], ["forwarding.add@1"], "'forwarding.add@1' names no contract it is made from"),
            (["forwarding.add@1": ["sftp.transfer@1"]], ["forwarding.add@1"], "'forwarding.add@1' is made from 'sftp.transfer@1', which is not one of the feature's own contracts"),
        ] {
            let plan = try validator.plan([vault(callsFrom, calls: calls)])
            XCTAssertEqual(plan.ordered.map(\.id), [], "\(callsFrom)")
            XCTAssertEqual(reason(plan, "vault")?.field, "callsFrom")
            XCTAssertTrue(reason(plan, "vault")?.message.contains("field \"callsFrom\": \(expected)") == true, reason(plan, "vault")?.message ?? "enabled")
        }
        var plugin = vault(["forwarding.add@1": ["vault.import.commit@1"]])
        plugin.kind = .c
        XCTAssertTrue(reason(try validator.plan([plugin]), "vault")?.message.contains("field \"callsFrom\": applies to Swift features only") == true)
        // Read from a manifest's JSON, and refused by the manifest's schema when not a map of lists.
        let text = #"{"id": "vault", "version": "1.0.0", "abi": 1, "library": "v.so", "calls": ["forwarding.add@1"], "callsFrom": {"forwarding.add@1": ["vault.import.commit@1"]}}"#
        guard case .success(let read) = ManifestReader.readPlugin(Data(text.utf8), source: "plugin.json", baseDirectory: "/p") else { return XCTFail("not read") }
        XCTAssertEqual(read.callsFrom, ["forwarding.add@1": ["vault.import.commit@1"]])
        let bad = #"{"id": "vault", "version": "1.0.0", "abi": 1, "library": "v.so", "callsFrom": {"forwarding.add@1": "vault.import.commit@1"}}"#
        guard case .failure(let problem) = ManifestReader.readPlugin(Data(bad.utf8), source: "plugin.json", baseDirectory: "/p") else { return XCTFail("read") }
        XCTAssertEqual(problem.field, "callsFrom.forwarding.add@1", problem.message)
    }
}

/// A one-shot command loads only what it needs, decided from the manifests alone.
final class CommandSelectionTests: XCTestCase {
    private func feature(_ id: String, commands: [String] = [], contracts: [String] = [], calls: [String] = [], requires: [String] = [],
                         optional: [String] = [], provides: [String] = [], consumersOf: [String] = []) -> FeatureManifest {
        var m = FeatureManifest(id: id, library: "/lib/\(id).so", ports: .init(provides: provides, requires: requires, optional: optional),
                                contracts: contracts, calls: calls, commands: commands.map { FeatureManifest.Command(name: $0, contract: contracts.first) })
        m.commandsNeedConsumersOf = consumersOf
        return m
    }

    func testTheCommandsFeatureAndWhatItReachesAreChosen() {
        let manifests = [
            feature("vault", commands: ["vault host list", "vault host"], contracts: ["vault.host.list@1"], calls: ["forwarding.rule.add@1"], requires: ["kernel.store"]),
            feature("forwarding", commands: ["forward add"], contracts: ["forwarding.rule.add@1"], requires: ["vault.hosts"]),
            feature("vaultports", provides: ["vault.hosts"]),
            feature("assistant", commands: ["assistant run"], contracts: ["assistant.run@1"], requires: ["settings.values"], optional: ["sftp.scheduler"]),
            feature("settings", commands: ["settings list"], contracts: ["settings.list@1"], provides: ["settings.values"], consumersOf: ["settings.values"]),
            feature("sftp", commands: ["get"], contracts: ["sftp.transfer@1"], optional: ["settings.values"], provides: ["sftp.scheduler"]),
            feature("metrics", commands: ["metrics add"], contracts: ["metrics.add@1"]),
            feature("sync", commands: ["sync now"], contracts: ["sync.now@1"], requires: ["sftp.scheduler"], consumersOf: ["settings.values"]),
        ]
        // The longest command the words begin with; its calls' owners and their ports' providers.
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["vault", "host", "list", "--tag", "prod"], in: manifests), ["vault", "forwarding", "vaultports"])
        // Optional ports' providers too, and their own needs.
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["assistant", "run", "hello"], in: manifests), ["assistant", "settings", "sftp"])
        // A registry's commands need the features that register into it.
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["settings", "list"], in: manifests), ["settings", "assistant", "sftp"])
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["metrics", "add", "box"], in: manifests), ["metrics"])
        // Settings reached on the way serves its port: its consumers are not pulled in.
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["get", "box:f", "."], in: manifests), ["sftp", "settings"])
        // A feature that reads what others register (sync sends their records) needs them
        // too, though it provides no such port itself.
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["sync", "now"], in: manifests), ["sync", "sftp", "settings", "assistant"])
        // No feature declares it: nil (everything boots, to say so).
        XCTAssertNil(RegistryValidator.selection(forCommand: ["frobnicate"], in: manifests))
    }

    /// A call the command's feature makes only from other contracts (`callsFrom`) does not
    /// load its owner; from the command's own contract it does. A feature reached on the way
    /// makes such a call only when a feature may call one of those contracts.
    func testACallMadeOnlyFromOtherContractsDoesNotLoadItsOwner() {
        var vault = feature("vault", contracts: ["vault.host.list@1", "vault.import.commit@1"], calls: ["forwarding.add@1"])
        vault.commands = [FeatureManifest.Command(name: "vault host list", contract: "vault.host.list@1"),
                          FeatureManifest.Command(name: "vault import commit", contract: "vault.import.commit@1")]
        vault.callsFrom = ["forwarding.add@1": ["vault.import.commit@1"]]
        let manifests = [vault, feature("forwarding", contracts: ["forwarding.add@1"]),
                         feature("workspaces", commands: ["workspaces list"], contracts: ["workspaces.list@1"], calls: ["vault.host.list@1"])]
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["vault", "host", "list"], in: manifests), ["vault"])
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["vault", "import", "commit", "--path", "x"], in: manifests), ["vault", "forwarding"])
        // Reached on the way (for its host list), it makes no call from the import's commit...
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["workspaces", "list"], in: manifests), ["workspaces", "vault"])
        // ...unless a feature may call that contract.
        let importer = feature("importer", commands: ["importer run"], contracts: ["importer.run@1"], calls: ["vault.import.commit@1"])
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["workspaces", "list"], in: manifests + [importer]), ["workspaces", "vault", "forwarding"])
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["importer", "run"], in: manifests + [importer]), ["importer", "vault", "forwarding"])
    }

    /// A settings command that names one record loads the feature declaring it (and what that
    /// reaches), not every feature that registers records; one naming none, or a key nobody
    /// declares, loads them all as before.
    func testASettingsCommandNamingARecordLoadsOnlyItsOwner() {
        var settings = feature("settings", contracts: ["settings.get@1"], provides: ["settings.values"], consumersOf: ["settings.values"])
        settings.commands = [FeatureManifest.Command(name: "settings get", contract: "settings.get@1", arguments: ["key"]),
                             FeatureManifest.Command(name: "settings set", contract: "settings.get@1", arguments: ["key", "value"]),
                             FeatureManifest.Command(name: "settings list", contract: "settings.get@1")]
        var sftp = feature("sftp", requires: ["settings.values", "vault.hosts"])
        sftp.settingsRecords = ["sftp.limits", "sftp.topology"]
        var assistant = feature("assistant", requires: ["settings.values"], optional: ["sftp.scheduler"])
        assistant.settingsRecords = ["assistant.policy"]
        let quiet = feature("quiet", optional: ["settings.values"])  // registers none it declares
        let manifests = [settings, sftp, assistant, quiet, feature("vault", provides: ["vault.hosts"])]
        func selected(_ words: String) -> Set<String>? { RegistryValidator.selection(forCommand: words.split(separator: " ").map(String.init), in: manifests) }
        XCTAssertEqual(selected("settings get sftp.limits"), ["settings", "sftp", "vault"])
        XCTAssertEqual(selected("settings get --key sftp.topology"), ["settings", "sftp", "vault"])
        XCTAssertEqual(selected("settings set sftp.limits {} --replace true"), ["settings", "sftp", "vault"])
        XCTAssertEqual(selected("settings set --revision 3 assistant.policy {}"), ["settings", "assistant"])
        // Nobody declares it (or a feature registers it undeclared): every consumer, to find it or say which exist.
        XCTAssertEqual(selected("settings get nothing.here"), ["settings", "sftp", "assistant", "quiet", "vault"])
        XCTAssertEqual(selected("settings get"), ["settings", "sftp", "assistant", "quiet", "vault"])
        XCTAssertEqual(selected("settings list"), ["settings", "sftp", "assistant", "quiet", "vault"])
    }

    /// A feature wanted only to register its records brings what it requires, not what it
    /// may use when present; one that is also wanted for itself brings both.
    func testARecordOwnerBringsItsRequiredPortsNotItsOptionalOnes() {
        var settings = feature("settings", contracts: ["settings.get@1"], provides: ["settings.values"], consumersOf: ["settings.values"])
        settings.commands = [FeatureManifest.Command(name: "settings get", contract: "settings.get@1", arguments: ["key"])]
        var workspaces = feature("workspaces", commands: ["exec"], contracts: ["workspaces.exec@1"], requires: ["vault.hosts"],
                                 optional: ["settings.values", "forwarding.session"])
        workspaces.settingsRecords = ["terminal.preferences"]
        let manifests = [settings, workspaces, feature("vault", provides: ["vault.hosts"]), feature("forwarding", provides: ["forwarding.session"])]
        func selected(_ words: String) -> Set<String>? { RegistryValidator.selection(forCommand: words.split(separator: " ").map(String.init), in: manifests) }
        XCTAssertEqual(selected("settings get terminal.preferences"), ["settings", "workspaces", "vault"])
        XCTAssertEqual(selected("settings get"), ["settings", "workspaces", "vault"])
        XCTAssertEqual(selected("exec box"), ["workspaces", "vault", "settings", "forwarding"])
        // Wanted as a consumer first and then wholly (its own feature calls it): all it may use.
        var caller = settings
        caller.calls = ["workspaces.exec@1"]
        XCTAssertEqual(RegistryValidator.selection(forCommand: ["settings", "get", "terminal.preferences"], in: [caller] + manifests.dropFirst()),
                       ["settings", "workspaces", "vault", "forwarding"])
    }
}

import TermindHarness

/// The real registry, end to end: what a one-shot command starts (its log says) and that
/// behaviour is unchanged.
final class OneShotLoadingTests: XCTestCase {
    func testAOneShotCommandStartsOnlyTheFeaturesItNeedsAndSettingsStillSeesEveryRecord() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let environment = ProcessInfo.termindEnvironment(home: directory.file("home"), socket: directory.file("none.sock"))
        func termind(_ arguments: [String], log: String) throws -> (ProcessResult, Set<String>) {
            let result = try ProcessRunner.run(FeatureHarness.buildDirectory + "/termind",
                                               ["--store", directory.file("db.sqlite"), "--secrets-key", directory.file("k"), "--log-file", directory.file(log)] + arguments,
                                               environment: environment)
            let text = (try? String(contentsOfFile: directory.file(log), encoding: .utf8)) ?? ""
            let started = Set(text.split(separator: "\n").filter { $0.contains("kernel.feature.started") }.compactMap { line -> String? in
                guard let range = line.range(of: "\"feature\":\"") ?? line.range(of: "feature=") else { return nil }
                return String(line[range.upperBound...].prefix { $0 != "\"" && $0 != " " && $0 != "," && $0 != "}" })
            })
            return (result, started)
        }
        let (added, _) = try termind(["vault", "host", "add", "10.0.0.9", "--label", "box"], log: "add.log")
        XCTAssertEqual(added.status, 0, added.stderr)
        let (listed, started) = try termind(["vault", "host", "list"], log: "list.log")
        XCTAssertEqual(listed.status, 0, listed.stderr)
        XCTAssertTrue(listed.stdout.contains("box"))
        XCTAssertTrue(started.contains("vault"), "\(started)")
        XCTAssertFalse(started.contains("assistant") || started.contains("metrics") || started.contains("workspaces"), "\(started)")
        // The Vault calls forwarding.add@1 only from an import's commit (`callsFrom`).
        XCTAssertFalse(started.contains("forwarding"), "\(started)")
        // settings list needs the features that register records: they start too.
        let (settings, withConsumers) = try termind(["settings", "list"], log: "settings.log")
        XCTAssertEqual(settings.status, 0, settings.stderr)
        XCTAssertTrue(settings.stdout.contains("assistant.policy") && settings.stdout.contains("metrics.preferences"), settings.stdout)
        XCTAssertTrue(withConsumers.contains("assistant") && withConsumers.contains("metrics"), "\(withConsumers)")
        // A settings command naming one record starts the feature that declares it, and every
        // record a built-in feature registers is declared in its manifest (and no other).
        let (topology, owner) = try termind(["--json", "settings", "get", "sftp.topology"], log: "topology.log")
        XCTAssertEqual(topology.status, 0, topology.stderr)
        XCTAssertTrue(topology.stdout.contains("\"strategy\""), topology.stdout)
        XCTAssertTrue(owner.contains("sftp") && owner.contains("settings"), "\(owner)")
        // A record's owner brings what it requires, not what it may use (Workspaces' forwards).
        let (preferences, itsOwner) = try termind(["settings", "get", "terminal.preferences"], log: "preferences.log")
        XCTAssertEqual(preferences.status, 0, preferences.stderr)
        XCTAssertTrue(itsOwner.contains("workspaces") && itsOwner.contains("vault"), "\(itsOwner)")
        XCTAssertFalse(itsOwner.contains("forwarding"), "\(itsOwner)")
        XCTAssertFalse(owner.contains("assistant") || owner.contains("metrics") || owner.contains("workspaces"), "\(owner)")
        let registry = try JSONCoding.parse(Data(contentsOf: URL(fileURLWithPath: FeatureHarness.buildDirectory + "/Registry.json")), source: "Registry.json")
        var declared: [String: String] = [:]
        for entry in registry["features"]?.arrayValue ?? [] {
            for key in entry["settingsRecords"]?.arrayValue?.compactMap(\.stringValue) ?? [] { declared[key] = entry["id"]?.stringValue }
        }
        let (listedJSON, _) = try termind(["--json", "settings", "list"], log: "list-json.log")
        let registered = try JSONCoding.parse(Data(listedJSON.stdout.utf8), source: "settings list")["records"]?.arrayValue?.compactMap { $0["key"]?.stringValue } ?? []
        XCTAssertEqual(Set(registered), Set(declared.keys), "the records registered are exactly those the manifests declare")
        for (key, id) in declared.sorted(by: { $0.key < $1.key }) {
            let (got, loaded) = try termind(["settings", "get", key], log: "get-\(key).log")
            XCTAssertEqual(got.status, 0, "\(key), declared by \(id), is registered by it: \(got.stderr)")
            XCTAssertTrue(loaded.contains(id), "\(key): \(loaded)")
        }
        // termind's own commands see every feature.
        let (features, _) = try termind(["features"], log: "features.log")
        XCTAssertTrue(features.stdout.contains("assistant") && features.stdout.contains("metrics"), features.stdout)
    }
}
