import Foundation
import Synchronization
import TermindCore
import VaultAPI

/// Test fixture: provides a fake `vault.hosts` port from a library (so a port crosses two
/// dlopen'ed images) and an echo contract that carries a secret and logs everything it
/// is allowed to, for the logging-redaction test.
public enum FixtureEcho: Contract {
    public struct Request: Codable, Sendable, Equatable {
        public var message: String
        public var secret: Secret
        public init(message: String, secret: Secret) {
            self.message = message
            self.secret = secret
        }
    }
    public struct Response: Codable, Sendable, Equatable {
        public var message: String
        public var secretLength: Int
    }
    public static let name = "fixture-echo.echo"
    public static let effect: Effect = .read
    public static let version = 1
    public static let summary = "Echo a message; report a secret's length (test fixture)."
}

struct FixtureHosts: HostDirectory {
    let hosts = [
        HostSummary(id: "h1", label: "gpu-box", address: "127.0.0.1", tags: ["mac=00:11:22:33:44:55", "wol-broadcast=127.0.0.1"]),
        HostSummary(id: "h2", label: "no-mac", address: "127.0.0.2"),
    ]
    func host(named name: String) async throws -> HostSummary? { hosts.first { $0.id == name || $0.label == name } }
    func allHosts() async throws -> [HostSummary] { hosts }
}

final class EchoFeature: Feature {
    private let logger = Mutex<Logger?>(nil)

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.provide(.hostDirectory, FixtureHosts())
        registrar.handle(FixtureEcho.self) { [self] request, _ in
            let logger = self.logger.withLock { $0 }
            // Everything a careless feature might try: each must come out redacted.
            logger?.debug("fixture.echo.handled", [
                "message": .identifier(request.message),
                "secret": .identifier("\(request.secret)"),
                "request": .identifier(String(describing: request)),
                "length": .int(request.secret.withPlaintext { $0.count }),
            ])
            return .init(message: request.message, secretLength: request.secret.withPlaintext { $0.utf8.count })
        }
    }

    func start(_ context: FeatureContext) async throws {
        logger.withLock { $0 = context.logger }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "fixture-echo", version: "1.0.0", signature: TermindLibrary.signature) { EchoFeature() }
}
