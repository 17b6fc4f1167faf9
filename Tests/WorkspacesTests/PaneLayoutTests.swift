import Foundation
import TermindCore
import VaultAPI
import WorkspacesRules
import XCTest

/// The workspace layout expression (pure): parsing, errors that say where, writing it
/// back, the grid of `--hosts`, the stored tree's checks, and the tmux splits that build it.
final class PaneLayoutTests: XCTestCase {
    func testTheExpressionParsesToATreeWithShares() throws {
        let tree = try PaneLayout.parse("h(web 60%, v(db, sftp:db))")
        XCTAssertEqual(tree, .split(horizontal: true, children: [
            .init(fraction: 0.6, tree: .pane(kind: .ssh, host: "web")),
            .init(fraction: 0.4, tree: .split(horizontal: false, children: [
                .init(fraction: 0.5, tree: .pane(kind: .ssh, host: "db")),
                .init(fraction: 0.5, tree: .pane(kind: .sftp, host: "db")),
            ])),
        ]))
        XCTAssertEqual(tree.leaves.map(\.host), ["web", "db", "db"])
        XCTAssertEqual(try PaneLayout.parse("  web  "), .pane(kind: .ssh, host: "web"))
        XCTAssertEqual(try PaneLayout.parse("empty"), .pane(kind: .empty, host: nil))
        // Quoted hosts keep spaces and are never keywords; a bare `h` without '(' is a host.
        guard case .split(false, let thirds) = try PaneLayout.parse("v(\"my box\", \"empty\", h, sftp:\"a b\")") else { return XCTFail("not a split") }
        XCTAssertEqual(thirds.map(\.tree), [.pane(kind: .ssh, host: "my box"), .pane(kind: .ssh, host: "empty"), .pane(kind: .ssh, host: "h"),
                                            .pane(kind: .sftp, host: "a b")])
        for child in thirds { XCTAssertEqual(child.fraction, 0.25, accuracy: 1e-12) }
        // Children without a share split what the others leave.
        guard case .split(_, let children) = try PaneLayout.parse("h(a 50%, b, c)") else { return XCTFail("not a split") }
        XCTAssertEqual(children.map(\.fraction), [0.5, 0.25, 0.25])
    }

    func testBadExpressionsSayWhatAndWhere() {
        func problem(_ text: String) -> String {
            do {
                _ = try PaneLayout.parse(text)
                return "parsed"
            } catch {
                return "\(error)"
            }
        }
        XCTAssertEqual(problem("h(a, b"), "the layout ends where ',' or ')' should be (at character 7)")
        XCTAssertEqual(problem("h(a)"), "h(…) needs two panes or more (at character 1)")
        XCTAssertEqual(problem("h(a 70%, b 40%)"), "the shares add up to 110.0%, not 100% (at character 1)")
        XCTAssertEqual(problem("h(a 100%, b)"), "a share must be above 0% and below 100%, not 100.0% (at character 3)")
        XCTAssertEqual(problem("h(a 60%, b 40%, c)"), "the shares add up to 100.0%, leaving nothing for the panes without one (at character 1)")
        XCTAssertEqual(problem("h(a x%, b)"), "'x%' is not a share (write it as 60%) (at character 5)")
        XCTAssertEqual(problem("a b"), "unexpected 'b' after the layout (at character 3)")
        XCTAssertEqual(problem("web 50%"), "a share (%) belongs to a pane inside h(…) or v(…), not to the whole layout")
        XCTAssertEqual(problem("sftp:"), "'sftp:' names no host (at character 1)")
        XCTAssertEqual(problem("h(\"a, b)"), "a quote is not closed (at character 3)")
        XCTAssertEqual(problem(String(repeating: "h(", count: 9) + "a, b" + String(repeating: ", c)", count: 9)),
                       "splits nest at most 8 deep (at character 17)")
        XCTAssertEqual(problem(String(repeating: "x", count: 5000)), "the layout is longer than 4096 bytes")
    }

    func testWrittenBackTheExpressionReadsTheSame() throws {
        for text in ["h(web 60%, v(db, sftp:db) 40%)", "v(a, b, c)", "empty", "h(\"my box\", sftp:\"x,y\")", "h(ssh:empty, ssh:h)"] {
            let tree = try PaneLayout.parse(text)
            XCTAssertEqual(PaneLayout.render(tree), text)
            XCTAssertEqual(try PaneLayout.parse(PaneLayout.render(tree)), tree)
        }
        // A share close to 0% or 100% is written finely enough to read back (not as 100%/0%,
        // which saving refuses).
        for text in ["h(a 99.99%, b 0.01%)", "v(a 0.05%, b 99.95%)", "h(a 33.3%, b 66.7%)"] {
            let tree = try PaneLayout.parse(text)
            XCTAssertEqual(PaneLayout.render(tree), text)
            let again = try PaneLayout.parse(PaneLayout.render(tree))
            guard case .split(_, let first) = tree, case .split(_, let second) = again else { return XCTFail(text) }
            XCTAssertEqual(first.map(\.fraction), second.map(\.fraction))
        }
        // Hosts are written by the name the caller gives them (today's label of an id).
        XCTAssertEqual(PaneLayout.render(.split(horizontal: true, children: [.init(fraction: 0.5, tree: .pane(kind: .ssh, host: "host_1")),
                                                                            .init(fraction: 0.5, tree: .pane(kind: .empty, host: nil))])) { $0 == "host_1" ? "web" : $0 },
                       "h(web, empty)")
    }

