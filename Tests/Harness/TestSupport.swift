import Foundation
import TermindCore

/// A folder under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ prefix: String = "termind-test") throws {
        var template = Array("\(NSTemporaryDirectory())/\(prefix)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw TermindError(code: "test.tmpdir", message: "mkdtemp failed: \(String(cString: strerror(errno)))")
        }
        path = String(cString: made)
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        let target = file(name)
        try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: target))
        return target
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs a program to completion, capturing its output.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

public enum ProcessRunner {
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                           stdin: String? = nil, currentDirectory: String? = nil) throws -> ProcessResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        // Read both pipes concurrently so neither can fill up and block the child.
        let errorData = SendableBox<Data>(Data())
        let done = DispatchSemaphore(value: 0)
        Thread {
            errorData.value = err.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }.start()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        done.wait()
        process.waitUntilExit()
        return ProcessResult(status: process.terminationStatus,
                             stdout: String(decoding: output, as: UTF8.self),
                             stderr: String(decoding: errorData.value, as: UTF8.self))
    }
}

final class SendableBox<T>: @unchecked Sendable {
    var value: T
    init(_ value: T) { self.value = value }
}

/// Paths in the source checkout, for tests that read sources or example manifests.
public enum Repository {
    /// The checkout root: walks up from the build folder to the folder holding
    /// Package.swift and Core/Package.swift.
    public static var root: String {
        var dir = FeatureHarness.buildDirectory
        while dir != "/" {
            if FileManager.default.fileExists(atPath: dir + "/Package.swift"),
               FileManager.default.fileExists(atPath: dir + "/Core/Package.swift") { return dir }
            dir = (dir as NSString).deletingLastPathComponent
        }
        return FileManager.default.currentDirectoryPath
    }

    public static func path(_ relative: String) -> String { (root as NSString).appendingPathComponent(relative) }
}

/// A UDP socket on 127.0.0.1 with a free port, to catch what a plugin sends.
public final class UDPReceiver {
    private let fd: Int32
    public let port: UInt16

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else {
            Foundation.close(fd)
            throw TermindError(code: "test.udp", message: "cannot bind a UDP socket on 127.0.0.1")
        }
        port = UInt16(bigEndian: address.sin_port)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// The next datagram, or nil after five seconds without one.
    public func receive() -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 2048)
        let n = recv(fd, &buffer, buffer.count, 0)
        return n > 0 ? Array(buffer[0..<n]) : nil
    }

    public func close() { Foundation.close(fd) }
}
