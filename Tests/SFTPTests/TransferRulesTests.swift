import TransferRules
import SFTPAPI
import XCTest

/// The transfer rules alone: how command-line paths split into sides, which child names a
/// tree may hold, kept-both names, the subtree test, and the scheduler's fair admission.
final class TransferRulesTests: XCTestCase {
    func testEndpointsFollowScpsRules() throws {
        XCTAssertEqual(try TransferEndpoint.parse("box:/etc/hosts"), .remote(host: "box", port: nil, path: "/etc/hosts"))
        XCTAssertEqual(try TransferEndpoint.parse("alice@db:logs"), .remote(host: "alice@db", port: nil, path: "logs"))
        XCTAssertEqual(try TransferEndpoint.parse("box:"), .remote(host: "box", port: nil, path: "."))
        XCTAssertEqual(try TransferEndpoint.parse("./a:b"), .local("./a:b"))
        XCTAssertEqual(try TransferEndpoint.parse("dir/a:b"), .local("dir/a:b"), "a '/' before the ':' makes it local")
        XCTAssertEqual(try TransferEndpoint.parse("/x:y"), .local("/x:y"))
        XCTAssertEqual(try TransferEndpoint.parse("plain.txt"), .local("plain.txt"))
        XCTAssertEqual(try TransferEndpoint.parse("bob@[::1]:/tmp/f"), .remote(host: "bob@::1", port: nil, path: "/tmp/f"))
        XCTAssertEqual(try TransferEndpoint.parse("scp://bob@db:2200/var/log"), .remote(host: "bob@db", port: 2200, path: "var/log"))
        XCTAssertEqual(try TransferEndpoint.parse("scp://db//abs"), .remote(host: "db", port: nil, path: "/abs"))
        XCTAssertEqual(try TransferEndpoint.parse("scp://[fe80::1]:22"), .remote(host: "fe80::1", port: 22, path: "."))
        for (bad, says) in [(":x", "no host"), ("scp://db:99999/x", "65535"), ("scp://db:ab/x", "not a port"), ("[::1]x", "followed by ':PATH'"), ("", "empty")] {
            XCTAssertThrowsError(try TransferEndpoint.parse(bad), bad) { XCTAssertTrue("\($0)".contains(says), "\(bad): \($0)") }
        }
    }

    func testChildNamesThatCouldEscapeAreRefused() {
        XCTAssertNil(TransferNames.problem(child: Array("ok name".utf8)))
        XCTAssertNil(TransferNames.problem(child: [0x66, 0xFF]), "bytes that are not UTF-8 are a fine name")
        for bad: [UInt8] in [[], [0x2E], [0x2E, 0x2E], Array("a/b".utf8), [0x61, 0]] {
            XCTAssertNotNil(TransferNames.problem(child: bad), "\(bad)")
        }
    }

    func testKeptBothNamesAndTemporaryNames() {
        func kept(_ name: String, _ n: Int, dir: Bool = false) -> String { String(decoding: TransferNames.keepBoth(Array(name.utf8), attempt: n, isDirectory: dir), as: UTF8.self) }
        XCTAssertEqual(kept("report.txt", 1), "report (1).txt")
        XCTAssertEqual(kept("archive.tar.gz", 2), "archive.tar (2).gz")
        XCTAssertEqual(kept(".bashrc", 1), ".bashrc (1)")
        XCTAssertEqual(kept("noext", 3), "noext (3)")
        XCTAssertEqual(kept("photos.2024", 1, dir: true), "photos.2024 (1)")
        let temporary = TransferNames.temporary(Array(String(repeating: "x", count: 250).utf8), token: "t1-abc")
        XCTAssertLessThanOrEqual(temporary.count, 255)
        XCTAssertEqual(temporary.first, 0x2E, "hidden")
        // Temporary-name tokens: hexadecimal digits, as many as asked for, not repeated.
        let tokens = (0..<100).map { _ in TransferNames.randomToken() }
        XCTAssertTrue(tokens.allSatisfy { $0.count == 6 && $0.allSatisfy(\.isHexDigit) }, "\(tokens.prefix(3))")
        XCTAssertGreaterThan(Set(tokens).count, 95)
        XCTAssertEqual(TransferNames.randomToken(digits: 16).count, 16)
    }

