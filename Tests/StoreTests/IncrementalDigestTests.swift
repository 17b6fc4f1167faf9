import Foundation
import TermindCrypto
import XCTest

/// The incremental digest that transfers hash as they go agrees with the one-shot digest
/// and with the published test vectors, however the input is cut.
final class IncrementalDigestTests: XCTestCase {
    func testPiecesHashLikeTheWhole() {
        let data = Data((0..<100_003).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        for cut in [1, 63, 64, 65, 4096, 100_003] {
            let digest = IncrementalDigest(.sha256)
            var offset = 0
            while offset < data.count {
                let end = min(offset + cut, data.count)
                digest.update(data[offset..<end])
                offset = end
            }
            XCTAssertEqual(digest.finish(), Digest.sha256(data), "pieces of \(cut) bytes")
        }
    }

    func testKnownVectors() {
        // FIPS 180-2 examples.
        let empty = IncrementalDigest(.sha256)
        XCTAssertEqual(empty.finish().hexEncoded, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let abc = IncrementalDigest(.sha256)
        abc.update(Data("a".utf8))
        abc.update(Data("bc".utf8))
        XCTAssertEqual(abc.finish().hexEncoded, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
