#ifndef TERMIND_CLIBSSH2_SHIM_H
#define TERMIND_CLIBSSH2_SHIM_H
#include <libssh2.h>
#include <libssh2_sftp.h>

// libssh2's convenience names are macros Swift cannot import; these are their expansions.
static inline LIBSSH2_SESSION *termind_ssh2_session_init(void) { return libssh2_session_init_ex(NULL, NULL, NULL, NULL); }
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
static inline const char *termind_ssh2_version(void) { return libssh2_version(0); }
static inline int termind_ssh2_error_eagain(void) { return LIBSSH2_ERROR_EAGAIN; }
static inline int termind_ssh2_hostkey_hash_sha256(void) { return LIBSSH2_HOSTKEY_HASH_SHA256; }
#endif
