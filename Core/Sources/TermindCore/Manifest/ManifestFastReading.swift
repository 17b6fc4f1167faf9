/// A manifest read straight from its parsed value when it is exactly right: every field one
/// the manifest knows, each of its type, no null. That is every manifest termind ships and
/// almost every plugin's, and it costs no schema derivation and no `Decodable` machinery,
/// whose first use of each type in a process (a scan of every loaded library's conformance
/// records per type) was most of a one-shot command's reading of Registry.json. Anything
/// else gives nil, and `ManifestReader` takes the path that names each problem (the schema
/// derived from the `Codable` type, then the decoder). `ManifestFastReadingTests` holds the
/// two to the same manifest for every field and refuses here whatever they refuse.
extension FeatureManifest {
    public init?(exactly value: JSONValue) {
        do {
            var o = try ManifestFields(value)
            let id = try o.required("id", ManifestFields.string), version = try o.required("version", ManifestFields.string)
            let abi = try o.required("abi", ManifestFields.integer), kind = try o.optional("kind", ManifestFields.enumeration(Kind.self)) ?? .swift
            let library = try o.required("library", ManifestFields.string), order = try o.optional("order", ManifestFields.integer) ?? 100
            let permanent = try o.optional("permanent", ManifestFields.bool) ?? false
            let dependencies = try o.optional("dependencies", ManifestFields.object { d in
                Dependencies(required: try d.optional("required", ManifestFields.strings) ?? [], optional: try d.optional("optional", ManifestFields.strings) ?? [])
            }) ?? .init()
            let ports = try o.optional("ports", ManifestFields.object { p in
                Ports(provides: try p.optional("provides", ManifestFields.strings) ?? [], requires: try p.optional("requires", ManifestFields.strings) ?? [],
                      optional: try p.optional("optional", ManifestFields.strings) ?? [])
            }) ?? .init()
            let contracts = try o.optional("contracts", ManifestFields.strings) ?? [], streams = try o.optional("streams", ManifestFields.strings) ?? []
            let calls = try o.optional("calls", ManifestFields.strings) ?? []
            let functions = try o.optional("functions", ManifestFields.array(ManifestFields.object(Self.function))) ?? []
            let commands = try o.optional("commands", ManifestFields.array(ManifestFields.object(Self.command))) ?? []
            let schemas = try o.optional("schemas", ManifestFields.map(ManifestFields.object(Self.contractSchemas))) ?? [:]
            let libraryOutsidePlugin = try o.optional("libraryOutsidePlugin", ManifestFields.bool) ?? false
            let summary = try o.optional("summary", ManifestFields.string)
            self.init(id: id, version: version, abi: abi, kind: kind, library: library, order: order, permanent: permanent, dependencies: dependencies,
                      ports: ports, contracts: contracts, streams: streams, calls: calls, functions: functions, commands: commands, schemas: schemas,
                      libraryOutsidePlugin: libraryOutsidePlugin, summary: summary)
            callsFrom = try o.optional("callsFrom", ManifestFields.map(ManifestFields.strings)) ?? [:]
            isolation = try o.optional("isolation", ManifestFields.enumeration(Isolation.self))
            access = try o.optional("access", ManifestFields.object { a in
                Access(read: try a.optional("read", ManifestFields.strings) ?? [], write: try a.optional("write", ManifestFields.strings) ?? [],
                       tcp: try a.optional("tcp", ManifestFields.bool) ?? false)
            })
            limits = try o.optional("limits", ManifestFields.object { l in
                Limits(memoryMiB: try l.optional("memoryMiB", ManifestFields.integer), openFiles: try l.optional("openFiles", ManifestFields.integer),
                       callSeconds: try l.optional("callSeconds", ManifestFields.integer))
            })
            help = try o.optional("help", ManifestFields.object { h in
                HelpGroup(title: try h.required("title", ManifestFields.string), rank: try h.optional("rank", ManifestFields.integer))
            })
            effects = try o.optional("effects", ManifestFields.map(ManifestFields.string)) ?? [:]
            serveOptions = try o.optional("serveOptions", ManifestFields.array(ManifestFields.object { s in
                ServeOption(name: try s.required("name", ManifestFields.string), value: try s.required("value", ManifestFields.string),
                            summary: try s.required("summary", ManifestFields.string))
            })) ?? []
            commandsNeedConsumersOf = try o.optional("commandsNeedConsumersOf", ManifestFields.strings) ?? []
            settingsRecords = try o.optional("settingsRecords", ManifestFields.strings) ?? []
            try o.end()
        } catch {
            return nil
        }
    }

