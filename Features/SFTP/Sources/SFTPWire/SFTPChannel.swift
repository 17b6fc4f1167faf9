import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import TermindSSH

/// The `sftp` subsystem channel of an SSH connection as an SFTP session's byte stream. The
/// channel's buffer bounds what waits unread (past it the server's window closes).
public struct SFTPChannelTransport: SFTPTransport {
    public let channel: SSHChannel

    public init(channel: SSHChannel) { self.channel = channel }

    public func send(_ bytes: [UInt8]) async throws { try await channel.write(Data(bytes)) }

    public func offer(_ bytes: [UInt8]) -> Bool { channel.offer(Data(bytes)) }

    public func receive() async throws -> Data? {
        while let (stream, data) = try await channel.next() {
            if stream == .stdout { return data }  // stderr: sftp-server's own log lines
        }
        return nil
    }

    public func close() { channel.close() }
}

extension SFTPSession {
    /// Starts the `sftp` subsystem on a channel of `connection` (other channels go on beside it).
    public static func open(on connection: SSHConnection, bufferLimit: Int = 8 << 20) async throws -> SFTPSession {
        let channel = try await connection.openChannel(.subsystem("sftp"), bufferLimit: bufferLimit)
        do {
            return try await start(SFTPChannelTransport(channel: channel))
        } catch {
            channel.close()
            throw error
        }
    }
}
