import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindStore

/// Finds and vets the plugins under one opt-in folder (`--plugins DIR`) before any of
/// their code runs. The kernel's boot and `termind plugins check` both go through here,
/// so the check refuses exactly what termind refuses.
///
/// DIR is a plugin folder (it holds plugin.json) or a folder of plugin folders. For each
/// plugin: plugin.json is a regular file of at most `maximumManifestBytes`, read without
/// blocking; it is read and validated; then the folder, plugin.json and the library pass
/// `SafePath` (resolved first; every folder from DIR down strictly). A library that
/// resolves outside the plugin's folder is refused unless the manifest sets
/// `"libraryOutsidePlugin": true`, and then it passes the same checks. The manifest that
/// comes out names the library by its resolved path, which is what gets opened.
enum PluginDiscovery {
    /// plugin.json is small; a larger one (or /dev/zero) is refused before it is read.
    static let maximumManifestBytes = 1 << 20

    struct Found {
        var manifests: [FeatureManifest] = []
        var problems: [FeatureProblem] = []
    }

    static func discover(root given: String) -> Found {
        var found = Found()
        guard let root = SafePath.resolve(given) else {
            found.problems.append(FeatureProblem(featureID: nil, field: nil, code: .pluginsFolderMissing,
                                                 message: "The plugin folder \(given) (from --plugins or TERMIND_PLUGINS) does not exist."))
            return found
        }
        var status = stat()
        guard stat(root, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            found.problems.append(FeatureProblem(featureID: nil, field: nil, code: .pluginsNotAFolder,
                                                 message: "The plugin folder \(given) (from --plugins or TERMIND_PLUGINS) is not a folder."))
            return found
        }
        do throws(SafePath.Unsafe) {
            try SafePath.check(root, strictFrom: root)
        } catch {
            found.problems.append(FeatureProblem(featureID: nil, field: nil, code: .pluginInsecure,
                                                 message: "No plugin in \(given) is loaded: \(error). Fix it with chmod go-w or chown."))
            return found
        }
        let folders = pluginFolders(in: root)
        guard !folders.isEmpty else {
            found.problems.append(FeatureProblem(featureID: nil, field: nil, code: .pluginsNoneFound,
                                                 message: "The plugin folder \(given) holds no plugin.json, neither itself nor in a subfolder."))
            return found
        }
        for folder in folders {
            switch inspect(folder: folder, root: root) {
            case .success(let manifest): found.manifests.append(manifest)
            case .failure(let problem): found.problems.append(problem)
            }
        }
        return found
    }

    /// The root itself when it holds plugin.json, else its subfolders that do (sorted).
    static func pluginFolders(in root: String) -> [String] {
        var info = stat()
        if lstat(PathText.appending(root, "plugin.json"), &info) == 0 { return [root] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return names.sorted().map { PathText.appending(root, $0) }.filter {
            lstat(PathText.appending($0, "plugin.json"), &info) == 0
        }
    }

    private static func inspect(folder given: String, root: String) -> Result<FeatureManifest, FeatureProblem> {
        func insecure(_ id: String?, _ detail: String, field: String? = nil) -> FeatureProblem {
            let name = id.map { "plugin '\($0)' (\(given))" } ?? "the plugin in \(given)"
            return FeatureProblem(featureID: id, field: field, code: .pluginInsecure,
                                  message: "\(name) is not loaded: \(detail).")
        }
        guard let folder = SafePath.resolve(given), let manifestPath = SafePath.resolve(PathText.appending(given, "plugin.json")) else {
            return .failure(insecure(nil, "its plugin.json cannot be resolved (a dangling symlink?)"))
        }
        // A plugin folder symlinked from the root is checked from its own folder down.
        let strict = SafePath.isInside(folder, root) ? root : folder
        do throws(SafePath.Unsafe) {
            try SafePath.check(folder, strictFrom: strict)
            guard SafePath.isInside(manifestPath, folder) else {
                return .failure(insecure(nil, "plugin.json resolves to \(manifestPath), outside the plugin folder"))
            }
            try SafePath.check(manifestPath, strictFrom: strict)
        } catch {
            return .failure(insecure(nil, "\(error). Fix it with chmod go-w or chown"))
        }
        let data: Data
        do {
            data = try BoundedFile.read(manifestPath, limit: maximumManifestBytes, what: "plugin manifest", code: .pluginManifestUnreadable)
        } catch let error as TermindError {
            return .failure(FeatureProblem(featureID: nil, field: nil, code: .pluginManifestUnreadable, message: "The plugin in \(given) is not loaded: \(error.message)"))
        } catch {
            return .failure(FeatureProblem(featureID: nil, field: nil, code: .pluginManifestUnreadable, message: "The plugin in \(given) is not loaded: plugin.json cannot be read."))
        }
        let source = PathText.appending(given, "plugin.json")
        var manifest: FeatureManifest
        switch ManifestReader.readPlugin(data, source: source, baseDirectory: folder) {
        case .success(let m): manifest = m
        case .failure(let problem): return .failure(problem)
        }
        // A missing library is reported by validation, with the path the manifest names.
        guard let library = SafePath.resolve(manifest.libraryPath) else { return .success(manifest) }
        let inside = SafePath.isInside(library, folder)
        if !inside && !manifest.libraryOutsidePlugin {
            return .failure(insecure(manifest.id, "its library \(manifest.library) resolves to \(library), outside the plugin folder \(folder); set \"libraryOutsidePlugin\": true in plugin.json to allow that", field: "library"))
        }
        do throws(SafePath.Unsafe) {
            try SafePath.check(library, strictFrom: inside ? strict : PathText.deletingLastComponent(library))
        } catch {
            return .failure(insecure(manifest.id, "\(error). Fix it with chmod go-w or chown", field: "library"))
        }
        var info = stat()
        guard stat(library, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            return .failure(insecure(manifest.id, "its library \(library) is not a regular file", field: "library"))
        }
        manifest.library = library
        return .success(manifest)
    }
}
