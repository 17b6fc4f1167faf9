import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// termind's HTTP client: libcurl (TLS with the system's trust store, `https_proxy`,
/// `http_proxy` and `no_proxy` from the environment as curl reads them) on one engine
/// thread, response bodies read as they arrive with backpressure (curl stops reading the
/// socket while the reader is behind), cancellation that closes the connection, connect
/// and idle deadlines. Redirects are followed here, not by curl, so each hop is checked:
/// never from https to http, credentials never sent to another origin, and `rule` may
/// refuse any hop.
public struct HTTPClient: Sendable {
    /// Decides on one redirect hop (from, to): throw to refuse it.
    public typealias RedirectRule = @Sendable (HTTPURL, HTTPURL) throws -> Void

    private let logger: Logger?

    public init(logger: Logger? = nil) {
        self.logger = logger
    }

    /// Sends `request` and returns once the final response's head arrived; read its body
    /// with `next()`. Follows up to `HTTPLimits.redirects` redirects: 307 and 308 for any
    /// method (body kept), 301, 302 and 303 for GET only.
    /// Chooses the address a hop connects to (its URL's host resolved and checked): throw to
    /// refuse the hop.
    public typealias PinRule = @Sendable (HTTPURL) async throws -> String

    public func send(_ request: HTTPRequest, rule: RedirectRule? = nil, pin: PinRule? = nil) async throws -> HTTPResponse {
        var current = request
        for hop in 0...HTTPLimits.redirects {
            if let pin, let url = HTTPURL(current.url) { current.pinned = try await pin(url) }
            log(current)
            let transfer = try Transfer(current)
            let head = try await transfer.start()
            let response = HTTPResponse(head: head, transfer: transfer)
            logger?.debug("http.response", ["status": .int(head.status), "origin": .identifier(HTTPURL(current.url)?.host ?? "")])
            guard [301, 302, 303, 307, 308].contains(head.status), let location = head.value("location") else { return response }
            response.cancel()
            guard hop < HTTPLimits.redirects else {
                throw HTTPFailure(HTTPErrorCode.redirect, "\(request.origin) redirected more than \(HTTPLimits.redirects) times; termind stopped following.", beforeResponse: true)
            }
            current = try redirect(current, status: head.status, location: location, rule: rule)
        }
        throw HTTPFailure(HTTPErrorCode.redirect, "\(request.origin) redirected too often.", beforeResponse: true)
    }

    /// The next request of a redirect, or why it is not followed.
    package func redirect(_ request: HTTPRequest, status: Int, location: String, rule: RedirectRule?) throws -> HTTPRequest {
        guard let from = HTTPURL(request.url), let resolved = URL(string: location, relativeTo: URL(string: request.url))?.absoluteString,
              let to = HTTPURL(resolved) else {
            throw HTTPFailure(HTTPErrorCode.redirect, "\(request.origin) redirected (\(status)) to something that is not an http(s) URL; termind did not follow.", beforeResponse: true)
        }
        if from.scheme == "https" && to.scheme == "http" {
            throw HTTPFailure(HTTPErrorCode.redirect, "\(request.origin) redirected (\(status)) from https to plain http (\(to.origin)); termind does not follow that.", beforeResponse: true)
        }
        var next = request
        next.url = resolved
        if status == 301 || status == 302 || status == 303 {
            guard request.method == "GET" else {
                throw HTTPFailure(HTTPErrorCode.redirect, "\(request.origin) answered \(request.method) with a \(status) redirect to \(to.origin), which would drop the request's body; "
                                  + "set the URL to where it points.", beforeResponse: true)
            }
        }
        // Credentials go to the origin they were given for, never further.
        if from.origin != to.origin { next.headers.removeAll { $0.isSensitive } }
        try rule?(from, to)
        logger?.debug("http.redirect", ["status": .int(status), "to": .identifier(to.host)])
        return next
    }

    /// `--debug`: the method, the host and the header names; never a header's value, the
    /// path, the query or the body.
    private func log(_ request: HTTPRequest) {
        guard let logger, logger.isEnabled(.debug) else { return }
        let names = request.headers.map { $0.isSensitive ? "\($0.name.lowercased()):redacted" : $0.name.lowercased() }.joined(separator: "+")
        logger.debug("http.request", ["method": .identifier(request.method), "host": .identifier(HTTPURL(request.url)?.host ?? ""),
                                      "headers": .identifier(names), "bytes": .int(request.body?.count ?? 0)])
    }
}

/// A response whose head arrived: its body is read piece by piece as the server sends it.
/// Dropping it (or cancelling the task reading it) ends the request and closes its
/// connection.
public final class HTTPResponse: Sendable {
    public let head: HTTPHead
    private let transfer: Transfer

    init(head: HTTPHead, transfer: Transfer) {
        self.head = head
        self.transfer = transfer
    }

    /// The next piece of the body as it arrived; nil at its end.
    public func next() async throws -> Data? { try await transfer.next() }

    /// The whole body (at most `limit` bytes: more is `http.too_large`).
    public func body(limit: Int = HTTPLimits.response) async throws -> Data {
        var data = Data()
        while let piece = try await next() {
            guard data.count + piece.count <= limit else {
                cancel()
                throw HTTPFailure(HTTPErrorCode.tooLarge, "The response from \(transfer.origin) is larger than \(limit) bytes; it was refused.", beforeResponse: false)
            }
            data.append(piece)
        }
        return data
    }

    public func cancel() { transfer.cancel() }

    deinit { transfer.cancel() }
}
