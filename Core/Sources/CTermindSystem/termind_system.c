#define _GNU_SOURCE
#include "termind_system.h"
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
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
