import Foundation
import TermindCore

/// What a client line addressed to a stream looks like (parsed once by the server).
enum StreamLine {
    case open(id: JSONValue, name: String, body: Data)
    case message(id: JSONValue, object: [String: JSONValue])

    /// nil when the line is an ordinary contract request (or something else).
    static func parse(_ value: JSONValue) -> StreamLine? {
        guard case .object(let o) = value, o["contract"] == nil else { return nil }
        let id = o["id"] ?? .null
        if case .string(let name)? = o["stream"] {
            return .open(id: id, name: name, body: Envelope.body(of: o))
        }
        if o["answer"] != nil || o["input"] != nil || o["inputEnd"] != nil || o["cancel"] != nil {
            return .message(id: id, object: o)
        }
        return nil
    }
}
