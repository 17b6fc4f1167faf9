import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// What a client line addressed to a stream looks like (parsed once by the server).
enum StreamLine {
    /// `window`: the event bytes the client takes before it gives credit (absent: the
    /// default); `binary`: data events carry their bytes raw after the line; `descriptors`:
    /// the roles of the descriptors sent with the line (SCM_RIGHTS), nil when none were
    /// named, `[]` when the field is not a list of strings.
    case open(id: JSONValue, name: String, body: Data, window: Int, binary: Bool, descriptors: [String]?)
    case message(id: JSONValue, object: [String: JSONValue])

    /// nil when the line is an ordinary contract request (or something else).
    static func parse(_ value: JSONValue) -> StreamLine? {
        guard case .object(let o) = value, o["contract"] == nil else { return nil }
        let id = o["id"] ?? .null
        if case .string(let name)? = o["stream"] {
            let window: Int = if case .integer(let bytes)? = o["window"] { Int(clamping: bytes) } else { StreamSession.defaultWindow }
            var descriptors: [String]?
            if let field = o["descriptors"] {
                let roles: [String]? = if case .array(let items) = field { items.compactMap(\.stringValue).count == items.count ? items.compactMap(\.stringValue) : nil } else { nil }
                descriptors = roles ?? []
            }
            return .open(id: id, name: name, body: Envelope.body(of: o), window: window, binary: o["binary"] == .bool(true), descriptors: descriptors)
        }
        if o["answer"] != nil || o["credit"] != nil || o["input"] != nil || o["attached"] != nil || o["control"] != nil || o["inputEnd"] != nil || o["cancel"] != nil {
            return .message(id: id, object: o)
        }
        return nil
    }
}
