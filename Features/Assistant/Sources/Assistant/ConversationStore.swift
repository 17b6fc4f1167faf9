import AssistantAPI
import AssistantRules
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindStore

/// The Assistant's tables (append-only migrations, checksummed like every feature's):
/// conversations, their entries (user, assistant, tool, error rows), tool calls with their
/// arguments and a bounded preview, each result whole by reference, and runs. Conversations
/// stay on this device; nothing here is a secret (keys never enter a request body or row).
enum AssistantSchema {
    static let schema = Schema(feature: "assistant", migrations: [
        Migration(1, "conversations, entries, tool calls, results, runs", """
            CREATE TABLE assistant_conversations (
                id TEXT PRIMARY KEY,
                title TEXT NOT NULL DEFAULT '',
                model TEXT NOT NULL DEFAULT '',
                archived INTEGER NOT NULL DEFAULT 0,
                forked_from TEXT,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL);
            CREATE TABLE assistant_entries (
                conversation TEXT NOT NULL,
                idx INTEGER NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'error')),
                text TEXT NOT NULL,
                calls TEXT,
                echo TEXT,
                call_id TEXT,
                run TEXT,
                input_tokens INTEGER,
                output_tokens INTEGER,
                created_at REAL NOT NULL,
                PRIMARY KEY (conversation, idx));
            CREATE TABLE assistant_tool_calls (
                conversation TEXT NOT NULL,
                call_id TEXT NOT NULL,
                entry INTEGER NOT NULL,
                position INTEGER NOT NULL,
                name TEXT NOT NULL,
                arguments TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'refused', 'unknown')),
                preview TEXT,
                result_bytes INTEGER,
                run TEXT,
                started_at REAL,
                finished_at REAL,
                PRIMARY KEY (conversation, call_id));
            CREATE TABLE assistant_tool_results (
                conversation TEXT NOT NULL,
                call_id TEXT NOT NULL,
                result BLOB NOT NULL,
                PRIMARY KEY (conversation, call_id));
            CREATE TABLE assistant_runs (
                id TEXT PRIMARY KEY,
                conversation TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')),
                started_at REAL NOT NULL,
                finished_at REAL,
                input_tokens INTEGER NOT NULL DEFAULT 0,
                output_tokens INTEGER NOT NULL DEFAULT 0,
                error_code TEXT,
                error_message TEXT);
            CREATE INDEX assistant_runs_by_conversation ON assistant_runs (conversation, started_at);
            """),
        Migration(2, "compactions", """
            CREATE TABLE assistant_compactions (
                conversation TEXT NOT NULL,
                upto INTEGER NOT NULL,
                summary TEXT NOT NULL,
                created_at REAL NOT NULL,
                PRIMARY KEY (conversation, upto));
            """),
        // Append-only (nothing in termind changes or deletes a row) and tamper-evident: each
        // row's `chain` is SHA-256 of the previous row's and its own fields (AuditLog).
        Migration(3, "audit log", """
            CREATE TABLE assistant_audit (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                at REAL NOT NULL,
                conversation TEXT,
                call_id TEXT,
                tool TEXT NOT NULL,
                host TEXT,
                host_label TEXT,
                effect TEXT NOT NULL,
                classifier TEXT,
                event TEXT NOT NULL CHECK (event IN ('decision', 'execution')),
                decision TEXT,
                decider TEXT,
                reason TEXT,
                exit_status INTEGER,
                exit_signal TEXT,
                outcome TEXT,
                stdout_bytes INTEGER,
                stderr_bytes INTEGER,
                chain TEXT NOT NULL);
            CREATE INDEX assistant_audit_by_host ON assistant_audit (host, at);
            """),
    ])
}

/// Reads and writes of the Assistant's tables; every change of one step (a message with its
/// tool calls, a call's outcome, a run's end) commits in one transaction.
struct ConversationStore: Sendable {
    let db: Database

    /// The bounded preview of a tool result kept beside its call (the whole is by reference).
    static let previewBytes = 4096

    typealias Summary = AssistantContracts.ConversationSummary
    typealias Entry = AssistantContracts.Entry

    // MARK: - Start-up

