import Foundation
import TermindCore

/// Test fixture: a feature with a stream that sends one of each event kind the generic
/// client renders (docs/contracts.md, Streams) and asks each kind of question, reporting
/// the answers it got — so the CLI's handling is tested without any real feature's code,
/// in-process and over the socket.
public enum ShowStream: StreamContract {
    public struct Request: Codable, Sendable {
        /// Progress events for one item of `total` bytes, `steps` of them, `pause` seconds apart.
        public var steps: Int?
        public var total: Int?
        public var pause: Double?
        /// Records, then live views of a table (one row per view, `n` counting up).
        public var records: Int?
        public var views: Int?
        public var stdout: String?
        public var stderr: String?
        public var notice: String?
        /// Questions to ask, in order: "confirm", "choice", "prompts".
        public var ask: [String]?
        /// Seconds to wait after the views (to be interrupted).
        public var hold: Double?
        /// Lines `tick 1` … `tick N` on standard output, `pause` seconds apart (0.05 unless said).
        public var ticks: Int?
        /// Emit an event kind the stream does not declare (the session must stop it).
        public var undeclared: Bool?
    }
    public struct Result: Codable, Sendable {
        /// What each question got: true/false, the choice, the prompt answers, or "unanswered".
        public var answers: [String]
    }
    public static let name = "fixture-streams.show"
    public static let effect: Effect = .read
    public static let version = 1
    public static let summary = "Send one of each stream event kind and ask each kind of question (test fixture)."
    public static var events: [String: JSONSchema] {
        StreamEvents.output.merging(["progress": StreamEvents.progress, "record": StreamEvents.record, "view": StreamEvents.view,
                                     "notice": StreamEvents.notice]) { $1 }
    }
    public static let questions = ["fixture.confirm": "confirm", "fixture.choice": "choice", "fixture.prompts": "prompts"]
}

final class StreamsFeature: Feature {
    func register(_ registrar: FeatureRegistrar) throws {
        registrar.stream(ShowStream.self) { request, session in
            if let text = request.stdout { await session.emit("stdout", data: Data(text.utf8)) }
            if let text = request.stderr { await session.emit("stderr", data: Data(text.utf8)) }
            if let text = request.notice { await session.emit("notice", ["text": .string(text)]) }
            for n in 0..<(request.ticks ?? 0) {
                await session.emit("stdout", data: Data("tick \(n + 1)\n".utf8))
                try await Task.sleep(nanoseconds: UInt64((request.pause ?? 0.05) * 1e9))
            }
            let steps = request.steps ?? 0, total = request.total ?? 0
            for step in 0...max(steps, 0) where steps > 0 {
                await session.emit("progress", ["item": .string("file.bin"), "done": .integer(Int64(total * step / steps)),
                                                "total": .integer(Int64(total)), "unit": .string("bytes")])
                if let pause = request.pause, step < steps { try await Task.sleep(nanoseconds: UInt64(pause * 1e9)) }
            }
            for n in 0..<(request.records ?? 0) {
                await session.emit("record", ["record": .object(["name": .string("record-\(n)"), "size": .integer(Int64(n * 10))])])
            }
            for n in 0..<(request.views ?? 0) {
                await session.emit("view", ["title": .string("view \(n + 1)"), "refresh": .double(0),
                                            "rows": .array([.object(["host": .string("box"), "n": .integer(Int64(n))])])])
            }
            if request.undeclared == true { await session.emit("surprise", ["x": .integer(1)]) }
            if let hold = request.hold { try await Task.sleep(nanoseconds: UInt64(hold * 1e9)) }
            var answers: [String] = []
            for kind in request.ask ?? [] {
                let reply: JSONValue?
                switch kind {
                case "confirm": reply = await session.ask(StreamQuestion.confirm(topic: "fixture.confirm", "Go ahead?"))
                case "choice": reply = await session.ask(StreamQuestion.choice(topic: "fixture.choice", "Pick [a]lpha/[b]eta: ", ["a": "alpha", "b": "beta"], default: "none"))
                case "prompts": reply = await session.ask(StreamQuestion.prompts(topic: "fixture.prompts", header: ["fixture"], [("Word: ", false)]))
                case "undeclared": reply = await session.ask(StreamQuestion.confirm(topic: "fixture.elsewhere", "Allowed?"))
                default: reply = nil
                }
                if StreamQuestion.unanswered(reply) {
                    answers.append("unanswered")
                } else if let yes = StreamQuestion.confirmed(reply) {
                    answers.append(yes ? "yes" : "no")
                } else if let words = StreamQuestion.answers(reply) {
                    answers.append(words.map { $0.withPlaintext { $0 } }.joined(separator: ","))
                } else {
                    answers.append(reply?["answer"]?.stringValue ?? "?")
                }
            }
            return .init(answers: answers)
        }
    }

    func start(_ context: FeatureContext) async throws {}
    func stop() async {}
}

@_cdecl("termind_feature_entry_v1")
public func termindFeatureEntry() -> UnsafeMutableRawPointer {
    FeatureDescriptor.export(id: "fixture-streams", version: "1.0.0", signature: TermindLibrary.signature) { StreamsFeature() }
}
