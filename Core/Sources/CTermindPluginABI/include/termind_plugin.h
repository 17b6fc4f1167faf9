/*
 * termind_plugin.h — the C ABI between the termind host and third-party plugins.
 *
 * A plugin is a shared library plus a manifest (plugin.json). The host reads and
 * validates the manifest before it opens the library, then resolves exactly one
 * symbol, TERMIND_PLUGIN_ENTRY_SYMBOL, and calls it once with the host API table.
 * The entry returns a descriptor that must match the manifest (id, version, ABI).
 *
 * Data crosses the boundary as UTF-8 JSON envelopes. Ownership is always explicit:
 *  - strings the host passes in are borrowed for the duration of the call;
 *  - a reply or error a plugin hands back must be allocated with host->alloc;
 *    the host frees it.
 *
 * Compatibility: termind_host_api only grows at the end. A plugin checks
 * host->size before touching a member newer than the ABI it was built for.
 * The host never dlclose()s a plugin.
 */
#ifndef TERMIND_PLUGIN_H
#define TERMIND_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TERMIND_PLUGIN_ABI_VERSION 1u
#define TERMIND_PLUGIN_ENTRY_SYMBOL "termind_plugin_entry_v1"

/* Status codes returned by plugin callbacks. */
enum {
    TERMIND_OK = 0,
    TERMIND_ERR_BAD_REQUEST = 1,  /* the request did not match the contract      */
    TERMIND_ERR_UNKNOWN = 2,      /* the contract is not handled by this plugin   */
    TERMIND_ERR_FAILED = 3        /* the operation failed; see the error message  */
};

/* Log levels for host->log. */
enum {
    TERMIND_LOG_DEBUG = 0,
    TERMIND_LOG_INFO = 1,
    TERMIND_LOG_WARNING = 2,
    TERMIND_LOG_ERROR = 3
};

/* Provided by the host, one table per plugin, valid for the process lifetime.
 * Append-only: new members are only ever added at the end. */
typedef struct termind_host_api {
    uint32_t size;          /* sizeof(termind_host_api) as the host knows it */
    uint32_t abi_version;   /* TERMIND_PLUGIN_ABI_VERSION of the host        */
    const char *host_version;
    /* Allocate memory the host will free (replies, error messages). */
    void *(*alloc)(size_t size);
    /* Log a stable English code (e.g. "digest.file.read_failed") as this plugin.
     * Pass the same `host` pointer the entry point received. Never pass secrets,
     * paths, user input or remote output: codes only (they are sanitized). */
    void (*log)(const struct termind_host_api *host, int level, const char *code);
    /* Opaque to plugins: identifies the plugin to the host. */
    void *host_context;
    /* Free memory returned by the host (json_* results). */
    void (*free)(void *pointer);
    /* The string value of top-level field `key` of JSON object `json`, as a
     * NUL-terminated UTF-8 copy (free with host->free), or NULL when the field is
     * absent, not a string, or contains a NUL byte. */
    char *(*json_string_field)(const char *json, const char *key);
    /* `text` as a quoted, escaped JSON string literal (free with host->free). */
    char *(*json_quote)(const char *text);

    /* ---- Streams (check host->size covers them: TERMIND_HOST_HAS(host, stream_emit)).
     * `stream` is the handle handle_stream received; valid until it returns. A handle
     * used after that names no stream: each call answers as for a stream that is over
     * (emit nonzero, read -1, ask NULL, cancelled nonzero). */

    /* Sends event `kind` ("progress", "record", "stdout", ...; docs/contracts.md) with
     * `fields_json`, a JSON object of its fields (NULL: none), and for a data event
     * (stdout, stderr) `data_length` bytes at `data` (NULL: none). Blocks while the
     * client has no room (flow control: nothing is dropped). Returns 0, or nonzero when
     * the stream was cancelled or its client went away (stop, and return). */
    int (*stream_emit)(void *stream, const char *kind, const char *fields_json,
                       const void *data, size_t data_length);
    /* Reads the stream's input (a stream whose manifest schema says "acceptsInput"):
     * blocks until some arrives, then copies up to `capacity` bytes into `buffer`.
     * Returns the count, 0 at the end of input, -1 once the stream was cancelled. */
    int64_t (*stream_read)(void *stream, void *buffer, size_t capacity);
    /* Asks the client `question_json` (a question as docs/contracts.md describes) and
     * blocks for the answer: a JSON object (free with host->free), or NULL when nobody
     * could answer (no terminal, cancelled) — then fail closed. */
    char *(*stream_ask)(void *stream, const char *question_json);
    /* Nonzero once the stream was cancelled (Ctrl-C at the client, client gone). */
    int (*stream_cancelled)(void *stream);

    /* ---- The caller chain (check TERMIND_HOST_HAS(host, call_chain)).
     * Who the call or stream this thread serves is for, as a JSON array of links, first
     * first: {"kind": "client"|"feature"|"agent", "id": "uid 1000", "detail": "pid 42"}
     * (docs/contracts.md, "The caller chain"). Free with host->free; NULL when the thread
     * serves no call (outside handle and handle_stream). */
    char *(*call_chain)(void);
} termind_host_api;

/* Whether a host table (or descriptor) is large enough to hold `member`. */
#define TERMIND_HOST_HAS(table, member) \
    ((table)->size >= offsetof(__typeof__(*(table)), member) + sizeof((table)->member))

/* Returned by the plugin's entry point; must stay valid for the process lifetime. */
typedef struct termind_plugin_descriptor {
    uint32_t size;          /* sizeof(termind_plugin_descriptor) */
    uint32_t abi_version;   /* must equal the manifest's "abi"   */
    const char *id;         /* must equal the manifest's "id"    */
    const char *version;    /* must equal the manifest's "version" */

    /* Called once in dependency order. Return TERMIND_OK, or set *error
     * (allocated with host->alloc) and return TERMIND_ERR_FAILED. May be NULL. */
    int (*start)(char **error);
    /* Called once in reverse order at shutdown. May be NULL. */
    void (*stop)(void);

    /* Handle one contract call. `contract` is "name@version" as declared in the
     * manifest; `request` is a JSON object of `request_length` bytes. On success
     * set *reply to a JSON value allocated with host->alloc and return TERMIND_OK.
     * On failure set *reply to a human-readable message (host->alloc) and return
     * a TERMIND_ERR_* code. Calls may arrive concurrently from several threads. */
    int (*handle)(const char *contract, const char *request, size_t request_length,
                  char **reply);

    /* Serve one stream declared under the manifest's "streams" (the host reads this
     * member only when `size` covers it). Like handle, with `stream` for the host's
     * stream_* calls while it runs; it may block (it runs on one of the plugin's
     * threads). Set *reply to the result (a JSON value, host->alloc) and return
     * TERMIND_OK, or a message and a TERMIND_ERR_* code. May be NULL. */
    int (*handle_stream)(const char *stream, const char *request, size_t request_length,
                         void *stream_handle, char **reply);
} termind_plugin_descriptor;

typedef const termind_plugin_descriptor *(*termind_plugin_entry_fn)(const termind_host_api *host);

#ifdef __cplusplus
}
#endif
#endif /* TERMIND_PLUGIN_H */
