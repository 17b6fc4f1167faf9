import Foundation
import MetricsAPI
import MetricsRules
import TermindCore
import TermindHarness
import XCTest

/// nvidia-smi's XML as real drivers wrote it (Tests/Fixtures/NvidiaSMI, recorded on real
/// machines: see SOURCES.md), and XML a hostile host could send instead.
final class NvidiaSMITests: XCTestCase {
    private func fixture(_ name: String) throws -> [UInt8] {
        let path = Repository.path("Tests/Fixtures/NvidiaSMI/\(name)")
        return Array(try XCTUnwrap(FileManager.default.contents(atPath: path), "missing fixture \(name)"))
    }

    private let MiB: UInt64 = 1 << 20

    func testEightV100sOnDriver460WithTheirProcesses() throws {
        let gpus = try NvidiaSMI.gpus(try fixture("tesla-v100s-x8-driver-460.xml"))
        XCTAssertEqual(gpus.count, 8)
        let first = try XCTUnwrap(gpus.first)
        XCTAssertEqual(first.id, "00000000:00:0D.0")
        XCTAssertEqual(first.name, "Tesla V100S-PCIE-32GB")
        XCTAssertEqual(first.utilization, 97)
        XCTAssertEqual(first.memoryUsed, 31689 * MiB)
        XCTAssertEqual(first.memoryTotal, 32510 * MiB)
        XCTAssertEqual(first.temperature, 66)
        XCTAssertEqual(first.power, 232.80)
        XCTAssertEqual(first.powerLimit, 250)
        XCTAssertEqual(first.graphicsClock, 1410)
        XCTAssertEqual(first.memoryClock, 1107)
        XCTAssertFalse(first.migMode)
        XCTAssertEqual(first.processes, [MetricsSample.GPUProcess(pid: 37305, name: "python", memoryUsed: 31683 * MiB)])
        // The same training process on every card; the accounted-processes list is not read as processes.
        XCTAssertEqual(Set(gpus.flatMap { $0.processes.map(\.pid) }), [37305])
        XCTAssertEqual(gpus.map(\.utilization), [97, 75, 80, 23, 98, 98, 91, 99])
    }

    func testMIGDevicesOnA100sOfTwoDriverGenerations() throws {
        let old = try XCTUnwrap(try NvidiaSMI.gpus(try fixture("a100-sxm4-40gb-mig-driver-510.xml")).first)
        XCTAssertTrue(old.migMode)
        XCTAssertNil(old.utilization, "utilization is N/A with MIG on")
        XCTAssertEqual(old.migDevices.map(\.gpuInstance), [1, 2])
        XCTAssertEqual(old.migDevices.map(\.computeInstance), [0, 0])
        XCTAssertTrue(old.migDevices.allSatisfy { $0.memoryTotal != nil && $0.memoryUsed != nil })
        XCTAssertEqual(old.memoryTotal, 40960 * MiB)
        XCTAssertEqual(old.power, 66.92)

        // Driver 535 moved power to gpu_power_readings (current_power_limit).
        let new = try XCTUnwrap(try NvidiaSMI.gpus(try fixture("a100-sxm4-80gb-mig-driver-535.xml")).first)
        XCTAssertTrue(new.migMode)
        XCTAssertEqual(new.migDevices.map(\.gpuInstance), [3, 4, 5, 6])
        XCTAssertEqual(new.power, 67.03)
        XCTAssertEqual(new.powerLimit, 500)
        XCTAssertEqual(new.memoryTotal, 81920 * MiB)
        XCTAssertEqual(new.processes, [])
    }

