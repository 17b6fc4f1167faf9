import AssistantAPI
import AssistantRules
import CurlHTTP
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindCrypto

/// A model ready to be asked: where its provider is, its own name there, what it can do,
/// and how to get its credential (read when a request goes out, never kept).
struct ResolvedModel: Sendable {
    /// The model id people chose (or `provider/model` when named directly).
    let id: String
    let provider: String
    let address: ProviderAddress
    let model: String
    let tools: Bool
    let maxOutputTokens: Int?
    /// How many tokens the model takes in (nil: not said; the conversation is never condensed).
    var contextTokens: Int? = nil
    let credential: @Sendable () async throws -> Credential
}

enum Credential: Sendable {
    case anonymous
    case key(Secret)
    /// Vertex: the service account's JSON.
    case serviceAccount(Secret)
}

/// Why a model request failed, and whether sending it again may help.
struct ModelFailure: Error, Sendable, TermindErrorConvertible {
    let error: TermindError
    let transient: Bool
    /// The server's Retry-After, in seconds.
    let retryAfter: Double?
    var termindError: TermindError { error }
}

/// Sends one streamed request to a model and reads its answer: deltas as they arrive, the
/// outcome once the body ends. HTTP errors are classified here (transient or not, the
/// server's Retry-After), and no message quotes a response body unscrubbed.
struct ModelClient: Sendable {
    let http: HTTPClient
    let tokens: VertexTokens

    /// The answer to `request`; `onDelta` sees text and tool-call starts as they arrive.
    func stream(_ request: ModelRequest, with model: ResolvedModel, onDelta: @escaping @Sendable (StreamDelta) async -> Void) async throws -> TurnOutcome {
        let (headers, secrets) = try await authorization(model)
        let body = try JSONCoding.encode(WireBody.body(request, model.address.modelProtocol))
        let wire = HTTPRequest(url: model.address.streamURL(model: model.model),
                               headers: [HTTPHeader("Content-Type", "application/json")] + model.address.protocolHeaders.map { HTTPHeader($0.0, $0.1) } + headers,
                               body: body, connectTimeout: 15, idleTimeout: 120)
        let response: HTTPResponse
        do {
            response = try await http.send(wire)
        } catch let failure as HTTPFailure {
            // Nothing of an answer was seen: safe to send again (a connection refused, reset,
            // a deadline before the head).
            throw ModelFailure(error: TermindError(.assistantProviderFailed, "\(model.provider): \(failure.message)"),
                               transient: failure.code != HTTPErrorCode.badURL && failure.code != HTTPErrorCode.tls && failure.code != HTTPErrorCode.redirect && failure.code != HTTPErrorCode.cancelled,
                               retryAfter: nil)
        }
        guard response.head.status == 200 else { throw try await failure(response, model: model, secrets: secrets) }
        var reader = SSEReader()
        var parser: any StreamParser = switch model.address.modelProtocol {
        case .responses: ResponsesParser()
        case .chat: ChatParser()
        case .anthropic: AnthropicParser()
        case .gemini, .vertex: GeminiParser()
        }
        do {
            reading: while let piece = try await response.next() {
                let events: [SSEEvent]
                do { events = try reader.feed(piece) } catch {
                    response.cancel()
                    throw ModelFailure(error: TermindError(.assistantIncomplete, "\(model.provider)'s answer was refused: \(error.description)."), transient: false, retryAfter: nil)
                }
                for event in events {
                    let deltas: [StreamDelta]
                    do { deltas = try parser.consume(event) } catch {
                        response.cancel()
                        break reading
                    }
                    for delta in deltas { await onDelta(delta) }
                }
            }
        } catch let failure as HTTPFailure {
            if failure.code == HTTPErrorCode.cancelled { throw CancellationError() }
            // The stream broke after it began: what came is incomplete and discarded; the
            // same request may go again.
            throw ModelFailure(error: TermindError(.assistantIncomplete, "\(model.provider)'s answer broke off: \(failure.message)"),
                               transient: failure.code != HTTPErrorCode.tooLarge, retryAfter: nil)
        }
        return parser.outcome()
    }

    /// The auth headers for a request to `model` and the secrets they hold (to scrub from
    /// anything the server says back).
    private func authorization(_ model: ResolvedModel) async throws -> (headers: [HTTPHeader], secrets: [String]) {
        switch try await model.credential() {
        case .anonymous:
            return ([], [])
        case .key(let key):
            let text = key.withPlaintext { $0 }
            return (model.address.authHeaders(text).map { HTTPHeader($0.0, $0.1) }, [text])
        case .serviceAccount(let account):
            let token = try await tokens.token(for: account, provider: model.provider, http: http)
            return (model.address.authHeaders(token).map { HTTPHeader($0.0, $0.1) }, [token])
        }
    }

    /// A non-200 answer as an error: its status, the provider's error code and a scrubbed,
    /// short message; transient for 408, 409, 429, 5xx and 529 unless the code says a budget
    /// is spent.
    private func failure(_ response: HTTPResponse, model: ResolvedModel, secrets: [String]) async throws -> ModelFailure {
        let status = response.head.status
        let body = (try? await response.body(limit: 64 << 10)) ?? Data()
        response.cancel()
        let (code, message) = Redaction.providerError(in: body)
        let said = message.map { ": " + Redaction.scrub($0, secrets: secrets) } ?? ""
        let what = code.map { " (\(Redaction.scrub($0, secrets: secrets, limit: 60)))" } ?? ""
        let hint = status == 401 || status == 403 ? " Check the provider's key: termind assistant provider edit \(model.provider) --key -." : ""
        return ModelFailure(error: TermindError(.assistantProviderFailed, "\(model.provider) answered HTTP \(status)\(what)\(said).\(hint)"),
                            transient: RetryRule.isTransient(status: status, code: code), retryAfter: response.head.retryAfter())
    }

