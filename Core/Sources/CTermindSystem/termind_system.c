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
