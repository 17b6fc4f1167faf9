#ifndef TERMIND_SYSTEM_H
#define TERMIND_SYSTEM_H
#include <sys/types.h>

/// The effective uid of the process on the other end of a connected Unix socket
/// (SO_PEERCRED). Returns 0 on success, -1 with errno set otherwise.
int termind_peer_uid(int fd, uid_t *uid);

/// Path of the running executable (/proc/self/exe), NUL-terminated into buf.
/// Returns the length, or -1 with errno set.
long termind_executable_path(char *buf, unsigned long size);

/// dlopen with RTLD_NOW | RTLD_LOCAL. Returns NULL and copies dlerror() into err.
void *termind_dlopen_now_local(const char *path, char *err, unsigned long err_size);
/// dlsym; returns NULL and copies dlerror() into err when the symbol is missing.
void *termind_dlsym(void *handle, const char *symbol, char *err, unsigned long err_size);
/// accept4(fd, NULL, NULL, SOCK_CLOEXEC).
int termind_accept_cloexec(int fd);
#endif
