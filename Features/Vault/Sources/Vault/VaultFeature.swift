import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import Synchronization
import SyncAPI
import TermindCore
import VaultAPI
import TermindStore
import VaultRules

/// The Vault: hosts, identities, snippets and workspaces in the process database, secrets in the
/// encrypted secret store. Provides `vault.hosts` (HostDirectory) to other features.
final class VaultFeature: Feature {
    private struct State: Sendable {
        let hosts: HostRepository
        let identities: IdentityRepository
        let snippets: SnippetRepository
        let workspaces: WorkspaceRepository
        let knownHosts: KnownHostRepository
        let keys: KeyRepository
        let logger: Logger
        let db: Database
        let secrets: SecretStore
        let call: @Sendable (ContractID, Data) async throws -> Data
    }

    private let state = Mutex<State?>(nil)
    /// Host edits and deletions, for `HostDirectory.changes()`.
    let hostChanges = HostChangeFeed()

    private func current() throws -> State {
        guard let state = state.withLock({ $0 }) else { throw TermindError.internalFailure("The Vault is not started.") }
        return state
    }

    /// Every saved host as last listed, with the database's change stamp taken before that
    /// read (`Database.changeStamp`): listed again only once some process changed the file.
    /// An agent lists hosts on its calls, and each list was a trip to the blocking executor.
    private let keptHosts = Mutex<(stamp: UInt64, hosts: [HostRecord])?>(nil)

