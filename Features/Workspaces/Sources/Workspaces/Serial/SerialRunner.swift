import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import TermindCore
import WorkspacesAPI

/// One `workspaces.serial@1` run: the line opened and set up, the client's terminal bridged
/// (its keys to the line, the line's bytes as `stdout`), until the client ends it (`~.`, a
/// signal) or the line hangs up; the end of the client's input ends only what it sends.
/// Nothing of it is kept.
struct SerialRunner {
    let request: WorkspacesStreams.Serial.Request
    let session: StreamSession

    func run() async throws -> WorkspacesStreams.Serial.Result {
        guard request.device.hasPrefix("/") else {
            throw TermindError.badRequest("The device must be a path (/dev/ttyUSB0, /dev/ttyS0), not '\(request.device)'.")
        }
        let line = try SerialLine(request)
        defer { line.close() }
        let session = self.session
        await session.emit("started")
        let counts = Counts()
        let input = Task {
            for await chunk in session.input {
                guard await line.write(chunk) else { break }
                counts.add(sent: chunk.count)
            }
        }
        defer { input.cancel() }
        await withTaskCancellationHandler {
            for await chunk in line.output() {
                counts.add(received: chunk.count)
                await session.emit("stdout", data: chunk)
                line.consumed()
            }
        } onCancel: {
            line.stop()  // the reader ends, the loop above with it; close() follows (defer)
        }
        return .init(received: counts.received, sent: counts.sent)
    }

    final class Counts: Sendable {
        private let counts = Mutex((received: 0, sent: 0))
        var received: Int { counts.withLock { $0.received } }
        var sent: Int { counts.withLock { $0.sent } }
        func add(received: Int = 0, sent: Int = 0) {
            counts.withLock {
                $0.received += received
                $0.sent += sent
            }
        }
    }
}
