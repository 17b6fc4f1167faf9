// swift-tools-version:6.1
// The root package: the host executable, one dynamic library per feature and plugin,
// the per-feature test harness, and the tests. Everything depends on Core through its
// single dynamic product, so exactly one libTermindCore.so exists in the process; feature
// API modules (contracts, records, ports) come the same way from APIs/ (libTermindAPIs.so).
// Build every product (`swift build`) before `swift run termind`: the host loads the
// feature libraries at run time, so SwiftPM does not know it needs them.
import PackageDescription

let core = Target.Dependency.product(name: "TermindCore", package: "Core")
/// Every feature's API module (VaultAPI, ...): what features and the host may import of each other.
let apis = Target.Dependency.product(name: "TermindAPIs", package: "APIs")
/// Records compiler and contracts hash in each Swift feature (FeatureDescriptor.export).
let signature = Target.PluginUsage.plugin(name: "BuildSignature", package: "Core")

/// The launcher imports neither Concurrency nor StringProcessing (nothing of theirs is
/// used), so its process maps two fewer Swift libraries: it starts for every command.
let launcherSettings: [SwiftSetting] = [
    .unsafeFlags(["-Xfrontend", "-disable-implicit-concurrency-module-import",
                  "-Xfrontend", "-disable-implicit-string-processing-module-import"]),
]

