import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// The control socket's wire format: one JSON object per line (NDJSON), in both directions.
///
///     → {"id": 1, "contract": "kernel.features@1", "body": {}}
///     ← {"id": 1, "ok": true, "body": {...}}
///     ← {"id": 1, "ok": false, "error": {"code": "contract.unknown", "message": "..."}}
///
/// `id` is any JSON value chosen by the client and echoed back; replies on one connection
/// may arrive out of order when requests are pipelined.
public enum Envelope {
    /// Upper bound for one request line; larger ones get `envelope.too_large` and are skipped.
    public static let maximumBytes = 4 << 20

    /// A request line that could not be routed, with whatever id could be read from it.
    public struct RejectedRequest: Error, Sendable {
        public var id: JSONValue
        public var error: TermindError
    }

    public struct Request: Sendable {
        public var id: JSONValue
        public var contract: String
        public var body: Data
    }

    /// Parses a request line. On failure returns the error and whatever id could be read.
    public static func parseRequest(_ line: Data) -> Result<Request, RejectedRequest> {
        parseJSON(line).flatMap(parseRequest)
    }

    /// A line as JSON, or the `envelope.malformed` rejection.
    static func parseJSON(_ line: Data) -> Result<JSONValue, RejectedRequest> {
        do { return .success(try JSONCoding.parse(line, source: "The envelope")) } catch let e as TermindError {
            return .failure(RejectedRequest(id: .null, error: TermindError(.envelopeMalformed, e.message)))
        } catch {
            return .failure(RejectedRequest(id: .null, error: TermindError(.envelopeMalformed, "The envelope is not valid JSON.")))
        }
    }

    /// A parsed line as a contract request.
    static func parseRequest(_ value: JSONValue) -> Result<Request, RejectedRequest> {
        guard case .object(let o) = value else {
            return .failure(RejectedRequest(id: .null, error: TermindError(.envelopeMalformed, "The envelope must be a JSON object with \"contract\" and \"body\", not \(value.typeName).")))
        }
        let id = o["id"] ?? .null
        guard case .string(let contract)? = o["contract"] else {
            return .failure(RejectedRequest(id: id, error: TermindError(.envelopeMalformed, "The envelope has no \"contract\" string (e.g. \"kernel.features@1\").")))
        }
        if let unknown = o.keys.sorted().first(where: { !["id", "contract", "body"].contains($0) }) {
            return .failure(RejectedRequest(id: id, error: TermindError(.envelopeMalformed, "The envelope has an unknown field \"\(unknown)\"; allowed: id, contract, body.")))
        }
        return .success(Request(id: id, contract: contract, body: body(of: o)))
    }

    /// An envelope's "body" as JSON bytes ({} when absent or null).
    static func body(of object: [String: JSONValue]) -> Data {
        switch object["body"] {
        case nil, .null?: Data("{}".utf8)
        case let b?: (try? JSONCoding.encode(b)) ?? Data("{}".utf8)
        }
    }

    public static func encodeRequest(id: JSONValue, contract: String, body: Data) -> Data {
        var line = Data("{\"id\":".utf8)
        line += (try? JSONCoding.encode(id)) ?? Data("null".utf8)
        line += Data(",\"contract\":".utf8)
        line += (try? JSONCoding.encode(contract)) ?? Data("\"\"".utf8)
        line += Data(",\"body\":".utf8)
        line += body.isEmpty ? Data("{}".utf8) : body
        line += Data("}\n".utf8)
        return line
    }

    public static func success(id: JSONValue, body: Data) -> Data {
        var line = Data("{\"id\":".utf8)
        line += (try? JSONCoding.encode(id)) ?? Data("null".utf8)
        line += Data(",\"ok\":true,\"body\":".utf8)
        line += body
        line += Data("}\n".utf8)
        return line
    }

    public static func failure(id: JSONValue, error: TermindError) -> Data {
        struct Failure: Encodable { let id: JSONValue; let ok = false; let error: TermindError }
        var line = (try? JSONCoding.encode(Failure(id: id, error: error))) ?? Data("{\"ok\":false}".utf8)
        line += Data("\n".utf8)
        return line
    }

    /// A parsed reply: either the raw body or the error.
    public static func parseReply(_ line: Data) throws -> (id: JSONValue, result: Result<Data, TermindError>) {
        let value = try JSONCoding.parse(line, source: "The server's reply")
        guard case .object(let o) = value, case .bool(let ok)? = o["ok"] else {
            throw TermindError(.envelopeMalformed, "The server's reply is not a termind envelope.")
        }
        let id = o["id"] ?? .null
        if ok { return (id, .success(try JSONCoding.encode(o["body"] ?? .null))) }
        let error = o["error"]
        return (id, .failure(TermindError(code: error?["code"]?.stringValue ?? ErrorCode.unknown.rawValue, message: error?["message"]?.stringValue ?? "The server reported an error without a message.",
                                          details: error?["details"])))
    }
}
