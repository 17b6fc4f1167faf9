#ifndef TERMIND_CLIBSSH2_SHIM_H
#define TERMIND_CLIBSSH2_SHIM_H
#include <libssh2.h>

// libssh2's convenience names are macros Swift cannot import; these are their expansions.
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

// The session engine's wake descriptor.
static inline int termind_ssh2_wake_fd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

static inline void termind_ssh2_wipe(void *pointer, size_t length) { if (pointer && length) explicit_bzero(pointer, length); }

// ---------------------------------------------------------------------------------------
// Memory: libssh2 holds passwords, keyboard-interactive answers, private keys and session
// keys in its own allocations; every block is wiped before it is freed.
static inline void *termind_ssh2_alloc(size_t count, void **abstract) { (void)abstract; return malloc(count); }
static inline void termind_ssh2_free(void *pointer, void **abstract) {
    (void)abstract;
    if (!pointer) return;
    explicit_bzero(pointer, malloc_usable_size(pointer));
    free(pointer);
}
static inline void *termind_ssh2_realloc(void *pointer, size_t count, void **abstract) {
    if (!pointer) return malloc(count);
    size_t old = malloc_usable_size(pointer);
    void *moved = malloc(count ? count : 1);
    if (!moved) return NULL;
    memcpy(moved, pointer, old < count ? old : count);
    termind_ssh2_free(pointer, abstract);
    return moved;
}

// ---------------------------------------------------------------------------------------
// Sending: libssh2 hands each complete encrypted packet to `termind_ssh2_send`, which always
// takes all of it into the session's own outbound buffer. libssh2 therefore never sees
// EAGAIN on a send — a send it had to repeat would otherwise be completed by whichever
// channel called next, losing that channel's packet and repeating the first one. The
// engine flushes the buffer when the socket is writable and holds back new channel data
// while the backlog is large (backpressure outside library calls); a large enough backlog
// is also written at once, from the callback (`eager_send`).
typedef struct termind_ssh2_context {
    void *owner;               // the Swift engine, for callbacks
    int fd;                    // the session's socket (libssh2 also sends to ssh-agent through the callback)
    int *cancel;               // set (atomically) when the opening in progress is cancelled
    unsigned char *out;
    size_t out_length, out_capacity, out_start;
    int discard;               // never send anything more (authentication was abandoned)
    unsigned long long received; // bytes read from the server: only they prove it is alive
    LIBSSH2_CHANNEL **agent_channels; // auth-agent@openssh.com channels the server opened, for the engine
    size_t agent_count, agent_capacity;
    size_t eager_send;         // write from the callback once this many bytes wait
    int quiet_hint;            // the engine is stepping its pumps: a socket known empty is not asked again
    int drained;               // ... and it is known empty (poll said so, or a recv since met EAGAIN or came short)
    int ack_due;               // ... and a short read is to be acknowledged once the pumps have stepped
    int peer_nodelay;          // the server sends small packets at once (a session started: see termind_ssh2_recv)
} termind_ssh2_context;

static inline termind_ssh2_context *termind_ssh2_context_new(void *owner) {
    termind_ssh2_context *context = calloc(1, sizeof(termind_ssh2_context));
    if (context) { context->owner = owner; context->fd = -1; context->eager_send = 262144; }
    return context;
}
static inline void termind_ssh2_context_free(termind_ssh2_context *context) {
    if (!context) return;
    if (context->out) { explicit_bzero(context->out, context->out_capacity); free(context->out); }
    free(context->agent_channels);  // the channels themselves are the session's
    free(context);
}
static inline size_t termind_ssh2_backlog(const termind_ssh2_context *context) { return context->out_length - context->out_start; }
static inline void termind_ssh2_set_eager_send(termind_ssh2_context *context, size_t bytes) { context->eager_send = bytes ? bytes : 1; }
static inline unsigned long long termind_ssh2_received(const termind_ssh2_context *context) { return context->received; }
static inline void termind_ssh2_set_peer_nodelay(termind_ssh2_context *context) { context->peer_nodelay = 1; }
static inline int termind_ssh2_acks_short_reads(const termind_ssh2_context *context) { return !context->peer_nodelay; }
static inline void termind_ssh2_discard_output(termind_ssh2_context *context) {
    context->discard = 1;
    context->out_start = context->out_length = 0;
}