let package = Package(
    name: "Termind",
    products: [
        // The launcher (no Foundation, no termind library: a command a server takes starts
        // in a few milliseconds) and the generic client it loads when a command runs here.
        .executable(name: "termind", targets: ["termind"]),
        .library(name: "TermindClient", type: .dynamic, targets: ["TermindClient"]),
        // A C plugin with "isolation": "process" runs in a child of termind, in this host.
        .executable(name: "termind-plugin-host", targets: ["PluginHost"]),
        // Features (listed in Registry.json).
        .library(name: "TermindVault", type: .dynamic, targets: ["Vault"]),
        .library(name: "TermindWorkspaces", type: .dynamic, targets: ["Workspaces"]),
        .library(name: "TermindSettings", type: .dynamic, targets: ["Settings"]),
        .library(name: "TermindMetrics", type: .dynamic, targets: ["Metrics"]),
        .library(name: "TermindPortForwarding", type: .dynamic, targets: ["PortForwarding"]),
        .library(name: "TermindSFTP", type: .dynamic, targets: ["SFTP"]),
        .library(name: "TermindAssistant", type: .dynamic, targets: ["Assistant"]),
        .library(name: "TermindSync", type: .dynamic, targets: ["Sync"]),
        // Example third-party plugins (opt-in: loaded only from --plugins / TERMIND_PLUGINS).
        .library(name: "TermindWakeOnLAN", type: .dynamic, targets: ["WakeOnLAN"]),
        .library(name: "TermindDigest", type: .dynamic, targets: ["Digest"]),
        // The per-feature harness, for our features and for plugin authors.
        .library(name: "TermindHarness", targets: ["TermindHarness"]),
        // Fixture features the kernel tests load (never listed in Registry.json).
        .library(name: "TermindFixtureEcho", type: .dynamic, targets: ["FixtureEcho"]),
        .library(name: "TermindFixtureFailingStart", type: .dynamic, targets: ["FixtureFailingStart"]),
        .library(name: "TermindFixtureWrongSignature", type: .dynamic, targets: ["FixtureWrongSignature"]),
        .library(name: "TermindFixtureProbe", type: .dynamic, targets: ["FixtureProbe"]),
        .library(name: "TermindFixtureStreams", type: .dynamic, targets: ["FixtureStreams"]),
        .library(name: "TermindFixtureAgent", type: .dynamic, targets: ["FixtureAgent"]),
        .library(name: "TermindFixturePolicy", type: .dynamic, targets: ["FixturePolicy"]),
    ],
    dependencies: [
        .package(path: "Core"),
        .package(path: "APIs"),
    ],
    targets: [
        .executableTarget(
            name: "termind",
            dependencies: ["TermindLauncher"],
            path: "Host/Sources/termind",
            swiftSettings: launcherSettings
        ),
        // The launcher's logic, on the Swift runtime and Glibc alone (unit-tested directly).
        .target(
            name: "TermindLauncher",
            dependencies: ["TermindHelpText"],
            path: "Host/Sources/TermindLauncher",
            swiftSettings: launcherSettings,
            // `termind version`'s facts as constants (no Core loaded to ask).
            plugins: [signature]
        ),
        // termind's general help, written by the client and by the launcher alike (pure
        // Swift, with the launcher's settings: it is linked into the launcher).
        .target(
            name: "TermindHelpText",
            dependencies: [],
            path: "Host/Sources/TermindHelpText",
            swiftSettings: launcherSettings
        ),
        // The generic client: commands, streams, questions, views, `serve` and, inside it,
        // the launcher's commands (libTermindClient.so, loaded by the launcher).
        .target(
            name: "TermindClient",
            dependencies: [core, apis, "TermindHelpText"],
            path: "Host/Sources/TermindClient"
        ),
        // termind-plugin-host: the whole of it is Core's PluginHostProcess.
        .executableTarget(
            name: "PluginHost",
            dependencies: [core],
            path: "Host/Sources/PluginHost"
        ),
        .target(
            name: "WakeOnLAN",
            dependencies: [core, apis],
            path: "Plugins/Examples/WakeOnLAN/Sources",
            plugins: [signature]
        ),
        .target(
            name: "Digest",
            path: "Plugins/Examples/Digest/Sources",
            cSettings: [.headerSearchPath("../../../../Core/Sources/CTermindPluginABI/include")],
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        .target(
            name: "Vault",
            dependencies: [core, apis, "VaultRules"],
            path: "Features/Vault/Sources/Vault",
            plugins: [signature]
        ),
        .target(
            name: "Workspaces",
            dependencies: [core, apis, "WorkspacesRules", "TerminalScreen"],
            path: "Features/Workspaces/Sources/Workspaces",
            plugins: [signature]
        ),
        // Workspaces' pure rules (the terminal output scanner: shell marks, working folder,
        // modes), unit-tested directly.
        .target(
            name: "WorkspacesRules",
            dependencies: [core],
            path: "Features/Workspaces/Sources/WorkspacesRules"
        ),
        // libvterm 0.3.3 built from Debian 13's source with termind's patches
        // (scripts/deps/libvterm.sh, linked statically), imported by TerminalScreen only.
        .systemLibrary(
            name: "CVTerm",
            path: "Features/Workspaces/Sources/CVTerm",
            pkgConfig: "termind-vterm"
        ),
        // A durable session's screen: libvterm's model, its scrollback, and the redraw.
        .target(
            name: "TerminalScreen",
            dependencies: ["CVTerm", "WorkspacesRules"],
            path: "Features/Workspaces/Sources/TerminalScreen"
        ),
        .target(
            name: "Settings",
            dependencies: [core, apis],
            path: "Features/Settings/Sources/Settings",
            plugins: [signature]
        ),
        .target(
            name: "Metrics",
            dependencies: [core, apis, "MetricsRules"],
            path: "Features/Metrics/Sources/Metrics",
            plugins: [signature]
        ),
        // Metrics' pure rules (the remote script, snapshot framing, procfs and nvidia-smi parsers, rates), unit-tested directly.
        .target(
            name: "MetricsRules",
            dependencies: [core, apis],
            path: "Features/Metrics/Sources/MetricsRules"
        ),
        .target(
            name: "PortForwarding",
            dependencies: [core, apis, "ForwardingRules"],
            path: "Features/PortForwarding/Sources/PortForwarding",
            plugins: [signature]
        ),
        // Port forwarding's pure rules (-L/-R/-D specs, the SOCKS handshake, the retry schedule), unit-tested directly.
        .target(
            name: "ForwardingRules",
            dependencies: [core, apis],
            path: "Features/PortForwarding/Sources/ForwardingRules"
        ),
        .target(
            name: "Assistant",
            dependencies: [core, apis, "AssistantRules", "CurlHTTP", "LoopbackHTTP"],
            path: "Features/Assistant/Sources/Assistant",
            plugins: [signature]
        ),
        // The Assistant's pure rules (server-sent events, the four provider dialects' parsers
        // and request bodies, retries), unit-tested directly against the SDKs' fixture shapes.
        .target(
            name: "AssistantRules",
            dependencies: [core, apis],
            path: "Features/Assistant/Sources/AssistantRules"
        ),
        // libcurl (Debian's libcurl4-openssl-dev) for HTTP and TLS, imported by CurlHTTP only.
        .systemLibrary(
            name: "CCurl",
            path: "Features/Assistant/Sources/CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // termind's one HTTP client: libcurl's multi interface on a thread of its own, bodies
        // read with backpressure, redirects followed by termind.
        .target(
            name: "CurlHTTP",
            dependencies: [core, "CCurl"],
            path: "Features/Assistant/Sources/CurlHTTP"
        ),
        // GNU libmicrohttpd (Debian's libmicrohttpd-dev) for MCP's loopback HTTP server,
        // imported by LoopbackHTTP only.
        .systemLibrary(
            name: "CMicroHTTPD",
            path: "Features/Assistant/Sources/CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        // A small loopback-only HTTP/1.1 server: a request's head checked before its body is
        // read, bodies capped, answers computed on Swift concurrency while the connection waits.
        .target(
            name: "LoopbackHTTP",
            dependencies: ["CMicroHTTPD"],
            path: "Features/Assistant/Sources/LoopbackHTTP"
        ),
        .target(
            name: "SFTP",
            dependencies: [core, apis, "SFTPWire", "TransferRules"],
            path: "Features/SFTP/Sources/SFTP",
            plugins: [signature]
        ),
        // SFTP v3 spoken by termind itself (pipelined requests sized by limits@openssh.com): packets,
        // the session over any byte stream, whole-file transfers; tested against OpenSSH's sftp-server.
        .target(
            name: "SFTPWire",
            dependencies: [core],
            path: "Features/SFTP/Sources/SFTPWire"
        ),
        // SFTP transfers' pure rules (HOST:PATH endpoints, child names, conflict names, subtree
        // rules, the fair queue), unit-tested directly.
        .target(
            name: "TransferRules",
            dependencies: [],
            path: "Features/SFTP/Sources/TransferRules"
        ),
        // Sync: the engine (capture, fetch, apply, send) over SFTP's folder port and the zones.
        .target(
            name: "Sync",
            dependencies: [core, apis, "SyncRules"],
            path: "Features/Sync/Sources/Sync",
            plugins: [signature]
        ),
        // Sync's pure rules: hybrid logical clocks, records and per-field merge, sealed files.
        .target(
            name: "SyncRules",
            dependencies: [core],
            path: "Features/Sync/Sources/SyncRules"
        ),
        // The Vault's pure rules (known_hosts, ssh_config, quick-connect), unit-tested directly.
        .target(
            name: "VaultRules",
            dependencies: [core, apis],
            path: "Features/Vault/Sources/VaultRules"
        ),
        .target(
            name: "TermindHarness",
            dependencies: [core, apis],
            path: "Tests/Harness"
        ),
        .target(
            name: "FixtureEcho",
            dependencies: [core, apis],
            path: "Tests/Fixtures/Echo",
            plugins: [signature]
        ),
        // Tries calls, SQL and secrets for the capability tests.
        .target(
            name: "FixtureProbe",
            dependencies: [core],
            path: "Tests/Fixtures/Probe",
            plugins: [signature]
        ),
        // Calls and streams on an agent's behalf; and a scripted policy hook (the kernel's).
        .target(
            name: "FixtureAgent",
            dependencies: [core, apis],
            path: "Tests/Fixtures/Agent",
            plugins: [signature]
        ),
        .target(
            name: "FixturePolicy",
            dependencies: [core],
            path: "Tests/Fixtures/Policy",
            plugins: [signature]
        ),
        // One stream sending each event kind and asking each question kind (the CLI's rendering).
        .target(
            name: "FixtureStreams",
            dependencies: [core],
            path: "Tests/Fixtures/Streams",
            plugins: [signature]
        ),
        .target(
            name: "FixtureFailingStart",
            dependencies: [core],
            path: "Tests/Fixtures/FailingStart",
            plugins: [signature]
        ),
        // A separate process that writes to a shared database (store tests kill it mid-write).
        .executableTarget(
            name: "termind-test-store-writer",
            dependencies: [core],
            path: "Tests/Tools/StoreWriter"
        ),
        // `make bench`: the SSH transport against OpenSSH's client on the same sshd.
        .executableTarget(
            name: "termind-ssh-bench",
            dependencies: [core, "TermindHarness"],
            path: "Tests/Tools/SSHBench"
        ),
        // `make bench`: the Vault's import and lookups against `ssh -G` on the same config.
        .executableTarget(
            name: "termind-vault-bench",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/Tools/VaultBench"
        ),
        // `make bench`: two devices syncing 10,000 hosts through a folder on a real sshd.
        .executableTarget(
            name: "termind-sync-bench",
            dependencies: [core, "TermindHarness"],
            path: "Tests/Tools/SyncBench"
        ),
        // `make bench`: 100 (or N) monitored hosts at 1 Hz from one termind serve.
        .executableTarget(
            name: "termind-metrics-bench",
            dependencies: [core, "MetricsRules", "TermindHarness"],
            path: "Tests/Tools/MetricsBench"
        ),
        // `make bench`: SFTP get and put against OpenSSH's sftp on the same sshd.
        .executableTarget(
            name: "termind-sftp-bench",
            dependencies: [core, "SFTPWire", "TermindHarness"],
            path: "Tests/Tools/SFTPBench"
        ),
        // `make bench`: forwards (-L, -D, recovery) against ssh -N and autossh on the same sshd.
        .executableTarget(
            name: "termind-forward-bench",
            dependencies: [core, "TermindHarness"],
            path: "Tests/Tools/ForwardBench"
        ),
        // `make bench`: a long streamed answer through `termind assistant run` against the official openai SDK.
        .executableTarget(
            name: "termind-assistant-bench",
            dependencies: [core, "AssistantRules", "TermindHarness"],
            path: "Tests/Tools/AssistantBench"
        ),
        // `make bench`: MCP tools/call over stdio against the official Python SDK's own server.
        .executableTarget(
            name: "termind-mcp-bench",
            dependencies: [core, "TermindHarness"],
            path: "Tests/Tools/MCPBench"
        ),
        // `make bench`: terminal output throughput and keystroke echo against ssh -tt on the same sshd.
        .executableTarget(
            name: "termind-terminal-bench",
            dependencies: [core, "TermindHarness"],
            path: "Tests/Tools/TerminalBench"
        ),
        .target(
            name: "FixtureWrongSignature",
            dependencies: [core],
            path: "Tests/Fixtures/WrongSignature",
            plugins: [signature]
        ),
        .testTarget(
            name: "KernelTests",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/KernelTests"
        ),
        .testTarget(
            name: "StoreTests",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/StoreTests"
        ),
        .testTarget(
            name: "VaultTests",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/VaultTests",
            // Schema fixtures are read from the checkout by path.
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "SettingsTests",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/SettingsTests",
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "SSHTests",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/SSHTests"
        ),
        .testTarget(
            name: "SyncTests",
            dependencies: [core, apis, "SyncRules", "TermindHarness"],
            path: "Tests/SyncTests"
        ),
        .testTarget(
            name: "VaultRulesTests",
            dependencies: [core, apis, "VaultRules", "TermindHarness"],
            path: "Tests/VaultRulesTests"
        ),
        .testTarget(
            name: "MetricsTests",
            dependencies: [core, apis, "MetricsRules", "TermindHarness"],
            path: "Tests/MetricsTests"
        ),
        .testTarget(
            name: "ForwardingTests",
            dependencies: [core, apis, "ForwardingRules", "TermindHarness"],
            path: "Tests/ForwardingTests"
        ),
        .testTarget(
            name: "AssistantTests",
            dependencies: [core, apis, "CurlHTTP", "AssistantRules", "LoopbackHTTP", "TermindHarness"],
            path: "Tests/AssistantTests"
        ),
        .testTarget(
            name: "SFTPTests",
            dependencies: [core, apis, "SFTPWire", "TransferRules", "TermindHarness"],
            path: "Tests/SFTPTests"
        ),
        .testTarget(
            name: "WorkspacesTests",
            dependencies: [core, apis, "WorkspacesRules", "TerminalScreen", "TermindHarness"],
            path: "Tests/WorkspacesTests"
        ),
        // The launcher's pure parts (its JSON, where a command goes); the launcher itself is
        // exercised end to end by every process test that starts termind.
        .testTarget(
            name: "LauncherTests",
            dependencies: ["TermindLauncher", "TermindHelpText"],
            path: "Tests/LauncherTests"
        ),
        .testTarget(
            name: "PluginTests",
            dependencies: [core, apis, "TermindHarness"],
            path: "Tests/PluginTests"
        ),
    ]
)
