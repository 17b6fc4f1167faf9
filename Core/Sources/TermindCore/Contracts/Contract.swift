import FoundationEssentials

/// A named, versioned request/response pair: the one definition of an operation that the
/// CLI, the control socket, MCP and plugins all reach. The JSON Schemas of `Request` and
/// `Response` are derived from their Codable shape and exported by `termind contracts`.
///
/// A new incompatible shape is a new version (`@2`) beside the old one, never an edit.
public protocol Contract: Sendable {
    associatedtype Request: Codable & Sendable
    associatedtype Response: Codable & Sendable
    /// Dotted lowercase name, owned by one feature (`kernel.features`).
    static var name: String { get }
    static var version: Int { get }
    /// One line for `termind contracts` and MCP tool lists.
    static var summary: String { get }
    /// What it does (read, write, destructive; network, secrets): the kernel's policy hook
    /// decides on it for calls made on someone's behalf.
    static var effect: Effect { get }
    /// What one request does, where that is less than `effect` (a listing through an
    /// operation that may also delete): the policy decides on this one. Never more than
    /// `effect`; by default `effect` itself.
    static func effect(of request: Request) -> Effect
    /// The hosts one request reaches, as it names them (a saved host's label or id, a
    /// quick-connect line, `tag:NAME`), for the policy to resolve; empty: none, or not known.
    static func hosts(in request: Request) -> [String]
}

extension Contract {
    public static var id: ContractID { ContractID(name: name, version: version) }
    public static func effect(of request: Request) -> Effect { effect }
    public static func hosts(in request: Request) -> [String] { [] }
}

/// What the kernel can tell the policy about one request body from its owner's types: what
/// it does (`effect(of:)`) and which hosts it reaches (`hosts(in:)`).
public struct RequestFacts: Sendable, Equatable {
    public let effect: Effect
    public let hosts: [String]
    public init(effect: Effect, hosts: [String]) {
        self.effect = effect
        self.hosts = hosts
    }

    /// The facts of a Swift request type, read from a body (nil when it does not decode).
    static func reader<R: Decodable & Sendable>(_ type: R.Type, effect: @escaping @Sendable (R) -> Effect, hosts: @escaping @Sendable (R) -> [String]) -> @Sendable (Data) -> RequestFacts? {
        { body in (try? JSONDecoder().decode(R.self, from: body.isEmpty ? Data("{}".utf8) : body)).map { RequestFacts(effect: effect($0), hosts: hosts($0)) } }
    }
}

/// An empty request or response body (`{}`).
public struct Empty: Codable, Sendable, Equatable, SchemaDescribable {
    public init() {}
    public static var schema: JSONSchema { .object([]) }
}


/// The type-erased form the kernel routes: JSON bytes in, JSON bytes out.
public struct ContractEndpoint: Sendable {
    public let id: ContractID
    public let summary: String
    public let owner: String
    /// What it does; nil when its owner did not say (a C plugin whose manifest names no
    /// effect for it), which the kernel treats as the worst: destructive, network, secrets.
    public let effect: Effect?
    /// What one request body does and which hosts it reaches (`Contract.effect(of:)`,
    /// `hosts(in:)`), for the policy; nil: `effect`, no hosts known.
    public let facts: (@Sendable (Data) -> RequestFacts?)?
    public var requestSchema: JSONSchema { request.schema }
    public var responseSchema: JSONSchema { response.schema }
    private let request: DeferredSchema
    private let response: DeferredSchema
    public let handler: @Sendable (Data, CallOrigin) async throws -> Data
    /// For Swift endpoints: the handler without JSON, used when an in-process caller uses
    /// the same request and response types (the type system already guarantees the shape).
    public let typed: TypedHandler?

    public struct TypedHandler: Sendable {
        public let requestType: ObjectIdentifier
        public let responseType: ObjectIdentifier
        /// `facts` of a request of `requestType` as it is, by the endpoint's own contract
        /// (never the caller's declaration of it), without encoding and decoding it first.
        public let facts: @Sendable (any Sendable) -> RequestFacts
        public let call: @Sendable (any Sendable, CallOrigin) async throws -> any Sendable
    }

    public init(id: ContractID, summary: String, owner: String, effect: Effect?, requestSchema: JSONSchema, responseSchema: JSONSchema,
                typed: TypedHandler? = nil,
                handler: @escaping @Sendable (Data, CallOrigin) async throws -> Data) {
        self.init(id: id, summary: summary, owner: owner, effect: effect, request: DeferredSchema(requestSchema), response: DeferredSchema(responseSchema),
                  typed: typed, handler: handler)
    }