    func listedHosts() async throws -> [HostRecord] {
        let s = try current()
        let stamp = s.db.changeStamp()
        if let stamp, let kept = keptHosts.withLock({ $0 }), kept.stamp == stamp { return kept.hosts }
        let hosts = try await BlockingExecutor.store.run { try s.hosts.list(tag: nil) }
        if let stamp { keptHosts.withLock { $0 = (stamp, hosts) } }
        return hosts
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.hostDirectory, VaultHostDirectory(vault: self))
        registrar.provide(.credentials, VaultCredentials(vault: self))
        registrar.provide(.hostKeyTrust, VaultTrust(vault: self))
        registrar.provide(.routes, VaultRoutes(vault: self, credentials: VaultCredentials(vault: self)))
        registrar.provide(.vaultSyncZone, VaultSyncZone(vault: self))
        registerKnownHosts(registrar)
        registrar.handleBlocking(KeyContracts.List.self) { [self] _, _ in .init(keys: try current().keys.list()) }
        registrar.handleBlocking(KeyContracts.Generate.self) { [self] r, _ in
            let s = try current()
            let key = try s.keys.generate(r)
            s.logger.info("vault.key.generated")
            return key
        }
        registrar.handleBlocking(KeyContracts.Import.self) { [self] r, _ in try current().keys.importFile(r) }
        registrar.handleBlocking(KeyContracts.Show.self) { [self] r, _ in try current().keys.get(r.key) }
        registrar.handleBlocking(KeyContracts.Delete.self) { [self] r, _ in .init(deleted: try current().keys.delete(r.key)) }
        registrar.handleBlocking(ConnectContracts.Resolve.self) { [self] r, _ in try QuickConnectResolver(hosts: try current().hosts).resolve(r.input) }
        registrar.handleBlocking(ConnectContracts.Save.self) { [self] r, _ in
            let s = try current()
            return try QuickConnectResolver(hosts: s.hosts).save(r, identities: s.identities)
        }
        registrar.handleBlocking(ImportContracts.Preview.self) { [self] r, _ in try ConfigImporter(hosts: try current().hosts).preview(r.path) }
        registrar.handle(ImportContracts.Commit.self) { [self] r, _ in
            let s = try current()
            var (result, forwards) = try await BlockingExecutor.store.run {
                try ConfigImporter(hosts: s.hosts, identities: s.identities, keys: s.keys).commit(r, identities: s.identities)
            }
            s.logger.info("vault.import.committed", ["created": .int(result.created.count), "skipped": .int(result.skipped.count)])
            // Forwards become rules of the forwarding feature once their hosts are saved (never started).
            for planned in forwards {
                do {
                    guard let host = try await BlockingExecutor.store.run({ try s.hosts.find(planned.alias) }) else { continue }
                    try await Self.saveRule(planned.candidate, host: host.id, call: s.call)
                    result.rules.append(.init(candidate: planned.candidate.id, name: planned.candidate.name))
                } catch {
                    let failure = TermindError.from(error)
                    let reason = failure.is(.contractUnknown) || failure.is(.capabilityDenied) ? "port forwarding is not loaded" : failure.message
                    result.skippedForwards.append(.init(alias: planned.candidate.id, reason: reason))
                }
            }
            return result
        }
        registrar.handle(VaultContracts.HostList.self) { [self] r, _ in .init(hosts: try await listedHosts().filter { r.tag == nil || $0.tags.contains(r.tag!) }) }
        registrar.handleBlocking(VaultContracts.HostGet.self) { [self] r, _ in try current().hosts.get(r.host) }
        registrar.handleBlocking(VaultContracts.HostAdd.self) { [self] r, _ in
            let s = try current()
            let host = try s.hosts.add(r, identities: s.identities)
            s.logger.info("vault.host.added")
            return host
        }
        registrar.handleBlocking(VaultContracts.HostUpdate.self) { [self] r, _ in
            let s = try current()
            let before = try s.hosts.get(r.host)
            let after = try s.hosts.update(r, identities: s.identities)
            let connects = { (h: HostRecord) in [h.address, "\(h.port)", h.user ?? "", h.identity ?? "", h.jump.joined(separator: ",")] }
            if connects(before) != connects(after) {
                hostChanges.send(HostChange(host: after.id, deleted: false, affected: [after.id] + (try Self.routedThrough(after.id, s.hosts))))
            }
            return after
        }
        registrar.handleBlocking(VaultContracts.HostDelete.self) { [self] r, _ in
            let s = try current()
            let through = try s.hosts.find(r.host).map { try Self.routedThrough($0.id, s.hosts) } ?? []
            let id = try s.hosts.delete(r.host)
            s.logger.info("vault.host.deleted")
            hostChanges.send(HostChange(host: id, deleted: true, affected: [id] + through))
            return .init(deleted: id)
        }
        registrar.handleBlocking(VaultContracts.IdentityList.self) { [self] _, _ in .init(identities: try current().identities.list()) }
        registrar.handleBlocking(VaultContracts.IdentityAdd.self) { [self] r, _ in try current().identities.add(r) }
        registrar.handleBlocking(VaultContracts.IdentityUpdate.self) { [self] r, _ in try current().identities.update(r) }
        registrar.handleBlocking(VaultContracts.IdentityDelete.self) { [self] r, _ in
            let s = try current()
            return .init(deleted: try s.identities.delete(r.identity, hosts: s.hosts))
        }
        registrar.handleBlocking(VaultContracts.SnippetList.self) { [self] _, _ in .init(snippets: try current().snippets.list()) }
        registrar.handleBlocking(VaultContracts.SnippetAdd.self) { [self] r, _ in try current().snippets.add(r) }
        registrar.handleBlocking(VaultContracts.SnippetDelete.self) { [self] r, _ in .init(deleted: try current().snippets.delete(r.snippet)) }
        registrar.handleBlocking(VaultContracts.WorkspaceList.self) { [self] _, _ in .init(workspaces: try current().workspaces.list()) }
        registrar.handleBlocking(VaultContracts.WorkspaceGet.self) { [self] r, _ in try current().workspaces.get(r.workspace) }
        registrar.handleBlocking(VaultContracts.WorkspaceSave.self) { [self] r, _ in try current().workspaces.save(r) }
        registrar.handleBlocking(VaultContracts.WorkspaceDelete.self) { [self] r, _ in .init(deleted: try current().workspaces.delete(r.workspace)) }
    }

    func start(_ context: FeatureContext) async throws {
        let db = try context.ports.require(.store)
        let secrets = try context.ports.require(.secrets)
        do {
            let report = try await db.migrate(VaultSchema.schema)
            if !report.applied.isEmpty { context.logger.info("vault.migrated", ["to": .int(report.to)]) }
        } catch let error as StoreError {
            throw error.termindError
        }
        let keys = KeyRepository(db: db, secrets: secrets)
        state.withLock {
            $0 = State(hosts: HostRepository(db: db), identities: IdentityRepository(db: db, secrets: secrets, keys: keys),
                       snippets: SnippetRepository(db: db), workspaces: WorkspaceRepository(db: db), knownHosts: KnownHostRepository(db: db), keys: keys, logger: context.logger,
                       db: db, secrets: secrets, call: context.call)
        }
    }

    func stop() async {
        state.withLock { $0 = nil }
        hostChanges.finish()
    }

    /// `forwarding.add@1` for an imported forward (the forwarding feature owns the rules).
    private static func saveRule(_ candidate: ImportContracts.ForwardCandidate, host: String,
                                 call: @Sendable (ContractID, Data) async throws -> Data) async throws {
        guard let spec = candidate.spec, let space = spec.firstIndex(of: " ") else { return }
        let text = String(spec[spec.index(after: space)...])
        var request = ForwardingContracts.Add.Request(name: candidate.name, host: host)
        switch candidate.kind {
        case "local": request.localForward = text
        case "remote": request.remoteForward = text
        default: request.dynamicForward = text
        }
        _ = try await call(ForwardingContracts.Add.id, try JSONCoding.encode(request))
    }

    /// Saved hosts whose jump route includes `id`.
    private static func routedThrough(_ id: String, _ hosts: HostRepository) throws -> [String] {
        try hosts.list(tag: nil).filter { $0.jump.contains(id) }.map(\.id)
    }

    func hosts() throws -> HostRepository { try current().hosts }
    func database() throws -> Database { try current().db }
    func secretStore() throws -> SecretStore { try current().secrets }
    func knownHosts() throws -> KnownHostRepository { try current().knownHosts }
    func repositories() throws -> (HostRepository, IdentityRepository, KeyRepository) {
        let s = try current()
        return (s.hosts, s.identities, s.keys)
    }
}

