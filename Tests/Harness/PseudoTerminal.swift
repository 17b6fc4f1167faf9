import Foundation
import TermindCore

/// Runs a program on a new pseudo-terminal that is its controlling terminal, as a person's
/// terminal emulator would (python3's pty module), following steps — expect text, send
/// keys, resize the window, send a signal — and reports what happened: each expectation
/// met or not, the exit status, whether the terminal's settings are as before, the output.
public enum PseudoTerminal {
    public enum Step {
        case expect(String, seconds: Double = 20)
        case send(String)
        case resize(rows: Int, columns: Int)
        case signal(String)
        case sleep(Double)
        /// Waits (reading the output meanwhile) until a file exists: another thread of the
        /// test says its part is done. Reported like an expectation.
        case waitForFile(String, seconds: Double = 30)

        var json: JSONValue {
            switch self {
            case .expect(let text, let seconds): .array([.string("expect"), .string(text), .double(seconds)])
            case .send(let text): .array([.string("send"), .string(text)])
            case .resize(let rows, let columns): .array([.string("resize"), .integer(Int64(rows)), .integer(Int64(columns))])
            case .signal(let name): .array([.string("signal"), .string(name)])
            case .sleep(let seconds): .array([.string("sleep"), .double(seconds)])
            case .waitForFile(let path, let seconds): .array([.string("waitfile"), .string(path), .double(seconds)])
            }
        }
    }

    public struct Report: Sendable {
        public let met: [Bool]
        public let status: Int?
        public let restored: Bool
        public let output: String
    }

    /// The window starts at `rows` × `columns` (30 × 100 unless said).
    public static func run(_ argv: [String], steps: [Step], environment: [String: String], rows: Int = 30, columns: Int = 100) throws -> Report {
        let directory = try TemporaryDirectory("termind-pty")
        defer { directory.remove() }
        let script = try directory.write("drive.py", driver)
        let size = JSONValue.array([.string("size"), .integer(Int64(rows)), .integer(Int64(columns))])
        let plan = String(decoding: try JSONCoding.encode(JSONValue.array([size] + steps.map(\.json))), as: UTF8.self)
        let result = try ProcessRunner.run("/usr/bin/python3", [script, plan] + argv, environment: printingBacktraces(environment))
        guard result.status == 0, let report = try? JSONCoding.parse(Data(result.stdout.utf8), source: "pty report") else {
            throw TermindError(code: "test.pty", message: "the pty driver failed: \(result.stderr)")
        }
        let met: [Bool] = if case .array(let list)? = report["steps"] { list.map { $0 == .bool(true) } } else { [] }
        let status: Int? = if case .integer(let code)? = report["status"] { Int(code) } else { nil }
        return Report(met: met, status: status, restored: report["restored"] == .bool(true), output: report["output"]?.stringValue ?? "")
    }

    static let driver = #"""
import json, os, pty, select, signal, struct, sys, termios, time, fcntl

# Runs argv under a new pseudo-terminal (its controlling terminal), as a person's terminal
# emulator would; follows a script of steps; prints a JSON report.
steps = json.loads(sys.argv[1])
_, rows, columns = steps.pop(0)  # the window's size from the start
argv = sys.argv[2:]
master, slave = os.openpty()
fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
before = termios.tcgetattr(slave)
pid = os.fork()
if pid == 0:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.close(master)
    os.execv(argv[0], argv)
output = b""
searched = 0  # an expectation is met only by output after the previous one's match
def read_until(marker, timeout):
    global output, searched
    def found():
        global searched
        at = output.find(marker.encode(), searched)
        if at < 0:
            return False
        searched = at + len(marker.encode())
        return True
    if found():
        return True
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return False
            if not chunk:
                return False
            output += chunk
            if found():
                return True
    return False
def wait_for_file(path, timeout):
    global output
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            return True
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            output += chunk
    return os.path.exists(path)
report = {"steps": []}
for step in steps:
    kind = step[0]
    if kind == "expect":
        report["steps"].append(read_until(step[1], step[2] if len(step) > 2 else 20))
    elif kind == "send":
        os.write(master, step[1].encode())
    elif kind == "resize":
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", step[1], step[2], 0, 0))
    elif kind == "signal":
        os.kill(pid, getattr(signal, step[1]))
    elif kind == "sleep":
        time.sleep(step[1])
    elif kind == "waitfile":
        report["steps"].append(wait_for_file(step[1], step[2]))
deadline = time.time() + 20
status = None
while time.time() < deadline:
    done, code = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(code)
        break
    r, _, _ = select.select([master], [], [], 0.1)
    if r:
        try:
            output += os.read(master, 65536)
        except OSError:
            pass
# What the program wrote just before it ended.
while True:
    r, _, _ = select.select([master], [], [], 0.2)
    if not r:
        break
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    output += chunk
report["status"] = status if status is None or status >= 0 else 128 - status
report["restored"] = termios.tcgetattr(slave) == before
report["output"] = output.decode("utf-8", "replace")
print(json.dumps(report))
"""#
}