    func testTwoA5000sOnDriver590ReadInstantPower() throws {
        let gpus = try NvidiaSMI.gpus(try fixture("rtx-a5000x2-driver-590.xml"))
        XCTAssertEqual(gpus.map(\.name), ["NVIDIA RTX A5000", "NVIDIA RTX A5000"])
        XCTAssertEqual(gpus.map(\.power), [6.52, 13.59])
        XCTAssertEqual(gpus.map(\.powerLimit), [230, 230])
        // The executable's name only: never a path's directories or arguments.
        XCTAssertEqual(gpus.flatMap { $0.processes.map(\.name) }, ["llama-server", "llama-server"])
        XCTAssertEqual(gpus[0].processes.first?.memoryUsed, 22430 * MiB)
    }

    func testOlderAndOtherDevicesWithNotAvailableValues() throws {
        let p400 = try XCTUnwrap(try NvidiaSMI.gpus(try fixture("quadro-p400-driver-418.xml")).first)
        XCTAssertEqual(p400.name, "Quadro P400")
        XCTAssertNil(p400.power, "N/A is unknown, not zero")
        XCTAssertNil(p400.powerLimit)
        XCTAssertEqual(p400.utilization, 0)
        XCTAssertFalse(p400.migMode)

        let t4 = try XCTUnwrap(try NvidiaSMI.gpus(try fixture("tesla-t4-driver-515.xml")).first)
        XCTAssertEqual(t4.processes.map(\.name), ["Xorg", "python"])
        XCTAssertEqual(t4.processes.map(\.memoryUsed), [22 * MiB, 1005 * MiB])

        let windows = try XCTUnwrap(try NvidiaSMI.gpus(try fixture("geforce-rtx2080-windows-driver-516.xml")).first)
        XCTAssertEqual(windows.processes.count, 26)
        XCTAssertTrue(windows.processes.allSatisfy { $0.memoryUsed == nil }, "N/A used memory is unknown")
        XCTAssertEqual(windows.processes.first?.name, "PhoneExperienceHost.exe")
        XCTAssertFalse(windows.processes.contains { $0.name.contains("\\") || $0.name.contains(" ") })
    }

    func testProcessNamesNeverCarryArguments() throws {
        let xml = """
        <?xml version="1.0" ?><nvidia_smi_log><gpu id="0"><product_name>X</product_name><processes><process_info>
        <pid>42</pid><process_name>/usr/bin/python3 train.py --token=SECRET</process_name><used_memory>10 MiB</used_memory>
        </process_info><process_info><pid>0</pid><process_name>bad pid</process_name></process_info></processes></gpu></nvidia_smi_log>
        """
        let gpu = try XCTUnwrap(try NvidiaSMI.gpus(Array(xml.utf8)).first)
        XCTAssertEqual(gpu.processes, [MetricsSample.GPUProcess(pid: 42, name: "python3", memoryUsed: 10 * MiB)])
    }

    /// A GPU whose product name nvidia-smi leaves out, empty or N/A has none (null), not "".
    func testAGPUWithoutAProductNameHasNone() throws {
        let xml = """
        <?xml version="1.0" ?><nvidia_smi_log><gpu id="0"><uuid>GPU-1</uuid></gpu><gpu id="1"><product_name>  </product_name><uuid></uuid></gpu>
        <gpu id="2"><product_name>N/A</product_name><uuid>[N/A]</uuid></gpu><gpu id="3"><product_name>Tesla T4</product_name></gpu></nvidia_smi_log>
        """
        // As every client sees them: JSON.
        let gpus = try NvidiaSMI.gpus(Array(xml.utf8)).map { try JSONCoding.parse(JSONEncoder().encode($0), source: "gpu") }
        XCTAssertEqual(gpus.map { $0["name"] }, [.null, .null, .null, .string("Tesla T4")])
        XCTAssertEqual(gpus.map { $0["uuid"] }, [.string("GPU-1"), .null, .null, .null])
    }

    // MARK: - Hostile XML

