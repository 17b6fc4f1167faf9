import Foundation
import TermindCore

/// One message of a PAM conversation round (one `pam_conv` call).
public enum PAMMessage: Sendable, Equatable {
    /// A prompt (PAM_PROMPT_ECHO_OFF, or PAM_PROMPT_ECHO_ON with `echo`) and the answer it
    /// expects (may be empty).
    case prompt(String, echo: Bool = false, answer: String)
    /// PAM_TEXT_INFO.
    case info(String)
    /// PAM_ERROR_MSG.
    case error(String)
}

/// One PAM conversation call: its messages, in order. A round without prompts (only info or
/// error text) is legal; a round with no messages at all is skipped (sshd refuses a
/// conversation with zero messages).
public struct PAMRound: Sendable, Equatable {
    public var messages: [PAMMessage]
    public init(_ messages: [PAMMessage]) { self.messages = messages }
    public init(_ messages: PAMMessage...) { self.messages = messages }
}

/// A real sshd that authenticates through PAM keyboard-interactive with a scripted
/// conversation: a tiny PAM module (C source below, compiled at test time with
/// `cc -shared -fPIC … -lpam`, needs libpam0g-dev) runs `rounds`, one `pam_conv` call per
/// round, and succeeds only when every prompt got its expected answer (it runs all rounds
/// either way unless `failFast`). Its account, setcred, session and password functions
/// always succeed, so the current user (root in the tests) passes the account phase.
///
/// How sshd finds the service: OpenSSH 9.2 (Debian 12) calls pam_start with
/// SSHD_PAM_SERVICE, which is `__progname` (there is no PAMServiceName option before
/// OpenSSH 10), i.e. the basename of argv[0]. The fixture writes
/// /etc/pam.d/termind-kbd-<pid>-<random> and starts sshd through a symlink of that name to
/// /usr/sbin/sshd; stop() (or the server's deinit) deletes the file, and `removeStale()`
/// (also run by init) deletes files left by processes that are gone. Needs root (/etc/pam.d).
///
/// What an OpenSSH client sees (sshd's auth-pam.c maps the conversation): every prompt
/// becomes its own SSH_MSG_USERAUTH_INFO_REQUEST with exactly one prompt (name and
/// instruction empty), also when one round holds several prompts; info and error text is
/// not sent on its own but prepended, each message followed by "\n", to the next prompt's
/// text. When authentication then ends: on success sshd sends a final INFO_REQUEST with
/// zero prompts (empty name and instruction) before USERAUTH_SUCCESS, and text left over
/// from trailing info-only rounds comes as a USERAUTH_BANNER; on failure, left-over text
/// becomes the instruction of an INFO_REQUEST with zero prompts, then USERAUTH_FAILURE.
public final class KeyboardInteractiveFixture: @unchecked Sendable {
    /// The sshd; it owns the PAM files (its stop() or deinit removes them).
    public let server: SSHServerFixture
    /// The PAM service name, also the basename of the sshd symlink.
    public let serviceName: String
    /// /etc/pam.d/<serviceName>.
    public let pamFile: String
    /// Holds the module, the rounds script, the module's log and the sshd symlink.
    public let directory: TemporaryDirectory
    public var port: Int { server.port }
    public private(set) var rounds: [PAMRound]

    /// Whether the fixture can run here: root, a C compiler, PAM headers and sshd.
    public static var isAvailable: Bool {
        getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/cc")
            && FileManager.default.fileExists(atPath: "/usr/include/security/pam_modules.h")
            && FileManager.default.isExecutableFile(atPath: "/usr/sbin/sshd")
    }

