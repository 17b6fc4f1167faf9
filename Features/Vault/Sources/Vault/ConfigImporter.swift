import Foundation
import TermindCore
import TermindCrypto
import VaultRules

/// Reads an ssh_config file and its Includes from disk (bounded by VaultRules), digesting
/// every file read, and turns the result into previews and host records. Executes nothing.
struct ConfigImporter {
    let hosts: HostRepository

    struct Reading {
        let config: SSHConfig
        let files: [ImportContracts.FileDigest]
    }

    /// Reads `path` and what it includes, recording each file's SHA-256.
    static func read(_ path: String) throws -> Reading {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw TermindError(code: "vault.import_unreadable", message: "Cannot read the ssh_config file \(path).")
        }
        guard data.count <= SSHConfig.maxFileBytes else {
            throw TermindError(code: "vault.import_too_large", message: "\(path) is larger than \(SSHConfig.maxFileBytes) bytes.")
        }
        let digests = Digests()
        digests.add(path, data)
        let home = ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()
        let config = SSHConfig.parse(String(decoding: data, as: UTF8.self), path: path, origin: .user) { pattern, _ in
            let expanded = pattern.hasPrefix("~/") ? home + pattern.dropFirst(1) : pattern
            return try glob(expanded).compactMap { file in
                guard let bytes = FileManager.default.contents(atPath: file), bytes.count <= SSHConfig.maxFileBytes else { return nil }
                digests.add(file, bytes)
                return (file, String(decoding: bytes, as: UTF8.self))
            }
        }
        return Reading(config: config, files: digests.all)
    }

    func preview(_ path: String) throws -> ImportContracts.Preview.Response {
        let reading = try Self.read(path)
        let candidates = try reading.config.importCandidates().map { resolved in
            ImportContracts.Candidate(
                alias: resolved.alias, hostname: resolved.hostname, user: resolved.user, port: resolved.port,
                jump: resolved.proxyJump.map(\.description), identityFiles: resolved.identityFiles,
                forwards: resolved.forwards.map(\.description), exists: try hosts.find(resolved.alias) != nil,
                warnings: resolved.warnings.map(\.description))
        }
        return .init(candidates: candidates, warnings: reading.config.warnings.map(\.description),
                     errors: reading.config.errors.map(\.message), files: reading.files)
    }

    /// Creates the selected hosts in one transaction. Jump hops must be saved hosts or be
    /// selected too; otherwise nothing is written.
    func commit(_ request: ImportContracts.Commit.Request, identities: IdentityRepository) throws -> ImportContracts.Commit.Response {
        let reading = try Self.read(request.path)
        if let expected = request.files, expected != reading.files {
            let changed = Set(expected.map(\.path)).union(reading.files.map(\.path)).sorted().filter { path in
                expected.first { $0.path == path }?.sha256 != reading.files.first { $0.path == path }?.sha256
            }
            throw TermindError(code: "vault.import_changed", message: "\(changed.joined(separator: ", ")) changed since the preview; preview again. Nothing was imported.")
        }
        let candidates = Dictionary(reading.config.importCandidates().map { ($0.alias, $0) }, uniquingKeysWith: { first, _ in first })
        let unknown = request.select.filter { candidates[$0] == nil }
        guard unknown.isEmpty else {
            throw TermindError.badRequest("select: \(unknown.map { "'\($0)'" }.joined(separator: ", ")) \(unknown.count == 1 ? "is" : "are") not a host in \(request.path).")
        }
        var seen = Set<String>()
        let selected = request.select.filter { seen.insert($0).inserted }
        let order = try Self.dependencyOrder(selected, hops: { candidates[$0]!.proxyJump.map(\.host) })
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
                        throw TermindError(code: "vault.import_jump_missing", message: "Jump host '\(hop)' of '\(alias)' is neither saved nor selected; select it too. Nothing was imported.")
                    }
                    jump.append(saved.id)
                }
                created.append(try hosts.add(.init(address: resolved.hostname, label: alias, port: resolved.port, user: resolved.user,
                                                   jump: jump), identities: identities))
            }
            return .init(created: created, skipped: skipped)
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
                throw TermindError(code: "vault.import_jump_cycle", message: "The jump route of '\(alias)' leads back to itself. Nothing was imported.")
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

/// Digests of the files a read touched, in reading order.
private final class Digests: @unchecked Sendable {
    private(set) var all: [ImportContracts.FileDigest] = []
    func add(_ path: String, _ data: Data) {
        all.append(.init(path: path, sha256: Digest.sha256(data).map { String(format: "%02x", $0) }.joined()))
    }
}
