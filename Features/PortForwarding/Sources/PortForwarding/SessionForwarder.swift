import ForwardingRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import TermindCore
import VaultAPI

/// `forwarding.session`: an interactive session's `-L/-R/-D`, run as `forward run` runs its
/// forwards (`HostRun`: one connection for them, the supervisor keeping them alive while the
/// session holds them), stopped with the session.
struct SessionForwarder: SessionForwarding {
    let feature: ForwardingFeature

    func start(_ specs: [(kind: ForwardKind, spec: String)], on target: String, acceptHostKey: HostKeyPreset?, connectTimeout: Double?,
               ask: @escaping ConnectionAsker) async throws -> any SessionForwards {
        let ports = try feature.current()
        // Every spec is read before anything starts: a typo starts nothing.
        let parsed = try specs.map { try ForwardSpec.parse($0.spec, kind: $0.kind) }
        let reference = try await ForwardingFeature.hostReference(target, ports: ports)
        let label = try await ForwardingFeature.label(reference, ports: ports)
        let id = UUID().uuidString.lowercased()
        let host = HostRun(target: reference, label: label, purpose: "forwarding-session-\(id)", opener: ports.opener, logger: ports.logger.child("session"))
        for (index, spec) in parsed.enumerated() {
            var rule = ForwardRule(id: "\(id)-\(index)", name: "", kind: spec.kind, bindAddress: spec.bindAddress, bindPort: spec.bindPort,
                                   targetHost: spec.targetHost, targetPort: spec.targetPort, host: reference)
            rule.name = rule.flagDescription
            // One that cannot start (a port in use) is reported in its status; the session goes on, as ssh's.
            _ = try? await host.start(rule, ask: ask, preset: acceptHostKey, connectTimeout: connectTimeout)
        }
        return Forwards(host: host)
    }

    private final class Forwards: SessionForwards, Sendable {
        private let host: HostRun
        init(host: HostRun) { self.host = host }
        func statuses() async -> [ForwardStatus] { await host.statuses() }
        func stop() async { await host.stopAll() }
    }
}