    /// The models a provider lists (GET …/models), with its credential.
    func models(_ model: ResolvedModel) async throws -> [String] {
        guard let url = model.address.modelsURL else { return [] }
        let (headers, secrets) = try await authorization(model)
        let response = try await http.send(HTTPRequest(method: "GET", url: url, headers: model.address.protocolHeaders.map { HTTPHeader($0.0, $0.1) } + headers,
                                                       connectTimeout: 15, idleTimeout: 30))
        guard response.head.status == 200 else { throw try await failure(response, model: model, secrets: secrets).error }
        let body = try await response.body(limit: 4 << 20)
        let listing = try JSONCoding.parse(body, source: "\(model.provider)'s model list")
        return ProviderAddress.modelNames(in: listing)
    }
}

/// Vertex access tokens: a JWT signed with the service account's key (RS256, OpenSSL)
/// exchanged at its token URL, kept in memory until a minute before it expires.
actor VertexTokens {
    private var cached: [String: (token: String, expires: Date)] = [:]

    /// The token URLs a service account may name: Google's, or this machine's own (a
    /// token service you run locally, and the tests').
    static func allowed(_ url: String) -> Bool {
        guard let parsed = HTTPURL(url) else { return false }
        if parsed.scheme == "https" && ["oauth2.googleapis.com", "accounts.google.com", "www.googleapis.com"].contains(parsed.host) { return true }
        return ["127.0.0.1", "::1", "localhost"].contains(parsed.host)
    }

    /// The fields of a service account's JSON that termind needs, checked.
    struct Account: Sendable {
        let email: String
        let keyID: String?
        let privateKey: Secret
        let tokenURL: String
    }

    static func account(_ json: Secret) throws -> Account {
        try json.withPlaintext { text in
            guard let object = try? JSONCoding.parse(Data(text.utf8), source: "the service account file"), case .object = object else {
                throw TermindError(.assistantInvalid, "The service account file is not JSON.")
            }
            guard object["type"]?.stringValue == "service_account" else {
                throw TermindError(.assistantInvalid, "The file is not a service account key (its \"type\" is not \"service_account\").")
            }
            guard let email = object["client_email"]?.stringValue, !email.isEmpty, let key = object["private_key"]?.stringValue, !key.isEmpty else {
                throw TermindError(.assistantInvalid, "The service account key lacks client_email or private_key.")
            }
            let tokenURL = object["token_uri"]?.stringValue ?? "https://oauth2.googleapis.com/token"
            guard allowed(tokenURL) else {
                throw TermindError(.assistantInvalid, "The service account's token_uri (\(HTTPURL(tokenURL)?.origin ?? "not a URL")) is not Google's token service; termind does not send a signed assertion there.")
            }
            return Account(email: email, keyID: object["private_key_id"]?.stringValue, privateKey: Secret(key), tokenURL: tokenURL)
        }
    }

    func token(for json: Secret, provider: String, http: HTTPClient) async throws -> String {
        let account = try Self.account(json)
        let cacheKey = provider + "\n" + account.email
        if let cached = cached[cacheKey], cached.expires > Date().addingTimeInterval(60) { return cached.token }
        let now = Int(Date().timeIntervalSince1970)
        var header: [String: JSONValue] = ["alg": .string("RS256"), "typ": .string("JWT")]
        if let kid = account.keyID { header["kid"] = .string(kid) }
        let claims: JSONValue = .object(["iss": .string(account.email), "scope": .string("https://www.googleapis.com/auth/cloud-platform"),
                                         "aud": .string(account.tokenURL), "iat": .integer(Int64(now)), "exp": .integer(Int64(now + 3600))])
        let signingInput = try JSONCoding.encode(JSONValue.object(header)).base64URLEncoded + "." + JSONCoding.encode(claims).base64URLEncoded
        let signature = try PEMSignature.rs256(Data(signingInput.utf8), key: account.privateKey)
        let assertion = signingInput + "." + signature.base64URLEncoded
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion
        let response: HTTPResponse
        do {
            response = try await http.send(HTTPRequest(url: account.tokenURL, headers: [HTTPHeader("Content-Type", "application/x-www-form-urlencoded")],
                                                       body: Data(form.utf8), connectTimeout: 15, idleTimeout: 30))
        } catch let failure as HTTPFailure {
            throw ModelFailure(error: TermindError(.assistantProviderFailed, "\(provider): the service account's token could not be fetched: \(failure.message)"),
                               transient: failure.beforeResponse, retryAfter: nil)
        }
        let body = try await response.body(limit: 64 << 10)
        guard response.head.status == 200, let object = try? JSONCoding.parse(body, source: "the token service's answer"),
              let token = object["access_token"]?.stringValue, !token.isEmpty else {
            let (code, message) = Redaction.providerError(in: body)
            let said = [code, message].compactMap { $0 }.map { Redaction.scrub($0, secrets: [assertion]) }.joined(separator: ": ")
            throw ModelFailure(error: TermindError(.assistantProviderFailed, "\(provider): the token service refused the service account (HTTP \(response.head.status)\(said.isEmpty ? "" : ", " + said))."),
                               transient: RetryRule.isTransient(status: response.head.status, code: code), retryAfter: response.head.retryAfter())
        }
        let lifetime: Double = switch object["expires_in"] {
        case .integer(let seconds)?: Double(seconds)
        case .double(let seconds)?: seconds
        default: 3600
        }
        cached[cacheKey] = (token, Date().addingTimeInterval(lifetime))
        return token
    }
}
