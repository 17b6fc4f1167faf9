#define _GNU_SOURCE
#include "termind_system.h"
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

int termind_peer_uid(int fd, uid_t *uid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    *uid = cred.uid;
    return 0;
}

int termind_peer_pid(int fd, pid_t *pid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -1;
    *pid = cred.pid;
    return 0;
}

long termind_executable_path(char *buf, unsigned long size) {
    if (size == 0) { errno = EINVAL; return -1; }
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n < 0) return -1;
    buf[n] = '\0';
    return (long)n;
}

static void copy_dlerror(char *err, unsigned long err_size) {
    const char *e = dlerror();
    if (err_size == 0) return;
    if (e == NULL) e = "unknown dynamic loader error";
    strncpy(err, e, err_size - 1);
    err[err_size - 1] = '\0';
}

void *termind_dlopen_now_local(const char *path, char *err, unsigned long err_size) {
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) copy_dlerror(err, err_size);
    return h;
}

void *termind_dlsym(void *handle, const char *symbol, char *err, unsigned long err_size) {
    dlerror();
    void *s = dlsym(handle, symbol);
    if (s == NULL) copy_dlerror(err, err_size);
    return s;
}

int termind_accept_cloexec(int fd) {
    return accept4(fd, NULL, NULL, SOCK_CLOEXEC);
}

long termind_send_fds(int sock, const void *buf, unsigned long len, const int *fds, int count) {
    if (count < 1 || count > TERMIND_MAX_PASSED_FDS || len == 0) { errno = EINVAL; return -1; }
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int) * TERMIND_MAX_PASSED_FDS)]; } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                          .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count) };
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
    memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * (size_t)count);
    ssize_t n;
    do { n = sendmsg(sock, &msg, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    return (long)n;
}

long termind_recv_fds(int sock, void *buf, unsigned long len, int *fds, int *count, int *truncated) {
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int) * TERMIND_MAX_PASSED_FDS)]; } control;
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof control.space };
    *count = 0;
    *truncated = 0;
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) return -1;
    if (msg.msg_flags & MSG_CTRUNC) *truncated = 1;
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) { *truncated = 1; continue; }
        size_t received = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < received; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
            if (*count < TERMIND_MAX_PASSED_FDS) fds[(*count)++] = fd; else { close(fd); *truncated = 1; }
        }
    }
    return (long)n;
}

/* ---- Plugin sandbox ---------------------------------------------------------------- */

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <unistd.h>

#include <linux/capability.h>

int termind_sandbox_drop_capabilities(void) {
    for (int cap = 0; cap <= 63; cap++) (void)prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2] = { { 0, 0, 0 }, { 0, 0, 0 } };
    return (int)syscall(SYS_capset, &header, data);
}

int termind_set_undumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif

int termind_pidfd_open(int pid) {
    return (int)syscall(__NR_pidfd_open, pid, 0);
}

int termind_pidfd_kill(int pidfd, int sig) {
    return (int)syscall(__NR_pidfd_send_signal, pidfd, sig, NULL, 0);
}

int termind_sandbox_no_new_privs(void) {
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

#if defined(__x86_64__)
#define TERMIND_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define TERMIND_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)
/* Allowed only when argument `arg` (its low 32 bits) equals `value`, else EPERM. */
#define ONLY_IF_ARG(nr, arg, value) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4), \
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[arg])), \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), 0, 1), \
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), \
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

#ifndef SECCOMP_FILTER_FLAG_TSYNC
#define SECCOMP_FILTER_FLAG_TSYNC 1
#endif

