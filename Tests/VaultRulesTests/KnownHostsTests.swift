import Foundation
import TermindCore
import VaultRules
import XCTest

/// known_hosts rules against hand-written files. Every expectation about `check` was confirmed
/// against OpenSSH 9.2's `ssh -v` (StrictHostKeyChecking=yes, CheckHostIP=no) with the same lines.
final class KnownHostsTests: XCTestCase {
    // Real keys made by ssh-keygen; fingerprints as `ssh-keygen -l -E sha256` printed them.
    static let edA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFIECUIgPaorJDkzeMqyD9bNpZ50sUc6POCsqfS3yNaK"
    static let edB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIILA9YoWwQeLVDNUK7l0KsC8N95uYoUFjhtyRLNRFIYz"
    static let ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBLUqSPocf0zAWMPkM1kAvpT6iWaYbNcjhnVKXwILopwxG8cqQpD6+t1HQK40TULrgHHYZKXQocyWvqdtHL5dHCE="
    static let rsa = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCyam352IHNhaFjVek4O9XIn6YTQNN28oLL5Aczq4ITFk/9IPaPjHg5DICqYKxxX6YOylsgSUoTUY9IhG9PZihEvQTeKn9R0TOYKjHF0a2c90x3sdU5xkMcok4DvwUSJztHRKSw27YgVTQ6R66pzTl13oHr8oEHn5fzaJRISx/vYIluxGfJOHdk3aMyLvFIVNhdEeQ+oLH7Ic6ys/k6knXd016CxpE0Md5/AvAURYOKJnWvEK7m0VSjdYZI6kq2qPNQbHo/pmZW+3HscQnvvmqZCTvx+2zccgGlqEeCdEZdgTcfTKLOVowCAh5Cl5Wpo0kRYD1CjgZUGQ4mHT9ejIr5"

    var keyA: HostKey { try! HostKey(openSSHLine: Self.edA) }
    var keyB: HostKey { try! HostKey(openSSHLine: Self.edB) }
    var keyC: HostKey { try! HostKey(openSSHLine: Self.ecdsa) }
    var keyR: HostKey { try! HostKey(openSSHLine: Self.rsa) }

    func decide(_ text: String, host: String = "example.com", port: Int = 22, key: HostKey) -> TrustDecision {
        let parsed = KnownHosts.parse(text, source: "known_hosts")
        XCTAssertEqual(parsed.problems, [], "fixture should parse cleanly")
        return KnownHosts.check(host: host, port: port, key: key, entries: parsed.entries)
    }

    func trustedLine(_ decision: TrustDecision) -> Int? {
        if case .trusted(let entry) = decision { return entry.line }
        return nil
    }

    // MARK: HostKey

    func testFingerprintSHA256IsWhatSSHKeygenPrints() {
        XCTAssertEqual(keyA.fingerprintSHA256, "SHA256:qDPd3xOzx5JwPKPPtHuHR0+bC69aRXAO/wc3NI+PAQg")
        XCTAssertEqual(keyB.fingerprintSHA256, "SHA256:pT7QCvQGYUiSAdntT9yaKo3+0TrZU2fL3GY4nMBaWjo")
        XCTAssertEqual(keyC.fingerprintSHA256, "SHA256:2ra83mEgoAOMTDgC0g6zLBaCREcUexr5mnL6QIZnSIc")
        XCTAssertEqual(keyR.fingerprintSHA256, "SHA256:mFBZLpVpM/WEP8zRVgj8VSWPxdeHCVJsSyu9+7PhjA8")
    }

    func testHostKeyReadsPubLineWithCommentAndKeepsBlob() throws {
        let key = try HostKey(openSSHLine: Self.ecdsa + " user@laptop\n")
        XCTAssertEqual(key.algorithm, "ecdsa-sha2-nistp256")
        XCTAssertEqual(key.blob.count, 104)
        XCTAssertEqual(key.openSSHText, Self.ecdsa)
        XCTAssertTrue(key.isSupported)
    }

