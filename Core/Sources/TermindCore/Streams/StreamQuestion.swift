import FoundationEssentials

/// The questions a stream may ask its client (docs/contracts.md, Streams), built the same
/// way by every feature so every client can ask them. `topic` names what is asked
/// (`ssh.hostKey`, `ssh.passphrase`, …): a script answers by topic (`--answers FILE`).
public enum StreamQuestion {
    /// Text, then one line read; `choices` maps what may be typed (lowercased, trimmed) to
    /// the answer, Enter alone is `default`, anything else is asked again. Answer:
    /// `{"answer": …}` or `{"unanswered": true}`.
    /// `personOnly`: only a person at a terminal answers it — never `--answers FILE` (an
    /// approval a script could give once for every action to come).
    public static func choice(topic: String, _ text: String, _ choices: [String: String], default fallback: String,
                              details: JSONValue? = nil, personOnly: Bool = false) -> JSONValue {
        var question: [String: JSONValue] = ["kind": .string("choice"), "topic": .string(topic), "text": .string(text),
                                             "choices": .object(choices.mapValues { .string($0) }), "default": .string(fallback)]
        question["details"] = details
        if personOnly { question["personOnly"] = .bool(true) }
        return .object(question)
    }

    /// A yes/no question (`text` ends with the prompt, e.g. "Delete 3 files?"); `default`
    /// is what Enter alone means. Answer: `{"answer": true|false}` or `{"unanswered": true}`;
    /// `--yes` answers it true.
    public static func confirm(topic: String, _ text: String, default fallback: Bool = false, details: JSONValue? = nil) -> JSONValue {
        var question: [String: JSONValue] = ["kind": .string("confirm"), "topic": .string(topic), "text": .string(text), "default": .bool(fallback)]
        question["details"] = details
        return .object(question)
    }

    /// Header lines, then each prompt read with echo as given (keyboard-interactive, a
    /// passphrase). Answer: `{"answers": [...]}` or `{"unanswered": true}`.
    /// `personOnly` as `choice`'s.
    public static func prompts(topic: String, header: [String], _ prompts: [(text: String, echo: Bool)], personOnly: Bool = false) -> JSONValue {
        var question: [String: JSONValue] = ["kind": .string("prompts"), "topic": .string(topic), "header": .array(header.map { .string($0) }),
                                             "prompts": .array(prompts.map { .object(["text": .string($0.text), "echo": .bool($0.echo)]) })]
        if personOnly { question["personOnly"] = .bool(true) }
        return .object(question)
    }

    /// The answers to a `prompts` question, one per prompt, or nil when nobody answered.
    public static func answers(_ reply: JSONValue?) -> [Secret]? {
        guard case .array(let answers)? = reply?["answers"] else { return nil }
        return answers.map { Secret($0.stringValue ?? "") }
    }

    /// The answer to a `confirm` question, or nil when nobody answered.
    public static func confirmed(_ reply: JSONValue?) -> Bool? {
        guard case .bool(let answer)? = reply?["answer"] else { return nil }
        return answer
    }

    /// Whether the client said nobody could answer (no terminal, no scripted answer).
    public static func unanswered(_ reply: JSONValue?) -> Bool { reply == nil || reply?["unanswered"] == .bool(true) }
}
