import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import VaultAPI
import TermindCrypto
import TermindStore
import VaultRules

/// Reads an ssh_config file and its Includes from disk (bounded by VaultRules), digesting
/// every file read, and turns the result into previews and host records. Executes nothing.
struct ConfigImporter {
    let hosts: HostRepository
    var identities: IdentityRepository?
    var keys: KeyRepository?

    struct Reading {
        let config: SSHConfig
        let files: [ImportContracts.FileDigest]
    }

    /// Reads `path` and what it includes, recording each file's SHA-256. Every file is read
    /// once (a file included again, even by itself, is not read or listed twice), bounded
    /// and only when it is a regular file: an Include of a directory, FIFO, device or an
    /// oversized file is an error naming it.
    static func read(_ path: String) throws -> Reading {
        let data = try BoundedFile.read(path, limit: SSHConfig.maxFileBytes, what: "ssh_config file", code: .vaultImportUnreadable)
        let digests = Digests()
        digests.add(path, data)
        let home = ProcessInfo.processInfo.environment["HOME"] ?? LocalUser.home
        let config = SSHConfig.parse(String(decoding: data, as: UTF8.self), path: path, origin: .user) { pattern, _ in
            let expanded = pattern.hasPrefix("~/") ? home + pattern.dropFirst(1) : pattern
            return try glob(expanded).map { file in
                if let text = digests.text(of: file) { return (file, text) }
                let bytes = try BoundedFile.read(file, limit: SSHConfig.maxFileBytes, what: "included file", code: .vaultImportUnreadable)
                return (file, digests.add(file, bytes))
            }
        }
        return Reading(config: config, files: digests.all)
    }

    func preview(_ path: String) throws -> ImportContracts.Preview.Response {
        let reading = try Self.read(path)
        // A client that went away (Ctrl-C) stops the work between hosts.
        let resolved = try reading.config.importCandidates(checking: BlockingExecutor.checkCancellation)
        let candidates = try resolved.map { resolved in
            ImportContracts.Candidate(
                alias: resolved.alias, hostname: resolved.hostname, user: resolved.user, port: resolved.port,
                jump: resolved.proxyJump.map(\.description), identityFiles: resolved.identityFiles.map(Self.expand),
                forwards: resolved.forwards.map(\.description), forwardCandidates: Self.forwardCandidates(resolved.alias, resolved.forwards),
                exists: try hosts.find(resolved.alias) != nil,
                warnings: resolved.warnings.map(\.description), problems: resolved.problems)
        }
        // Key files are digested (never kept) so a commit can tell whether they changed.
        var keyDigests: [ImportContracts.FileDigest] = []
        for file in Set(candidates.flatMap(\.identityFiles)).sorted() {
            if let digest = Self.digest(file) { keyDigests.append(digest) }
        }
        return .init(candidates: candidates, warnings: reading.config.warnings.map(\.description),
                     errors: reading.config.errors.map(\.message), files: reading.files + keyDigests)
    }

    /// A host's forwards as rule candidates: `ALIAS:N`, the spec termind's forwards take,
    /// the rule's name; Unix sockets and a SOCKS proxy on the server are shown, not importable.
    static func forwardCandidates(_ alias: String, _ forwards: [SSHForward]) -> [ImportContracts.ForwardCandidate] {
        forwards.enumerated().map { index, forward in
            let id = "\(alias):\(index + 1)"
            let letter = switch forward.kind { case .local: "L"; case .remote: "R"; case .dynamic: "D" }
            var port = 0
            if case .tcp(_, let p) = forward.listen { port = p }
            let name = "\(alias)-\(letter)\(port)"
            let kind = forward.kind.rawValue
            switch (forward.listen, forward.connect, forward.kind) {
            case (.socket, _, _), (_, .socket?, _):
                return .init(id: id, kind: kind, spec: nil, name: name, problem: "Unix socket forwarding is not supported")
            case (.tcp, nil, .remote):
                return .init(id: id, kind: kind, spec: nil, name: name, problem: "a SOCKS proxy on the server (RemoteForward with one argument) is not supported")
            case (.tcp, nil, _):
                return .init(id: id, kind: kind, spec: "--dynamic-forward \(forward.listen)", name: name)
            case (.tcp, let connect?, _):
                return .init(id: id, kind: kind, spec: "--\(kind)-forward \(forward.listen):\(connect)", name: name)
            }
        }
    }

