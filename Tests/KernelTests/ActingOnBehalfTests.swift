import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import Synchronization
import XCTest

/// Acting on someone's behalf: every call and stream carries its caller chain; a feature
/// runs another feature's stream through the kernel (questions up the chain, never
/// answered by anyone else); and a call whose chain holds an agent goes through the one
/// policy hook first — refused when there is none, when it fails or when it is late.
final class ActingOnBehalfTests: XCTestCase {
    private func agent(calls: [String]) -> FeatureManifest {
        FeatureManifest(id: "fixture-agent", version: "1.0.0", library: FeatureHarness.libraryPath(product: "TermindFixtureAgent"), order: 60,
                        contracts: ["fixture-agent.chain@1", "fixture-agent.relay@1", "fixture-agent.transfer@1"], streams: ["fixture-agent.run@1"],
                        calls: calls, source: "test")
    }

    private var policy: FeatureManifest {
        FeatureManifest(id: "fixture-policy", version: "1.0.0", library: FeatureHarness.libraryPath(product: "TermindFixturePolicy"), order: 5,
                        ports: .init(provides: ["kernel.policy"]), contracts: ["fixture-policy.script@1"], source: "test")
    }

    private var streams: FeatureManifest {
        FeatureManifest(id: "fixture-streams", version: "1.0.0", library: FeatureHarness.libraryPath(product: "TermindFixtureStreams"), order: 10,
                        streams: ["fixture-streams.show@1"], source: "test")
    }

    private func boot(policy: Bool = true, calls: [String] = ["kernel.ping@1", "fixture-streams.show@1", "fixture-agent.chain@1"]) async throws -> HarnessSession {
        try await FeatureHarness.boot(agent(calls: calls), others: [streams] + (policy ? [self.policy] : []))
    }

    // The fixture's requests and replies (fixture-agent's contracts, as a client sees them).
    struct Relay: Codable {
        var contract: String
        var body: String
        var agent: String?
        var stream: Bool?
        var input: String?
    }
    struct Reply: Decodable { var reply: String?; var events: [String]?; var errorCode: String?; var errorMessage: String?; var errorDetails: JSONValue? }
    struct Seen: Decodable { var operation: String; var effect: String; var chain: [Caller]; var arguments: JSONValue }
    struct Chain: Decodable { var chain: [Caller]; var served: [Caller]? }

    private func relay(_ session: HarnessSession, _ request: Relay) async throws -> Reply {
        let json = String(decoding: try JSONCoding.encode(request), as: UTF8.self)
        return try JSONDecoder().decode(Reply.self, from: try await session.call("fixture-agent.relay@1", json: json))
    }

    /// Scripts the policy (nil: as it was) and returns what it was asked so far.
    @discardableResult
    private func script(_ session: HarnessSession, _ decisions: [String: String]? = nil, fallback: String = "deny") async throws -> [Seen] {
        var body: [String: JSONValue] = ["fallback": .string(fallback)]
        if let decisions { body["decisions"] = .object(decisions.mapValues(JSONValue.string)) }
        struct Script: Decodable { var seen: [Seen] }
        return try JSONDecoder().decode(Script.self, from: try await session.call("fixture-policy.script@1", json: String(decoding: try JSONCoding.encode(body), as: UTF8.self))).seen
    }

    func testTheChainNamesTheClientAndEachFeatureThatCalledOn() async throws {
        let session = try await boot()
        defer { Task { await session.shutdown() } }
        // Called directly: this process's person.
        let direct = try JSONDecoder().decode(Chain.self, from: try await session.call("fixture-agent.chain@1", json: "{}"))
        XCTAssertEqual(direct.chain.map(\.kind), [.client])
        XCTAssertEqual(direct.chain.first?.id, "uid \(getuid())")
        XCTAssertEqual(direct.served?.map(\.kind), [.client], "the handler's task serves the chain")
        // Through a feature, then for an agent: each link in order.
        let relayed = try await relay(session, .init(contract: "fixture-agent.chain@1", body: "{}"))
        let chain = try JSONDecoder().decode(Chain.self, from: Data(try XCTUnwrap(relayed.reply).utf8)).chain
        XCTAssertEqual(chain.map(\.kind), [.client, .feature])
        XCTAssertEqual(chain.last?.id, "fixture-agent")
        _ = try await script(session, ["fixture-agent.chain@1": "allow"])
        let forAgent = try await relay(session, .init(contract: "fixture-agent.chain@1", body: "{}", agent: "conversation 7/tool-call 3"))
        let agentChain = try JSONDecoder().decode(Chain.self, from: Data(try XCTUnwrap(forAgent.reply, forAgent.errorMessage ?? "").utf8)).chain
        XCTAssertEqual(agentChain.map(\.kind), [.client, .agent, .feature])
        XCTAssertEqual(agentChain[1].detail, "conversation 7/tool-call 3")
        XCTAssertEqual(CallOrigin.serving, .inProcess, "the test's own task serves this process's person")
    }