    func testStrictlyInsideComparesWholeComponents() {
        func inside(_ a: String, _ b: String) -> Bool { TransferNames.isStrictlyInside(Array(a.utf8), Array(b.utf8)) }
        XCTAssertTrue(inside("/a/b", "/a"))
        XCTAssertTrue(inside("/a//b/", "/a/"))
        XCTAssertTrue(inside("/a/./b", "/a"))
        XCTAssertTrue(inside("/x", "/"))
        XCTAssertFalse(inside("/ab", "/a"))
        XCTAssertFalse(inside("/a", "/a"))
        XCTAssertFalse(inside("/a", "/a/b"))
        XCTAssertTrue(TransferNames.isSame(Array("a/./b/".utf8), Array("a/b".utf8)))
    }

    func testAdmissionRotatesHostsThenSourcesFirstInFirstOutWithinEach() {
        var queue = FairQueue<String>()
        // Source s1 queues six files on host A, then s2 two on A, then s3 two on B.
        for i in 1...6 { queue.enqueue("s1-A\(i)", hosts: ["A"], source: "s1") }
        for i in 1...2 { queue.enqueue("s2-A\(i)", hosts: ["A"], source: "s2") }
        for i in 1...2 { queue.enqueue("s3-B\(i)", hosts: ["B"], source: "s3") }
        let first = queue.admit(.init(active: 4, perHost: 10))
        XCTAssertEqual(first, ["s1-A1", "s3-B1", "s2-A1", "s3-B2"], "hosts alternate; on A the sources take turns")
        // Per host: A may take one more of 3 once two free.
        queue.finish("s1-A1")
        queue.finish("s3-B1")
        let next = queue.admit(.init(active: 10, perHost: 3))
        XCTAssertEqual(next, ["s1-A2", "s2-A2"], "A reaches 3 (s2-A1, s1-A2, s2-A2); B has nothing queued")
        XCTAssertEqual(queue.active(on: "A"), 3)
        XCTAssertEqual(queue.admit(.init(active: 10, perHost: 3)), [])
        // A lower limit applies to what is queued; what runs keeps running.
        XCTAssertEqual(queue.activeCount, 4)
        queue.finish("s2-A1")
        XCTAssertEqual(queue.admit(.init(active: 2, perHost: 3)), [], "four still run above the new limit of 2")
    }

    func testACrossHostFileNeedsASlotOnBothHostsAndAResumedOneKeepsItsPlace() {
        var queue = FairQueue<String>()
        queue.enqueue("busy-B", hosts: ["B"], source: "x")
        XCTAssertEqual(queue.admit(.init(active: 5, perHost: 1)), ["busy-B"])
        queue.enqueue("copy-AB", hosts: ["A", "B"], source: "y")
        queue.enqueue("after-A", hosts: ["A"], source: "y")
        XCTAssertEqual(queue.admit(.init(active: 5, perHost: 1)), [], "B is full and y is first in, first out")
        queue.finish("busy-B")
        XCTAssertEqual(queue.admit(.init(active: 5, perHost: 1)), ["copy-AB"])
        XCTAssertEqual(queue.active(on: "A"), 1)
        XCTAssertEqual(queue.active(on: "B"), 1)
        // Paused (removed) and put back: ahead of what its source queued after it.
        queue.remove("copy-AB")
        queue.enqueue("copy-AB", hosts: ["A", "B"], source: "y")
        XCTAssertEqual(queue.admit(.init(active: 5, perHost: 1)), ["copy-AB"])
    }
    func testALongSourceKeepsItsOrderThroughTakingRemovingAndResuming() {
        // Thousands of files from one run: taken from the front, some removed while queued,
        // one paused and put back; the order stays first in, first out.
        var queue = FairQueue<Int>()
        for i in 0..<1_000 { queue.enqueue(i, hosts: ["A"], source: "run") }
        var order: [Int] = []
        func take(_ count: Int) {
            for _ in 0..<count {
                let started = queue.admit(.init(active: 1, perHost: 1))
                XCTAssertEqual(started.count, 1)
                guard let id = started.first else { return }
                order.append(id)
                queue.finish(id)
            }
        }
        take(150)
        XCTAssertEqual(order, Array(0..<150))
        queue.remove(500)
        queue.remove(151)
        // 150 starts, is paused (removed), and comes back ahead of 152.
        XCTAssertEqual(queue.admit(.init(active: 1, perHost: 1)), [150])
        queue.remove(150)
        queue.enqueue(150, hosts: ["A"], source: "run")
        order = []
        take(848)
        XCTAssertEqual(order.prefix(2), [150, 152])
        XCTAssertEqual(order, [150] + Array(152..<500) + Array(501..<1_000))
        XCTAssertEqual(queue.admit(.init(active: 1, perHost: 1)), [], "nothing is left")
        XCTAssertEqual(queue.activeCount, 0)
    }

