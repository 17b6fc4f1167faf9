// GNU libmicrohttpd (Debian's libmicrohttpd-dev) for the Assistant's loopback HTTP server
// (MCP's Streamable HTTP). MHD_start_daemon is variadic, which Swift cannot call: one typed
// shim with the options termind uses.
#ifndef TERMIND_CMICROHTTPD_SHIM_H
#define TERMIND_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// A daemon on an already bound and listening socket (termind binds it: loopback only, port
/// 0 allowed), its own polling thread (epoll), suspend/resume for answers computed elsewhere.
static inline struct MHD_Daemon *termind_mhd_start(int listen_fd, MHD_AccessHandlerCallback handler, void *cls,
                                                   MHD_RequestCompletedCallback completed, unsigned int connection_limit,
                                                   unsigned int idle_timeout_seconds, size_t header_memory_limit) {
    return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME,
                            0, NULL, NULL, handler, cls,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout_seconds,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, header_memory_limit,
                            MHD_OPTION_END);
}

static const enum MHD_ResponseMemoryMode termind_mhd_must_copy = MHD_RESPMEM_MUST_COPY;
static const enum MHD_Result termind_mhd_yes = MHD_YES;
static const enum MHD_Result termind_mhd_no = MHD_NO;
static const enum MHD_ValueKind termind_mhd_header_kind = MHD_HEADER_KIND;
static const enum MHD_ValueKind termind_mhd_query_kind = MHD_GET_ARGUMENT_KIND;
#endif
