import Foundation
import TermindCore
import TermindHarness
import XCTest

/// Core's Foundation-free text helpers give what Foundation gives for the same input.
final class PathTextTests: XCTestCase {
    func testPathsAreJoinedCutAndStandardizedAsNSStringDoes() throws {
        let directory = try TemporaryDirectory("termind-path-text")
        defer { directory.remove() }
        let real = directory.file("real")
        try FileManager.default.createDirectory(atPath: real + "/inner", withIntermediateDirectories: true)
        XCTAssertEqual(symlink(real, directory.file("link")), 0)
        XCTAssertEqual(symlink("real/inner", directory.file("relative-link")), 0)
        let root = directory.path
        let home = directory.file("home")

        for path in ["/", "/a", "/a/b", "/a/b/", "a/b/", "a/b", "//a//b//", "", "/a/./b"] {
            XCTAssertEqual(PathText.lastComponent(path), (path as NSString).lastPathComponent, path)
            XCTAssertEqual(PathText.deletingLastComponent(path), (path as NSString).deletingLastPathComponent, path)
        }
        // NSString stops the process for a single relative component; "" is its parent.
        XCTAssertEqual(PathText.deletingLastComponent("a"), "")
        XCTAssertEqual(PathText.lastComponent("a"), "a")

        for (base, component) in [("a/", "b"), ("", "b"), ("/", "b"), ("a", "/b"), ("a", "b/"), ("/a//", "//b"), ("a", ""), ("/", ""), (root, "x.sqlite")] {
            XCTAssertEqual(PathText.appending(base, component), (base as NSString).appendingPathComponent(component), "\(base) + \(component)")
        }

        let paths = ["\(root)/link/x", "\(root)/link/../y", "\(root)/link", "\(root)/link/inner/",
                     "\(root)/./real//inner/../inner", "/a/./b//c/", "a/../../b", "/../a", "rel/./x/", "/a/b/..", "//a", "/",
                     "~/notes.txt", "~", "\(root)/missing/../link/z"]
        let previous = getenv("HOME").map { String(cString: $0) }
        setenv("HOME", home, 1)
        defer { if let previous { setenv("HOME", previous, 1) } else { unsetenv("HOME") } }
        for path in paths {
            // NSString expands `~` from its own idea of the home folder (not $HOME as set here).
            XCTAssertEqual(PathText.standardized(path, home: NSHomeDirectory()), (path as NSString).standardizingPath, path)
        }
        XCTAssertEqual(PathText.standardized("~/notes.txt", home: home), home + "/notes.txt")
        // A link to a relative target is resolved too (Foundation on Linux leaves it as it is).
        XCTAssertEqual(PathText.standardized("\(root)/relative-link/deeper/file", home: nil),
                       PathText.standardized(real, home: nil) + "/inner/deeper/file")
        XCTAssertEqual(PathText.standardized("\(root)/link/x", home: home), PathText.appending(PathText.standardized(real, home: home), "x"))
    }

    func testNumbersAreFormattedAndTextTrimmedAsFoundationDoes() {
        for value in [0.0, 1.25, 2.35, -0.5, 1234.5678, 99.995, 1e-7, 123456789.0] {
            for format in ["%.0f", "%.1f", "%.2f", "%.3f×", "%.6f", "%.1f MiB"] {
                XCTAssertEqual(String(printf: format, value), String(format: format, value), "\(format) \(value)")
            }
        }
        XCTAssertEqual(String(printf: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int32(2026), Int32(12), Int32(7), Int32(3), Int32(4), Int32(5), Int32(67)),
                       "2026-12-07T03:04:05.067Z")
        XCTAssertEqual(String(printf: "%0200ld", 7), String(repeating: "0", count: 199) + "7", "longer than the first buffer")
        for text in ["  a b \t", "\n\t x \r\n", "", "   ", "\u{00A0}nb\u{2003}", "..field..", "x\n"] {
            XCTAssertEqual(text.trimmedWhitespaceAndNewlines, text.trimmingCharacters(in: .whitespacesAndNewlines), text.debugDescription)
            XCTAssertEqual(text.trimmedWhitespace, text.trimmingCharacters(in: .whitespaces), text.debugDescription)
            XCTAssertEqual(text.trimming { $0 == "." }, text.trimmingCharacters(in: CharacterSet(charactersIn: ".")), text.debugDescription)
        }
        for text in ["plain", "a%20b", "%41%62", "%e2%82%ac", "%E2%82%AC", "bad%", "bad%4", "bad%zz", "%ff", "%C3%A9t%C3%A9", ""] {
            XCTAssertEqual(text.percentDecoded, text.removingPercentEncoding, text)
        }
        let segment = CharacterSet.urlPathAllowed.subtracting(CharacterSet(charactersIn: "/?#"))
        for text in ["gemini-2.5-pro", "models/a b", "x?y#z", "tuned/é-ü", "a%b", "~ok_(1)!$&'*+,;=:@", ""] {
            XCTAssertEqual(text.percentEncoded(keeping: URLText.isPathSegmentByte), text.addingPercentEncoding(withAllowedCharacters: segment), text)
        }
        XCTAssertEqual("ab".padded(to: 4), "ab".padding(toLength: 4, withPad: " ", startingAt: 0))
        XCTAssertEqual("abcdef".padded(to: 4), "abcdef".padding(toLength: 4, withPad: " ", startingAt: 0))
    }