    func testHostKeyRejectsTypeMismatchBadBase64TruncationAndTrailingData() {
        let edBase64 = String(Self.edA.split(separator: " ")[1])
        let blob = Data(base64Encoded: edBase64)!
        XCTAssertThrowsError(try HostKey(openSSHLine: "ssh-rsa " + edBase64)) { error in
            XCTAssertEqual((error as? TermindError)?.code, "host_key.invalid")
            XCTAssertTrue((error as? TermindError)?.message.contains("'ssh-ed25519'") ?? false)
        }
        XCTAssertThrowsError(try HostKey(openSSHLine: "ssh-ed25519 AAAA*AAA"))
        XCTAssertThrowsError(try HostKey(openSSHLine: "ssh-ed25519 " + String(edBase64.dropLast(4))))
        XCTAssertThrowsError(try HostKey(algorithm: "ssh-ed25519", blob: blob + Data([0, 0, 0, 0])))
        XCTAssertThrowsError(try HostKey(algorithm: "ssh-ed25519", blob: blob.dropLast()))
        XCTAssertThrowsError(try HostKey(openSSHLine: "ssh-ed25519"))
        // Unpadded base64 is refused by OpenSSH's b64_pton too.
        let ecBase64 = String(Self.ecdsa.split(separator: " ")[1])
        XCTAssertThrowsError(try HostKey(openSSHLine: "ecdsa-sha2-nistp256 " + ecBase64.dropLast()))
        // The curve inside must agree with the type name.
        XCTAssertThrowsError(try HostKey(openSSHLine: "ecdsa-sha2-nistp384 " + ecBase64))
    }

    func testRSASignatureNamesAreAcceptedAsRSAKeyType() throws {
        let base64 = Self.rsa.split(separator: " ")[1]
        let key = try HostKey(openSSHLine: "rsa-sha2-512 \(base64)")
        XCTAssertEqual(key, keyR)
        XCTAssertEqual(key.algorithm, "ssh-rsa")
    }

    // MARK: Parsing

    func testParseSkipsCommentsAndBlankLinesAndKeepsLineNumbersAndComments() {
        let text = """
        # a comment

           \t# indented comment
        example.com,192.0.2.1 \(Self.edA) my laptop key
        \t  other.example\t\(Self.edB)
        """
        let (entries, problems) = KnownHosts.parse(text + "\n", source: "/home/u/.ssh/known_hosts")
        XCTAssertEqual(problems, [])
        XCTAssertEqual(entries.map(\.line), [4, 5])
        XCTAssertEqual(entries.map(\.source), ["/home/u/.ssh/known_hosts", "/home/u/.ssh/known_hosts"])
        XCTAssertEqual(entries[0].names, .patterns("example.com,192.0.2.1"))
        XCTAssertEqual(entries[0].comment, "my laptop key")
        XCTAssertEqual(entries[0].key, keyA)
        XCTAssertEqual(entries[1].names, .patterns("other.example"))
        XCTAssertNil(entries[1].comment)
        XCTAssertEqual(entries[1].marker, .none)
    }

    func testParseReadsMarkersAndCRLFLines() {
        let text = "@revoked example.com \(Self.edA)\r\n@cert-authority  *.example.com\t\(Self.edB) ca\r\n"
        let (entries, problems) = KnownHosts.parse(text, source: "kh")
        XCTAssertEqual(problems, [])
        XCTAssertEqual(entries.map(\.marker), [.revoked, .certAuthority])
        XCTAssertEqual(entries.map(\.line), [1, 2])
        XCTAssertEqual(entries.last?.names, .patterns("*.example.com"))
        XCTAssertEqual(entries.last?.comment, "ca")
    }

    func testMarkerEndsAtTheFirstSpaceOnTheLineSoATabAfterItBreaksTheLine() {
        // hostfile.c check_markers looks for a space anywhere before trying a tab: ssh 9.2
        // ignores "@revoked<TAB>host key" (so the revocation is lost) but reads an all-tab line.
        let mixed = KnownHosts.parse("@revoked\texample.com \(Self.edA)\n", source: "kh")
        XCTAssertEqual(mixed.entries, [])
        XCTAssertEqual(mixed.problems.map(\.kind), [.invalidMarker])
        let tabs = KnownHosts.parse("@revoked\texample.com\t" + Self.edA.replacingOccurrences(of: " ", with: "\t") + "\n", source: "kh")
        XCTAssertEqual(tabs.problems, [])
        XCTAssertEqual(tabs.entries.map(\.marker), [.revoked])
    }

