/*
 * digest — an example termind plugin written in C.
 *
 * Contract digest.file@1: {"path": "...", "algorithm": "sha256"} → the file's digest,
 * computed by OpenSSL, e.g. to check a transfer against a published checksum:
 *     termind --plugins DIR digest ./image.iso --algorithm sha512
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

static int digest_file(const char *request, char **reply) {
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
    file = fopen(path, "rb");
    if (file == NULL) {
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
    unsigned long long total = 0;
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, file)) > 0) {
        EVP_DigestUpdate(ctx, buffer, n);
        total += n;
    }
    if (ferror(file)) {
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
    size_t size = strlen(name) + strlen(hex) + strlen(bytes) + 64;
    *reply = host->alloc(size);
    if (*reply != NULL) snprintf(*reply, size, "{\"algorithm\":\"%s\",\"digest\":\"%s\",\"bytes\":%s}", name, hex, bytes);
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
    if (strcmp(contract, "digest.file@1") == 0) return digest_file(request, reply);
    *reply = host_strdup("unknown contract");
    return TERMIND_ERR_UNKNOWN;
}

static int start(char **error) {
    if (host->size < sizeof(termind_host_api)) {
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