    /// The validation classes match CharacterSet's for every scalar of the Basic Multilingual
    /// Plane assigned by Unicode 13. Foundation's tables on Linux are older in places: they
    /// miss letters of later planes (Tangut, U+17000…, is a letter since Unicode 9) and
    /// still class U+200B ZERO WIDTH SPACE as a space (a format character since Unicode
    /// 4.0.1; validation refuses it as a control character just the same).
    func testScalarClassesAreCharacterSetsClasses() {
        var compared = 0
        XCTAssertTrue(Unicode.Scalar(0x17000)!.isAlphanumericScalar)
        XCTAssertTrue(Unicode.Scalar(0x200B)!.isControlScalar)
        for value in UInt32(0)...0xFFFF where value != 0x200B {
            guard let scalar = Unicode.Scalar(value), let age = scalar.properties.age, age.major <= 13 else { continue }
            compared += 1
            XCTAssertEqual(scalar.isAlphanumericScalar, CharacterSet.alphanumerics.contains(scalar), "U+\(String(value, radix: 16)) alphanumerics")
            XCTAssertEqual(scalar.isControlScalar, CharacterSet.controlCharacters.contains(scalar), "U+\(String(value, radix: 16)) controls")
            XCTAssertEqual(scalar.isNewlineScalar, CharacterSet.newlines.contains(scalar), "U+\(String(value, radix: 16)) newlines")
            XCTAssertEqual(scalar.isWhitespaceOrNewlineScalar, CharacterSet.whitespacesAndNewlines.contains(scalar), "U+\(String(value, radix: 16)) whitespace")
        }
        XCTAssertGreaterThan(compared, 50_000)
        XCTAssertEqual(LocalUser.home, NSHomeDirectoryForUser(NSUserName()))
        XCTAssertEqual(LocalUser.name, NSUserName())
    }

    /// A single-quoted word reaches the shell as it was, whatever it holds: a quote followed
    /// by a combining mark is one Character to Swift and to NSString, and a Character-level
    /// replace left it unescaped, ending the word early (the rest ran as shell code).
    func testASingleQuotedWordIsReadBackByTheShellExactlyAsItWas() throws {
        let directory = try TemporaryDirectory("termind-quote")
        defer { directory.remove() }
        let escaped = directory.file("escaped")
        let words = ["plain", "it's", "a'\u{301}; touch \(escaped); echo '", "'\u{301}", "''", "\u{301}'x'\u{302}", "tab\tnew\nline", "$(id) `id` \\ \"", ""]
        for word in words {
            let quoted = ShellText.singleQuoted(word)
            let result = try ProcessRunner.run("/bin/sh", ["-c", "printf %s " + quoted])
            XCTAssertEqual(result.status, 0, quoted)
            XCTAssertEqual(Array(result.stdout.utf8), Array(word.utf8), quoted)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: escaped), "a quoted word ran as shell code")
        // Byte-wise replacing finds what Character-wise search misses, and matches it elsewhere.
        XCTAssertEqual("x hunter2\u{301} y".replacingUTF8("hunter2", with: "[r]"), "x [r]\u{301} y")
        for (text, target, replacement) in [("a-b-c", "-", "_"), ("aaa", "aa", "b"), ("abc", "", "x"), ("", "a", "b"), ("1.2.3", ".", "-"), ("é", "e", "x")] {
            XCTAssertEqual(text.replacingUTF8(target, with: replacement), target.isEmpty ? text : text.replacingOccurrences(of: target, with: replacement), text)
        }
    }
}
