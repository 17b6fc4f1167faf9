import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import SFTPAPI
import Synchronization
import SyncAPI
import SyncRules
import TermindCore
import TermindCrypto
import TermindStore
import VaultAPI

/// Sync (docs/sync.md): this device's changes sealed into its own append-only log in a
/// folder on a saved host, every other device's log merged in per field by hybrid logical
/// clock. The zones are the features' own (`vault.sync`, …); the folder is reached through
/// SFTP's scheduler port; no server software, no third party sees plaintext.
final class SyncFeature: Feature {
    private struct Ports: Sendable {
        let store: SyncStore
        let secrets: SecretStore
        let scheduler: any TransferScheduling
        let hosts: (any HostDirectory)?
        let zones: [String: any SyncZone]
        let logger: Logger
    }

    private let ports = Mutex<Ports?>(nil)
    /// One sync at a time in this process (generations are serialized); SQLite's immediate
    /// transactions keep two processes' commits whole.
    private let lane = SerialLane()
    private let follower = Mutex<Task<Void, Never>?>(nil)

    private func current() throws -> Ports {
        guard let ports = ports.withLock({ $0 }) else { throw TermindError.internalFailure("Sync is not started.") }
        return ports
    }

    private func engine(_ p: Ports) -> SyncEngine {
        SyncEngine(store: p.store, secrets: p.secrets, scheduler: p.scheduler, zones: p.zones, logger: p.logger)
    }

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.handle(SyncContracts.Setup.self) { [self] request, _ in
            let p = try current()
            return try await lane.run { try await SyncSetup(store: p.store, secrets: p.secrets, scheduler: p.scheduler, hosts: p.hosts, zones: p.zones).run(request) }
        }
        registrar.handle(SyncContracts.Status.self) { [self] _, _ in
            let p = try current()
            return try await SyncStatusReader(store: p.store, zones: p.zones).status()
        }
        registrar.handle(SyncContracts.Now.self) { [self] _, _ in
            let p = try current()
            return try await lane.run { try await self.engine(p).run() }
        }
        registrar.handle(SyncContracts.Pause.self) { [self] _, _ in try await change(paused: true) }
        registrar.handle(SyncContracts.Resume.self) { [self] _, _ in try await change(paused: false) }
        registrar.handle(SyncContracts.Zones.self) { [self] request, _ in
            var zones: [String: Bool]?
            let asked: [(String, SyncSwitch?)] = [("vault", request.vault), ("settings", request.settings), ("metrics", request.metrics)]
            if asked.contains(where: { $0.1 != nil }) {
                let p = try current()
                guard var now = try await BlockingExecutor.store.run({ try p.store.config() })?.zones else {
                    throw TermindError(.syncNotConfigured, "Sync is not set up on this device: run 'termind sync setup HOST:PATH' first.")
                }
                for case (let name, let value?) in asked { now[name] = value == .on }
                zones = now
            }
            return try await change(secrets: request.secrets.map { $0 == .on }, zones: zones)
        }
    }

    private func change(paused: Bool? = nil, secrets: Bool? = nil, zones: [String: Bool]? = nil) async throws -> SyncStatus {
        let p = try current()
        try await BlockingExecutor.store.run {
            guard try p.store.config() != nil else {
                throw TermindError(.syncNotConfigured, "Sync is not set up on this device: run 'termind sync setup HOST:PATH' first.")
            }
            try p.store.update(paused: paused, secrets: secrets, zones: zones)
        }
        return try await SyncStatusReader(store: p.store, zones: p.zones).status()
    }

    func start(_ context: FeatureContext) async throws {
        let db = try context.ports.require(.store)
        do {
            let report = try await db.migrate(SyncSchema.schema)
            if !report.applied.isEmpty { context.logger.info("sync.migrated", ["to": .int(report.to)]) }
        } catch let error as StoreError {
            throw error.termindError
        }
        var zones: [String: any SyncZone] = [:]
        for key in [PortKey<any SyncZone>.vaultSyncZone, .forwardingSyncZone, .settingsSyncZone, .metricsSyncZone] {
            if let zone = context.ports.optional(key) { zones[zone.zone] = zone }
        }
        let ports = Ports(store: SyncStore(db: db), secrets: try context.ports.require(.secrets), scheduler: try context.ports.require(.sftpScheduler),
                          hosts: context.ports.optional(.hostDirectory), zones: zones, logger: context.logger)
        self.ports.withLock { $0 = ports }
        guard context.resident else { return }
        let interval = try Self.interval(context.options["sync-interval"])
        follower.withLock { $0 = Task { [self] in await follow(ports, every: interval) } }
    }

    func stop() async {
        let task = follower.withLock { task in defer { task = nil }; return task }
        task?.cancel()
        await task?.value
        ports.withLock { $0 = nil }
    }

    /// `--sync-interval SECONDS` of `serve` (default 300; at least 1).
    static func interval(_ text: String?) throws -> Double {
        guard let text else { return 300 }
        guard let seconds = Double(text), seconds >= 1, seconds <= 86_400 else {
            throw TermindError(.syncInvalid, "--sync-interval '\(text)': give seconds between 1 and 86400.")
        }
        return seconds
    }

    /// Inside `serve`: a sync two seconds after local changes stop coming (debounced), and
    /// every `interval` seconds for the other devices' changes. A failure is logged and
    /// kept in `sync status`; the next turn tries again. Nothing runs while sync is not set
    /// up or is paused.
    private func follow(_ p: Ports, every interval: Double) async {
        let (wakes, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let listeners = p.zones.values.map { zone in
            Task {
                for await _ in zone.journaled() {
                    // Debounce: wait until changes stop for two seconds.
                    try? await Task.sleep(for: .seconds(2))
                    wake.yield()
                }
            }
        }
        let timer = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval))
                wake.yield()
            }
        }
        defer {
            for listener in listeners { listener.cancel() }
            timer.cancel()
            wake.finish()
        }
        for await _ in wakes {
            if Task.isCancelled { break }
            guard let config = try? await BlockingExecutor.store.run({ try p.store.config() }), !config.paused else { continue }
            do {
                let result = try await lane.run { try await self.engine(p).run() }
                p.logger.info("sync.ran", ["fetched": .int(result.fetched), "applied": .int(result.applied), "sent": .int(result.sent)])
            } catch {
                p.logger.warning("sync.failed", ["code": .identifier(TermindError.from(error).code)])
            }
        }
    }
}