    func testMalformedLinesBecomeProblemsNamingSourceAndLineAndAreSkipped() {
        let edBase64 = Self.edA.split(separator: " ")[1]
        let text = """
        @bogus example.com \(Self.edA)
        @revoked @revoked example.com \(Self.edA)
        example.com
        example.com # no key
        example.com ssh-ed25519
        example.com ssh-ed25519 not*base64
        example.com ssh-rsa \(edBase64)
        |1|AAECAwQFBgcICQoLDA0ODxAREhM=|short \(Self.edA)
        |1|AAEC|nnUK16ANsXd3hL31YfAkGOluSjU= \(Self.edA)
        example.com 1024 35 1234567890
        good.example \(Self.edB)
        """
        let (entries, problems) = KnownHosts.parse(text, source: "hosts.txt")
        XCTAssertEqual(entries.map(\.line), [11])
        XCTAssertEqual(problems.map(\.line), Array(1...10))
        XCTAssertEqual(problems.map(\.kind), [.invalidMarker, .invalidMarker, .missingKey, .missingKey, .missingKey,
                                              .badKey, .badKey, .badHashedName, .badHashedName, .legacyRSA1])
        XCTAssertTrue(problems.allSatisfy { $0.source == "hosts.txt" })
        let error = problems[6].error
        XCTAssertEqual(error.code, "known_hosts.bad_key")
        XCTAssertTrue(error.message.hasPrefix("hosts.txt:7: "), error.message)
        XCTAssertTrue(error.message.contains("'ssh-rsa'") && error.message.contains("'ssh-ed25519'"), error.message)
    }

    func testUnknownKeyTypesAreKeptButNeverDecideTrust() {
        let text = "example.com ssh-futurekey AAAADXNzaC1mdXR1cmVrZXkAAAAA extra\n"
        let (entries, problems) = KnownHosts.parse(text, source: "kh")
        XCTAssertEqual(problems, [])
        XCTAssertEqual(entries.count, 1)
        XCTAssertEqual(entries[0].key.algorithm, "ssh-futurekey")
        XCTAssertFalse(entries[0].key.isSupported)
        // OpenSSH drops the line when loading, so the host is unknown rather than changed.
        XCTAssertEqual(KnownHosts.check(host: "example.com", port: 22, key: keyA, entries: entries), .unknown)
    }

    // MARK: Trust decision, port 22

    func testSameKeyOnMatchingLineIsTrusted() {
        let decision = decide("other.example \(Self.edB)\nexample.com \(Self.edA)\n", key: keyA)
        XCTAssertEqual(trustedLine(decision), 2)
        XCTAssertTrue(decision.isTrusted)
    }

