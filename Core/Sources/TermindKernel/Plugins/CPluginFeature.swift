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
            registrar.handle(ContractEndpoint(id: contract, summary: summary, owner: id, requestSchema: .any, responseSchema: .any) { [self] body, _ in
                try await self.handle(contract: text, body: body)
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
            let message = Self.take(error)
            guard status == Int32(TERMIND_OK) else {
                throw TermindError(code: "feature.start_failed", message: "feature '\(id)' failed to start: \(message ?? "status \(status)").")
            }
        }
    }

    func stop() async {
        guard let stop = descriptor.pointee.stop else { return }
        _ = try? await BlockingExecutor.detached(name: "termind.plugin.\(manifest.id).stop") { stop() }
    }

    private func handle(contract: String, body: Data) async throws -> Data {
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
            switch Int(status) {
            case TERMIND_OK:
                guard let text else { return Data("null".utf8) }
                let data = Data(text.utf8)
                _ = try JSONCoding.parse(data, source: "The reply of plugin '\(id)' to \(contract)")
                return data
            case TERMIND_ERR_BAD_REQUEST:
                throw TermindError.badRequest("Invalid request for \(contract): \(text ?? "rejected by plugin '\(id)'").")
            case TERMIND_ERR_UNKNOWN:
                throw TermindError.unknownContract(contract)
            default:
                throw TermindError(code: "plugin.failed", message: "plugin '\(id)' failed on \(contract): \(text ?? "status \(status)").")
            }
        }
    }

    /// Takes ownership of a string the plugin allocated with host->alloc.
    private static func take(_ pointer: UnsafeMutablePointer<CChar>?) -> String? {
        guard let pointer else { return nil }
        defer { free(pointer) }
        let length = strnlen(pointer, maximumReplyBytes + 1)
        guard length <= maximumReplyBytes else { return "reply larger than \(maximumReplyBytes) bytes" }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
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