    /// Runs left running by a termind that stopped are interrupted (never resumed or
    /// replayed); a tool call that was running has an unknown outcome. Returns how many.
    /// Each such call keeps what was observed of it (the audit's decision, whether it had
    /// started) as its preview, which the model is told instead of a result.
    func interruptLeftovers(now: Double) async throws -> (runs: Int, calls: Int) {
        try await db.write { db in
            try db.execute("UPDATE assistant_runs SET state = 'interrupted', finished_at = ? WHERE state = 'running'", [now])
            let runs = db.changes
            let left = try db.query("SELECT conversation, call_id, state FROM assistant_tool_calls WHERE state IN ('running', 'pending')")
            for row in left {
                let conversation = try row.text("conversation"), call = try row.text("call_id")
                let (state, observed) = try Self.observed(db, conversation: conversation, call: call, started: row.string("state") == "running")
                try db.execute("UPDATE assistant_tool_calls SET state = ?, preview = ?, finished_at = ? WHERE conversation = ? AND call_id = ?",
                               [state, observed, now, conversation, call])
            }
            return (runs, left.count)
        }
    }

    /// What is known of a call termind stopped during, from the audit: its state and the words.
    private static func observed(_ db: Database, conversation: String, call: String, started: Bool) throws -> (String, String) {
        guard started else { return ("failed", "termind stopped before this call started: it did not run.") }
        let rows = try db.query("SELECT event, decision, decider, reason, at FROM assistant_audit WHERE conversation = ? AND call_id = ? ORDER BY seq",
                                [conversation, call])
        let formatter = Date.ISO8601FormatStyle()
        let when: (Row) -> String = { formatter.format(Date(timeIntervalSince1970: $0.double("at") ?? 0)) }
        if let refused = rows.first(where: { $0.string("event") == "decision" && $0.string("decision") == "refused" }) {
            return ("refused", "It was refused (by \(refused.string("decider") ?? "the policy"), \(when(refused))): \(refused.string("reason") ?? "") It did not run.")
        }
        if let allowed = rows.last(where: { $0.string("event") == "decision" && $0.string("decision") == "allowed" }) {
            return ("unknown", "termind stopped while this call ran. Observed: it was allowed (by \(allowed.string("decider") ?? "the policy"), \(when(allowed))) and started; "
                    + "no outcome was reported, so whether it took effect is not known. Check before repeating it.")
        }
        return ("unknown", Self.unanswered("unknown"))
    }

    // MARK: - Conversations

