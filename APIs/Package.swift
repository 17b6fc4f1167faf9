// swift-tools-version:6.1
// Feature API modules: each feature's contracts, records, ports and error codes, which other
// features and the host may import (a feature's implementation is imported by nobody). Like
// Core, a nested package whose single `.dynamic` product holds every API module, so the host
// and every dlopen'ed feature share one copy of their metadata (checked by LinkageTests).
// A new feature adds its module here (Sources/<Name>API) and to the product's targets.
import PackageDescription

let core = Target.Dependency.product(name: "TermindCore", package: "Core")

let package = Package(
    name: "APIs",
    products: [
        .library(name: "TermindAPIs", type: .dynamic, targets: ["SettingsAPI", "VaultAPI", "WorkspacesAPI", "SFTPAPI", "AssistantAPI", "MetricsAPI", "PortForwardingAPI", "SyncAPI"]),
    ],
    dependencies: [
        .package(path: "../Core"),
    ],
    targets: [
        // The Vault: hosts, identities, keys, known hosts, ssh_config import, quick connect;
        // the hosts, credentials and host-key trust ports.
        .target(name: "VaultAPI", dependencies: [core], path: "Sources/VaultAPI"),
        // Settings: typed records features register, the settings.values port, the settings contracts.
        .target(name: "SettingsAPI", dependencies: [core], path: "Sources/SettingsAPI"),
        // Workspaces: SSH sessions; the exec and terminal streams; the terminal's settings records.
        .target(name: "WorkspacesAPI", dependencies: [core, "SettingsAPI", "VaultAPI"], path: "Sources/WorkspacesAPI"),
        // SFTP: its settings records (limits, topology), the sftp stream; the scheduler port comes with transfers.
        .target(name: "SFTPAPI", dependencies: [core, "SettingsAPI", "VaultAPI"], path: "Sources/SFTPAPI"),
        // The Assistant: its settings records (providers and MCP servers with secret references, models, roles, local) so far.
        .target(name: "AssistantAPI", dependencies: [core, "SettingsAPI"], path: "Sources/AssistantAPI"),
        // Metrics: samples of monitored hosts, the metrics contracts and streams, its settings record (device-local preferences).
        .target(name: "MetricsAPI", dependencies: [core, "SettingsAPI", "VaultAPI"], path: "Sources/MetricsAPI"),
        // Port forwarding: its rules, their state, the forwarding contracts and streams.
        .target(name: "PortForwardingAPI", dependencies: [core, "VaultAPI"], path: "Sources/PortForwardingAPI"),
        // Sync: the zone port features provide for their synced data, the sync contracts.
        .target(name: "SyncAPI", dependencies: [core], path: "Sources/SyncAPI"),
    ]
)
