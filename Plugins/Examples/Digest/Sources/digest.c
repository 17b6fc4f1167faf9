/*
 * digest — an example termind plugin written in C.
 *
 * Contract digest.file@1: {"path": "...", "algorithm": "sha256"} → the file's digest,
 * computed by OpenSSL, e.g. to check a transfer against a published checksum.
 * Stream digest.hash@1 (the `digest` command): the same, with progress events while a
 * large file is read, and "-" hashing the command's standard input:
 *     termind --plugins DIR digest ./image.iso --algorithm sha512
 *     tar c dir | termind --plugins DIR digest -
 * Functions bound through libffi from the manifest's signatures:
 *     digest.fn.crc32@1   uint32(string)  CRC-32 (IEEE 802.3) of a UTF-8 string
 *     digest.fn.sha256@1  string(string)  hex SHA-256 of a UTF-8 string
 */
#include "termind_plugin.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const termind_host_api *host;

static char *host_strdup(const char *text) {
    size_t n = strlen(text) + 1;
    char *copy = host->alloc(n);
    if (copy != NULL) memcpy(copy, text, n);
    return copy;
}

static char *host_printf(const char *format, const char *a, const char *b) {
    size_t n = strlen(format) + strlen(a) + strlen(b) + 1;
    char *out = host->alloc(n);
    if (out != NULL) snprintf(out, n, format, a, b);
    return out;
}

static void to_hex(const unsigned char *bytes, unsigned int length, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (unsigned int i = 0; i < length; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * length] = '\0';
}

/* A progress event for the stream (docs/contracts.md): bytes done of total. */
static int progress(void *stream, const char *path, unsigned long long done, unsigned long long total) {
    char *item = host->json_quote(path);
    char fields[4096 + 128];
    snprintf(fields, sizeof fields, "{\"item\":%s,\"done\":%llu,\"total\":%llu,\"unit\":\"bytes\"}",
             item != NULL && strlen(item) < 4096 ? item : "\"file\"", done, total);
    host->free(item);
    return host->stream_emit(stream, "progress", fields, NULL, 0);
}

/* Reads the next piece of the input: the file, or the stream's input for "-". */
static long long next_piece(FILE *file, void *stream, unsigned char *buffer, size_t capacity) {
    if (file != NULL) return (long long)fread(buffer, 1, capacity, file);
    return (long long)host->stream_read(stream, buffer, capacity);
}