    func testEntitiesAndInternalDTDsAreRefused() {
        let laughs = """
        <?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
        <nvidia_smi_log><gpu id="x"><product_name>&lol2;</product_name></gpu></nvidia_smi_log>
        """
        XCTAssertThrowsError(try NvidiaSMI.gpus(Array(laughs.utf8))) { error in
            XCTAssertTrue("\(error)".contains("internal subset"), "\(error)")
            XCTAssertFalse("\(error)".contains("lol"), "the error repeats the input: \(error)")
        }
        let external = #"<?xml version="1.0"?><!DOCTYPE n SYSTEM "file:///etc/passwd"><nvidia_smi_log><gpu id="x"><product_name>&xxe;</product_name></gpu></nvidia_smi_log>"#
        XCTAssertThrowsError(try NvidiaSMI.gpus(Array(external.utf8))) { error in
            XCTAssertTrue("\(error)".contains("undeclared entity"), "\(error)")
        }
        // The DOCTYPE nvidia-smi writes is skipped, never fetched.
        let normal = #"<?xml version="1.0" ?><!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd"><nvidia_smi_log><gpu id="a"><product_name>A &amp; B &#65;&#x42;</product_name></gpu></nvidia_smi_log>"#
        XCTAssertEqual(try NvidiaSMI.gpus(Array(normal.utf8)).first?.name, "A & B AB")
    }

    func testTruncatedDeepAndOversizedDocumentsFailWithoutTheirContent() throws {
        let whole = try fixture("tesla-t4-driver-515.xml")
        for cut in [0, 1, 10, whole.count / 3, whole.count / 2, whole.count - 20] {
            XCTAssertThrowsError(try NvidiaSMI.gpus(Array(whole.prefix(cut))), "cut at \(cut)") { error in
                XCTAssertFalse("\(error)".contains("Tesla"), "\(error)")
            }
        }
        let deep = String(repeating: "<a>", count: 10_000) + String(repeating: "</a>", count: 10_000)
        XCTAssertThrowsError(try XMLTree.parse(Array(deep.utf8))) { error in XCTAssertTrue("\(error)".contains("deeper"), "\(error)") }
        let wide = "<r>" + String(repeating: "<a/>", count: XMLTree.maxElements + 1) + "</r>"
        XCTAssertThrowsError(try XMLTree.parse(Array(wide.utf8))) { error in XCTAssertTrue("\(error)".contains("elements"), "\(error)") }
        let long = "<r>" + String(repeating: "x", count: XMLTree.maxText + 1) + "</r>"
        XCTAssertThrowsError(try XMLTree.parse(Array(long.utf8)))
        XCTAssertThrowsError(try NvidiaSMI.gpus(Array("<other/>".utf8)))
        XCTAssertThrowsError(try XMLTree.parse(Array("<a></b>".utf8)))
        XCTAssertThrowsError(try XMLTree.parse(Array("<a x='1' x='2'/>".utf8)))
        XCTAssertThrowsError(try XMLTree.parse(Array("<a/><b/>".utf8)))
    }

    func testMutatedDocumentsNeverCrash() throws {
        // Random byte flips, deletions and duplications of a real document: each parses or
        // fails with an error, and never yields more GPUs than the bound.
        let original = try fixture("rtx-a5000x2-driver-590.xml")
        var generator = SeededGenerator(seed: 17 &+ 0x9E37_79B9_7F4A_7C15)  // the sequence it always had
        for _ in 0..<400 {
            var bytes = original
            for _ in 0..<Int.random(in: 1...8, using: &generator) {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[at] = UInt8.random(in: 0...255, using: &generator)
                case 1: bytes.removeSubrange(at..<min(bytes.count, at + Int.random(in: 1...64, using: &generator)))
                default: bytes.insert(contentsOf: bytes[at..<min(bytes.count, at + 200)], at: at)
                }
                if bytes.isEmpty { bytes = [0x3C] }
            }
            if let gpus = try? NvidiaSMI.gpus(bytes) { XCTAssertLessThanOrEqual(gpus.count, NvidiaSMI.maxGPUs) }
        }
    }
}