    func testAnAgentsCallsGoThroughThePolicyAndAPersonsNever() async throws {
        let session = try await boot()
        defer { Task { await session.shutdown() } }
        _ = try await script(session, ["kernel.ping@1": "allow"], fallback: "deny")
        // A person's call (no agent in the chain): the policy is not consulted.
        let personal = try await relay(session, .init(contract: "fixture-streams.show@1", body: "{}", stream: true))
        XCTAssertNil(personal.errorCode)
        let asked = try await script(session)
        XCTAssertEqual(asked.count, 0, "the policy was asked about a call no agent made")
        // An agent's: allowed as scripted, with what it does and for whom.
        let allowed = try await relay(session, .init(contract: "kernel.ping@1", body: #"{"payload": "p"}"#, agent: "conversation 1"))
        XCTAssertNil(allowed.errorCode, allowed.errorMessage ?? "")
        let seen = try await script(session)
        XCTAssertEqual(seen.map(\.operation), ["kernel.ping@1"])
        XCTAssertEqual(seen.first?.effect, "read")
        XCTAssertEqual(seen.first?.arguments["payload"], .string("p"))
        XCTAssertEqual(seen.first?.chain.map(\.kind), [.client, .agent, .feature])
        // Denied: a typed refusal with its fields, the reason the policy gave.
        let denied = try await relay(session, .init(contract: "fixture-streams.show@1", body: "{}", agent: "conversation 1", stream: true))
        XCTAssertEqual(denied.errorCode, "policy.denied")
        XCTAssertEqual(denied.errorMessage, "The scripted policy refuses fixture-streams.show@1.")
        XCTAssertEqual(denied.errorDetails?["contract"], .string("fixture-streams.show@1"))
        XCTAssertEqual(denied.errorDetails?["effect"], .string("read"))
        XCTAssertEqual(denied.errorDetails?["chain"]?.arrayValue?.compactMap { $0["kind"]?.stringValue }, ["client", "agent", "feature"])
        XCTAssertEqual(denied.events, [], "a refused stream never started")
    }

    func testWithAnAgentInTheChainNoPolicyAFailingOneOrALateOneRefuses() async throws {
        let without = try await boot(policy: false)
        let unavailable = try await relay(without, .init(contract: "kernel.ping@1", body: #"{"payload": "p"}"#, agent: "conversation 2"))
        XCTAssertEqual(unavailable.errorCode, "policy.unavailable")
        XCTAssertTrue(unavailable.errorMessage?.contains("no policy is loaded") == true, unavailable.errorMessage ?? "")
        // Without an agent the same call goes through: nothing to decide.
        let personal = try await relay(without, .init(contract: "kernel.ping@1", body: #"{"payload": "p"}"#))
        XCTAssertNil(personal.errorCode)
        await without.shutdown()

        let session = try await boot()
        defer { Task { await session.shutdown() } }
        _ = try await script(session, ["kernel.ping@1": "fail"])
        let failed = try await relay(session, .init(contract: "kernel.ping@1", body: #"{"payload": "p"}"#, agent: "conversation 3"))
        XCTAssertEqual(failed.errorCode, "policy.unavailable")
        XCTAssertTrue(failed.errorMessage?.contains("the scripted policy failed") == true, failed.errorMessage ?? "")
        _ = try await script(session, ["kernel.ping@1": "hang"])
        let started = Date()
        let late = try await relay(session, .init(contract: "kernel.ping@1", body: #"{"payload": "p"}"#, agent: "conversation 4"))
        XCTAssertEqual(late.errorCode, "policy.unavailable")
        XCTAssertTrue(late.errorMessage?.contains("did not decide") == true, late.errorMessage ?? "")
        XCTAssertLessThan(Date().timeIntervalSince(started), CallPolicyLimits.seconds + 20, "the wait for the policy is bounded")
    }

    func testAFeatureRunsAnotherFeaturesStreamOnlyWhenItsManifestSaysSo() async throws {
        let session = try await boot()
        defer { Task { await session.shutdown() } }
        let ran = try await relay(session, .init(contract: "fixture-streams.show@1", body: #"{"stdout": "hi", "records": 2, "notice": "n"}"#, stream: true))
        XCTAssertNil(ran.errorCode, ran.errorMessage ?? "")
        XCTAssertEqual(ran.events, ["stdout", "notice", "record", "record"])
        XCTAssertEqual(try JSONCoding.parse(Data(try XCTUnwrap(ran.reply).utf8), source: "result")["answers"], .array([]))
        // Not among its calls: refused before it runs, as a typed refusal.
        let limited = try await FeatureHarness.boot(agent(calls: []), others: [streams])
        let refused = try await relay(limited, .init(contract: "fixture-streams.show@1", body: "{}", stream: true))
        XCTAssertEqual(refused.errorCode, "capability.denied")
        XCTAssertEqual(refused.errorDetails?["contract"], .string("fixture-streams.show@1"))
        await limited.shutdown()
    }

    func testAQuestionOfAStreamAFeatureRunsGoesUpTheChainOrIsRefused() async throws {
        let session = try await boot()
        defer { Task { await session.shutdown() } }
        // From a contract's handler nobody can be asked: the question is refused, never answered.
        let unaskable = try await relay(session, .init(contract: "fixture-streams.show@1", body: #"{"ask": ["confirm"]}"#, stream: true))
        XCTAssertEqual(try JSONCoding.parse(Data(try XCTUnwrap(unaskable.reply).utf8), source: "r")["answers"], .array([.string("unanswered")]))
        // From a stream the test runs (its client answers yes): the question reaches the test.
        let asked = Mutex<[String]>([])
        let body = try JSONCoding.encode(Relay(contract: "fixture-streams.show@1", body: #"{"ask": ["confirm"]}"#, stream: true))
        let result = try await session.kernel.runStream("fixture-agent.run@1", body: body) { event in
            guard event.kind == "ask" else { return nil }
            asked.withLock { $0.append(event["ask"]?["topic"]?.stringValue ?? "?") }
            return .object(["askID": event["askID"] ?? .null, "answer": .bool(true)])
        }
        XCTAssertEqual(asked.withLock { $0 }, ["fixture.confirm"])
        let reply = try JSONCoding.parse(result, source: "run")["reply"]?.stringValue ?? ""
        XCTAssertEqual(try JSONCoding.parse(Data(reply.utf8), source: "inner")["answers"], .array([.string("yes")]))
    }

    func testAnAskFromThePolicyGoesToThePersonAtTheStartOfTheChain() async throws {
        let session = try await boot()
        defer { Task { await session.shutdown() } }
        _ = try await script(session, ["kernel.ping@1": "ask"])
        for (yes, code) in [(true, nil), (false, "policy.denied")] as [(Bool, String?)] {
            let questions = Mutex<[String]>([])
            let body = try JSONCoding.encode(Relay(contract: "kernel.ping@1", body: #"{"payload": "p"}"#, agent: "conversation 5"))
            let result = try await session.kernel.runStream("fixture-agent.run@1", body: body) { event in
                guard event.kind == "ask" else { return nil }
                questions.withLock { $0.append((event["ask"]?["topic"]?.stringValue ?? "") + ": " + (event["ask"]?["text"]?.stringValue ?? "")) }
                return .object(["askID": event["askID"] ?? .null, "answer": .bool(yes)])
            }
            XCTAssertEqual(questions.withLock { $0 }, ["kernel.policy: Let the agent run kernel.ping@1?"])
            XCTAssertEqual(try JSONCoding.parse(result, source: "run")["errorCode"]?.stringValue, code)
        }
        // With nobody to ask (a contract's handler), ask is a refusal.
        let alone = try await relay(session, .init(contract: "kernel.ping@1", body: #"{"payload": "p"}"#, agent: "conversation 6"))
        XCTAssertEqual(alone.errorCode, "policy.denied")
        XCTAssertTrue(alone.errorMessage?.contains("there is nobody to ask") == true, alone.errorMessage ?? "")
    }
}
