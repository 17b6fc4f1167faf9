#ifndef TERMIND_SYSTEM_H
#define TERMIND_SYSTEM_H
#include <sys/types.h>

/// The effective uid of the process on the other end of a connected Unix socket
/// (SO_PEERCRED). Returns 0 on success, -1 with errno set otherwise.
int termind_peer_uid(int fd, uid_t *uid);
/* The pid of the process at the other end of a Unix socket (SO_PEERCRED), as it connected. */
int termind_peer_pid(int fd, pid_t *pid);

/// Path of the running executable (/proc/self/exe), NUL-terminated into buf.
/// Returns the length, or -1 with errno set.
long termind_executable_path(char *buf, unsigned long size);

/// dlopen with RTLD_NOW | RTLD_LOCAL. Returns NULL and copies dlerror() into err.
void *termind_dlopen_now_local(const char *path, char *err, unsigned long err_size);
/// dlsym; returns NULL and copies dlerror() into err when the symbol is missing.
void *termind_dlsym(void *handle, const char *symbol, char *err, unsigned long err_size);
/// accept4(fd, NULL, NULL, SOCK_CLOEXEC).
int termind_accept_cloexec(int fd);

/// The most descriptors one message carries (stdin, stdout, stderr).
#define TERMIND_MAX_PASSED_FDS 3

/// sendmsg() of `len` bytes of `buf` with `count` (1...TERMIND_MAX_PASSED_FDS) descriptors
/// as SCM_RIGHTS, MSG_NOSIGNAL. Returns the bytes sent (the descriptors go with the first
/// one), or -1 with errno set.
long termind_send_fds(int sock, const void *buf, unsigned long len, const int *fds, int count);

/// recvmsg() into `buf` with room for TERMIND_MAX_PASSED_FDS descriptors (received
/// close-on-exec). Stores the descriptors received in `fds` and their number in `count`;
/// `truncated` is set when the peer sent more than fit (the kernel closed the rest) or a
/// control message of another kind. Returns the bytes read, 0 at the end, -1 with errno.
long termind_recv_fds(int sock, void *buf, unsigned long len, int *fds, int *count, int *truncated);
#endif
