import Foundation
import TermindCore

/// The questions a stream may ask (docs/contracts.md, Streams), asked of the person at the
/// controlling terminal. The feature words them; the text shown is escaped (it may hold a
/// server's). Without a terminal every question is answered `{"unanswered": true}`, never
/// with a guess: the feature then fails closed and says what to do instead.
enum Questions {
    static func answer(_ question: JSONValue) -> JSONValue {
        let unanswered: JSONValue = .object(["unanswered": .bool(true)])
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard tty >= 0 else { return unanswered }
        defer { close(tty) }
        switch question["kind"]?.stringValue {
        case "choice"?: return choice(question, tty: tty)
        case "prompts"?: return prompts(question, tty: tty)
        default: return unanswered
        }
    }

    /// Shows `text`, reads one line; `choices` maps what may be typed to the answer.
    private static func choice(_ question: JSONValue, tty: Int32) -> JSONValue {
        TerminalPrompt.begin(tty)
        defer { TerminalPrompt.end() }
        say(question["text"]?.stringValue ?? "", tty)
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = read(tty, &buffer, buffer.count)
        let typed = n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).lowercased() : ""
        let answer = question["choices"]?[typed]?.stringValue ?? question["default"]?.stringValue ?? ""
        return .object(["answer": .string(answer)])
    }

    /// Shows the header lines, then reads each prompt's answer, with echo as it asks.
    private static func prompts(_ question: JSONValue, tty: Int32) -> JSONValue {
        if case .array(let header)? = question["header"] {
            for line in header.compactMap(\.stringValue) { say(line.hasSuffix("\n") ? line : line + "\n", tty) }
        }
        guard case .array(let prompts)? = question["prompts"] else { return .object(["answers": .array([])]) }
        var answers: [JSONValue] = []
        for prompt in prompts {
            let text = prompt["text"]?.stringValue ?? ""
            let secret: Secret
            if prompt["echo"] == .bool(true) {
                say(text, tty)
                TerminalPrompt.begin(tty)
                var bytes: [UInt8] = []
                var byte: UInt8 = 0
                while read(tty, &byte, 1) == 1, byte != 10 { bytes.append(byte) }
                TerminalPrompt.end()
                secret = Secret(String(decoding: bytes, as: UTF8.self))
                bytes.withUnsafeMutableBufferPointer { buffer in for index in buffer.indices { buffer[index] = 0 } }
            } else {
                secret = SecretInput.hidden(input: tty, output: tty, prompt: text)
            }
            answers.append(secret.withPlaintext { .string($0) })
        }
        return .object(["answers": .array(answers)])
    }

    private static func say(_ text: String, _ tty: Int32) {
        _ = TerminalText.escaped(text).withCString { write(tty, $0, strlen($0)) }
    }
}
