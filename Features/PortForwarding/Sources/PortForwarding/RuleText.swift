import ForwardingRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import PortForwardingAPI
import TermindCore

/// How rules read for a person (the commands' human output; `--json` keeps the records):
/// a rule by its name, its host's label and its spec as ssh writes it (`-L
/// 127.0.0.1:8080:db:80`), its state in words, times as ages.
enum RuleText {
    /// `db (-L 127.0.0.1:15432:db.internal:5432 through prod)`; an unsaved forward, named by
    /// its spec, is `-L … through prod`.
    static func what(_ rule: ForwardRule, hostLabel: String) -> String {
        let flag = rule.flagDescription
        return rule.name == flag ? "\(flag) through \(hostLabel)" : "\(rule.name) (\(flag) through \(hostLabel))"
    }

    /// Where connections go once accepted: `127.0.0.1:8080 → db:80`, `a SOCKS proxy on
    /// 127.0.0.1:1080`, `prod listens on 127.0.0.1:41234 → localhost:3000 from here`.
    static func path(_ status: ForwardStatus) -> String {
        let rule = status.rule
        let bound = status.bound ?? rule.spec.listenDescription
        let target = "\(ForwardSpec.bracketed(rule.targetHost ?? "?")):\(rule.targetPort ?? 0)"
        switch rule.kind {
        case .local: return "\(bound) → \(target)"
        case .dynamic: return "a SOCKS proxy on \(bound)"
        case .remote: return "\(status.hostLabel) listens on \(bound) → \(target) from here"
        }
    }

    /// One sentence on a rule's state now.
    static func sentence(_ status: ForwardStatus, now: Double = Date().timeIntervalSince1970) -> String {
        let what = what(status.rule, hostLabel: status.hostLabel)
        switch status.state {
        case .running:
            let since = status.runningSince.flatMap { now - $0 >= 1 ? " for \(duration(now - $0))" : nil } ?? ""
            return "\(what) is running\(since): \(path(status))."
        case .starting:
            return "\(what) is starting."
        case .recovering:
            let next = status.nextRetryAt.map { "; next try in \(duration(max(0, $0 - now)))" } ?? ""
            return "\(what) lost its connection and is reconnecting\(next)\(status.lastError.map { " (\(sentenceEnd($0)))" } ?? "")."
        case .failed:
            return "\(what) failed: \(sentenceEnd(status.lastError ?? "no reason was given"))."
        case .needsAttention:
            return "\(what) needs attention: \(sentenceEnd(status.lastError ?? "termind forward retry asks again"))."
        case .stopped:
            return "\(what) is stopped."
        }
    }

    /// A message without its closing full stop, to sit inside a sentence.
    static func sentenceEnd(_ text: String) -> String {
        text.hasSuffix(".") ? String(text.dropLast()) : text
    }

    /// The rules as a table (`view`): what each row is first (the rule, its host, its
    /// forward), then its state; each rule's last error under the table, whole. Unsaved
    /// forwards are named by their forward alone.
    static func view(_ list: [ForwardStatus], title: String, empty: String, now: Double = Date().timeIntervalSince1970) -> [String: JSONValue] {
        let unsaved = list.allSatisfy { $0.rule.name == $0.rule.flagDescription }
        let rows: [JSONValue] = list.map { status in
            var row: [String: JSONValue] = [
                "name": .string(status.rule.name), "host": .string(status.hostLabel), "forward": .string(status.rule.flagDescription),
                "state": .string(state(status, now: now)), "listening": .string(status.bound ?? "-"),
                "sent": .string(TerminalText.bytes(status.bytesSent)), "received": .string(TerminalText.bytes(status.bytesReceived)),
                "flows": .string("\(status.openFlows) open / \(status.flows)"),
            ]
            row["uptime"] = .string(status.runningSince.map { duration(now - $0) } ?? "-")
            if unsaved { row["name"] = nil }
            return .object(row)
        }
        var view: [String: JSONValue] = ["title": .string(list.isEmpty ? empty : title), "rows": .array(rows),
                                         "columns": .array(["name", "host", "forward", "state", "listening", "uptime", "sent", "received", "flows"].map(JSONValue.string))]
        let problems: [JSONValue] = list.compactMap { status in
            status.lastError.map { .object([unsaved ? "forward" : "name": .string(status.rule.name), "error": .string($0)]) }
        }
        if !problems.isEmpty { view["sections"] = .array([.object(["title": .string("Last errors"), "rows": .array(problems)])]) }
        return view
    }

    /// `running`, `recovering (next try in 4 s)`, `failed`, `needs-attention`, `stopped`.
    static func state(_ status: ForwardStatus, now: Double) -> String {
        guard status.state == .recovering, let next = status.nextRetryAt else { return status.state.rawValue }
        return "recovering (next try in \(duration(max(0, next - now))))"
    }

    /// `42 s`, `3 min 5 s`, `2 h 10 min`.
    static func duration(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        if s < 60 { return "\(s) s" }
        if s < 3600 { return "\(s / 60) min \(s % 60) s" }
        return "\(s / 3600) h \(s % 3600 / 60) min"
    }
}
