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
        .library(name: "TermindAPIs", type: .dynamic, targets: ["VaultAPI", "WorkspacesAPI"]),
    ],
    dependencies: [
        .package(path: "../Core"),
    ],
    targets: [
        // The Vault: hosts, identities, keys, known hosts, ssh_config import, quick connect;
        // the hosts, credentials and host-key trust ports.
        .target(name: "VaultAPI", dependencies: [core], path: "Sources/VaultAPI"),
        // Workspaces: SSH sessions; the exec stream.
        .target(name: "WorkspacesAPI", dependencies: [core], path: "Sources/WorkspacesAPI"),
    ]
)