    /// Starts sshd with `UsePAM yes`, `KbdInteractiveAuthentication yes`, `PermitRootLogin yes`
    /// and `AuthenticationMethods authenticationMethods` (nil: no such line, sshd's default).
    /// `extraConfig` lines go first and so override these; `authorizedKeys`, `namespace` and
    /// `listenAddress` are as for SSHServerFixture (e.g. "publickey,keyboard-interactive").
    public init(rounds: [PAMRound], authorizedKeys: [String] = [], authenticationMethods: String? = "keyboard-interactive",
                failFast: Bool = false, extraConfig: [String] = [], namespace: String? = nil,
                listenAddress: String = "127.0.0.1") throws {
        guard getuid() == 0 else { throw TermindError(code: "fixture.pam", message: "the PAM fixture writes /etc/pam.d and needs root") }
        Self.removeStale()
        self.rounds = rounds
        let directory = try TemporaryDirectory("termind-kbd")
        self.directory = directory
        chmod(directory.path, 0o755)
        let pid = getpid()
        serviceName = "termind-kbd-\(pid)-" + String(format: "%06x", Int.random(in: 0..<0x1000000))
        let pamFile = "/etc/pam.d/" + serviceName
        self.pamFile = pamFile
        let cleanup: @Sendable () -> Void = {
            try? FileManager.default.removeItem(atPath: pamFile)
            directory.remove()
        }
        do {
            let module = directory.file("pam_termind_test.so")
            try directory.write("pam_termind_test.c", Self.moduleSource)
            let built = try ProcessRunner.run("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-Wall", "-o", module,
                                                             directory.file("pam_termind_test.c"), "-lpam"])
            guard built.status == 0 else {
                throw TermindError(code: "fixture.pam", message: "cannot compile the PAM test module (libpam0g-dev installed?): \(built.stderr)")
            }
            try Self.writeScript(rounds, to: directory.file("rounds"))
            let log = directory.file("pam.log")
            let common = "\(module) log=\(log)"
            let service = [
                "# termind-kbd pid=\(pid) start=\(NetworkChain.startTime(of: pid) ?? "") dir=\(directory.path)",
                "# Written by Termind's KeyboardInteractiveFixture; removed when its sshd stops.",
                "auth     required \(common) script=\(directory.file("rounds"))" + (failFast ? " failfast" : ""),
                "account  required \(common)",
                "session  required \(common)",
                "password required \(common)",
            ]
            try (service.joined(separator: "\n") + "\n").write(toFile: pamFile, atomically: true, encoding: .utf8)
            chmod(pamFile, 0o644)
            // sshd's PAM service is its program name: run it through a symlink named like the service.
            let executable = directory.file(serviceName)
            try FileManager.default.createSymbolicLink(atPath: executable, withDestinationPath: "/usr/sbin/sshd")
            let config = extraConfig + ["UsePAM yes", "KbdInteractiveAuthentication yes", "PermitRootLogin yes"]
                + (authenticationMethods.map { ["AuthenticationMethods \($0)"] } ?? [])
            server = try SSHServerFixture(authorizedKeys: authorizedKeys, extraConfig: config, namespace: namespace,
                                          listenAddress: listenAddress, executable: executable, onStop: cleanup)
        } catch {
            cleanup()
            throw error
        }
    }

    /// Replaces the rounds; the module reads them at each authentication attempt.
    public func setRounds(_ rounds: [PAMRound]) throws {
        try Self.writeScript(rounds, to: directory.file("rounds"))
        self.rounds = rounds
    }

    /// The module's log, one line per event: "auth start user=root", "round 1 prompt 2 ok",
    /// "round 1 prompt 2 wrong", "round 1 done", "auth success", "auth failure", "account",
    /// "session open", "session close", "round 1 conversation failed: …".
    public var log: [String] {
        let text = (try? String(contentsOfFile: directory.file("pam.log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    /// Stops sshd and removes the PAM service file and the module.
    public func stop() { server.stop() }

    /// Kills sshd at once (see SSHServerFixture.kill); the files go with stop() or deinit.
    public func kill() { server.kill() }

    /// Deletes /etc/pam.d/termind-kbd-* files (and their module folders) whose process is gone.
    public static func removeStale() {
        let folder = "/etc/pam.d"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.hasPrefix("termind-kbd-") {
            let path = folder + "/" + name
            let header = ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").first ?? ""
            var fields: [String: String] = [:]
            for field in header.split(separator: " ") {
                let pair = field.split(separator: "=", maxSplits: 1)
                if pair.count == 2 { fields[String(pair[0])] = String(pair[1]) }
            }
            let parts = name.split(separator: "-")
            guard let pid = pid_t(fields["pid"] ?? (parts.count == 4 ? String(parts[2]) : "")) else { continue }
            if NetworkChain.isAlive(pid, start: fields["start"]) { continue }
            try? FileManager.default.removeItem(atPath: path)
            guard let dir = fields["dir"], (dir as NSString).lastPathComponent.hasPrefix("termind-kbd-") else { continue }
            // The crashed run's sshd listener outlives it. Its command line, rewritten by sshd's
            // setproctitle to "<service>: <symlink> -D -e -f <config> [listener] …", still names
            // the symlink; the config's folder is the SSHServerFixture's, removed with it.
            let symlink = dir + "/" + name
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
                guard let pid = pid_t(entry), pid != getpid() else { continue }
                let words = SSHServerFixture.commandLineWords(of: pid)
                guard words.contains(symlink) else { continue }
                Foundation.kill(pid, SIGKILL)
                if let folder = SSHServerFixture.fixtureFolder(inCommandLine: words) { try? FileManager.default.removeItem(atPath: folder) }
            }
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    /// The rounds file: "R" starts a round; "P0 TEXT ANSWER" (echo off), "P1 TEXT ANSWER"
    /// (echo on), "I TEXT", "E TEXT"; TEXT and ANSWER are UTF-8 in hex, "-" when empty.
    static func writeScript(_ rounds: [PAMRound], to path: String) throws {
        func hex(_ text: String) -> String { text.isEmpty ? "-" : text.utf8.map { String(format: "%02x", $0) }.joined() }
        var lines: [String] = []
        for round in rounds {
            lines.append("R")
            for message in round.messages {
                switch message {
                case let .prompt(text, echo, answer): lines.append("\(echo ? "P1" : "P0") \(hex(text)) \(hex(answer))")
                case let .info(text): lines.append("I \(hex(text))")
                case let .error(text): lines.append("E \(hex(text))")
                }
            }
        }
        // Written whole and renamed, so a concurrent authentication never reads half a file.
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// The PAM module's C source (pam_sm_authenticate runs the rounds from `script=`).
    public static let moduleSource = #"""
/* Test PAM module for Termind's keyboard-interactive fixture. */
#define PAM_SM_AUTH
#define PAM_SM_ACCOUNT
#define PAM_SM_SESSION
#define PAM_SM_PASSWORD
#include <security/pam_appl.h>
#include <security/pam_modules.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item { int style; char *text; char *answer; };
struct round { struct item *items; int count; };

static const char *arg_value(int argc, const char **argv, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    return NULL;
}

static int has_flag(int argc, const char **argv, const char *flag) {
    for (int i = 0; i < argc; i++) if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

static void note(int argc, const char **argv, const char *format, ...) {
    const char *path = arg_value(argc, argv, "log");
    if (path == NULL) return;
    FILE *f = fopen(path, "a");
    if (f == NULL) return;
    va_list ap;
    va_start(ap, format);
    vfprintf(f, format, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "-" is the empty string; anything else is hex. */
static char *unhex(const char *s) {
    if (s == NULL) return NULL;
    if (strcmp(s, "-") == 0) return strdup("");
    size_t n = strlen(s);
    if (n % 2) return NULL;
    char *out = malloc(n / 2 + 1);
    if (out == NULL) return NULL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) { free(out); return NULL; }
        out[i] = (char)(hi * 16 + lo);
    }
    out[n / 2] = 0;
    return out;
}

static void free_rounds(struct round *rounds, int count) {
    for (int r = 0; r < count; r++) {
        for (int i = 0; i < rounds[r].count; i++) { free(rounds[r].items[i].text); free(rounds[r].items[i].answer); }
        free(rounds[r].items);
    }
    free(rounds);
}

/* Lines: "R" starts a round; "P0 TEXT ANSWER" (echo off), "P1 TEXT ANSWER" (echo on),
   "I TEXT" (PAM_TEXT_INFO), "E TEXT" (PAM_ERROR_MSG); TEXT and ANSWER are hex or "-". */
static int load(const char *path, struct round **out, int *count) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    struct round *rounds = NULL;
    int n = 0, ok = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) >= 0) {
        char *save = NULL;
        char *tag = strtok_r(line, " \t\r\n", &save);
        if (tag == NULL || tag[0] == '#') continue;
        if (strcmp(tag, "R") == 0) {
            struct round *grown = realloc(rounds, sizeof(*rounds) * (n + 1));
            if (grown == NULL) goto done;
            rounds = grown;
            rounds[n].items = NULL;
            rounds[n].count = 0;
            n++;
            continue;
        }
        if (n == 0) goto done;
        struct item item = { 0, NULL, NULL };
        if (strcmp(tag, "P0") == 0) item.style = PAM_PROMPT_ECHO_OFF;
        else if (strcmp(tag, "P1") == 0) item.style = PAM_PROMPT_ECHO_ON;
        else if (strcmp(tag, "I") == 0) item.style = PAM_TEXT_INFO;
        else if (strcmp(tag, "E") == 0) item.style = PAM_ERROR_MSG;
        else goto done;
        item.text = unhex(strtok_r(NULL, " \t\r\n", &save));
        if (item.text == NULL) goto done;
        if (item.style == PAM_PROMPT_ECHO_OFF || item.style == PAM_PROMPT_ECHO_ON) {
            item.answer = unhex(strtok_r(NULL, " \t\r\n", &save));
            if (item.answer == NULL) { free(item.text); goto done; }
        }
        struct round *r = &rounds[n - 1];
        struct item *grown = realloc(r->items, sizeof(*grown) * (r->count + 1));
        if (grown == NULL) { free(item.text); free(item.answer); goto done; }
        r->items = grown;
        r->items[r->count++] = item;
    }
    ok = 1;
done:
    free(line);
    fclose(f);
    if (!ok) { free_rounds(rounds, n); return -1; }
    *out = rounds;
    *count = n;
    return 0;
}

PAM_EXTERN int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    const char *user = NULL;
    pam_get_item(pamh, PAM_USER, (const void **)&user);
    note(argc, argv, "auth start user=%s", user ? user : "");
    const char *script = arg_value(argc, argv, "script");
    struct round *rounds = NULL;
    int count = 0;
    if (script == NULL || load(script, &rounds, &count) != 0) {
        note(argc, argv, "auth error: cannot read script %s", script ? script : "(none)");
        return PAM_AUTHINFO_UNAVAIL;
    }
    const struct pam_conv *conv = NULL;
    if (pam_get_item(pamh, PAM_CONV, (const void **)&conv) != PAM_SUCCESS || conv == NULL || conv->conv == NULL) {
        free_rounds(rounds, count);
        note(argc, argv, "auth error: no conversation function");
        return PAM_CONV_ERR;
    }
    int failfast = has_flag(argc, argv, "failfast");
    int wrong = 0, result = PAM_SUCCESS;
    for (int r = 0; r < count && result == PAM_SUCCESS; r++) {
        int n = rounds[r].count;
        if (n == 0) { note(argc, argv, "round %d skipped (no messages)", r + 1); continue; }
        struct pam_message *messages = calloc(n, sizeof(*messages));
        const struct pam_message **pointers = calloc(n, sizeof(*pointers));
        struct pam_response *responses = NULL;
        if (messages == NULL || pointers == NULL) { free(messages); free(pointers); result = PAM_BUF_ERR; break; }
        for (int i = 0; i < n; i++) {
            messages[i].msg_style = rounds[r].items[i].style;
            messages[i].msg = rounds[r].items[i].text;
            pointers[i] = &messages[i];
        }
        int rc = conv->conv(n, pointers, &responses, conv->appdata_ptr);
        if (rc != PAM_SUCCESS) {
            note(argc, argv, "round %d conversation failed: %s", r + 1, pam_strerror(pamh, rc));
            result = PAM_CONV_ERR;
        } else {
            for (int i = 0; i < n; i++) {
                struct item *item = &rounds[r].items[i];
                const char *given = (responses && responses[i].resp) ? responses[i].resp : "";
                if (item->style == PAM_PROMPT_ECHO_OFF || item->style == PAM_PROMPT_ECHO_ON) {
                    int right = strcmp(given, item->answer) == 0;
                    note(argc, argv, "round %d prompt %d %s", r + 1, i + 1, right ? "ok" : "wrong");
                    if (!right) wrong = 1;
                }
            }
            note(argc, argv, "round %d done", r + 1);
        }
        if (responses) {
            for (int i = 0; i < n; i++) if (responses[i].resp) { memset(responses[i].resp, 0, strlen(responses[i].resp)); free(responses[i].resp); }
            free(responses);
        }
        free(messages);
        free(pointers);
        if (wrong && failfast) break;
    }
    free_rounds(rounds, count);
    if (result == PAM_SUCCESS && wrong) result = PAM_AUTH_ERR;
    note(argc, argv, "auth %s", result == PAM_SUCCESS ? "success" : "failure");
    return result;
}

PAM_EXTERN int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags; (void)argc; (void)argv;
    return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_acct_mgmt(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags;
    note(argc, argv, "account");
    return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_open_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags;
    note(argc, argv, "session open");
    return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags;
    note(argc, argv, "session close");
    return PAM_SUCCESS;
}

PAM_EXTERN int pam_sm_chauthtok(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)pamh; (void)flags; (void)argc; (void)argv;
    return PAM_SUCCESS;
}
"""#
}
