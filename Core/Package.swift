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
            targets: ["TermindCore", "TermindKernel", "CTermindPluginABI"]
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
            dependencies: ["TermindCore", "CFFI", "CTermindSystem", "CTermindPluginABI"],
            path: "Sources/TermindKernel"
        ),
        .plugin(
            name: "BuildSignature",
            capability: .buildTool(),
            path: "Plugins/BuildSignature"
        ),
    ]
)