/// `sync setup HOST:PATH`: the folder made (0700) or found, the sync key derived from the
/// passphrase (scrypt; a new folder gets a new salt) and checked against the folder's
/// check value before anything else happens, then kept in the secret store under a new
/// device id.
struct SyncSetup: Sendable {
    let store: SyncStore
    let secrets: SecretStore
    let scheduler: any TransferScheduling
    let hosts: (any HostDirectory)?
    let zones: [String: any SyncZone]

    func run(_ request: SyncContracts.Setup.Request) async throws -> SyncStatus {
        let (host, path) = try Self.target(request.target)
        let passphrase = try Self.passphrase(request)
        if let hosts {
            guard try await hosts.host(named: host) != nil else {
                throw TermindError(.syncInvalid, "\(request.target): '\(host)' is not a saved host (termind vault host list); sync goes only to a saved host, whose key is trusted.")
            }
        }
        let folder = try await scheduler.folder(host: host)
        let key: SymmetricKey
        do {
            if try await folder.list(path, limit: 100_000) == nil {
                _ = try await folder.makeDirectory(path, mode: 0o700)
            }
            let file = path + "/" + SyncEnvelope.folderFile
            let shown = "\(host):\(file)"
            if let data = try await folder.read(file, limit: 64 << 10) {
                key = try await Self.open(try SyncEnvelope.Folder.parse(data, shown: shown), passphrase, shown: shown)
            } else {
                let salt = SecureRandom.bytes(16)
                let parameters = KeyDerivation.ScryptParameters.standard
                let derived = try await BlockingExecutor.crypto.run { try KeyDerivation.scrypt(passphrase: passphrase, salt: salt, parameters: parameters) }
                let description = SyncEnvelope.Folder.make(key: derived, salt: salt, scrypt: parameters)
                if try await folder.create(file, data: try JSONCoding.encode(description, pretty: true)) {
                    key = derived
                } else if let data = try await folder.read(file, limit: 64 << 10) {
                    // Another device set the folder up at the same moment: use its salt.
                    key = try await Self.open(try SyncEnvelope.Folder.parse(data, shown: shown), passphrase, shown: shown)
                } else {
                    throw TermindError(.syncFolderInvalid, "\(shown) could not be created.")
                }
            }
            await folder.close()
        } catch {
            await folder.close()
            throw error
        }
        let handle = try secrets.store(Secret(key.data.base64EncodedString()), purpose: "sync.key")
        let previous = try await BlockingExecutor.store.run { try store.config() }
        let device = SecureRandom.bytes(16).hexEncoded
        let config = SyncConfig(host: host, path: path, device: device, keyHandle: handle, paused: false, secrets: false,
                                zones: previous?.zones ?? SyncConfig.defaultZones, clock: previous?.clock, lastSync: nil, lastError: nil)
        do {
            try await BlockingExecutor.store.run { try store.replaceConfig(config) }
        } catch {
            try? secrets.delete(handle)
            throw error
        }
        if let old = previous?.keyHandle { try? secrets.delete(old) }
        return try await SyncStatusReader(store: store, zones: zones).status()
    }

