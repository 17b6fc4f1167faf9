import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore

/// A conversation's scratch folder (`assistant-scratch/ID` beside the database, 0700): where
/// a command's whole output is kept for the model to page through, and what `scratch_write`
/// writes. Paths are relative to the folder: an absolute path, `..`, `.` or an empty part is
/// refused before anything is opened, and every part is opened with O_NOFOLLOW from the
/// folder down, so a symlink (to /etc, or out of the folder) is refused wherever it is.
struct Scratch: Sendable {
    /// The folder holding every conversation's.
    let root: String

    /// The most one conversation's folder holds, and one file.
    static let folderLimit = 64 << 20
    static let fileLimit = 16 << 20

    struct Refusal: Error {
        let message: String
    }

    /// `path`'s parts, or why it is refused.
    static func parts(_ path: String) throws -> [String] {
        guard !path.isEmpty else { throw Refusal(message: "The scratch path is empty.") }
        guard !path.hasPrefix("/") else { throw Refusal(message: "\(path) is absolute; scratch paths are relative to the conversation's scratch folder.") }
        guard path.utf8.count <= 512, !path.contains("\0") else { throw Refusal(message: "The scratch path is longer than 512 bytes or holds a NUL.") }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        for part in parts {
            guard part != "..", part != ".", !part.isEmpty else {
                throw Refusal(message: "\(path) has a '\(part.isEmpty ? "//" : part)' part; scratch paths name files inside the scratch folder only.")
            }
        }
        return parts
    }

    /// The conversation's folder, made (0700) when missing; an fd for it.
    private func folder(_ conversation: String) throws -> Int32 {
        guard conversation.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }), !conversation.isEmpty else {
            throw Refusal(message: "No scratch folder for conversation \(conversation).")
        }
        mkdir(root, 0o700)
        let rootFD = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard rootFD >= 0 else { throw Refusal(message: "The scratch folder \(root) cannot be opened: \(String(cString: strerror(errno))).") }
        defer { close(rootFD) }
        mkdirat(rootFD, conversation, 0o700)
        let fd = openat(rootFD, conversation, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw Refusal(message: "The scratch folder of conversation \(conversation) cannot be opened: \(String(cString: strerror(errno))).") }
        return fd
    }

    /// Opens `path` inside the conversation's folder, each part without following a symlink;
    /// `create` makes the folders on the way and the file (0600).
    private func openFile(_ conversation: String, _ path: String, create: Bool) throws -> Int32 {
        let parts = try Self.parts(path)
        var directory = try folder(conversation)
        defer { close(directory) }
        for part in parts.dropLast() {
            if create { mkdirat(directory, part, 0o700) }
            let next = openat(directory, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard next >= 0 else { throw Self.openFailure(path, part, errno) }
            close(directory)
            directory = next
        }
        let flags = create ? (O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC) : (O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        let fd = openat(directory, parts.last!, flags, 0o600)
        guard fd >= 0 else { throw Self.openFailure(path, parts.last!, errno) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw Refusal(message: "\(path) is not a regular file.")
        }
        return fd
    }

    private static func openFailure(_ path: String, _ part: String, _ code: Int32) -> Refusal {
        switch code {
        case ELOOP, ENOTDIR:
            Refusal(message: "\(path): '\(part)' is a symbolic link or not a folder; the scratch folder follows no links.")
        case ENOENT:
            Refusal(message: "\(path) does not exist in the scratch folder.")
        default:
            Refusal(message: "\(path) cannot be opened: \(String(cString: strerror(code))).")
        }
    }

    /// Bytes the conversation's folder holds.
    func used(_ conversation: String) -> Int {
        let base = root + "/" + conversation
        guard let paths = try? FileManager.default.subpathsOfDirectory(atPath: base) else { return 0 }
        var total = 0
        var status = stat()
        for path in paths where lstat(base + "/" + path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG { total += Int(status.st_size) }
        return total
    }

    /// The absolute path of an existing regular file at `path` in the conversation's folder
    /// (every part checked as `read` checks it).
    func existing(_ conversation: String, _ path: String) throws -> String {
        let fd = try openFile(conversation, path, create: false)
        close(fd)
        return root + "/" + conversation + "/" + path
    }

    /// Writes `data` at `path` (replacing it), within the folder's and a file's limits.
    func write(_ conversation: String, _ path: String, _ data: Data) throws {
        guard data.count <= Self.fileLimit else { throw Refusal(message: "\(data.count) bytes is more than a scratch file holds (\(Self.fileLimit)).") }
        guard used(conversation) + data.count <= Self.folderLimit else {
            throw Refusal(message: "The scratch folder would hold more than \(Self.folderLimit >> 20) MiB; nothing was written.")
        }
        let fd = try openFile(conversation, path, create: true)
        defer { close(fd) }
        var written = 0
        try data.withUnsafeBytes { buffer in
            while written < buffer.count {
                let n = Glibc.write(fd, buffer.baseAddress! + written, buffer.count - written)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Refusal(message: "Writing \(path) failed: \(String(cString: strerror(errno))).") }
                written += n
            }
        }
    }

    /// Up to `length` bytes of `path` from `offset`, and the file's size.
    func read(_ conversation: String, _ path: String, offset: Int, length: Int) throws -> (data: Data, size: Int) {
        let fd = try openFile(conversation, path, create: false)
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        let size = Int(info.st_size)
        guard offset >= 0, offset <= size else { throw Refusal(message: "Offset \(offset) is past the end of \(path) (\(size) bytes).") }
        var buffer = [UInt8](repeating: 0, count: max(0, min(length, size - offset)))
        var got = 0
        while got < buffer.count {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + got, $0.count - got, off_t(offset + got)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            got += n
        }
        return (Data(buffer.prefix(got)), size)
    }
}