extension VaultFeature {
    func registerKnownHosts(_ registrar: FeatureRegistrar) {
        registrar.handleBlocking(KnownHostContracts.List.self) { [self] r, _ in .init(entries: try knownHosts().list(host: r.host, port: r.port)) }
        registrar.handleBlocking(KnownHostContracts.Add.self) { [self] r, _ in
            let key = try Self.hostKey(r.key)
            let port = try VaultValidation.port(r.port ?? 22)
            let host = try VaultValidation.address(r.host)
            return try knownHosts().add(KnownHostEntry(host: host, port: port, key: key, hashed: r.hashed ?? false)).record
        }
        registrar.handleBlocking(KnownHostContracts.Remove.self) { [self] r, _ in .init(removed: try knownHosts().remove(r.id)) }
        registrar.handleBlocking(KnownHostContracts.Check.self) { [self] r, _ in
            let key = try Self.hostKey(r.key)
            let verdict = VaultTrust.verdict(try knownHosts().check(host: r.host, port: try VaultValidation.port(r.port ?? 22), key: key))
            var known: [String] = []
            switch verdict {
            case .changed(let fingerprints): known = fingerprints
            case .otherKeyTypes(let keys): known = keys.map(\.fingerprint)
            default: break
            }
            return .init(verdict: verdict.name, fingerprint: key.fingerprintSHA256, knownFingerprints: known)
        }
        registrar.handleBlocking(KnownHostContracts.Import.self) { [self] r, _ in
            let data = try BoundedFile.read(r.path, limit: KnownHosts.maxFileBytes, what: "known_hosts file", code: .vaultImportUnreadable)
            return try knownHosts().importText(String(decoding: data, as: UTF8.self), source: r.path)
        }
        registrar.handleBlocking(KnownHostContracts.Export.self) { [self] r, _ in
            let (text, count) = try knownHosts().exportText()
            guard let path = r.path else { return .init(entries: count, text: text) }
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw TermindError(.vaultExportFailed, "Cannot create \(path): \(String(cString: strerror(errno))) (an existing file is never overwritten).")
            }
            defer { close(fd) }
            let bytes = Array(text.utf8)
            guard write(fd, bytes, bytes.count) == bytes.count else {
                throw TermindError(.vaultExportFailed, "Writing \(path) failed: \(String(cString: strerror(errno))).")
            }
            return .init(entries: count, text: nil)
        }
    }

    static func hostKey(_ line: String) throws -> HostKey {
        do {
            return try HostKey(openSSHLine: line)
        } catch let error as TermindError {
            throw TermindError.badRequest("key: \(error.message)")
        }
    }
}

/// `vault.hosts`: host lookup for other features (public metadata only).
struct VaultHostDirectory: HostDirectory {
    let vault: VaultFeature

    func changes() -> AsyncStream<HostChange> { vault.hostChanges.subscribe() }

    func host(named name: String) async throws -> HostSummary? {
        try await BlockingExecutor.store.run { [vault] in try vault.hosts().find(name)?.summary }
    }

    func allHosts() async throws -> [HostSummary] {
        try await vault.listedHosts().map(\.summary)
    }
}

/// Fans host changes out to every subscriber (each with its own bounded buffer: a
/// subscriber that falls behind loses the oldest changes, never blocks an edit).
final class HostChangeFeed: Sendable {
    private let subscribers = Mutex<[UInt64: AsyncStream<HostChange>.Continuation]>([:])
    private let next = Mutex<UInt64>(0)

    func subscribe() -> AsyncStream<HostChange> {
        let (stream, continuation) = AsyncStream<HostChange>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let id = next.withLock { $0 += 1; return $0 }
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    func send(_ change: HostChange) {
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield(change) }
    }

    func finish() {
        for continuation in subscribers.withLock({ list in defer { list = [:] }; return Array(list.values) }) { continuation.finish() }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "vault", version: "0.1.0", signature: TermindLibrary.signature) { VaultFeature() }
}