    func testTmuxBuildsEachSplitByCarvingTheRemainder() throws {
        // h(a 60%, v(b, c)): the right 40 % off pane a, then pane b's lower half.
        XCTAssertEqual(PaneLayout.splits(try PaneLayout.parse("h(a 60%, v(b, c))")), [
            .init(target: 0, horizontal: true, percent: 40, leaf: 1),
            .init(target: 1, horizontal: false, percent: 50, leaf: 2),
        ])
        // Three even columns: 2/3 off the first, then half of that.
        XCTAssertEqual(PaneLayout.splits(try PaneLayout.parse("h(a, b, c)")), [
            .init(target: 0, horizontal: true, percent: 67, leaf: 1),
            .init(target: 1, horizontal: true, percent: 50, leaf: 2),
        ])
        // Nested first child: its leaves come before the second child's.
        XCTAssertEqual(PaneLayout.splits(try PaneLayout.parse("v(h(a, b) 30%, c)")), [
            .init(target: 0, horizontal: false, percent: 70, leaf: 2),
            .init(target: 0, horizontal: true, percent: 50, leaf: 1),
        ])
        XCTAssertEqual(PaneLayout.splits(.pane(kind: .ssh, host: "a")), [])
    }

    func testStoredLayoutsAreCheckedAndTheGridFillsRows() throws {
        let pane = WorkspaceLayout.pane(WorkspacePane(kind: .ssh, host: "host_1"))
        func problem(_ layout: WorkspaceLayout) -> String {
            do {
                _ = try layout.validated()
                return "valid"
            } catch {
                return TermindError.from(error).message
            }
        }
        XCTAssertEqual(problem(.split(.horizontal, [.init(fraction: 1, layout: pane)])), "layout: a split needs two panes or more, not 1.")
        XCTAssertEqual(problem(.split(.horizontal, [.init(fraction: 0.5, layout: pane), .init(fraction: 0.2, layout: pane)])),
                       "layout: the fractions add up to 70.0 %, not 100 %.")
        XCTAssertEqual(problem(.split(.horizontal, [.init(fraction: .nan, layout: pane), .init(fraction: 1, layout: pane)])),
                       "layout.children[0]: the fraction must be above 0, not nan.")
        XCTAssertEqual(problem(.split(.vertical, [.init(fraction: 0.5, layout: pane), .init(fraction: 0.5, layout: .pane(WorkspacePane(kind: .sftp)))])),
                       "layout.children[1]: an sftp pane needs a saved host.")
        XCTAssertEqual(problem(.pane(WorkspacePane(kind: .empty, host: "host_1"))), "layout: an empty pane has no host.")
        XCTAssertEqual(problem(.grid(Array(repeating: WorkspacePane(kind: .empty), count: 33))), "layout: 33 panes; a workspace holds at most 32.")
        // Within 1 %: normalized to exactly 1.
        guard case .split(_, let children) = try WorkspaceLayout.split(.horizontal, [.init(fraction: 0.333, layout: pane), .init(fraction: 0.666, layout: pane)]).validated() else {
            return XCTFail("not a split")
        }
        XCTAssertEqual(children.map(\.fraction).reduce(0, +), 1, accuracy: 1e-12)
        // JSON as documented, both ways.
        let json = String(decoding: try JSONCoding.encode(WorkspaceLayout.split(.vertical, [.init(fraction: 0.5, layout: pane), .init(fraction: 0.5, layout: pane)])), as: UTF8.self)
        XCTAssertTrue(json.contains("\"split\":\"vertical\""), json)
        XCTAssertTrue(json.contains("\"pane\":{"), json)
        XCTAssertEqual(try JSONDecoder().decode(WorkspaceLayout.self, from: Data(json.utf8)),
                       .split(.vertical, [.init(fraction: 0.5, layout: pane), .init(fraction: 0.5, layout: pane)]))

        // Five hosts: rows of ⌈√5⌉ = 3, then 2.
        let hosts = (1...5).map { WorkspacePane(kind: .ssh, host: "h\($0)") }
        guard case .split(.vertical, let rows) = WorkspaceLayout.grid(hosts) else { return XCTFail("not rows") }
        XCTAssertEqual(rows.map { $0.layout.panes.count }, [3, 2])
        XCTAssertEqual(WorkspaceLayout.grid(hosts).panes, hosts)
        XCTAssertEqual(WorkspaceLayout.grid([hosts[0]]), .pane(hosts[0]))
    }
}