/// Writes what it can without blocking: 0 when the buffer is empty, 1 when bytes remain,
/// -1 on a socket error (errno set).
static inline int termind_ssh2_flush(termind_ssh2_context *context, int fd) {
    while (context->out_start < context->out_length) {
        ssize_t sent = send(fd, context->out + context->out_start, context->out_length - context->out_start, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent > 0) { context->out_start += (size_t)sent; continue; }
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
        return -1;
    }
    context->out_start = context->out_length = 0;
    return 0;
}

// Once `eager_send` bytes wait, the send callback writes them at once (without blocking)
// instead of leaving them for the engine's flush at the end of its pass (which may have
// gathered up to half a MiB); small packets are still gathered into one write. The engine
// sets it from the cipher after the handshake (SessionEngine.tuneSending): what pays depends
// on how fast the server decrypts.

static inline ssize_t termind_ssh2_send(libssh2_socket_t socket, const void *buffer, size_t length, int flags, void **abstract) {
    termind_ssh2_context *context = (termind_ssh2_context *)*abstract;
    if (socket != context->fd) {
        // Not the SSH connection (libssh2 talks to ssh-agent through this callback too): a
        // plain send, as libssh2's own callback does.
        ssize_t sent = send(socket, buffer, length, flags | MSG_NOSIGNAL);
        return sent < 0 ? -errno : sent;
    }
    if (context->discard) return (ssize_t)length;
    if (context->out_start > 0 && context->out_start == context->out_length) context->out_start = context->out_length = 0;
    if (context->out_length + length > context->out_capacity) {
        if (context->out_start > 0) {   // compact first
            memmove(context->out, context->out + context->out_start, context->out_length - context->out_start);
            context->out_length -= context->out_start;
            context->out_start = 0;
        }
        if (context->out_length + length > context->out_capacity) {
            size_t capacity = context->out_capacity ? context->out_capacity : 65536;
            while (capacity < context->out_length + length) capacity *= 2;
            unsigned char *grown = malloc(capacity);
            if (!grown) return -ENOMEM;
            if (context->out) {
                memcpy(grown, context->out, context->out_length);
                explicit_bzero(context->out, context->out_capacity);
                free(context->out);
            }
            context->out = grown;
            context->out_capacity = capacity;
        }
    }
    memcpy(context->out + context->out_length, buffer, length);
    context->out_length += length;
    // A failed write is left for the engine's flush to find and report.
    if (context->out_length - context->out_start >= context->eager_send) {
        int saved = errno;
        (void)termind_ssh2_flush(context, context->fd);
        errno = saved;
    }
    return (ssize_t)length;
}

