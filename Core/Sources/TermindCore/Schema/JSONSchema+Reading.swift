/// Reading a JSON Schema back into `JSONSchema`: the subset termind exports, so a C
/// plugin's manifest can declare the request and response of its contracts and have them
/// enforced like a Swift contract's. Objects with `properties` are closed (unknown fields
/// are errors, as for Swift contracts); an object without them is a map whose values
/// follow `additionalProperties` (any value when absent).
extension JSONSchema {
    static let readableKeywords = ["type", "properties", "required", "additionalProperties", "items", "enum", "format", "description", "title"]

    /// The schema `json` describes, or a problem naming the path (`request.properties.name`)
    /// and what is wrong.
    public static func read(_ json: JSONValue, at path: String) -> Result<JSONSchema, TermindError> {
        do throws(TermindError) { return .success(try reading(json, at: path)) } catch { return .failure(error) }
    }

    private static func problem(_ path: String, _ detail: String) -> TermindError {
        TermindError(.schemaInvalid, "\(path): \(detail)")
    }

    private static func reading(_ json: JSONValue, at path: String) throws(TermindError) -> JSONSchema {
        guard case .object(let o) = json else { throw problem(path, "a schema is a JSON object, not \(json.typeName)") }
        if let unknown = o.keys.sorted().first(where: { !readableKeywords.contains($0) }) {
            throw problem(path, "unsupported keyword '\(unknown)' (supported: \(readableKeywords.joined(separator: ", ")))")
        }
        for key in ["description", "title"] where o[key] != nil && o[key]?.stringValue == nil {
            throw problem("\(path).\(key)", "must be a string")
        }
        guard let typeValue = o["type"] else {
            guard o.keys.allSatisfy({ $0 == "description" || $0 == "title" }) else {
                throw problem(path, "a schema with keywords needs \"type\"")
            }
            return .any
        }
        guard let type = typeValue.stringValue else { throw problem("\(path).type", "must be one string (one of string, integer, number, boolean, array, object)") }
        func only(_ allowed: [String]) throws(TermindError) {
            let extra = o.keys.sorted().first { !(allowed + ["type", "description", "title"]).contains($0) }
            if let extra { throw problem(path, "keyword '\(extra)' does not apply to type \(type)") }
        }
        switch type {
        case "string":
            try only(["format", "enum"])
            if let values = o["enum"] {
                guard case .array(let cases) = values, !cases.isEmpty, cases.allSatisfy({ $0.stringValue != nil }) else {
                    throw problem("\(path).enum", "must be a non-empty array of strings")
                }
                return .enumeration(cases.compactMap(\.stringValue))
            }
            if let format = o["format"] {
                guard let text = format.stringValue else { throw problem("\(path).format", "must be a string") }
                return .string(format: text)
            }
            return .string()
        case "integer": try only([]); return .integer
        case "number": try only([]); return .number
        case "boolean": try only([]); return .boolean
        case "array":
            try only(["items"])
            guard let items = o["items"] else { return .array(.any) }
            return .array(try reading(items, at: "\(path).items"))
        case "object":
            try only(["properties", "required", "additionalProperties"])
            guard let propertiesValue = o["properties"] else {
                if o["required"] != nil { throw problem("\(path).required", "needs \"properties\"") }
                switch o["additionalProperties"] {
                case nil, .bool(true)?: return .dictionary(.any)
                case .bool(false)?: return .object([])
                case let values?: return .dictionary(try reading(values, at: "\(path).additionalProperties"))
                }
            }
            guard case .object(let properties) = propertiesValue else { throw problem("\(path).properties", "must be an object of schemas") }
            switch o["additionalProperties"] {
            case nil, .bool(false)?: break
            default: throw problem("\(path).additionalProperties", "an object with \"properties\" is closed: leave it out or set it to false")
            }
            var required: [String] = []
            if let requiredValue = o["required"] {
                guard case .array(let names) = requiredValue, names.allSatisfy({ $0.stringValue != nil }) else {
                    throw problem("\(path).required", "must be an array of property names")
                }
                required = names.compactMap(\.stringValue)
                if let missing = required.first(where: { properties[$0] == nil }) {
                    throw problem("\(path).required", "names '\(missing)', which is not under \"properties\"")
                }
            }
            var result: [Property] = []
            for name in properties.keys.sorted() {
                result.append(Property(name: name, schema: try reading(properties[name]!, at: "\(path).properties.\(name)"),
                                       required: required.contains(name)))
            }
            return .object(result)
        default:
            throw problem("\(path).type", "'\(type)' is not one of string, integer, number, boolean, array, object")
        }
    }
}
