import CCurl
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import TermindCore
import Synchronization

/// libcurl's multi interface on a thread of its own: every request of the process is one
/// easy handle on it. Only this thread touches curl's handles; others talk to it through
/// `submit`, which wakes its poll.
///
/// `@unchecked Sendable`: `active` is touched only on the engine's thread (`run` and what it
/// calls); other threads only append to `commands` (a Mutex) and call curl_multi_wakeup, which
/// libcurl allows from any thread; `multi` is a `let`.
final class CurlEngine: @unchecked Sendable {
    static let shared = CurlEngine()

    enum Command {
        case add(Transfer)
        case cancel(Transfer)
        case resume(Transfer)
    }

    private let multi: UnsafeMutableRawPointer
    private let commands = Mutex<[Command]>([])
    /// The transfers on the multi handle, by easy handle (engine thread only).
    private var active: [UnsafeMutableRawPointer: Transfer] = [:]

    private init() {
        curl_global_init(termind_curl_global_default)
        guard let multi = curl_multi_init() else { fatalError("curl_multi_init failed") }
        self.multi = multi
        let thread = SystemThread.named("termind.http") { [self] in run() }
        thread.start()
    }

    func submit(_ command: Command) {
        commands.withLock { $0.append(command) }
        curl_multi_wakeup(multi)
    }

    private func run() {
        while true {
            for command in commands.withLock({ pending -> [Command] in defer { pending.removeAll() }; return pending }) {
                apply(command)
            }
            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                let result = termind_curl_message_result(message)
                if let transfer = active[easy] { finish(transfer, curl: result) }
            }
            let now = Transfer.monotonic()
            for transfer in active.values {
                if let failure = transfer.overdue(now: now) { finish(transfer, failure: failure) }
            }
            // Wake at least every 250 ms while anything runs, for the idle deadlines.
            var ready: Int32 = 0
            curl_multi_poll(multi, nil, 0, active.isEmpty ? 60_000 : 250, &ready)
        }
    }

    private func apply(_ command: Command) {
        switch command {
        case .add(let transfer):
            guard !transfer.isCancelled else {
                transfer.release()
                return
            }
            active[transfer.easy] = transfer
            let code = curl_multi_add_handle(multi, transfer.easy)
            if code != CURLM_OK {
                finish(transfer, failure: HTTPFailure(HTTPErrorCode.interrupted, "The request to \(transfer.origin) could not be started (\(String(cString: curl_multi_strerror(code)))).",
                                                      beforeResponse: true))
            }
        case .cancel(let transfer):
            // Removing a handle mid-response closes its connection (never reused half-read).
            if active[transfer.easy] != nil { finish(transfer, failure: HTTPFailure(HTTPErrorCode.cancelled, "The request to \(transfer.origin) was cancelled.", beforeResponse: false)) }
        case .resume(let transfer):
            if active[transfer.easy] != nil { _ = curl_easy_pause(transfer.easy, termind_curl_pause_continue) }
        }
    }

    private func finish(_ transfer: Transfer, curl code: CURLcode) {
        finish(transfer, failure: code == CURLE_OK ? nil : transfer.failure(for: code))
    }

    private func finish(_ transfer: Transfer, failure: HTTPFailure?) {
        active[transfer.easy] = nil
        curl_multi_remove_handle(multi, transfer.easy)
        transfer.finished(failure)
        transfer.release()
    }
}