    /// A forward a commit saves as a rule once the hosts are in.
    struct PlannedForward: Sendable {
        let candidate: ImportContracts.ForwardCandidate
        let alias: String
    }

    /// The selected forward candidates, checked before anything is written: each must exist,
    /// be importable, and belong to a host that is selected or saved already.
    func plannedForwards(_ request: ImportContracts.Commit.Request, candidates: [String: ResolvedHost], selected: [String]) throws -> [PlannedForward] {
        var planned: [PlannedForward] = []
        var seen = Set<String>()
        for id in request.forwards ?? [] where seen.insert(id).inserted {
            guard let colon = id.lastIndex(of: ":"), let resolved = candidates[String(id[..<colon])],
                  let candidate = Self.forwardCandidates(resolved.alias, resolved.forwards).first(where: { $0.id == id }) else {
                throw TermindError.badRequest("forwards: '\(id)' is not a forward in \(request.path) (the preview's forwardCandidates list them as ALIAS:N). Nothing was imported.")
            }
            if let problem = candidate.problem {
                throw TermindError(.vaultImportInvalidHost, "forwards: '\(id)' cannot be imported: \(problem). Nothing was imported.")
            }
            guard try selected.contains(resolved.alias) || hosts.find(resolved.alias) != nil else {
                throw TermindError.badRequest("forwards: '\(id)' belongs to '\(resolved.alias)', which is neither selected nor saved; select it too. Nothing was imported.")
            }
            planned.append(PlannedForward(candidate: candidate, alias: resolved.alias))
        }
        return planned
    }

    static func expand(_ path: String) -> String {
        let home = ProcessInfo.processInfo.environment["HOME"] ?? LocalUser.home
        return path.hasPrefix("~/") ? home + path.dropFirst(1) : path
    }

    static func digest(_ path: String) -> ImportContracts.FileDigest? {
        guard let data = FileManager.default.contents(atPath: path), data.count <= 64 * 1024 else { return nil }
        return fileDigest(path, data)
    }

    static func fileDigest(_ path: String, _ data: Data) -> ImportContracts.FileDigest {
        .init(path: path, sha256: Digest.sha256(data).hexEncoded)
    }