int termind_sandbox_seccomp(int allow_inet) {
#ifndef TERMIND_AUDIT_ARCH
    (void)allow_inet;
    errno = ENOSYS;
    return -1;
#else
    const unsigned int self = (unsigned int)getpid();
    const unsigned int inet = allow_inet ? SECCOMP_RET_ALLOW : (SECCOMP_RET_ERRNO | EPERM);
    struct sock_filter filter[] = {
        /* Another architecture's calls (a 32-bit entry) end the process. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TERMIND_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        /* x32 calls carry this bit: refused. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
#endif
        DENY(__NR_ptrace), DENY(__NR_mount), DENY(__NR_umount2), DENY(__NR_bpf),
        DENY(__NR_keyctl), DENY(__NR_add_key), DENY(__NR_request_key),
        DENY(__NR_perf_event_open), DENY(__NR_userfaultfd),
        DENY(__NR_process_vm_readv), DENY(__NR_process_vm_writev),
        DENY(__NR_kexec_load), DENY(__NR_init_module), DENY(__NR_finit_module), DENY(__NR_delete_module),
        DENY(__NR_pivot_root), DENY(__NR_chroot), DENY(__NR_setns), DENY(__NR_unshare),
        /* io_uring would open sockets and files around this filter. */
        DENY(__NR_io_uring_setup), DENY(__NR_io_uring_enter), DENY(__NR_io_uring_register),
        /* No Unix socket pair (a datagram one could send to any named socket). */
        DENY(__NR_socketpair),
        /* File metadata (Landlock does not cover it): no chmod, chown, times, xattrs, truncate by path. */
        DENY(__NR_chmod), DENY(__NR_fchmod), DENY(__NR_fchmodat),
        DENY(__NR_chown), DENY(__NR_fchown), DENY(__NR_lchown), DENY(__NR_fchownat),
        DENY(__NR_utime), DENY(__NR_utimes), DENY(__NR_futimesat), DENY(__NR_utimensat),
        DENY(__NR_setxattr), DENY(__NR_lsetxattr), DENY(__NR_fsetxattr),
        DENY(__NR_removexattr), DENY(__NR_lremovexattr), DENY(__NR_fremovexattr),
        DENY(__NR_truncate),
        /* No new processes: threads only (glibc falls back from clone3 to clone). */
        DENY(__NR_fork), DENY(__NR_vfork),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x00010000 /* CLONE_THREAD */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        /* Signals only to itself. */
        ONLY_IF_ARG(__NR_kill, 0, self),
        ONLY_IF_ARG(__NR_tgkill, 0, self),
        ONLY_IF_ARG(__NR_rt_sigqueueinfo, 0, self),
        ONLY_IF_ARG(__NR_rt_tgsigqueueinfo, 0, self),
        DENY(__NR_tkill), DENY(__NR_pidfd_send_signal), DENY(__NR_pidfd_open),
        /* fcntl: no F_SETOWN, F_SETOWN_EX or F_SETSIG (they turn I/O into signals to others). */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fcntl, 0, 6),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 8 /* F_SETOWN */, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 10 /* F_SETSIG */, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 15 /* F_SETOWN_EX */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* socket(domain, ...): AF_INET/AF_INET6 when allowed, nothing else. */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, inet),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = { .len = (unsigned short)(sizeof(filter) / sizeof(filter[0])), .filter = filter };
    /* Every thread of the process, not only the caller. */
    return (int)syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program);
#endif
}

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

struct termind_ruleset_attr { uint64_t fs, net, scoped; };
struct termind_path_beneath { uint64_t allowed; int32_t parent_fd; } __attribute__((packed));

int termind_landlock_abi(void) {
    long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi < 0 ? 0 : (int)abi;
}

/* Rights a rule on a regular file may carry: execute, write, read, truncate, ioctl. */
#define TERMIND_LL_FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))
#define TERMIND_LL_READ ((1ULL << 0) | (1ULL << 2) | (1ULL << 3))

static int termind_landlock_rule(int ruleset, const char *path, uint64_t rights, uint64_t handled) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : -1;  /* a path that is not there grants nothing */
    struct stat info;
    if (fstat(fd, &info) == 0 && !S_ISDIR(info.st_mode)) rights &= TERMIND_LL_FILE_RIGHTS;
    struct termind_path_beneath rule = { .allowed = rights & handled, .parent_fd = fd };
    long rc = syscall(__NR_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &rule, 0);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc < 0 ? -1 : 0;
}

int termind_landlock_restrict(int abi, const char *const *read, int read_count, const char *const *write, int write_count,
                              int allow_tcp, const char **failed) {
    if (abi <= 0) { errno = ENOSYS; return -1; }
    if (abi > 6) abi = 6;
    uint64_t fs = (1ULL << 13) - 1;
    if (abi >= 2) fs |= 1ULL << 13; /* refer */
    if (abi >= 3) fs |= 1ULL << 14; /* truncate */
    if (abi >= 5) fs |= 1ULL << 15; /* ioctl on devices */
    struct termind_ruleset_attr attr = { .fs = fs, .net = 0, .scoped = 0 };
    size_t size = sizeof(uint64_t);
    if (abi >= 4) { attr.net = allow_tcp ? 0 : 3 /* bind and connect TCP */; size = 2 * sizeof(uint64_t); }
    if (abi >= 6) { attr.scoped = 3 /* abstract Unix sockets, signals */; size = 3 * sizeof(uint64_t); }
    int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) return -1;
    for (int i = 0; i < read_count; i++) {
        if (termind_landlock_rule(ruleset, read[i], TERMIND_LL_READ, fs) < 0) { *failed = read[i]; close(ruleset); return -1; }
    }
    for (int i = 0; i < write_count; i++) {
        if (termind_landlock_rule(ruleset, write[i], fs, fs) < 0) { *failed = write[i]; close(ruleset); return -1; }
    }
    long rc = syscall(__NR_landlock_restrict_self, ruleset, 0);
    int saved = errno;
    close(ruleset);
    errno = saved;
    return rc < 0 ? -1 : 0;
}

int termind_edge_poller(const int *fds, int count) {
    int poller = epoll_create1(EPOLL_CLOEXEC);
    if (poller < 0) return -1;
    for (int i = 0; i < count; i++) {
        struct epoll_event event = { .events = EPOLLIN | EPOLLET, .data = { .fd = fds[i] } };
        if (epoll_ctl(poller, EPOLL_CTL_ADD, fds[i], &event) != 0) {
            int saved = errno;
            close(poller);
            errno = saved;
            return -1;
        }
    }
    return poller;
}

int termind_poller_wait(int poller) {
    struct epoll_event event;
    int n = epoll_wait(poller, &event, 1, -1);
    if (n != 1) return -1;
    return event.data.fd;
}

int termind_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
