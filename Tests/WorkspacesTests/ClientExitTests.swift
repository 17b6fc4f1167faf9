import Foundation
import Synchronization
import TermindCore
import TermindHarness
import XCTest

/// A command run in-process ends the process while the kernel's threads still run (the SSH
/// engine closing its connection, executor workers). The client must end without running
/// the process's exit handlers under those threads: with `exit` it died of "double free"
/// on the engine thread in 2 of 3,600 runs under load, and CI caught one. This runs
/// many short sessions on pseudo-terminals, four at a time, half of them ending because
/// the reader of their output went away (`| head -1`) while the remote side still sends,
/// and holds each to its exit status and output. `TERMIND_EXIT_RUNS` sets how many (`make soak` runs 3,000;
/// `make test` runs 24).
final class ClientExitTests: XCTestCase {
    func testManyShortInProcessSessionsEndWithTheRightStatusAndNeverCrash() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let server = try SSHServerFixture.withNewKey(in: directory)
        defer { server.stop() }
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = directory.file("home")
        for name in ["TERMIND_PLUGINS", "TERMIND_FEATURES", "TERMIND_REGISTRY", "TERMIND_SOCKET", "TERMIND_STORE"] { environment.removeValue(forKey: name) }
        let target = "ssh -p \(server.port) -i \(directory.file("id")) \(NSUserName())@127.0.0.1"
        let termind = [FeatureHarness.buildDirectory + "/termind", "--local", "--store", directory.file("db.sqlite"),
                       "--secrets-key", directory.file("k"), "ssh", target, "--accept-host-key", "once", "--"]
        let quoted = Shell.quoted(termind)
        // On a terminal, as a person runs them: a short command, and one whose output's
        // reader goes away while the remote side still sends.
        let shortCommand = (termind + ["echo OUT-$((1+2)); exit 3"], "OUT-3", 3)
        let goneReader = (["/bin/bash", "--norc", "--noprofile", "-c", quoted + " 'seq 1 10000000' | head -1; echo STATUS=${PIPESTATUS[0]}"],
                          "STATUS=", 141)
        let environmentForRuns = environment
        let runs = Int(ProcessInfo.processInfo.environment["TERMIND_EXIT_RUNS"] ?? "") ?? 24
        let failures = Mutex<[String]>([])
        let next = Mutex(0)
        // Four threads of our own: concurrentPerform would run only as many as there are cores.
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                while true {
                    let run = next.withLock { count -> Int in
                        count += 1
                        return count
                    }
                    guard run <= runs else { return }
                    let (argv, marker, status) = run % 2 == 0 ? goneReader : shortCommand
                    do {
                        let report = try PseudoTerminal.run(argv, steps: [.expect(marker)], environment: environmentForRuns)
                        let ended = run % 2 == 0 ? report.output.contains("1\r\nSTATUS=141") : report.status == status
                        if report.met != [true] || !ended || report.output.contains("crashed") {
                            failures.withLock { $0.append("run \(run): status \(report.status.map(String.init) ?? "none"), wanted \(status)\n\(report.output)") }
                        }
                    } catch {
                        failures.withLock { $0.append("run \(run): \(error)") }
                    }
                }
            }
        }
        group.wait()
        let failed = failures.withLock { $0 }
        XCTAssertTrue(failed.isEmpty, "\(failed.count) of \(runs) runs failed; the first:\n\(failed.first ?? "")")
    }
}
