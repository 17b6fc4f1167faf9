import Foundation
import Synchronization
import TermindCore
import TermindSSH
import TermindStore

/// Test fixture: a feature that tries what the capability tests ask of it — call another
/// contract, run SQL on its database connection, use the secret store — and reports what
/// the kernel let it do. It holds whatever its manifest lets it have, nothing more.
public enum ProbeCall: Contract {
    /// `typed`: through the typed call (kernel.ping@1 with the body as its payload, or
    /// kernel.plugins.enable@1 with it as the id), not the JSON one.
    public struct Request: Codable, Sendable { public var contract: String; public var body: String; public var typed: Bool? }
    public struct Response: Codable, Sendable { public var reply: String?; public var errorCode: String?; public var errorMessage: String? }
    public static let name = "fixture-probe.call"
    public static let effect: Effect = .read
    public static let version = 1
    public static let summary = "Call another contract as this feature (test fixture)."
}

public enum ProbeSQL: Contract {
    public struct Request: Codable, Sendable {
        public var sql: String
        /// Let a failure escape the handler, as a careless feature would.
        public var rethrow: Bool?
    }
    public struct Response: Codable, Sendable { public var rows: Int?; public var errorCode: String?; public var errorMessage: String? }
    public static let name = "fixture-probe.sql"
    public static let effect: Effect = .write
    public static let version = 1
    public static let summary = "Run SQL on this feature's database connection (test fixture)."
}

public enum ProbeSecrets: Contract {
    public struct Request: Codable, Sendable { public var store: String?; public var read: String? }
    public struct Response: Codable, Sendable { public var stored: String?; public var handles: [String]; public var read: String?; public var readError: String? }
    public static let name = "fixture-probe.secrets"
    public static let effect: Effect = Effect(.write, secrets: true)
    public static let version = 1
    public static let summary = "Store, list and read secrets as this feature (test fixture)."
}

/// Tries each way a feature once had out of its views, and says what the kernel let it do.
public enum ProbeEscape: Contract {
    public typealias Request = Empty
    public struct Response: Codable, Sendable {
        /// The `kernel.ssh` port is the pool itself (with closeAll, closeIdle, routes).
        public var gotThePool: Bool
        public var gotSSH: Bool
        /// Changing how the whole secret store is protected, from its view.
        public var changedProtection: String
    }
    public static let name = "fixture-probe.escape"
    public static let effect: Effect = .destructive
    public static let version = 1
    public static let summary = "Try to leave this feature's views (test fixture)."
}

final class ProbeFeature: Feature {
    private let context = Mutex<FeatureContext?>(nil)

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.handle(ProbeCall.self) { [self] request, _ in
            guard let context = self.context.withLock({ $0 }), let id = ContractID(parsing: request.contract) else {
                return .init(reply: nil, errorCode: "probe.bad_request", errorMessage: nil)
            }
            do {
                if request.typed == true {
                    if id == KernelContracts.Ping.id {
                        return .init(reply: try await context.call(KernelContracts.Ping.self, .init(payload: request.body)).payload, errorCode: nil, errorMessage: nil)
                    }
                    return .init(reply: try await context.call(KernelContracts.PluginEnable.self, .init(id: request.body)).message, errorCode: nil, errorMessage: nil)
                }
                let reply = try await context.call(id, Data(request.body.utf8))
                return .init(reply: String(decoding: reply, as: UTF8.self), errorCode: nil, errorMessage: nil)
            } catch let error as TermindError {
                return .init(reply: nil, errorCode: error.code, errorMessage: error.message)
            }
        }
        registrar.handle(ProbeSQL.self) { [self] request, _ in
            guard let db = self.context.withLock({ $0 })?.ports.optional(.store) else {
                return .init(rows: nil, errorCode: "probe.no_store", errorMessage: nil)
            }
            do {
                return .init(rows: try db.query(request.sql).count, errorCode: nil, errorMessage: nil)
            } catch let error as StoreError where request.rethrow != true {
                return .init(rows: nil, errorCode: error.code, errorMessage: error.message)
            }
        }
        registrar.handle(ProbeEscape.self) { [self] _, _ in
            let context = self.context.withLock { $0 }
            let ssh = context?.ports.optional(.sshConnections)
            var changed = "no secret store"
            if let secrets = context?.ports.optional(.secrets) {
                do {
                    try secrets.changeProtection(to: .passphrase(Secret("taken over")))
                    changed = "changed"
                } catch let error as TermindError {
                    changed = error.code
                }
            }
            let port: Any? = ssh
            return .init(gotThePool: port is SSHConnectionPool, gotSSH: ssh != nil, changedProtection: changed)
        }
        registrar.handle(ProbeSecrets.self) { [self] request, _ in
            guard let secrets = self.context.withLock({ $0 })?.ports.optional(.secrets) else {
                return .init(stored: nil, handles: [], read: nil, readError: "probe.no_secrets")
            }
            let stored = try request.store.map { try secrets.store(Secret($0), purpose: "probe.test") }
            var read: String?, readError: String?
            if let handle = request.read {
                do { read = try secrets.secret(handle).withPlaintext { $0 } } catch let error as TermindError { readError = error.code }
            }
            return .init(stored: stored, handles: try secrets.handles(), read: read, readError: readError)
        }
    }

    func start(_ context: FeatureContext) async throws {
        if let db = context.ports.optional(.store) {
            try await db.migrate(Schema(feature: "fixture-probe", migrations: [
                Migration(1, "create notes", "CREATE TABLE fixture_probe_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"),
            ]))
        }
        self.context.withLock { $0 = context }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "fixture-probe", version: "1.0.0", signature: TermindLibrary.signature) { ProbeFeature() }
}
