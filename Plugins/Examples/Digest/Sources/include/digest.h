#ifndef TERMIND_EXAMPLE_DIGEST_H
#define TERMIND_EXAMPLE_DIGEST_H
#include <stdint.h>
/* Exported for libffi binding; see plugin.json. */
uint32_t termind_digest_crc32(const char *text);
const char *termind_digest_sha256(const char *text);
#endif