    func create(model: String, title: String, forkedFrom: String? = nil, now: Double) async throws -> String {
        try await db.write { db in
            let next = (try db.query("SELECT id FROM assistant_conversations").compactMap { $0.string("id").flatMap(Int.init) }.max() ?? 0) + 1
            try db.execute("INSERT INTO assistant_conversations (id, title, model, forked_from, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                           [String(next), title, model, forkedFrom, now, now])
            return String(next)
        }
    }

    func summary(_ id: String) async throws -> Summary? {
        try await db.read { db in try Self.summaries(db, where: "c.id = ?", [id]).first }
    }

    func list(archived: Bool) async throws -> [Summary] {
        try await db.read { db in try Self.summaries(db, where: "c.archived = ?", [archived ? 1 : 0]) }
    }

    private static func summaries(_ db: Database, where condition: String, _ bindings: [any SQLBindable]) throws -> [Summary] {
        try db.query("""
            SELECT c.id, c.title, c.model, c.archived, c.forked_from, c.updated_at,
                (SELECT count(*) FROM assistant_entries e WHERE e.conversation = c.id) AS messages,
                (SELECT r.state FROM assistant_runs r WHERE r.conversation = c.id ORDER BY r.started_at DESC, r.id DESC LIMIT 1) AS last_run
            FROM assistant_conversations c WHERE \(condition) ORDER BY c.updated_at DESC, CAST(c.id AS INTEGER) DESC
            """, bindings).map { row in
            Summary(id: try row.text("id"), title: try row.text("title"), model: try row.text("model"), messages: try row.integer("messages"),
                    archived: try row.integer("archived") != 0, updatedAt: row.double("updated_at") ?? 0,
                    lastRun: row.string("last_run").flatMap(AssistantContracts.RunState.init(rawValue:)), forkedFrom: row.string("forked_from"))
        }
    }

    func setArchived(_ id: String, _ archived: Bool, now: Double) async throws {
        try await db.write { db in try db.execute("UPDATE assistant_conversations SET archived = ?, updated_at = ? WHERE id = ?", [archived, now, id]) }
    }

    func retitle(_ id: String, _ title: String) async throws {
        try await db.write { db in try db.execute("UPDATE assistant_conversations SET title = ? WHERE id = ?", [title, id]) }
    }

    func remove(_ id: String) async throws {
        try await db.write { db in
            for table in ["assistant_entries", "assistant_tool_calls", "assistant_tool_results", "assistant_runs", "assistant_compactions"] {
                try db.execute("DELETE FROM \(table) WHERE conversation = ?", [id])
            }
            try db.execute("DELETE FROM assistant_conversations WHERE id = ?", [id])
        }
    }

    /// A new conversation with a copy of `id`'s entries, calls and results.
    func fork(_ id: String, now: Double) async throws -> String {
        try await db.write { db in
            guard let source = try db.query("SELECT title, model FROM assistant_conversations WHERE id = ?", [id]).first else {
                throw TermindError(.assistantUnknown, "There is no conversation \(id).")
            }
            let next = (try db.query("SELECT id FROM assistant_conversations").compactMap { $0.string("id").flatMap(Int.init) }.max() ?? 0) + 1
            let copy = String(next)
            try db.execute("INSERT INTO assistant_conversations (id, title, model, forked_from, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                           [copy, source.string("title") ?? "", source.string("model") ?? "", id, now, now])
            try db.execute("""
                INSERT INTO assistant_entries (conversation, idx, role, text, calls, echo, call_id, run, input_tokens, output_tokens, created_at)
                SELECT ?, idx, role, text, calls, echo, call_id, NULL, input_tokens, output_tokens, created_at FROM assistant_entries WHERE conversation = ?
                """, [copy, id])
            try db.execute("""
                INSERT INTO assistant_tool_calls (conversation, call_id, entry, position, name, arguments, state, preview, result_bytes, run, started_at, finished_at)
                SELECT ?, call_id, entry, position, name, arguments, state, preview, result_bytes, NULL, started_at, finished_at
                FROM assistant_tool_calls WHERE conversation = ?
                """, [copy, id])
            try db.execute("INSERT INTO assistant_tool_results (conversation, call_id, result) SELECT ?, call_id, result FROM assistant_tool_results WHERE conversation = ?",
                           [copy, id])
            try db.execute("INSERT INTO assistant_compactions (conversation, upto, summary, created_at) SELECT ?, upto, summary, created_at FROM assistant_compactions WHERE conversation = ?",
                           [copy, id])
            return copy
        }
    }

    // MARK: - Entries

    func entries(_ conversation: String) async throws -> [Entry] {
        try await db.read { db in
            let calls = try db.query("SELECT * FROM assistant_tool_calls WHERE conversation = ? ORDER BY entry, position", [conversation])
            var byEntry: [Int: [AssistantContracts.CallView]] = [:]
            for row in calls {
                byEntry[try row.integer("entry"), default: []].append(try Self.callView(row))
            }
            let callByID = Dictionary(try calls.map { (try $0.text("call_id"), try Self.callView($0)) }, uniquingKeysWith: { first, _ in first })
            return try db.query("SELECT * FROM assistant_entries WHERE conversation = ? ORDER BY idx", [conversation]).map { row in
                let index = try row.integer("idx")
                let role = row.string("role").flatMap(Entry.Role.init(rawValue:)) ?? .error
                let calls: [AssistantContracts.CallView]? = switch role {
                case .assistant: byEntry[index]
                case .tool: row.string("call_id").flatMap { callByID[$0] }.map { [$0] }
                default: nil
                }
                return Entry(index: index, role: role, text: try row.text("text"), calls: calls, createdAt: row.double("created_at") ?? 0,
                             inputTokens: row.int("input_tokens"), outputTokens: row.int("output_tokens"))
            }
        }
    }

    private static func callView(_ row: Row) throws -> AssistantContracts.CallView {
        let arguments = row.string("arguments").flatMap { try? JSONCoding.parse(Data($0.utf8), source: "arguments") } ?? .object([:])
        return AssistantContracts.CallView(id: try row.text("call_id"), name: try row.text("name"), arguments: arguments,
                                           state: row.string("state").flatMap(AssistantContracts.CallView.State.init(rawValue:)) ?? .unknown,
                                           preview: row.string("preview"), resultBytes: row.int("result_bytes"))
    }

    /// What the model is sent of a conversation: its user, assistant and tool entries in
    /// order (errors are for people, not models). A call whose outcome is unknown is told to
    /// the model as such, never as if it had not run.
    func transcript(_ conversation: String) async throws -> [TranscriptItem] {
        try await db.read { db in
            let compaction = try db.query("SELECT upto, summary FROM assistant_compactions WHERE conversation = ? ORDER BY upto DESC LIMIT 1", [conversation]).first
            var items = try Self.items(db, conversation, after: compaction?.int("upto") ?? -1)
            if let summary = compaction?.string("summary") { items.insert(.user(Self.summaryPreamble + summary), at: 0) }
            return items
        }
    }

    static let summaryPreamble = "What this conversation said so far, condensed to fit the model (the messages themselves are kept by termind):\n"

    /// The entries up to (not including) the last prompt, to be condensed, and the index they
    /// end at; nil when there is too little before it.
    func compactable(_ conversation: String) async throws -> (upto: Int, items: [TranscriptItem])? {
        try await db.read { db in
            let compaction = try db.query("SELECT upto, summary FROM assistant_compactions WHERE conversation = ? ORDER BY upto DESC LIMIT 1", [conversation]).first
            let after = compaction?.int("upto") ?? -1
            guard let last = try db.query("SELECT max(idx) AS top FROM assistant_entries WHERE conversation = ? AND role = 'user'", [conversation]).first?.int("top"),
                  last - after > 2 else { return nil }
            var items = try Self.items(db, conversation, after: after, before: last)
            if let summary = compaction?.string("summary") { items.insert(.user(Self.summaryPreamble + summary), at: 0) }
            return (last - 1, items)
        }
    }

    func compact(_ conversation: String, upto: Int, summary: String, now: Double) async throws {
        try await db.write { db in
            try db.execute("INSERT OR REPLACE INTO assistant_compactions (conversation, upto, summary, created_at) VALUES (?, ?, ?, ?)", [conversation, upto, summary, now])
        }
    }

    /// The model's view of the entries with `after` < idx < `before`.
    private static func items(_ db: Database, _ conversation: String, after: Int, before: Int = Int.max) throws -> [TranscriptItem] {
        let calls = try db.query("SELECT * FROM assistant_tool_calls WHERE conversation = ? ORDER BY entry, position", [conversation])
        var byEntry: [Int: [Row]] = [:]
        for row in calls { byEntry[try row.integer("entry"), default: []].append(row) }
        var items: [TranscriptItem] = []
        for row in try db.query("SELECT * FROM assistant_entries WHERE conversation = ? AND idx > ? AND idx < ? ORDER BY idx", [conversation, after, before]) {
            let text = try row.text("text")
            switch row.string("role") {
            case "user":
                items.append(.user(text))
            case "assistant":
                let rows = byEntry[try row.integer("idx")] ?? []
                let made = try rows.map { call in
                    ToolCall(id: try call.text("call_id"), name: try call.text("name"),
                             arguments: call.string("arguments").flatMap { try? JSONCoding.parse(Data($0.utf8), source: "arguments") } ?? .object([:]))
                }
                let stored = row.string("calls").flatMap { try? JSONDecoder().decode([ToolCall].self, from: Data($0.utf8)) } ?? made
                let echo = row.string("echo").flatMap { try? JSONCoding.parse(Data($0.utf8), source: "echo") }
                items.append(.assistant(text: text, calls: stored, echo: echo))
                // Every call gets an answer before the next user turn: a call that never
                // got a tool entry (refused before running, or unknown) is answered here.
                for call in rows {
                    let id = call.string("call_id") ?? ""
                    if let result = try db.query("SELECT e.text FROM assistant_entries e WHERE e.conversation = ? AND e.role = 'tool' AND e.call_id = ?",
                                                 [conversation, id]).first {
                        items.append(.toolResult(id: id, name: call.string("name") ?? "", output: result.string("text") ?? "",
                                                 isError: call.string("state") != "succeeded"))
                    } else {
                        let state = call.string("state") ?? "unknown"
                        // What was observed of a call termind stopped during, else the state's words.
                        let said = call.string("preview").flatMap { $0.isEmpty ? nil : $0 } ?? Self.unanswered(state)
                        items.append(.toolResult(id: id, name: call.string("name") ?? "", output: said, isError: true))
                    }
                }
            default:
                continue  // tool entries were placed after their call; errors are not sent
            }
        }
        return items
    }

    static func unanswered(_ state: String) -> String {
        switch state {
        case "unknown", "running": "termind stopped while this call ran: whether it took effect is not known. Check before repeating it."
        case "refused": "The call was refused."
        default: "The call did not run: the turn ended before it."
        }
    }

    /// Appends an entry; returns its index.
    @discardableResult
    func append(_ conversation: String, role: Entry.Role, text: String, calls: [ToolCall] = [], echo: JSONValue? = nil, callID: String? = nil, run: String?,
                usage: TokenUsage? = nil, now: Double) async throws -> Int {
        let callsText = calls.isEmpty ? nil : (try? JSONCoding.encode(calls)).map { String(decoding: $0, as: UTF8.self) }
        let echoText = echo.flatMap { try? JSONCoding.encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        return try await db.write { db in
            let index = (try db.query("SELECT max(idx) AS top FROM assistant_entries WHERE conversation = ?", [conversation]).first?.int("top") ?? -1) + 1
            try db.execute("""
                INSERT INTO assistant_entries (conversation, idx, role, text, calls, echo, call_id, run, input_tokens, output_tokens, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [conversation, index, role.rawValue, text, callsText, echoText, callID, run, usage?.input, usage?.output, now])
            for (position, call) in calls.enumerated() {
                let arguments = String(decoding: (try? JSONCoding.encode(call.arguments)) ?? Data("{}".utf8), as: UTF8.self)
                try db.execute("""
                    INSERT INTO assistant_tool_calls (conversation, call_id, entry, position, name, arguments, state, run)
                    VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)
                    """, [conversation, call.id, index, position, call.name, arguments, run])
            }
            try db.execute("UPDATE assistant_conversations SET updated_at = ? WHERE id = ?", [now, conversation])
            return index
        }
    }

    /// A call about to run: marked before it runs, so a termind that stops meanwhile leaves
    /// it `unknown`, never "not run".
    func callStarted(_ conversation: String, _ id: String, now: Double) async throws {
        try await db.write { db in
            try db.execute("UPDATE assistant_tool_calls SET state = 'running', started_at = ? WHERE conversation = ? AND call_id = ?", [now, conversation, id])
        }
    }

    /// A call's outcome with its result (the preview beside the call, the whole by
    /// reference) and the tool entry the model is sent, in one transaction.
    func callFinished(_ conversation: String, _ id: String, state: AssistantContracts.CallView.State, result: String, run: String, now: Double) async throws {
        let preview = Self.preview(result)
        try await db.write { db in
            try db.execute("UPDATE assistant_tool_calls SET state = ?, preview = ?, result_bytes = ?, finished_at = ? WHERE conversation = ? AND call_id = ?",
                           [state.rawValue, preview, result.utf8.count, now, conversation, id])
            try db.execute("INSERT OR REPLACE INTO assistant_tool_results (conversation, call_id, result) VALUES (?, ?, ?)", [conversation, id, Data(result.utf8)])
            let index = (try db.query("SELECT max(idx) AS top FROM assistant_entries WHERE conversation = ?", [conversation]).first?.int("top") ?? -1) + 1
            try db.execute("INSERT INTO assistant_entries (conversation, idx, role, text, call_id, run, created_at) VALUES (?, ?, 'tool', ?, ?, ?, ?)",
                           [conversation, index, result, id, run, now])
        }
    }

    /// The start of `text`, at most `previewBytes`, cut at a character boundary.
    static func preview(_ text: String) -> String {
        guard text.utf8.count > previewBytes else { return text }
        var end = text.utf8.index(text.utf8.startIndex, offsetBy: previewBytes)
        while end > text.startIndex && !text.unicodeScalars.indices.contains(end) { end = text.utf8.index(before: end) }
        return String(text[..<end])
    }

    // MARK: - Runs

    func startRun(_ conversation: String, now: Double) async throws -> String {
        try await db.write { db in
            let count = try db.query("SELECT count(*) AS n FROM assistant_runs WHERE conversation = ?", [conversation]).first?.int("n") ?? 0
            let id = "\(conversation).\(count + 1)"
            try db.execute("INSERT INTO assistant_runs (id, conversation, state, started_at) VALUES (?, ?, 'running', ?)", [id, conversation, now])
            return id
        }
    }

    func endRun(_ id: String, state: AssistantContracts.RunState, usage: TokenUsage, error: TermindError?, now: Double) async throws {
        try await db.write { db in
            try db.execute("""
                UPDATE assistant_runs SET state = ?, finished_at = ?, input_tokens = ?, output_tokens = ?, error_code = ?, error_message = ? WHERE id = ?
                """, [state.rawValue, now, usage.input, usage.output, error?.code, error?.message, id])
        }
    }
}

extension Row {
    func double(_ column: String) -> Double? {
        switch self[column] {
        case .real(let value): value
        case .integer(let value): Double(value)
        default: nil
        }
    }
}