    /// With schemas derived when first asked for.
    public init(id: ContractID, summary: String, owner: String, effect: Effect?, request: DeferredSchema, response: DeferredSchema,
                typed: TypedHandler? = nil, facts: (@Sendable (Data) -> RequestFacts?)? = nil,
                handler: @escaping @Sendable (Data, CallOrigin) async throws -> Data) {
        self.effect = effect
        self.facts = facts
        self.id = id
        self.summary = summary
        self.owner = owner
        self.request = request
        self.response = response
        self.typed = typed
        self.handler = handler
    }

    /// Wraps a typed handler: validates the body against the request schema (every
    /// problem named by field), decodes, calls, encodes.
    public static func typed<C: Contract>(_ contract: C.Type, owner: String,
                                          handler: @escaping @Sendable (C.Request, CallOrigin) async throws -> C.Response) -> ContractEndpoint {
        let requestSchema = DeferredSchema.of(C.Request.self)
        return ContractEndpoint(
            id: C.id, summary: C.summary, owner: owner, effect: C.effect,
            request: requestSchema,
            response: DeferredSchema.of(C.Response.self),
            typed: TypedHandler(requestType: ObjectIdentifier(C.Request.self), responseType: ObjectIdentifier(C.Response.self), facts: { request in
                let request = request as! C.Request
                return RequestFacts(effect: C.effect(of: request), hosts: C.hosts(in: request))
            }) { request, origin in
                try await handler(request as! C.Request, origin)
            },
            facts: RequestFacts.reader(C.Request.self, effect: C.effect(of:), hosts: C.hosts(in:))
        ) { body, origin in
            let request: C.Request = try ContractCoding.decodeRequest(body, schema: requestSchema.schema, contract: C.id)
            return try JSONCoding.encode(try await handler(request, origin))
        }
    }
}

/// The contract whose handler this task runs, where the kernel keeps it: around the
/// handlers of contracts that a feature's manifest names in `callsFrom`, so that a call it
/// makes only from those is refused from anywhere else.
public enum ServedContract {
    @TaskLocal package static var current: ContractID?
}

extension ContractEndpoint {
    /// This endpoint with its handlers run as serving it (`ServedContract.current`).
    package func markingServed() -> ContractEndpoint {
        let id = id, handler = handler
        let typed = typed.map { typed in
            TypedHandler(requestType: typed.requestType, responseType: typed.responseType, facts: typed.facts) { request, origin in
                try await ServedContract.$current.withValue(id) { try await typed.call(request, origin) }
            }
        }
        return ContractEndpoint(id: id, summary: summary, owner: owner, effect: effect, request: request, response: response, typed: typed,
                                facts: facts) { body, origin in
            try await ServedContract.$current.withValue(id) { try await handler(body, origin) }
        }
    }
}

public enum ContractCoding {
    /// Decodes a request body after checking it against `schema`, so a bad body gets a
    /// message naming each offending field instead of a decoder dump.
    public static func decodeRequest<T: Decodable>(_ body: Data, schema: JSONSchema, contract: ContractID) throws -> T {
        let value = body.isEmpty ? JSONValue.object([:]) : try JSONCoding.parse(body, source: "The request body for \(contract)")
        try check(value, schema, contract: contract.description)
        do {
            // The body is valid JSON matching the schema: decode it as it came.
            return try JSONDecoder().decode(T.self, from: body.isEmpty ? Data("{}".utf8) : body)
        } catch let DecodingError.dataCorrupted(context) {
            throw TermindError.badRequest("Invalid request for \(contract): \(path(context.codingPath)): \(context.debugDescription).")
        } catch {
            throw TermindError.badRequest("Invalid request for \(contract): the body does not match the contract's schema.")
        }
    }

    /// Refuses a request that does not match `schema`, naming each offending field (the
    /// first five).
    public static func check(_ value: JSONValue, _ schema: JSONSchema, contract: String) throws {
        let problems = schema.problems(in: value)
        guard problems.isEmpty else {
            throw TermindError.badRequest("Invalid request for \(contract): \(problems.prefix(5).joined(separator: "; "))\(problems.count > 5 ? "; …" : "").")
        }
    }

    static func path(_ keys: [any CodingKey]) -> String {
        (["body"] + keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }).joined(separator: ".")
    }
}