    private static func open(_ description: SyncEnvelope.Folder, _ passphrase: Secret, shown: String) async throws -> SymmetricKey {
        guard let salt = description.saltBytes else { throw TermindError(.syncFolderInvalid, "\(shown) has no valid salt.") }
        let key = try await BlockingExecutor.crypto.run { try KeyDerivation.scrypt(passphrase: passphrase, salt: salt, parameters: description.scrypt) }
        guard description.accepts(key) else {
            throw TermindError(.syncWrongPassphrase, "The passphrase does not open \(shown): it is not the one this folder was set up with. Nothing was stored.")
        }
        return key
    }

    static func target(_ text: String) throws -> (String, String) {
        guard let colon = text.firstIndex(of: ":") else {
            throw TermindError(.syncInvalid, "'\(text)' is not HOST:PATH (a saved host, a colon, the folder on it).")
        }
        let host = String(text[..<colon])
        var path = String(text[text.index(after: colon)...])
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        guard !host.isEmpty, !path.isEmpty else {
            throw TermindError(.syncInvalid, "'\(text)' is not HOST:PATH: \(host.isEmpty ? "the host" : "the folder") is missing.")
        }
        guard !path.contains("\0"), !path.split(separator: "/").contains("..") else {
            throw TermindError(.syncInvalid, "'\(text)': the folder may not contain '..' or NUL.")
        }
        return (host, path)
    }

    static func passphrase(_ request: SyncContracts.Setup.Request) throws -> Secret {
        let passphrase = try given(request)
        guard passphrase.withPlaintext({ $0.count }) >= 8 else {
            throw TermindError(.syncInvalid, "The sync passphrase is shorter than 8 characters; the secrecy of every record rests on it.")
        }
        return passphrase
    }

    private static func given(_ request: SyncContracts.Setup.Request) throws -> Secret {
        if let passphrase = request.passphrase, !passphrase.isEmpty {
            guard request.passphraseFile == nil else { throw TermindError(.syncInvalid, "Give the passphrase once: --passphrase or --passphrase-file, not both.") }
            return passphrase
        }
        guard let file = request.passphraseFile else {
            throw TermindError(.syncInvalid, "A sync passphrase is needed: --passphrase - (read from standard input) or --passphrase-file FILE.")
        }
        let data = try BoundedFile.read(file, limit: 4096, what: "passphrase file", code: .syncInvalid)
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        return Secret(line.hasSuffix("\r") ? String(line.dropLast()) : line)
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "sync", version: "0.1.0", signature: TermindLibrary.signature) { SyncFeature() }
}