    /// Creates the selected hosts in one transaction. Jump hops must be saved hosts or be
    /// selected too; otherwise nothing is written.
    func commit(_ request: ImportContracts.Commit.Request, identities: IdentityRepository) throws -> (ImportContracts.Commit.Response, [PlannedForward]) {
        let reading = try Self.read(request.path)
        let candidates = Dictionary(try reading.config.importCandidates(checking: BlockingExecutor.checkCancellation).map { ($0.alias, $0) }, uniquingKeysWith: { first, _ in first })
        let keyPaths = Set(candidates.values.flatMap { $0.identityFiles.map(Self.expand) })
        if let expected = request.files?.filter({ !keyPaths.contains($0.path) }), expected != reading.files {
            let changed = Set(expected.map(\.path)).union(reading.files.map(\.path)).sorted().filter { path in
                expected.first { $0.path == path }?.sha256 != reading.files.first { $0.path == path }?.sha256
            }
            throw TermindError(.vaultImportChanged, "\(changed.joined(separator: ", ")) changed since the preview; preview again. Nothing was imported.")
        }
        if !(request.identities ?? []).isEmpty && request.files == nil {
            throw TermindError.badRequest("files: importing identities imports private keys, so the commit needs the digests the preview returned (its files) to check nothing changed since.")
        }
        let identitySelections = try (request.identities ?? []).map { selection -> (ImportContracts.IdentitySelection, [SSHPrivateKey]) in
            guard let candidate = candidates[selection.alias] else {
                throw TermindError.badRequest("identities: '\(selection.alias)' is not a host in \(request.path).")
            }
            guard candidate.user != nil else {
                throw TermindError.badRequest("identities: '\(selection.alias)' has no User in \(request.path), so there is no identity to import.")
            }
            guard !selection.keys.isEmpty else {
                throw TermindError.badRequest("identities: '\(selection.alias)': an imported identity needs at least one selected key.")
            }
            let offered = candidate.identityFiles.map(Self.expand)
            return (selection, try selection.keys.map { path in
                guard offered.contains(path) else {
                    throw TermindError.badRequest("identities: '\(path)' is not an IdentityFile of '\(selection.alias)' (\(offered.joined(separator: ", "))).")
                }
                return try Self.rereadKey(path, expected: request.files)
            })
        }
        let unknown = request.select.filter { candidates[$0] == nil }
        guard unknown.isEmpty else {
            throw TermindError.badRequest("select: \(unknown.map { "'\($0)'" }.joined(separator: ", ")) \(unknown.count == 1 ? "is" : "are") not a host in \(request.path).")
        }
        var seen = Set<String>()
        let selected = request.select.filter { seen.insert($0).inserted }
        let invalid = selected.filter { !candidates[$0]!.problems.isEmpty }
        guard invalid.isEmpty else {
            let reasons = invalid.map { alias in "'\(alias)': \(candidates[alias]!.problems.joined(separator: "; "))" }
            throw TermindError(.vaultImportInvalidHost,
                               "\(invalid.count == 1 ? "This host is" : "These hosts are") not importable, as OpenSSH would refuse \(invalid.count == 1 ? "it" : "them"): "
                                   + reasons.joined(separator: " · ") + ". Fix the file and preview again. Nothing was imported.")
        }
        let forwards = try plannedForwards(request, candidates: candidates, selected: selected)
        let order = try Self.dependencyOrder(selected, hops: { candidates[$0]!.proxyJump.map(\.host) })
        var storedSecrets: [String] = []
        do {
            return try hosts.db.transaction {
                var created: [HostRecord] = []
                var skipped: [ImportContracts.Commit.Skipped] = []
                for alias in order {
                    let resolved = candidates[alias]!
                    if try hosts.find(alias) != nil {
                        skipped.append(.init(alias: alias, reason: "a saved host already has the label '\(alias)'"))
                        continue
                    }
                    var jump: [String] = []
                    for hop in resolved.proxyJump.map(\.host) {
                        guard let saved = try hosts.find(hop) else {
                            throw TermindError(.vaultImportJumpMissing, "Jump host '\(hop)' of '\(alias)' is neither saved nor selected; select it too. Nothing was imported.")
                        }
                        jump.append(saved.id)
                    }
                    created.append(try hosts.add(.init(address: resolved.hostname, label: alias, port: resolved.port, user: resolved.user,
                                                       jump: jump), identities: identities))
                }
                var importedIdentities: [IdentityRecord] = []
                var importedKeys: [KeyRecord] = []
                for (selection, parsedKeys) in identitySelections {
                    guard let keys = self.keys, let identityRepository = self.identities else { break }
                    let user = candidates[selection.alias]!.user!
                    var keyIDs: [String] = []
                    for (path, key) in zip(selection.keys, parsedKeys) {
                        if let existing = try keys.find(key.publicKey.fingerprintSHA256) {
                            keyIDs.append(existing.id)
                            continue
                        }
                        let saved = try keys.save(key, label: nil, defaultLabel: PathText.lastComponent(path))
                        storedSecrets.append(saved.handle)
                        importedKeys.append(saved.record)
                        keyIDs.append(saved.record.id)
                    }
                    // An identity holds one key: the first selected; reuse one with the same user and key.
                    let identity: IdentityRecord
                    if let same = try identityRepository.list().first(where: { $0.username == user && $0.key == keyIDs[0] }) {
                        identity = same
                    } else {
                        let label = try identityRepository.find(user) == nil ? user : "\(user) (\(selection.alias))"
                        identity = try identityRepository.add(.init(username: user, label: label, key: keyIDs[0]))
                        importedIdentities.append(identity)
                    }
                    // Attach only to a host this commit created; existing hosts are never changed.
                    if let host = created.first(where: { $0.label == selection.alias }) {
                        let updated = try hosts.update(.init(host: host.id, identity: identity.id), identities: identityRepository)
                        created[created.firstIndex { $0.id == host.id }!] = updated
                    }
                }
                return (.init(created: created, identities: importedIdentities, keys: importedKeys, skipped: skipped), forwards)
            }
        } catch {
            for handle in storedSecrets { try? keys?.secrets.delete(handle) }
            throw error
        }
    }