    private static func function(_ f: inout ManifestFields) throws -> Function {
        Function(name: try f.required("name", ManifestFields.string), symbol: try f.required("symbol", ManifestFields.string),
                 signature: try f.required("signature", ManifestFields.string), summary: try f.optional("summary", ManifestFields.string))
    }

    private static func contractSchemas(_ s: inout ManifestFields) throws -> ContractSchemas {
        ContractSchemas(request: try s.optional("request", ManifestFields.any), response: try s.optional("response", ManifestFields.any),
                        acceptsInput: try s.optional("acceptsInput", ManifestFields.bool), events: try s.optional("events", ManifestFields.map(ManifestFields.any)),
                        questions: try s.optional("questions", ManifestFields.map(ManifestFields.string)))
    }

    private static func command(_ c: inout ManifestFields) throws -> Command {
        var command = Command(name: try c.required("name", ManifestFields.string), contract: try c.optional("contract", ManifestFields.string),
                              stream: try c.optional("stream", ManifestFields.string), arguments: try c.required("arguments", ManifestFields.strings),
                              paths: try c.optional("paths", ManifestFields.strings), secrets: try c.optional("secrets", ManifestFields.strings),
                              workingDirectory: try c.optional("workingDirectory", ManifestFields.string), terminal: try c.optional("terminal", ManifestFields.string),
                              output: try c.optional("output", ManifestFields.string), summary: try c.optional("summary", ManifestFields.string),
                              help: try c.optional("help", ManifestFields.strings), flags: try c.optional("flags", ManifestFields.map(ManifestFields.string)),
                              options: try c.optional("options", ManifestFields.map(ManifestFields.string)), values: try c.optional("values", ManifestFields.map(ManifestFields.any)),
                              environment: try c.optional("environment", ManifestFields.map(ManifestFields.string)))
        command.columns = try c.optional("columns", ManifestFields.strings)
        command.stopsOptions = try c.optional("stopsOptions", ManifestFields.bool)
        command.quietResult = try c.optional("quietResult", ManifestFields.bool)
        command.interactive = try c.optional("interactive", ManifestFields.string)
        command.interruptible = try c.optional("interruptible", ManifestFields.bool)
        return command
    }
}

/// One JSON object read field by field: a field of the wrong type, or null, throws; so does
/// `end` when the object holds a field nobody asked for.
private struct ManifestFields {
    struct Mismatch: Error {}
    let fields: [String: JSONValue]
    private var asked = 0

    init(_ value: JSONValue) throws {
        guard case .object(let fields) = value else { throw Mismatch() }
        self.fields = fields
    }

    mutating func optional<T>(_ key: String, _ read: (JSONValue) throws -> T) throws -> T? {
        guard let value = fields[key] else { return nil }
        guard value != .null else { throw Mismatch() }
        asked += 1
        return try read(value)
    }

    mutating func required<T>(_ key: String, _ read: (JSONValue) throws -> T) throws -> T {
        guard let value = try optional(key, read) else { throw Mismatch() }
        return value
    }

    func end() throws {
        guard asked == fields.count else { throw Mismatch() }
    }

    /// A nested object, read by `read` and then held to `end`.
    static func object<T>(_ read: @escaping (inout ManifestFields) throws -> T) -> (JSONValue) throws -> T {
        { value in
            var fields = try ManifestFields(value)
            let result = try read(&fields)
            try fields.end()
            return result
        }
    }

    static func string(_ value: JSONValue) throws -> String {
        guard let text = value.stringValue else { throw Mismatch() }
        return text
    }
    static func bool(_ value: JSONValue) throws -> Bool {
        guard case .bool(let flag) = value else { throw Mismatch() }
        return flag
    }
    static func integer(_ value: JSONValue) throws -> Int {
        switch value {
        case .integer(let number): if let result = Int(exactly: number) { return result }
        case .unsignedInteger(let number): if let result = Int(exactly: number) { return result }
        default: break
        }
        throw Mismatch()
    }
    static func any(_ value: JSONValue) throws -> JSONValue { value }
    static func strings(_ value: JSONValue) throws -> [String] { try array(string)(value) }
    static func array<T>(_ read: @escaping (JSONValue) throws -> T) -> (JSONValue) throws -> [T] {
        { value in
            guard case .array(let items) = value else { throw Mismatch() }
            return try items.map(read)
        }
    }
    static func map<T>(_ read: @escaping (JSONValue) throws -> T) -> (JSONValue) throws -> [String: T] {
        { value in
            guard case .object(let fields) = value else { throw Mismatch() }
            return try fields.mapValues(read)
        }
    }
    static func enumeration<E: RawRepresentable>(_ type: E.Type) -> (JSONValue) throws -> E where E.RawValue == String {
        { value in
            guard let result = E(rawValue: try string(value)) else { throw Mismatch() }
            return result
        }
    }
}