    // MARK: - The prompt's lines (termind sftp HOST)

    func testPromptLinesSplitAsAShellSplitsThem() throws {
        XCTAssertEqual(try BrowseLine.words("  put  my\\ file 'a b'  \"c \\\"d\\\" \\x\" ''  "), ["put", "my file", "a b", "c \"d\" \\x", ""])
        XCTAssertEqual(try BrowseLine.words("ls\t-L\tdir"), ["ls", "-L", "dir"])
        XCTAssertEqual(try BrowseLine.words(""), [])
        XCTAssertEqual(try BrowseLine.words("a'b'c\"d\"e"), ["abcde"], "quotes join with what touches them")
        XCTAssertThrowsError(try BrowseLine.words("ls 'open")) { XCTAssertEqual("\($0)", "the quote ' is not closed") }
        XCTAssertThrowsError(try BrowseLine.words("ls \"open")) { XCTAssertEqual("\($0)", "the quote \" is not closed") }
        XCTAssertThrowsError(try BrowseLine.words("ls end\\")) { XCTAssertEqual("\($0)", "the line ends with a backslash") }
    }

    func testPromptPathsStartAtItsFolderAndTildeAtHome() {
        let (folder, home) = ("/srv/data", "/home/ana")
        XCTAssertEqual(BrowseLine.resolve("logs/x.txt", folder: folder, home: home), "/srv/data/logs/x.txt")
        XCTAssertEqual(BrowseLine.resolve("/etc/hosts", folder: folder, home: home), "/etc/hosts")
        XCTAssertEqual(BrowseLine.resolve("~", folder: folder, home: home), "/home/ana")
        XCTAssertEqual(BrowseLine.resolve("~/notes", folder: folder, home: home), "/home/ana/notes")
        XCTAssertEqual(BrowseLine.resolve(".", folder: folder, home: home), "/srv/data")
        XCTAssertEqual(BrowseLine.resolve("..", folder: folder, home: home), "/srv/data/..", "the server resolves .. (it knows the links)")
        XCTAssertEqual(BrowseLine.resolve("*.log", folder: "/", home: home), "/*.log")
        XCTAssertEqual(BrowseLine.resolve("~x", folder: folder, home: home), "/srv/data/~x", "~user is a name here")
        // A path to be matched: the folder's own pattern characters are escaped, the typed ones stay.
        XCTAssertEqual(BrowseLine.resolve("*.log", folder: "/x/run[1]", home: home, pattern: true), "/x/run\\[1]/*.log")
        XCTAssertEqual(BrowseLine.resolve("~/a?", folder: folder, home: "/h/*", pattern: true), "/h/\\*/a?")
        XCTAssertEqual(BrowseLine.resolve("a", folder: "/x/back\\slash", home: home, pattern: true), "/x/back\\\\slash/a")
        XCTAssertEqual(BrowseLine.resolve("a", folder: "/x/run[1]", home: home), "/x/run[1]/a", "a literal path stays as it is")
    }

    func testPromptOptionsComeBeforeTheWordsAndEndAtDoubleDash() {
        let parsed = BrowseLine.options(["-rp", "-L", "src", "-x"][...])
        XCTAssertEqual(parsed.flags, ["r", "p", "L"])
        XCTAssertEqual(parsed.rest, ["src", "-x"])
        let dashed = BrowseLine.options(["-r", "--", "-name-", "b"][...])
        XCTAssertEqual(dashed.flags, ["r"])
        XCTAssertEqual(dashed.rest, ["-name-", "b"])
        XCTAssertEqual(BrowseLine.options(["-", "x"][...]).rest, ["-", "x"], "a lone - is a word")
    }
}
