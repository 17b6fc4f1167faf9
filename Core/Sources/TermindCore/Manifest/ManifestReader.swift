import FoundationEssentials

/// Reads Registry.json and plugin.json files into manifests. Structural problems of one
/// entry (a missing field, a wrong type) disable that entry with a message naming the
/// feature and the field; a file that is not JSON at all is rejected with its line.
public enum ManifestReader {
    public static let schemaVersion = 1

    public struct Result: Sendable {
        public var manifests: [FeatureManifest] = []
        /// Entries that could not be read, keyed by id when the id was readable.
        public var rejected: [FeatureProblem] = []
    }

    /// Parses a Registry.json document. Throws only when the file as a whole is unusable.
    public static func readRegistry(_ data: Data, source: String, baseDirectory: String) throws -> Result {
        let root = try JSONCoding.parse(data, source: source)
        guard case .object(let object) = root else {
            throw TermindError(.registryMalformed, "\(source): the top level must be an object with \"schema\" and \"features\", not \(root.typeName).")
        }
        guard case .integer(let schema)? = object["schema"] else {
            throw TermindError(.registryMalformed, "\(source): field \"schema\" is missing or not an integer (this termind reads schema \(schemaVersion)).")
        }
        guard schema == schemaVersion else {
            throw TermindError(.registrySchema, "\(source): schema \(schema) is not supported (this termind reads schema \(schemaVersion)).")
        }
        guard case .array(let entries)? = object["features"] else {
            throw TermindError(.registryMalformed, "\(source): field \"features\" is missing or not an array.")
        }
        if let unknown = object.keys.sorted().first(where: { $0 != "schema" && $0 != "features" }) {
            throw TermindError(.registryMalformed, "\(source): unknown top-level field \"\(unknown)\" (allowed: schema, features).")
        }
        var result = Result()
        for (index, entry) in entries.enumerated() {
            switch readEntry(entry, label: "\(source) features[\(index)]", source: source, baseDirectory: baseDirectory, origin: .registry) {
            case .success(let manifest): result.manifests.append(manifest)
            case .failure(var problem):
                // An entry that says it is permanent stops boot whatever is wrong with it. A
                // "permanent" that is present and not false counts: an unreadable entry fails closed.
                if case .object(let fields) = entry, let flag = fields["permanent"], flag != .bool(false) { problem.permanent = true }
                result.rejected.append(problem)
            }
        }
        return result
    }

    /// Parses one plugin.json; the library resolves against the plugin's own folder.
    /// Plugins are never permanent: a plugin.json that says so is refused.
    public static func readPlugin(_ data: Data, source: String, baseDirectory: String) -> Swift.Result<FeatureManifest, FeatureProblem> {
        let value: JSONValue
        do { value = try JSONCoding.parse(data, source: source) } catch let error as TermindError {
            return .failure(FeatureProblem(featureID: nil, field: nil, code: error.code, message: error.message))
        } catch {
            return .failure(FeatureProblem(featureID: nil, field: nil, code: .jsonMalformed, message: "\(source) is not valid JSON."))
        }
        return readEntry(value, label: source, source: source, baseDirectory: baseDirectory, origin: .plugin)
    }

    private static let schema = SchemaDerivation.schema(for: FeatureManifest.self)

    static func readEntry(_ entry: JSONValue, label: String, source: String, baseDirectory: String,
                          origin: FeatureManifest.Origin) -> Swift.Result<FeatureManifest, FeatureProblem> {
        // A manifest exactly of the manifest's shape is read as it is; any other is checked
        // against the schema, which names its problems, and decoded.
        if var manifest = FeatureManifest(exactly: entry) {
            manifest.source = source
            manifest.baseDirectory = baseDirectory
            manifest.origin = origin
            return .success(manifest)
        }
        let id = entry["id"]?.stringValue
        let name = id.map { "feature '\($0)' (\(label))" } ?? label
        let problems = schema.problems(in: entry, at: "")
        if let first = problems.first {
            let field = String(first.prefix { $0 != ":" }).trimming { $0 == "." }
            let detail = first.drop { $0 != ":" }.dropFirst().trimmedWhitespace
            let more = problems.count > 1 ? " (and \(problems.count - 1) more problem\(problems.count == 2 ? "" : "s"))" : ""
            return .failure(FeatureProblem(featureID: id, field: field, code: .manifestInvalidField,
                                           message: "\(name): field \"\(field)\": \(detail)\(more)."))
        }
        do {
            var manifest = try JSONValueDecoder.decode(FeatureManifest.self, from: entry)
            manifest.source = source
            manifest.baseDirectory = baseDirectory
            manifest.origin = origin
            return .success(manifest)
        } catch {
            return .failure(FeatureProblem(featureID: id, field: nil, code: .manifestInvalid, message: "\(name): cannot be read as a feature manifest."))
        }
    }
}

/// One reason a feature cannot run, naming the feature and (when there is one) the field.
public struct FeatureProblem: Sendable, Equatable, Codable, Error, CustomStringConvertible {
    public var featureID: String?
    public var field: String?
    public var code: String
    public var message: String
    /// The entry declared itself permanent (for entries that could not even be read):
    /// boot stops instead of going on without it.
    public var permanent: Bool

    /// `code` as another error carries it (a `TermindError`'s, a store's); a problem raised
    /// here takes its `ErrorCode` constant (the initialiser below).
    public init(featureID: String?, field: String?, code: String, message: String, permanent: Bool = false) {
        self.featureID = featureID
        self.field = field
        self.code = code
        self.message = message
        self.permanent = permanent
    }

    public init(featureID: String?, field: String?, code: ErrorCode, message: String, permanent: Bool = false) {
        self.init(featureID: featureID, field: field, code: code.rawValue, message: message, permanent: permanent)
    }

    /// Whether this problem has `code`.
    public func `is`(_ code: ErrorCode) -> Bool { self.code == code.rawValue }

    enum CodingKeys: String, CodingKey { case featureID, field, code, message }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        featureID = try c.decodeIfPresent(String.self, forKey: .featureID)
        field = try c.decodeIfPresent(String.self, forKey: .field)
        code = try c.decode(String.self, forKey: .code)
        message = try c.decode(String.self, forKey: .message)
        permanent = false
    }

    public var description: String { message }
}
