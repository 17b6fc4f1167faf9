#ifndef TERMIND_CLIBSSH2_SHIM_H
#define TERMIND_CLIBSSH2_SHIM_H
#include <libssh2.h>
#include <libssh2_sftp.h>

// libssh2's convenience names are macros Swift cannot import; these are their expansions.
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

// The session engine's wake descriptor.
static inline int termind_ssh2_wake_fd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

// `abstract` comes back to callbacks (keyboard-interactive) as *abstract.
static inline LIBSSH2_SESSION *termind_ssh2_session_init(void *abstract) { return libssh2_session_init_ex(NULL, NULL, NULL, abstract); }
static inline int termind_ssh2_session_disconnect(LIBSSH2_SESSION *s, const char *description) {
    return libssh2_session_disconnect_ex(s, SSH_DISCONNECT_BY_APPLICATION, description, "");
}
static inline LIBSSH2_CHANNEL *termind_ssh2_channel_open_session(LIBSSH2_SESSION *s) {
    return libssh2_channel_open_ex(s, "session", sizeof("session") - 1, LIBSSH2_CHANNEL_WINDOW_DEFAULT, LIBSSH2_CHANNEL_PACKET_DEFAULT, NULL, 0);
}
static inline int termind_ssh2_channel_exec(LIBSSH2_CHANNEL *c, const char *command, unsigned int length) {
    return libssh2_channel_process_startup(c, "exec", sizeof("exec") - 1, command, length);
}
static inline ssize_t termind_ssh2_channel_read(LIBSSH2_CHANNEL *c, int stream, char *buffer, size_t size) {
    return libssh2_channel_read_ex(c, stream, buffer, size);
}
static inline int termind_ssh2_userauth_password(LIBSSH2_SESSION *s, const char *user, unsigned int user_length,
                                                 const char *password, unsigned int password_length) {
    return libssh2_userauth_password_ex(s, user, user_length, password, password_length, NULL);
}
static inline int termind_ssh2_channel_shell(LIBSSH2_CHANNEL *c) {
    return libssh2_channel_process_startup(c, "shell", sizeof("shell") - 1, NULL, 0);
}
static inline int termind_ssh2_channel_subsystem(LIBSSH2_CHANNEL *c, const char *name, unsigned int length) {
    return libssh2_channel_process_startup(c, "subsystem", sizeof("subsystem") - 1, name, length);
}
static inline ssize_t termind_ssh2_channel_write(LIBSSH2_CHANNEL *c, const char *buffer, size_t size) {
    return libssh2_channel_write_ex(c, 0, buffer, size);
}

// Keyboard-interactive: libssh2 frees each response text with free(), so answers are copied
// with malloc here; the caller wipes its own copy.
typedef void (*termind_ssh2_kbdint_callback)(const char *name, int name_len, const char *instruction,
                                             int instruction_len, int num_prompts,
                                             const LIBSSH2_USERAUTH_KBDINT_PROMPT *prompts,
                                             LIBSSH2_USERAUTH_KBDINT_RESPONSE *responses, void **abstract);
static inline int termind_ssh2_userauth_kbdint(LIBSSH2_SESSION *s, const char *user, unsigned int user_length,
                                               termind_ssh2_kbdint_callback callback) {
    return libssh2_userauth_keyboard_interactive_ex(s, user, user_length, callback);
}
static inline const unsigned char *termind_ssh2_prompt_text(const LIBSSH2_USERAUTH_KBDINT_PROMPT *prompts, int index, size_t *length, int *echo) {
    *length = prompts[index].length;
    *echo = prompts[index].echo;
    return prompts[index].text;
}
static inline int termind_ssh2_set_response(LIBSSH2_USERAUTH_KBDINT_RESPONSE *responses, int index, const char *text, unsigned int length) {
    char *copy = malloc(length + 1);
    if (!copy) return -1;
    if (length) memcpy(copy, text, length);
    copy[length] = 0;
    responses[index].text = copy;
    responses[index].length = length;
    return 0;
}
static inline void *termind_ssh2_abstract(void **abstract) { return abstract ? *abstract : NULL; }

static inline LIBSSH2_CHANNEL *termind_ssh2_direct_tcpip(LIBSSH2_SESSION *s, const char *host, int port) {
    return libssh2_channel_direct_tcpip_ex(s, host, port, "127.0.0.1", 0);
}
static inline LIBSSH2_SFTP_HANDLE *termind_ssh2_sftp_open(LIBSSH2_SFTP *sftp, const char *path, unsigned int length,
                                                         unsigned long flags, long mode, int type) {
    return libssh2_sftp_open_ex(sftp, path, length, flags, mode, type);
}
static inline int termind_ssh2_sftp_realpath(LIBSSH2_SFTP *sftp, const char *path, unsigned int length, char *target, unsigned int max) {
    return libssh2_sftp_symlink_ex(sftp, path, length, target, max, LIBSSH2_SFTP_REALPATH);
}
static inline int termind_ssh2_sftp_stat(LIBSSH2_SFTP *sftp, const char *path, unsigned int length, LIBSSH2_SFTP_ATTRIBUTES *attributes) {
    return libssh2_sftp_stat_ex(sftp, path, length, LIBSSH2_SFTP_STAT, attributes);
}
static inline int termind_ssh2_sftp_readdir(LIBSSH2_SFTP_HANDLE *handle, char *buffer, size_t size, LIBSSH2_SFTP_ATTRIBUTES *attributes) {
    return libssh2_sftp_readdir_ex(handle, buffer, size, NULL, 0, attributes);
}
static inline int termind_ssh2_sftp_unlink(LIBSSH2_SFTP *sftp, const char *path, unsigned int length) {
    return libssh2_sftp_unlink_ex(sftp, path, length);
}
static inline ssize_t termind_ssh2_sftp_read_shim(LIBSSH2_SFTP_HANDLE *handle, char *buffer, size_t size) {
    return libssh2_sftp_read(handle, buffer, size);
}
static inline ssize_t termind_ssh2_sftp_write_shim(LIBSSH2_SFTP_HANDLE *handle, const char *buffer, size_t size) {
    return libssh2_sftp_write(handle, buffer, size);
}

static inline const char *termind_ssh2_version(void) { return libssh2_version(0); }
static inline int termind_ssh2_error_eagain(void) { return LIBSSH2_ERROR_EAGAIN; }
static inline int termind_ssh2_hostkey_hash_sha256(void) { return LIBSSH2_HOSTKEY_HASH_SHA256; }
#endif