    func testNoLineForHostIsUnknown() {
        XCTAssertEqual(decide("other.example \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(decide("", key: keyA), .unknown)
    }

    func testDifferentKeyOfSameTypeIsChangedAndListsKnownKeys() {
        XCTAssertEqual(decide("example.com \(Self.edB)\n", key: keyA), .changed(known: [keyB]))
    }

    func testKeysOfOtherTypesOnlyAreToldApartFromAChangedKeyButStillRefused() {
        // check_hostkeys_by_key_or_type: any non-matching plain key for the host is HOST_CHANGED
        // (OpenSSH 9.2 prints "REMOTE HOST IDENTIFICATION HAS CHANGED" for an ECDSA key when
        // only ED25519 is known). We refuse too, but say which case it is.
        let decision = decide("example.com \(Self.rsa)\nexample.com \(Self.ecdsa)\n", key: keyA)
        XCTAssertEqual(decision, .otherKeyTypes(known: [keyR, keyC]))
        XCTAssertFalse(decision.isTrusted)
        // A key of the presented type among them: that one changed, and only it is named.
        XCTAssertEqual(decide("example.com \(Self.rsa)\nexample.com \(Self.edB)\n", key: keyA), .changed(known: [keyB]))
    }

    func testKnownKeyTypesAreThoseOfThePlainLinesNamingTheHostInLineOrder() {
        let text = """
            example.com \(Self.ecdsa)
            other.example \(Self.rsa)
            *.com \(Self.edA)
            example.com \(Self.edB)
            @revoked example.com \(Self.rsa)
            @cert-authority example.com \(Self.rsa)
            [example.com]:2222 \(Self.rsa)

            """
        let entries = KnownHosts.parse(text, source: "known_hosts").entries
        XCTAssertEqual(KnownHosts.knownKeyTypes(host: "example.com", port: 22, entries: entries), ["ecdsa-sha2-nistp256", "ssh-ed25519"])
        XCTAssertEqual(KnownHosts.knownKeyTypes(host: "EXAMPLE.com", port: 2222, entries: entries), ["ssh-rsa"],
                       "a [host]:port line decides; port-less lines then do not count")
        // Nothing names [example.com]:2200: the port-less lines count, as check() consults them.
        XCTAssertEqual(KnownHosts.knownKeyTypes(host: "example.com", port: 2200, entries: Array(entries.prefix(4))),
                       ["ecdsa-sha2-nistp256", "ssh-ed25519"])
        XCTAssertEqual(KnownHosts.knownKeyTypes(host: "example.org", port: 22, entries: entries), [])
    }

    func testAnyLineHoldingTheKeyWinsOverOtherKeysForTheHost() {
        let decision = decide("example.com \(Self.edB)\nexample.com \(Self.rsa)\n*.com \(Self.edA)\n", key: keyA)
        XCTAssertEqual(trustedLine(decision), 3)
    }

    func testRevokedKeyIsRefusedRegardlessOfOtherLines() {
        let text = "example.com \(Self.edA)\n@revoked * \(Self.edA)\n"
        guard case .revoked(let entry) = decide(text, key: keyA) else { return XCTFail("expected revoked") }
        XCTAssertEqual(entry.line, 2)
    }

    func testRevokedLineForAnotherKeyDoesNotAffectTrust() {
        XCTAssertEqual(trustedLine(decide("@revoked example.com \(Self.edB)\nexample.com \(Self.edA)\n", key: keyA)), 2)
    }

    func testCertAuthorityLineDoesNotTrustAPlainKey() {
        XCTAssertEqual(decide("@cert-authority example.com \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(decide("@cert-authority example.com \(Self.edA)\nexample.com \(Self.edB)\n", key: keyA),
                       .changed(known: [keyB]))
    }

    // MARK: Ports

    func testNonDefaultPortUsesBracketedEntry() {
        let text = "[example.com]:2222 \(Self.edA)\n"
        XCTAssertEqual(trustedLine(decide(text, port: 2222, key: keyA)), 1)
        XCTAssertEqual(decide(text, port: 2200, key: keyA), .unknown)
        XCTAssertEqual(decide(text, port: 22, key: keyA), .unknown)
    }

    func testNonDefaultPortWithoutBracketedEntryAcceptsSameKeyOnly() {
        let text = "example.com \(Self.edA)\n"
        guard case .trustedWithoutPort(let entry) = decide(text, port: 2222, key: keyA) else { return XCTFail("expected w/out port") }
        XCTAssertEqual(entry.line, 1)
        // A different port-less key makes the port unknown, not changed (OpenSSH's recursive check is read-only).
        XCTAssertEqual(decide(text, port: 2222, key: keyB), .unknown)
    }

    func testBracketedEntryWithOtherKeyIsChangedEvenWhenPortlessLineHoldsTheKey() {
        let text = "[example.com]:2222 \(Self.edB)\nexample.com \(Self.edA)\n"
        XCTAssertEqual(decide(text, port: 2222, key: keyA), .changed(known: [keyB]))
    }

    func testBracketedPort22EntryDoesNotMatchPort22() {
        XCTAssertEqual(decide("[example.com]:22 \(Self.edA)\n", port: 22, key: keyA), .unknown)
    }

    func testStarPatternAlsoMatchesBracketedLookupName() {
        XCTAssertEqual(trustedLine(decide("* \(Self.edA)\n", port: 2222, key: keyA)), 1)
        XCTAssertEqual(decide("* \(Self.edB)\n", port: 2222, key: keyA), .changed(known: [keyB]))
        XCTAssertEqual(trustedLine(decide("[*.com]:22?? \(Self.edA)\n", port: 2222, key: keyA)), 1)
    }

    func testRevocationOnlyAppliesToLinesNamingTheLookupName() {
        let text = "@revoked example.com \(Self.edA)\n[example.com]:2222 \(Self.edA)\n"
        XCTAssertEqual(trustedLine(decide(text, port: 2222, key: keyA)), 2)
    }

    func testPortlessRevocationReachedByFallbackIsReportedRevoked() {
        let text = "@revoked example.com \(Self.edA)\nexample.com \(Self.edA)\n"
        guard case .revoked(let entry) = decide(text, port: 2222, key: keyA) else { return XCTFail("expected revoked") }
        XCTAssertEqual(entry.line, 1)
    }

    // MARK: Patterns

    func testNegatedPatternMakesTheWholeLineNotMatch() {
        XCTAssertEqual(decide("*,!example.com \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(decide("!example.com,* \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(decide("*,!example.com \(Self.edB)\n", key: keyA), .unknown)
        XCTAssertEqual(trustedLine(decide("*.com,!*.org \(Self.edA)\n", key: keyA)), 1)
        // A negation alone never makes a line match.
        XCTAssertEqual(decide("!other.example \(Self.edA)\n", key: keyA), .unknown)
    }

    func testWildcardPatterns() {
        XCTAssertEqual(trustedLine(decide("ex?mple.c*m \(Self.edA)\n", key: keyA)), 1)
        XCTAssertEqual(trustedLine(decide("**.com \(Self.edA)\n", key: keyA)), 1)
        XCTAssertEqual(decide("ex?mple.co \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(decide("*.example.com \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(trustedLine(decide("a,,example.com \(Self.edA)\n", key: keyA)), 1)
    }

    func testHostnameMatchingIgnoresCase() {
        XCTAssertEqual(trustedLine(decide("EXAMPLE.Com \(Self.edA)\n", host: "example.COM", key: keyA)), 1)
        XCTAssertEqual(trustedLine(decide("[Example.com]:2222 \(Self.edA)\n", host: "EXAMPLE.com", port: 2222, key: keyA)), 1)
    }

    func testSubpatternOf1023BytesMakesTheLineFailAsInOpenSSH() {
        let long = String(repeating: "a", count: 1023)
        XCTAssertEqual(decide("example.com,\(long) \(Self.edA)\n", key: keyA), .unknown)
        XCTAssertEqual(trustedLine(decide("example.com,\(long.dropLast()) \(Self.edA)\n", key: keyA)), 1)
    }

    // MARK: Hashing and rendering

    func testHashedNameIsHMACSHA1OfLookupNameUnderSalt() {
        let salt = Data(0..<20)
        XCTAssertEqual(KnownHosts.hashedName("example.com", salt: salt), "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|nnUK16ANsXd3hL31YfAkGOluSjU=")
        XCTAssertEqual(KnownHosts.hashedName(KnownHosts.lookupName(host: "Example.com", port: 2222), salt: salt),
                       "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|Wgcx+Fm+LmaWwC7rQ80eIf2uHe0=")
    }

    func testHashedLinesMatchOnlyTheirLookupName() {
        let text = """
        |1|AAECAwQFBgcICQoLDA0ODxAREhM=|nnUK16ANsXd3hL31YfAkGOluSjU= \(Self.edA)
        |1|AAECAwQFBgcICQoLDA0ODxAREhM=|Wgcx+Fm+LmaWwC7rQ80eIf2uHe0= \(Self.edB)
        """
        XCTAssertEqual(trustedLine(decide(text, host: "EXAMPLE.com", key: keyA)), 1)
        XCTAssertEqual(trustedLine(decide(text, port: 2222, key: keyB)), 2)
        XCTAssertEqual(decide(text, port: 2222, key: keyA), .changed(known: [keyB]))
        XCTAssertEqual(decide(text, host: "example.org", key: keyA), .unknown)
    }

    func testBuiltEntriesUseLowercaseLookupNameAndRenderAsOpenSSHWrites() {
        let plain = KnownHostEntry(host: "Example.COM", port: 2222, key: keyA, hashed: false)
        XCTAssertEqual(plain.lineText, "[example.com]:2222 \(Self.edA)")
        let hashed = KnownHostEntry(host: "example.com", port: 22, key: keyA, salt: Data(0..<20), comment: "added by termind")
        XCTAssertEqual(hashed.lineText, "|1|AAECAwQFBgcICQoLDA0ODxAREhM=|nnUK16ANsXd3hL31YfAkGOluSjU= \(Self.edA) added by termind")
        let random = KnownHostEntry(host: "example.com", port: 22, key: keyA, hashed: true)
        guard case .hashed(let salt, _) = random.names else { return XCTFail("expected hashed") }
        XCTAssertEqual(salt.count, 20)
        XCTAssertTrue(KnownHosts.matches(random, lookupName: "example.com"))
        XCTAssertFalse(KnownHosts.matches(random, lookupName: "[example.com]:22"))
    }

    func testRenderThenParseGivesTheSameEntries() {
        let text = """
        @revoked example.com \(Self.edB)
        @cert-authority *.example.com,!bad.example.com \(Self.ecdsa) corp CA
        |1|AAECAwQFBgcICQoLDA0ODxAREhM=|nnUK16ANsXd3hL31YfAkGOluSjU= \(Self.rsa)
        [example.com]:2222,192.0.2.1 \(Self.edA) two words
        """
        let first = KnownHosts.parse(text, source: "a")
        XCTAssertEqual(first.problems, [])
        let rendered = KnownHosts.render(first.entries)
        XCTAssertEqual(rendered, text + "\n")
        XCTAssertEqual(KnownHosts.parse(rendered, source: "a").entries, first.entries)
    }

    func testAPatternWithManyStarsIsDecidedWithoutBacktrackingExplosively() {
        // A recursive match_pattern tries every split for every '*': 2^40 here. One port, iterative.
        let name = String(repeating: "a", count: 400) + ".example"
        let pattern = String(repeating: "*a", count: 40) + "*b"
        XCTAssertEqual(decide("\(pattern) \(Self.edA)\n", host: name, key: keyA), .unknown)
        XCTAssertEqual(trustedLine(decide("\(String(repeating: "*a", count: 40))* \(Self.edA)\n", host: name, key: keyA)), 1)
    }
}
