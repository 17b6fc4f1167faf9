import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// The byte channels' tools, offered to MCP sessions of a serve that listens on HTTP
/// (docs/mcp.md, "Files"): a link for one file in one direction, and its status.
extension HostTools {
    static let linkTools: Set<String> = ["sftp_download_link", "sftp_upload_link", "sftp_link_status"]

    private static let downloadLinkSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "path", schema: .string(), required: true),
    ])
    private static let uploadLinkSchema: JSONSchema = .object([
        JSONSchema.Property(name: "host", schema: .string(), required: true),
        JSONSchema.Property(name: "path", schema: .string(), required: true),
        JSONSchema.Property(name: "size", schema: .integer, required: true),
        JSONSchema.Property(name: "sha256", schema: .string(), required: true),
        JSONSchema.Property(name: "replace", schema: .boolean, required: false),
    ])
    private static let statusSchema: JSONSchema = .object([JSONSchema.Property(name: "id", schema: .string(), required: true)])

    var linkSpecs: [ToolSpec] {
        guard channels != nil, linkBase != nil else { return [] }
        return [
            ToolSpec(name: "sftp_download_link", description: """
                A link to download one regular file of a saved host over loopback HTTP, without its bytes passing through this conversation: \
                GET the url with the given header (never in the URL); Range: bytes=N- resumes. It works for ten minutes, for this session only. \
                Afterwards check sftp_link_status and the file's size and SHA-256: a 200 alone does not prove the copy is whole.
                """, parameters: Self.downloadLinkSchema.json),
            ToolSpec(name: "sftp_upload_link", description: """
                A link to upload one file to a saved host over loopback HTTP (PUT the bytes with the given header): it commits only when exactly \
                size bytes with this SHA-256 arrived, else nothing changes; a cut upload resumes with Upload-Offset at the acknowledged count. \
                An existing file is kept unless replace is true. It changes the host: it needs an approval or the host's tier.
                """, parameters: Self.uploadLinkSchema.json),
            ToolSpec(name: "sftp_link_status", description: "The state of a link made by sftp_download_link or sftp_upload_link: bytes moved, done, failed (why), expiry.",
                     parameters: Self.statusSchema.json),
        ]
    }

    func link(_ call: ToolCall, conversation: String) async -> ToolOutcome {
        guard let channels, let base = linkBase else {
            return ToolOutcome(state: .failed, text: "\(call.name) needs termind serve --mcp-listen: links are served on its loopback HTTP listener.")
        }
        let schema = call.name == "sftp_upload_link" ? Self.uploadLinkSchema : call.name == "sftp_download_link" ? Self.downloadLinkSchema : Self.statusSchema
        if let misfit = misfit(call, schema) { return misfit }
        func string(_ name: String) -> String { call.arguments[name]?.stringValue ?? "" }
        if call.name == "sftp_link_status" {
            guard let record = channels.status(string("id"), owner: conversation) else {
                return ToolOutcome(state: .failed, text: "No link \(string("id")) of this session (finished links are kept thirty minutes).")
            }
            let view: JSONValue = .object(["id": .string(record.id), "direction": .string(record.direction.rawValue), "state": .string(record.state.rawValue),
                                           "bytes": .integer(Int64(record.bytes)), "expiresAt": .double(record.expires),
                                           "error": record.error.map { .string($0) } ?? .null, "path": .string(record.path)])
            return ToolOutcome(state: .succeeded, text: Self.json(view), structured: view)
        }
        let path = string("path")
        guard !path.isEmpty, !path.utf8.contains(0) else { return ToolOutcome(state: .failed, text: "\(call.name) needs a path on the host.") }
        guard let host = try? await hosts.host(named: string("host")) else { return await unknownHost(string("host")) }
        let upload = call.name == "sftp_upload_link"
        var size: UInt64?
        var sha256: String?
        if upload {
            guard let count = JSONRead.int(call.arguments["size"]), count >= 0 else { return ToolOutcome(state: .failed, text: "size is a byte count (0 or more).") }
            guard let hash = ByteChannelRules.sha256(string("sha256")) else { return ToolOutcome(state: .failed, text: "sha256 is the file's SHA-256 as 64 hexadecimal digits.") }
            size = UInt64(count)
            sha256 = hash
        }
        let replace = call.arguments["replace"] == .bool(true)
        let description = upload ? "upload \(size ?? 0) bytes (SHA-256 \(sha256?.prefix(16) ?? "")…) to \(path)\(replace ? ", replacing what is there" : "")" : "download \(path)"
        let assessment: Assessment
        do {
            assessment = try await policy.assess(tool: call.name, conversation: conversation, call: call.id, host: host, command: upload ? description : nil,
                                                 declared: upload ? Effect(.write, network: true) : Effect(.read, network: true))
        } catch {
            return ToolOutcome(state: .refused, text: "The policy could not decide (\(TermindError.from(error).message)); no link was made.")
        }
        if let refused = await settle(assessment, call: call, conversation: conversation, grant: upload ? (host.id, description) : nil,
                                      guardianAction: "\(call.name) on \(host.label) (\(host.address)): \(description)",
                                      notApproved: "The operator did not approve writing to \(host.label); no link was made.",
                                      ask: { await approval(tool: call.name, for: description, on: host, why: "an MCP client would write a file there") }) {
            return refused
        }
        do {
            let made = try channels.create(upload ? .upload : .download, host: host, path: path, owner: conversation, size: size, sha256: sha256, replace: replace)
            let view: JSONValue = .object([
                "id": .string(made.id), "method": .string(upload ? "PUT" : "GET"), "url": .string(base + (upload ? "/files/upload" : "/files/download")),
                "headers": .object(["Termind-Capability": .string(made.secret)]), "expiresAt": .double(made.expires),
                "resume": .string(upload ? "Upload-Offset: N with the bytes from N (N: the acknowledged count, from a failed answer or sftp_link_status)" : "Range: bytes=N-"),
            ])
            return ToolOutcome(state: .succeeded, text: Self.json(view), structured: view)
        } catch {
            return ToolOutcome(state: .failed, text: TermindError.from(error).message)
        }
    }
}
