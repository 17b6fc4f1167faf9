import CTermindPluginABI
import Dispatch
import Foundation
import TermindCore

/// The documented bounds of C plugin calls (docs/plugins.md).
public enum PluginLimits {
    /// Replies and errors from a plugin are capped; a larger one is an error, not a crash.
    public static let maximumReplyBytes = 4 << 20
    /// Calls of one plugin that run at once, each on a thread of the plugin's own.
    public static let callThreads = 4
    /// Calls of one plugin that wait for a thread; beyond them a call gets `plugin.busy` at once.
    public static let queuedCalls = 64
}

/// Adapts a C ABI plugin to `Feature`: its contracts become endpoints whose handler calls
/// the plugin's `handle`, and its manifest functions become `<id>.fn.<name>@1` contracts
/// called through libffi. Every call runs on the plugin's own `BlockingExecutor`
/// (`callThreads` at once, `queuedCalls` waiting, then `plugin.busy`), so a plugin that
/// blocks delays only its own calls — never the kernel's contracts or other features.
final class CPluginFeature: Feature, @unchecked Sendable {
    private let manifest: FeatureManifest
    private let descriptor: UnsafePointer<termind_plugin_descriptor>
    private let functions: [ForeignFunction]
    private let executor: BlockingExecutor
    static let maximumReplyBytes = PluginLimits.maximumReplyBytes
    static let callThreads = PluginLimits.callThreads
    static let queuedCalls = PluginLimits.queuedCalls

    init(manifest: FeatureManifest, descriptor: UnsafePointer<termind_plugin_descriptor>, functions: [ForeignFunction]) {
        self.manifest = manifest
        self.descriptor = descriptor
        self.functions = functions
        executor = BlockingExecutor(name: "termind.plugin.\(manifest.id)", threadLimit: Self.callThreads, queueLimit: Self.queuedCalls)
    }

    private func onExecutor<T: Sendable>(_ contract: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let id = manifest.id
        return try await executor.run(busy: TermindError(
            code: "plugin.busy",
            message: "plugin '\(id)' is busy: \(Self.callThreads) calls are running and \(Self.queuedCalls) are waiting; \(contract) was not started. Try again shortly."
        ), body)
    }

    func register(_ registrar: FeatureRegistrar) throws {
        let id = manifest.id
        for text in manifest.contracts {
            guard let contract = ContractID(parsing: text) else { continue }
            let summary = manifest.commands.first { $0.contract == text }?.summary ?? "Handled by C plugin '\(id)'."
            // The header promises `handle` a JSON object: enforce it, or the declared schema.
            let schemas = manifest.schemas(of: text)
            registrar.handle(ContractEndpoint(id: contract, summary: summary, owner: id, requestSchema: schemas.request,
                                              responseSchema: schemas.response) { [self] body, _ in
                let request = body.isEmpty ? Data("{}".utf8) : body
                let value = try JSONCoding.parse(request, source: "The request body for \(text)")
                let problems = schemas.request.problems(in: value)
                guard problems.isEmpty else {
                    throw TermindError.badRequest("Invalid request for \(text): \(problems.prefix(5).joined(separator: "; "))\(problems.count > 5 ? "; …" : "").")
                }
                let (reply, parsed) = try await self.handle(contract: text, body: request)
                let replyProblems = schemas.response.problems(in: parsed)
                guard replyProblems.isEmpty else {
                    throw TermindError(code: "plugin.bad_reply", message: "The reply of plugin '\(id)' to \(text) does not match the response schema in its manifest: \(replyProblems.prefix(5).joined(separator: "; ")).")
                }
                return reply
            })
        }
        let requestSchema = SchemaDerivation.schema(for: ForeignFunctionCall.Request.self)
        let responseSchema = SchemaDerivation.schema(for: ForeignFunctionCall.Response.self)
        for function in functions {
            let contract = ContractID(name: "\(id).fn.\(function.name)", version: 1)
            let summary = manifest.functions.first { $0.name == function.name }?.summary ?? "C function \(function.name)\(function.signature)"
            registrar.handle(ContractEndpoint(
                id: contract, summary: summary, owner: id,
                requestSchema: requestSchema,
                responseSchema: responseSchema
            ) { [self] body, _ in
                let request: ForeignFunctionCall.Request = try ContractCoding.decodeRequest(body, schema: requestSchema, contract: contract)
                let result = try await self.onExecutor(contract.description) { try function.call(request.args) }
                return try JSONCoding.encode(ForeignFunctionCall.Response(result: result))
            })
        }
    }

    func start(_ context: FeatureContext) async throws {
        guard let start = descriptor.pointee.start else { return }
        let id = manifest.id
        try await BlockingExecutor.detached(name: "termind.plugin.\(id).start") {
            var error: UnsafeMutablePointer<CChar>?
            let status = start(&error)
            let message = Self.take(error).message
            guard status == Int32(TERMIND_OK) else {
                throw TermindError(code: "feature.start_failed", message: "feature '\(id)' failed to start: \(message ?? "status \(status)").")
            }
        }
    }

    func stop() async {
        guard let stop = descriptor.pointee.stop else { return }
        _ = try? await BlockingExecutor.detached(name: "termind.plugin.\(manifest.id).stop") { stop() }
    }

