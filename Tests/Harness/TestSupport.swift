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
