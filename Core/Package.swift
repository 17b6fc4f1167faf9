// swift-tools-version:6.1
// Core is a nested package for one reason: its single `.dynamic` product is the only
// SwiftPM shape in which the host and every dlopen'ed feature share one copy of Core
// (see ../shared DESIGN "Shape"). Every module listed in the product lands in
// libTermindCore.so; nothing here may be linked statically into a feature.
import PackageDescription

let package = Package(
    name: "Core",
    products: [
        .library(
            name: "TermindCore",
            type: .dynamic,
            targets: ["TermindCore", "TermindKernel", "TermindCrypto", "TermindStore", "TermindSSH", "CTermindPluginABI"]
        ),
        // Every Swift feature or plugin target applies it (see the plugin's doc comment).
        .plugin(name: "BuildSignature", targets: ["BuildSignature"]),
    ],
    targets: [
        // C libraries: one system-library target each, imported by exactly one Swift module.
        .systemLibrary(
            name: "CFFI",
            path: "Sources/CFFI",
            pkgConfig: "libffi",
            providers: [.apt(["libffi-dev"])]
        ),
        .systemLibrary(
            name: "CCrypto",
            path: "Sources/CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            path: "Sources/CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // libssh2 >= 1.11.1: built from Debian 13's source package by scripts/deps/libssh2.sh when
        // the system's is older, and found through its pkg-config file.
        .systemLibrary(
            name: "CLibSSH2",
            path: "Sources/CLibSSH2",
            pkgConfig: "termind-libssh2"
        ),
        // Our own small C: socket credentials and other calls Swift cannot express.
        .target(name: "CTermindSystem", path: "Sources/CTermindSystem"),
        // The plugin C ABI header (termind_plugin.h), shared by the kernel and C plugins.
        .target(name: "CTermindPluginABI", path: "Sources/CTermindPluginABI"),
        // Pure values and rules: contracts, ports, manifests, schemas, logging. No dlopen, no sockets.
        .target(
            name: "TermindCore",
            path: "Sources/TermindCore",
            plugins: ["BuildSignature"]
        ),
        // The kernel: lifecycle, loader, contract routing, control socket, libffi binding.
        .target(
            name: "TermindKernel",
            dependencies: ["TermindCore", "TermindStore", "TermindCrypto", "TermindSSH", "CFFI", "CTermindSystem", "CTermindPluginABI"],
            path: "Sources/TermindKernel"
        ),
        // Digests, MACs, AEAD, KDFs and keys through OpenSSL (the only wrapper of CCrypto).
        // Optimised in debug builds too: bcrypt_pbkdf (a passphrase-protected OpenSSH key) is
        // Blowfish written here in Swift, and unoptimised it took seconds a key in the tests.
        .target(name: "TermindCrypto", dependencies: ["TermindCore", "CCrypto"], path: "Sources/TermindCrypto",
                swiftSettings: [.unsafeFlags(["-O"], .when(configuration: .debug))]),
        // The process database (SQLite, WAL, per-feature migrations) and the secret store.
        .target(name: "TermindStore", dependencies: ["TermindCore", "TermindCrypto", "CSQLite"], path: "Sources/TermindStore"),
        // The SSH transport: libssh2 sessions, each owned by one engine thread (the only wrapper of CLibSSH2).
        .target(name: "TermindSSH", dependencies: ["TermindCore", "TermindCrypto", "CLibSSH2"], path: "Sources/TermindSSH"),
        .plugin(
            name: "BuildSignature",
            capability: .buildTool(),
            path: "Plugins/BuildSignature"
        ),
    ]
)
