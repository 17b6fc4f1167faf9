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

/* ---- The sandbox of a plugin's own process (termind-plugin-host), applied before any
 * plugin code runs. Each returns 0, or -1 with errno set. */

/// Drops every capability (bounding set, ambient, effective, permitted, inheritable): a
/// plugin process started by root keeps root's uid but none of its powers.
int termind_sandbox_drop_capabilities(void);

/// prctl(PR_SET_DUMPABLE, 0) for termind itself: processes of the same user (a plugin's
/// among them) can no longer read its memory, environment or descriptors through /proc.
int termind_set_undumpable(void);

/// pidfd_open(pid, 0): a descriptor for that process itself; -1 with errno where the kernel
/// has none (before 5.3).
int termind_pidfd_open(int pid);
/// pidfd_send_signal(pidfd, sig, NULL, 0).
int termind_pidfd_kill(int pidfd, int sig);

/// prctl(PR_SET_NO_NEW_PRIVS): nothing exec'd later gains privileges (setuid, file caps).
int termind_sandbox_no_new_privs(void);

/// A seccomp filter: ptrace, mount/umount2, bpf, keyctl/add_key/request_key,
/// perf_event_open, userfaultfd, process_vm_readv/writev, kexec and module loading fail
/// with EPERM; so does socket() for AF_UNIX (termind's control socket is a Unix socket),
/// and for AF_INET/AF_INET6 unless `allow_inet`. Every other call is allowed.
int termind_sandbox_seccomp(int allow_inet);

/// The Landlock ABI the kernel offers (0: none).
int termind_landlock_abi(void);

/// Restricts this process with Landlock (at `abi`, at most 6 used): reading (and mapping
/// libraries) only beneath `read` paths, writing only beneath `write` paths; with ABI 4 and
/// later no TCP bind or connect unless `allow_tcp`; with ABI 6 no signals to processes
/// outside this one and no abstract Unix sockets. On failure, `failed` names the path.
int termind_landlock_restrict(int abi, const char *const *read, int read_count, const char *const *write, int write_count,
                              int allow_tcp, const char **failed);

/// An epoll set (close-on-exec) watching `count` descriptors for input, edge-triggered: of
/// the threads waiting in one set, epoll wakes one per arrival (a level-triggered set wakes
/// another waiter while the first has not read yet), and that thread must read until EAGAIN.
/// Returns the set, or -1 with errno set.
int termind_edge_poller(const int *fds, int count);
/// Waits, without a timeout, until a descriptor of `poller` has input: that descriptor, or -1
/// with errno set (EINTR among them).
int termind_poller_wait(int poller);
/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK).
int termind_eventfd(void);
#endif