    /// Re-reads a selected key at commit: it must be the file the preview digested, unencrypted
    /// (a protected key is imported with `vault key import`, which takes its passphrase).
    static func rereadKey(_ path: String, expected: [ImportContracts.FileDigest]?) throws -> SSHPrivateKey {
        // One read: the bytes digested are the bytes parsed.
        guard let data = FileManager.default.contents(atPath: path), data.count <= 64 * 1024 else {
            throw TermindError(.vaultImportChanged, "The key file \(path) is gone or unreadable since the preview. Nothing was imported.")
        }
        let now = fileDigest(path, data).sha256
        if let expected {
            guard let before = expected.first(where: { $0.path == path }), before.sha256 == now else {
                throw TermindError(.vaultImportChanged, "The key file \(path) changed since the preview; preview again. Nothing was imported.")
            }
        }
        do {
            return try SSHPrivateKey.parse(Secret(String(decoding: data, as: UTF8.self)), passphrase: nil)
        } catch let error as TermindError where error.is(.keyPassphraseRequired) {
            throw TermindError(.keyPassphraseRequired, "The key file \(path) is passphrase-protected: import it with 'termind vault key import \(path) --passphrase -' and select the identity without it. Nothing was imported.")
        } catch let error as TermindError {
            throw TermindError(code: error.code, message: "\(path): \(error.message) Nothing was imported.")
        }
    }

    /// Selected aliases ordered so each jump host comes before the hosts that use it
    /// (depth-first, selection order otherwise). A cycle among them is an error.
    static func dependencyOrder(_ selected: [String], hops: (String) -> [String]) throws -> [String] {
        let chosen = Set(selected)
        var order: [String] = []
        var state: [String: Bool] = [:] // false: visiting, true: done
        func visit(_ alias: String) throws {
            if state[alias] == true { return }
            if state[alias] == false {
                throw TermindError(.vaultImportJumpCycle, "The jump route of '\(alias)' leads back to itself. Nothing was imported.")
            }
            state[alias] = false
            for hop in hops(alias) where chosen.contains(hop) && hop != alias { try visit(hop) }
            state[alias] = true
            order.append(alias)
        }
        for alias in selected { try visit(alias) }
        return order
    }

    /// glob(3) with sorted results; no match is an empty list.
    static func glob(_ pattern: String) throws -> [String] {
        var result = glob_t()
        defer { globfree(&result) }
        let status = Glibc.glob(pattern, 0, nil, &result)
        guard status == 0 else { return [] }
        return (0..<Int(result.gl_pathc)).compactMap { result.gl_pathv[$0].map { String(cString: $0) } }
    }
}

/// Digests of the files a read touched, in reading order, each once, with their text.
private final class Digests {
    private(set) var all: [ImportContracts.FileDigest] = []
    private var texts: [String: String] = [:]

    @discardableResult
    func add(_ path: String, _ data: Data) -> String {
        let text = String(decoding: data, as: UTF8.self)
        all.append(ConfigImporter.fileDigest(path, data))
        texts[path] = text
        return text
    }

    func text(of path: String) -> String? { texts[path] }
}
