import Foundation
import TermindCore
import TermindHarness
import TermindKernel
import TermindCrypto
import TermindStore
import XCTest

/// `termind settings` as separate processes on one database file: two writers at once (one
/// killed with SIGKILL while it writes) lose nothing and leave revisions and journal
/// consistent; the CLI names the field at fault and exits non-zero, writing nothing.
final class SettingsProcessTests: XCTestCase {
    private var directory: TemporaryDirectory!

    override func setUpWithError() throws { directory = try TemporaryDirectory() }
    override func tearDown() { directory?.remove() }

    private var termind: String {
        Shell.quoted([FeatureHarness.buildDirectory + "/termind", "--local", "--registry", FeatureHarness.buildDirectory + "/Registry.json",
                     "--store", directory.file("termind.sqlite"), "--secrets-key", directory.file("secrets.key")])
    }

    private func shell(_ script: String) throws -> ProcessResult {
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_STORE", "TERMIND_SOCKET", "TERMIND_DEBUG"] {
            environment.removeValue(forKey: name)
        }
        return try ProcessRunner.run("/bin/bash", ["-c", script], environment: environment)
    }

    func testTwoWritersAtOnceOneKilledLoseNothing() throws {
        let script = """
        cd \(directory.path)
        writer() {
          for i in $(seq 1 $2); do
            if \(termind) settings set terminal.preferences "{\\"scrollbackLines\\": $((1000 * $1 + i))}" > /dev/null 2>> errors.$1; then echo ok >> done.$1; fi
          done
        }
        setsid bash -c "$(declare -f writer); writer 2 1000" &
        victim=$!
        writer 1 30
        kill -9 -- -$victim 2> /dev/null; wait $victim 2> /dev/null
        echo "first $(wc -l < done.1)"
        echo "second $(cat done.2 2> /dev/null | wc -l)"
        """
        let result = try shell(script)
        XCTAssertEqual(result.status, 0, result.stderr)
        let counts = Dictionary(result.stdout.split(separator: "\n").compactMap { line -> (String, Int)? in
            let parts = line.split(separator: " ")
            return parts.count == 2 ? (String(parts[0]), Int(parts[1]) ?? -1) : nil
        }, uniquingKeysWith: { $1 })
        let errors = (try? String(contentsOfFile: directory.file("errors.1"), encoding: .utf8)) ?? ""
        XCTAssertEqual(counts["first"], 30, "a writer failed while the other wrote: \(errors)")
        let second = try XCTUnwrap(counts["second"])
        XCTAssertGreaterThan(second, 0, "the second writer never got a write in before it was killed")

        let db = try StoreAccess.database(path: directory.file("termind.sqlite"))
        XCTAssertEqual(try db.scalar("PRAGMA integrity_check"), .text("ok"))
        let revisions = try db.query("SELECT revision FROM settings_outbox WHERE key = 'terminal.preferences' ORDER BY seq").compactMap { $0.int("revision") }
        // Every write that reported success is journaled once, in order; the killed writer's
        // last one either committed whole or not at all.
        XCTAssertEqual(revisions, Array(1...max(1, revisions.count)), "revisions must rise by one per change, without gaps or repeats")
        XCTAssertTrue((30 + second)...(30 + second + 1) ~= revisions.count, "\(revisions.count) journal rows for \(30 + second) reported writes")
        let record = try XCTUnwrap(try db.query("SELECT value, revision FROM settings_records WHERE key = 'terminal.preferences'").first)
        XCTAssertEqual(record.int("revision"), revisions.last)
        let last = try XCTUnwrap(try db.query("SELECT digest FROM settings_outbox ORDER BY seq DESC LIMIT 1").first?.string("digest"))
        XCTAssertEqual(Digest.sha256(Data((record.string("value") ?? "").utf8)).map { String(format: "%02x", $0) }.joined(), last)
    }

    func testTheCLINamesTheFieldAtFaultExitsNonZeroAndWritesNothing() throws {
        let bad = try shell("\(termind) settings set sftp.limits '{\"perHost\": 60}'; echo \" $?\"; \(termind) settings set terminal.preferences '{\"scrollbackLines\": 5}'; echo \" $?\"")
        XCTAssertEqual(bad.stdout, " 2\n 2\n", bad.stderr)
        XCTAssertTrue(bad.stderr.contains("sftp.limits.perHost: must be from 1 to 30"), "SFTP registers its records: \(bad.stderr)")
        XCTAssertTrue(bad.stderr.contains("terminal.preferences.scrollbackLines: must be from 100 to 100000, not 5"), bad.stderr)
        let listed = try shell("\(termind) --json settings list")
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let records = try JSONCoding.parse(Data(listed.stdout.utf8), source: "list")["records"]
        guard case .array(let items)? = records else { return XCTFail(listed.stdout) }
        XCTAssertEqual(items.compactMap { $0["key"]?.stringValue }, ["assistant.local", "assistant.mcpServers", "assistant.models", "assistant.policy", "assistant.providers", "assistant.roles",
                                                                     "metrics.preferences", "sftp.limits", "sftp.topology", "terminal.device", "terminal.preferences"],
                       "Workspaces registers the terminal's records, Metrics its preferences, SFTP its limits and topology, the Assistant its own")
        XCTAssertTrue(items.allSatisfy { $0["state"] == .string("default") }, listed.stdout)

        let set = try shell("\(termind) --json settings set terminal.preferences '{\"scrollbackLines\": 20000}'")
        XCTAssertEqual(set.status, 0, set.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(set.stdout.utf8), source: "set")["revision"], .integer(1))
    }

    func testAValueFromStandardInputAndARecordHandEditedWithSqlite3() throws {
        // `settings set KEY --json -`: the value from standard input, the report as JSON.
        let piped = try shell("printf '%s' '{\"theme\": \"dracula\"}' | \(termind) settings set terminal.preferences --json -")
        XCTAssertEqual(piped.status, 0, piped.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(piped.stdout.utf8), source: "set")["value"]?["theme"], .string("dracula"))

        // A person edits the database: the record is quarantined, not applied, not deleted.
        let edit = #"UPDATE settings_records SET value = '{"theme": "dracula", "scrollbackLines": "lots"}' WHERE key = 'terminal.preferences'"#
        let edited = try shell("sqlite3 \(directory.file("termind.sqlite")) \"$(cat <<'SQL'\n\(edit)\nSQL\n)\"")
        XCTAssertEqual(edited.status, 0, edited.stderr)
        let listed = try shell("\(termind) --json settings get terminal.preferences")
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let record = try JSONCoding.parse(Data(listed.stdout.utf8), source: "get")["record"]
        XCTAssertEqual(record?["state"], .string("quarantined"), listed.stdout)
        XCTAssertTrue(record?["reason"]?.stringValue?.contains("terminal.preferences.scrollbackLines: expected integer, got string") == true, listed.stdout)
        XCTAssertEqual(record?["value"]?["scrollbackLines"], .integer(10_000), "the defaults apply meanwhile")
        let stored = try shell("sqlite3 \(directory.file("termind.sqlite")) \"SELECT value FROM settings_records WHERE key = 'terminal.preferences'\"")
        XCTAssertEqual(stored.stdout, #"{"theme": "dracula", "scrollbackLines": "lots"}"# + "\n", "the stored value was changed")
        let repaired = try shell("\(termind) --json settings repair terminal.preferences reset")
        XCTAssertEqual(repaired.status, 0, repaired.stderr)
        XCTAssertEqual(try JSONCoding.parse(Data(repaired.stdout.utf8), source: "repair")["state"], .string("default"))
    }
}