/* The digest of `path` (with `stream`: progress for a large file; "-": its input). */
static int digest_file(const char *request, void *stream, char **reply) {
    char *path = host->json_string_field(request, "path");
    char *algorithm = host->json_string_field(request, "algorithm");
    const char *name = algorithm != NULL ? algorithm : "sha256";
    int status = TERMIND_OK;
    FILE *file = NULL;
    EVP_MD_CTX *ctx = NULL;

    if (path == NULL || path[0] == '\0') {
        *reply = host_strdup("field \"path\" is required and must be a non-empty string");
        status = TERMIND_ERR_BAD_REQUEST;
        goto done;
    }
    const EVP_MD *md = EVP_get_digestbyname(name);
    if (md == NULL || (strcmp(name, "sha256") && strcmp(name, "sha512") && strcmp(name, "sha1") &&
                       strcmp(name, "md5") && strcmp(name, "sha384"))) {
        *reply = host_printf("field \"algorithm\": '%s' is not one of sha256, sha384, sha512, sha1, md5%s", name, "");
        status = TERMIND_ERR_BAD_REQUEST;
        goto done;
    }
    int from_input = stream != NULL && strcmp(path, "-") == 0;
    file = from_input ? NULL : fopen(path, "rb");
    if (!from_input && file == NULL) {
        host->log(host, TERMIND_LOG_WARNING, "digest.file.open_failed");
        char *quoted = host->json_quote(path);
        *reply = host_printf("cannot open %s: %s", quoted != NULL ? quoted : "the file", strerror(errno));
        host->free(quoted);
        status = TERMIND_ERR_FAILED;
        goto done;
    }
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, md, NULL) != 1) {
        *reply = host_strdup("OpenSSL could not start the digest");
        status = TERMIND_ERR_FAILED;
        goto done;
    }
    unsigned char buffer[1 << 16];
    unsigned long long total = 0, size = 0, shown = 0;
    struct stat info;
    /* Progress only where it helps: a stream reading a file of more than 4 MiB. */
    int show = stream != NULL && file != NULL && fstat(fileno(file), &info) == 0 && info.st_size > (4 << 20);
    if (show) size = (unsigned long long)info.st_size;
    long long n;
    while ((n = next_piece(file, stream, buffer, sizeof buffer)) > 0) {
        EVP_DigestUpdate(ctx, buffer, (size_t)n);
        total += (unsigned long long)n;
        if (show && total - shown >= (4u << 20)) {
            shown = total;
            if (progress(stream, path, total, size) != 0) break;  /* cancelled */
        }
    }
    if (stream != NULL && host->stream_cancelled(stream)) {
        *reply = host_strdup("cancelled");
        status = TERMIND_ERR_FAILED;
        goto done;
    }
    if (show && shown != total) progress(stream, path, total, size);
    if (n < 0 || (file != NULL && ferror(file))) {
        *reply = host_printf("reading the file failed: %s%s", strerror(errno), "");
        status = TERMIND_ERR_FAILED;
        goto done;
    }
    unsigned char md_value[EVP_MAX_MD_SIZE];
    unsigned int md_length = 0;
    EVP_DigestFinal_ex(ctx, md_value, &md_length);
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    to_hex(md_value, md_length, hex);
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu", total);
    size_t length = strlen(name) + strlen(hex) + strlen(bytes) + 64;
    *reply = host->alloc(length);
    if (*reply != NULL) snprintf(*reply, length, "{\"algorithm\":\"%s\",\"digest\":\"%s\",\"bytes\":%s}", name, hex, bytes);
    host->log(host, TERMIND_LOG_DEBUG, "digest.file.done");

done:
    if (ctx != NULL) EVP_MD_CTX_free(ctx);
    if (file != NULL) fclose(file);
    host->free(path);
    host->free(algorithm);
    return status;
}

static int handle(const char *contract, const char *request, size_t length, char **reply) {
    (void)length;
    if (strcmp(contract, "digest.file@1") == 0) return digest_file(request, NULL, reply);
    *reply = host_strdup("unknown contract");
    return TERMIND_ERR_UNKNOWN;
}

static int handle_stream(const char *name, const char *request, size_t length, void *stream, char **reply) {
    (void)length;
    if (strcmp(name, "digest.hash@1") == 0) return digest_file(request, stream, reply);
    *reply = host_strdup("unknown stream");
    return TERMIND_ERR_UNKNOWN;
}

static int start(char **error) {
    if (!TERMIND_HOST_HAS(host, stream_cancelled)) {
        *error = host_strdup("this termind's host API is older than the plugin needs");
        return TERMIND_ERR_FAILED;
    }
    return TERMIND_OK;
}

static const termind_plugin_descriptor descriptor = {
    .size = sizeof(termind_plugin_descriptor),
    .abi_version = TERMIND_PLUGIN_ABI_VERSION,
    .id = "digest",
    .version = "1.0.0",
    .start = start,
    .stop = NULL,
    .handle = handle,
    .handle_stream = handle_stream,
};

const termind_plugin_descriptor *termind_plugin_entry_v1(const termind_host_api *api) {
    host = api;
    return &descriptor;
}

/* --- Functions declared in plugin.json, called through libffi. --- */

uint32_t termind_digest_crc32(const char *text) {
    uint32_t crc = 0xFFFFFFFFu;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        crc ^= *p;
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* Returns a thread-local buffer, valid until the next call on the same thread. */
const char *termind_digest_sha256(const char *text) {
    static _Thread_local char hex[2 * 32 + 1];
    unsigned char md_value[EVP_MAX_MD_SIZE];
    unsigned int md_length = 0;
    if (EVP_Digest(text, strlen(text), md_value, &md_length, EVP_sha256(), NULL) != 1) return NULL;
    to_hex(md_value, md_length, hex);
    return hex;
}
