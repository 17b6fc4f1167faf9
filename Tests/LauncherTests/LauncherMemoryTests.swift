import Foundation
@testable import TermindLauncher
import XCTest

final class LauncherMemoryTests: XCTestCase {
    /// The launcher fixes glibc's mmap threshold before anything allocates (issue 40). With
    /// glibc's default, freeing a mapped 16 MiB block raises the threshold above it, and the
    /// next 12 MiB block comes from a heap (where freed memory stays resident); fixed at
    /// 128 KiB, it is mapped for itself (its chunk starts 16 bytes into a mapping of its own).
    /// (Sizes far above anything the test process has freed, so no free heap chunk serves it.)
    func testBigBlocksAreMappedForThemselvesOnceTheThresholdIsFixed() throws {
        XCTAssertTrue(Launcher.setMmapThreshold(128 << 10))
        let first = try XCTUnwrap(malloc(16 << 20))
        free(first)
        let block = try XCTUnwrap(malloc(12 << 20))
        defer { free(block) }
        let start = UInt(bitPattern: block) - 16
        XCTAssertEqual(start % 4096, 0, "a mapped chunk begins a page")
        let maps = try String(contentsOfFile: "/proc/self/maps", encoding: .utf8)
        let mapping = String(start, radix: 16) + "-"
        XCTAssertTrue(maps.split(separator: "\n").contains { $0.hasPrefix(mapping) }, "no mapping of its own begins at \(mapping)")
    }
}