    /// Calls `handle` and maps its status (docs/plugins.md): OK → the reply, which must be
    /// UTF-8 JSON within the bound; BAD_REQUEST → `request.invalid`; UNKNOWN for a declared
    /// contract → `plugin.unhandled`; FAILED or any other status → `plugin.failed`.
    private func handle(contract: String, body: Data) async throws -> (Data, JSONValue) {
        let id = manifest.id
        let handler = descriptor.pointee.handle
        return try await onExecutor(contract) {
            guard let handler else { throw TermindError.unknownContract(contract) }
            var reply: UnsafeMutablePointer<CChar>?
            let status = contract.withCString { c in
                body.withUnsafeBytes { raw -> Int32 in
                    // Give the plugin a NUL-terminated copy, so C string functions are safe.
                    let copy = UnsafeMutablePointer<CChar>.allocate(capacity: raw.count + 1)
                    defer { copy.deallocate() }
                    raw.copyBytes(to: UnsafeMutableRawBufferPointer(start: copy, count: raw.count))
                    copy[raw.count] = 0
                    return handler(c, copy, raw.count, &reply)
                }
            }
            let text = Self.take(reply)
            let who = "plugin '\(id)'"
            switch Int(status) {
            case TERMIND_OK:
                switch text {
                case .none:
                    throw TermindError(code: "plugin.bad_reply", message: "\(who) returned TERMIND_OK for \(contract) without a reply (set *reply to a JSON value).")
                case .tooLarge:
                    throw TermindError(code: "plugin.bad_reply", message: "The reply of \(who) to \(contract) is larger than \(Self.maximumReplyBytes) bytes (the reply bound).")
                case .invalidUTF8(let offset):
                    throw TermindError(code: "plugin.bad_reply", message: "The reply of \(who) to \(contract) is not valid UTF-8 (byte \(offset)).")
                case .text(let reply):
                    let data = Data(reply.utf8)
                    do {
                        return (data, try JSONCoding.parse(data, source: "The reply of \(who) to \(contract)"))
                    } catch let error as TermindError {
                        throw TermindError(code: "plugin.bad_reply", message: error.message)
                    }
                }
            case TERMIND_ERR_BAD_REQUEST:
                throw TermindError.badRequest("Invalid request for \(contract): \(text.message ?? "rejected by \(who)").")
            case TERMIND_ERR_UNKNOWN:
                throw TermindError(code: "plugin.unhandled", message: "\(who) answered TERMIND_ERR_UNKNOWN for \(contract), which its manifest declares: the plugin does not handle it\(text.message.map { " (\($0))" } ?? "").")
            case TERMIND_ERR_FAILED:
                throw TermindError(code: "plugin.failed", message: "\(who) failed on \(contract): \(text.message ?? "no message").")
            default:
                throw TermindError(code: "plugin.failed", message: "\(who) failed on \(contract) with status \(status), which is not a TERMIND_* code\(text.message.map { ": \($0)" } ?? "").")
            }
        }
    }

    /// A string a plugin handed back (reply or error message).
    enum Returned {
        case none, tooLarge, invalidUTF8(Int), text(String)

        /// For error messages: the text, or what was wrong with it.
        var message: String? {
            switch self {
            case .none: nil
            case .tooLarge: "its message is larger than \(CPluginFeature.maximumReplyBytes) bytes"
            case .invalidUTF8(let offset): "its message is not valid UTF-8 (byte \(offset))"
            case .text(let text): text
            }
        }
    }

    /// Takes ownership of a string the plugin allocated with host->alloc: never read past
    /// the reply bound, never repaired.
    static func take(_ pointer: UnsafeMutablePointer<CChar>?) -> Returned {
        guard let pointer else { return .none }
        defer { free(pointer) }
        let length = strnlen(pointer, maximumReplyBytes + 1)
        guard length <= maximumReplyBytes else { return .tooLarge }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if let bad = UTF8Validation.firstInvalidOffset(in: bytes) { return .invalidUTF8(bad) }
        return .text(String(decoding: bytes, as: UTF8.self))
    }
}

/// The per-plugin host API table and the context behind it. Allocated once per plugin and
/// never freed (the plugin may keep the pointer for the life of the process).
final class CPluginHost: @unchecked Sendable {
    let logger: Logger
    let table: UnsafeMutablePointer<termind_host_api>

    init(logger: Logger, hostVersion: String) {
        self.logger = logger
        table = .allocate(capacity: 1)
        table.initialize(to: termind_host_api())
        table.pointee.size = UInt32(MemoryLayout<termind_host_api>.size)
        table.pointee.abi_version = UInt32(TERMIND_PLUGIN_ABI_VERSION)
        table.pointee.host_version = UnsafePointer(strdup(hostVersion))
        table.pointee.alloc = { malloc($0) }
        table.pointee.log = { host, level, code in
            guard let host, let context = host.pointee.host_context, let code else { return }
            let plugin = Unmanaged<CPluginHost>.fromOpaque(context).takeUnretainedValue()
            let logLevel = LogLevel(rawValue: Int(level)) ?? .info
            plugin.logger.log(logLevel, LogCode(sanitizing: String(cString: code)))
        }
        table.pointee.free = { free($0) }
        table.pointee.json_string_field = { json, key in
            guard let json, let key else { return nil }
            let value = try? JSONCoding.parse(Data(String(cString: json).utf8), source: "plugin JSON")
            guard let text = value?[String(cString: key)]?.stringValue, !text.utf8.contains(0) else { return nil }
            return strdup(text)
        }
        table.pointee.json_quote = { text in
            let value = text.map { String(cString: $0) } ?? ""
            guard let data = try? JSONCoding.encode(value) else { return strdup("\"\"") }
            return strdup(String(decoding: data, as: UTF8.self))
        }
        // The table outlives every call; keep the context alive with it.
        table.pointee.host_context = Unmanaged.passRetained(self).toOpaque()
    }
}