/// Acknowledges what the socket received now, not up to 40 ms later (see termind_ssh2_recv).
static inline void termind_ssh2_ack_now(int socket) {
    int one = 1;
    (void)setsockopt(socket, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

/// Receiving: the session's socket is read as libssh2 itself would. Any other socket is
/// ssh-agent's, which libssh2 reads blocking on the engine thread; it is waited on in
/// slices so that cancelling the attempt ends even a wait for the agent's confirmation.
static inline ssize_t termind_ssh2_recv(libssh2_socket_t socket, void *buffer, size_t length, int flags, void **abstract) {
    termind_ssh2_context *context = (termind_ssh2_context *)*abstract;
    if (socket != context->fd) {
        for (;;) {
            if (context->cancel && __atomic_load_n(context->cancel, __ATOMIC_SEQ_CST)) return -ECANCELED;
            struct pollfd waiting = { socket, POLLIN, 0 };
            int ready = poll(&waiting, 1, 100);
            if (ready > 0) break;
            if (ready < 0 && errno != EINTR) return -errno;
        }
    }
    // While the engine steps its pumps, a socket that poll() found empty, or that a read
    // since found empty (EAGAIN, or a short read), is not read again: each channel read
    // would otherwise cost a recv() that fails (libssh2 drains the socket in every read and
    // write). Bytes that arrive meanwhile make the socket readable for the engine's next
    // poll(), so they wait one loop at most.
    if (socket == context->fd && context->quiet_hint && context->drained) return -EAGAIN;
    ssize_t received = recv(socket, buffer, length, flags);
    if (received > 0 && socket == context->fd) {
        context->received += (unsigned long long)received;
        // A short read emptied the socket. Until the server has turned Nagle off, what was
        // read is acknowledged now, not up to 40 ms later: OpenSSH's sshd sets TCP_NODELAY
        // only when the connection's first session (exec, shell, subsystem) starts, so on a
        // connection with forwards alone its second small packet (a channel-open
        // confirmation, then the first data) waits for that acknowledgement; SOCKS opens
        // stalled 44 or 88 ms in about half the bench runs. Once a session started
        // (`peer_nodelay`) nothing waits for it, and the acknowledgement — a setsockopt()
        // and a packet through the whole TCP path for every echo, about 6 % of the engine's
        // CPU per key in a durable session — is left to TCP, as ssh(1) always leaves it.
        // A burst's full reads set nothing. While the pumps step, the acknowledgement waits
        // until they have, so an echo read here reaches the terminal first; and the socket
        // counts as drained: libssh2 reads again after every packet, a recv() that could
        // only fail before the echo is written.
        if ((size_t)received < length) {
            if (context->quiet_hint) {
                context->drained = 1;
                if (!context->peer_nodelay) context->ack_due = 1;
            } else if (!context->peer_nodelay) {
                termind_ssh2_ack_now(socket);
            }
        }
    }
    if (received < 0 && socket == context->fd && (errno == EAGAIN || errno == EWOULDBLOCK)) context->drained = context->quiet_hint;
    return received < 0 ? -errno : received;
}
/// Around the engine's pump steps: `on` with whether poll() just found the socket empty;
/// off afterwards, so every other caller (the opening's retries) reads as libssh2 does.
/// Turning it off sends the acknowledgement a short read in the step left due.
static inline void termind_ssh2_quiet_hint(termind_ssh2_context *context, int on, int empty) {
    if (!on && context->ack_due) termind_ssh2_ack_now(context->fd);
    context->ack_due = 0;
    context->quiet_hint = on;
    context->drained = on && empty;
}
/// For the engine's thread, at its start: names it (top -H, perf) and gives it the
/// process's own priority. Started from a Dispatch worker, it would otherwise keep that
/// worker's name and QoS priority (nice -2 under user-initiated work).
static inline void termind_ssh2_engine_thread(const char *name) {
    (void)prctl(PR_SET_NAME, name, 0, 0, 0);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)getpid());
    if (errno == 0) (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
}
static inline void termind_ssh2_set_flag(int *flag, int value) { __atomic_store_n(flag, value, __ATOMIC_SEQ_CST); }

// The session's abstract pointer is the context: it comes back to callbacks as *abstract.
static inline LIBSSH2_SESSION *termind_ssh2_session_init(termind_ssh2_context *context, int fd) {
    context->fd = fd;
    LIBSSH2_SESSION *session = libssh2_session_init_ex(termind_ssh2_alloc, termind_ssh2_free, termind_ssh2_realloc, context);
    if (session) {
        libssh2_session_callback_set2(session, LIBSSH2_CALLBACK_SEND, (libssh2_cb_generic *)termind_ssh2_send);
        libssh2_session_callback_set2(session, LIBSSH2_CALLBACK_RECV, (libssh2_cb_generic *)termind_ssh2_recv);
    }
    return session;
}
// Agent forwarding. libssh2 offers each auth-agent@openssh.com channel the server opens to
// this callback, from inside a read on the engine thread, already confirmed; the channel is
// queued and the engine bridges it to the local agent once the library call has returned.
// Until a channel asked for agent forwarding no callback is set, and libssh2 refuses such
// channels itself (a server cannot reach the agent uninvited).
static inline void termind_ssh2_authagent(LIBSSH2_SESSION *session, LIBSSH2_CHANNEL *channel, void **abstract) {
    (void)session;
    termind_ssh2_context *context = (termind_ssh2_context *)*abstract;
    if (context->agent_count == context->agent_capacity) {
        size_t capacity = context->agent_capacity ? context->agent_capacity * 2 : 8;
        LIBSSH2_CHANNEL **grown = realloc(context->agent_channels, capacity * sizeof(LIBSSH2_CHANNEL *));
        if (!grown) return;  // the channel stays the session's, unused; freed with it
        context->agent_channels = grown;
        context->agent_capacity = capacity;
    }
    context->agent_channels[context->agent_count++] = channel;
}
static inline void termind_ssh2_accept_agent_channels(LIBSSH2_SESSION *s) {
    libssh2_session_callback_set2(s, LIBSSH2_CALLBACK_AUTHAGENT, (libssh2_cb_generic *)termind_ssh2_authagent);
}
static inline LIBSSH2_CHANNEL *termind_ssh2_take_agent_channel(termind_ssh2_context *context) {
    if (!context || context->agent_count == 0) return NULL;
    LIBSSH2_CHANNEL *channel = context->agent_channels[0];
    memmove(context->agent_channels, context->agent_channels + 1, (context->agent_count - 1) * sizeof(LIBSSH2_CHANNEL *));
    context->agent_count--;
    return channel;
}
static inline int termind_ssh2_request_agent(LIBSSH2_CHANNEL *channel) { return libssh2_channel_request_auth_agent(channel); }

static inline int termind_ssh2_session_disconnect(LIBSSH2_SESSION *s, const char *description) {
    return libssh2_session_disconnect_ex(s, SSH_DISCONNECT_BY_APPLICATION, description, "");
}
/* A session channel offering the server a receive window of `window` bytes. */
static inline LIBSSH2_CHANNEL *termind_ssh2_channel_open_session(LIBSSH2_SESSION *s, unsigned int window) {
    return libssh2_channel_open_ex(s, "session", sizeof("session") - 1, window, LIBSSH2_CHANNEL_PACKET_DEFAULT, NULL, 0);
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
static inline void *termind_ssh2_abstract(void **abstract) {
    return abstract && *abstract ? ((termind_ssh2_context *)*abstract)->owner : NULL;
}

static inline LIBSSH2_CHANNEL *termind_ssh2_direct_tcpip(LIBSSH2_SESSION *s, const char *host, int port) {
    return libssh2_channel_direct_tcpip_ex(s, host, port, "127.0.0.1", 0);
}
/* A direct-tcpip channel as libssh2_channel_direct_tcpip_ex opens it (originator
 * 127.0.0.1:0), offering the server a receive window of `window` bytes instead of
 * libssh2's 2 MiB. The open message (RFC 4254 7.2: host, port, originator address and
 * port) is built here each call, byte for byte the same for the same arguments: libssh2
 * may use it again on the repeats after EAGAIN until the open packet went out. The caller
 * keeps `host` to 1024 bytes (longer: NULL). */
static inline unsigned char *termind_ssh2_put_u32(unsigned char *at, uint32_t value) {
    at[0] = (unsigned char)(value >> 24); at[1] = (unsigned char)(value >> 16); at[2] = (unsigned char)(value >> 8); at[3] = (unsigned char)value;
    return at + 4;
}
static inline LIBSSH2_CHANNEL *termind_ssh2_direct_tcpip_window(LIBSSH2_SESSION *s, const char *host, int port, unsigned int window) {
    static const char originator[] = "127.0.0.1";
    size_t host_length = strlen(host);
    unsigned char message[4 + 1024 + 4 + 4 + sizeof(originator) - 1 + 4];
    if (host_length > 1024) return NULL;
    unsigned char *at = message;
    at = termind_ssh2_put_u32(at, (uint32_t)host_length);
    memcpy(at, host, host_length); at += host_length;
    at = termind_ssh2_put_u32(at, (uint32_t)port);
    at = termind_ssh2_put_u32(at, (uint32_t)(sizeof(originator) - 1));
    memcpy(at, originator, sizeof(originator) - 1); at += sizeof(originator) - 1;
    at = termind_ssh2_put_u32(at, 0);
    return libssh2_channel_open_ex(s, "direct-tcpip", sizeof("direct-tcpip") - 1, window, LIBSSH2_CHANNEL_PACKET_DEFAULT,
                                   (const char *)message, (unsigned int)(at - message));
}

static inline const char *termind_ssh2_version(void) { return libssh2_version(0); }
static inline int termind_ssh2_error_eagain(void) { return LIBSSH2_ERROR_EAGAIN; }
#endif
