import Foundation
import Synchronization
import SFTPAPI
import TermindCore

/// Test fixture: a feature that calls and runs other features' operations — as itself or on
/// an agent's behalf — and reports what the kernel let it do and who each call was for.
public enum AgentChain: Contract {
    public typealias Request = Empty
    public struct Response: Codable, Sendable { public var chain: [Caller]; public var served: [Caller]? }
    public static let name = "fixture-agent.chain"
    public static let version = 1
    public static let summary = "Who this call is for (test fixture)."
    public static let effect: Effect = .read
}

public enum AgentRelay: Contract {
    public struct Request: Codable, Sendable {
        public var contract: String
        public var body: String
        /// On an agent's behalf (`actingForAgent`), with this detail.
        public var agent: String?
        /// A stream instead of a contract: its events' kinds come back.
        public var stream: Bool?
        public var input: String?
    }
    public struct Response: Codable, Sendable {
        public var reply: String?
        public var events: [String]?
        /// What the stream wrote on standard output.
        public var output: String?
        public var errorCode: String?
        public var errorMessage: String?
        public var errorDetails: JSONValue?
    }
    public static let name = "fixture-agent.relay"
    public static let version = 1
    public static let summary = "Call or run another operation as this feature, maybe for an agent (test fixture)."
    public static let effect: Effect = .destructive
}

/// The same as a stream: what it runs may ask questions, which go to this stream's client.
public enum AgentRun: StreamContract {
    public typealias Request = AgentRelay.Request
    public typealias Result = AgentRelay.Response
    public static let name = "fixture-agent.run"
    public static let version = 1
    public static let summary = "Run another operation from inside a stream, maybe for an agent (test fixture)."
    public static let effect: Effect = .destructive
    public static var events: [String: JSONSchema] { ["notice": StreamEvents.notice] }
    public static let questions = ["fixture.confirm": "confirm", "ssh.hostKey": "choice"]
}

/// Queues one transfer through the SFTP scheduler's port (`sftp.scheduler`) and reports
/// the progress events it saw and the result.
public enum AgentTransfer: Contract {
    public typealias Request = SFTPStreams.Transfer.Request
    public struct Response: Codable, Sendable { public var events: [String]; public var progress: [Int64]; public var result: String }
    public static let name = "fixture-agent.transfer"
    public static let version = 1
    public static let summary = "A transfer through the SFTP scheduler's port (test fixture)."
    public static let effect: Effect = Effect(.destructive, network: true)
}

final class AgentFeature: Feature {
    private let context = Mutex<FeatureContext?>(nil)

    func register(_ registrar: FeatureRegistrar) throws {
        registrar.handle(AgentChain.self) { _, origin in
            .init(chain: origin.chain, served: CallOrigin.serving.chain)
        }
        registrar.handle(AgentRelay.self) { [self] request, _ in try await relay(request) }
        registrar.handle(AgentTransfer.self) { [self] request, _ in
            guard let context = context.withLock({ $0 }) else { throw TermindError(code: "fixture.not_started", message: "not started") }
            let scheduler = try context.ports.require(.sftpScheduler)
            let seen = Mutex<(kinds: [String], done: [Int64])>(([], []))
            let result = try await context.withSession(onEvent: { event in
                seen.withLock { seen in
                    seen.kinds.append(event.kind ?? "?")
                    if event.kind == "progress", case .integer(let done)? = event["done"] { seen.done.append(done) }
                }
            }) { session in
                try await scheduler.transfer(request, session: session)
            }
            let text = String(decoding: try JSONCoding.encode(result), as: UTF8.self)
            return seen.withLock { .init(events: $0.kinds, progress: $0.done, result: text) }
        }
        registrar.stream(AgentRun.self) { [self] request, _ in try await relay(request) }
    }

    private func relay(_ request: AgentRelay.Request) async throws -> AgentRelay.Response {
        guard let context = context.withLock({ $0 }), let id = ContractID(parsing: request.contract) else {
            return .init(errorCode: "fixture.bad_request")
        }
        let events = Mutex<[String]>([])
        let run: @Sendable () async throws -> AgentRelay.Response = {
            if request.stream == true {
                let output = Mutex(Data())
                let reply = try await context.runStream(id, Data(request.body.utf8), request.input.map { Data($0.utf8) }) { event in
                    events.withLock { $0.append(event.kind ?? "?") }
                    if event.kind == "stdout", let data = event.data { output.withLock { $0.append(data) } }
                }
                return .init(reply: String(decoding: reply, as: UTF8.self), events: events.withLock { $0 },
                             output: String(decoding: output.withLock { $0 }, as: UTF8.self))
            }
            let reply = try await context.call(id, Data(request.body.utf8))
            return .init(reply: String(decoding: reply, as: UTF8.self))
        }
        do {
            if let agent = request.agent { return try await context.actingForAgent(agent) { try await run() } }
            return try await run()
        } catch {
            let error = TermindError.from(error)
            return .init(events: events.withLock { $0 }, errorCode: error.code, errorMessage: error.message, errorDetails: error.details)
        }
    }

    func start(_ context: FeatureContext) async throws {
        self.context.withLock { $0 = context }
    }
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "fixture-agent", version: "1.0.0", signature: TermindLibrary.signature) { AgentFeature() }
}
