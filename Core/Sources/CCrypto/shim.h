#ifndef TERMIND_CCRYPTO_SHIM_H
#define TERMIND_CCRYPTO_SHIM_H
#define OPENSSL_API_COMPAT 30000
#define OPENSSL_NO_DEPRECATED 1
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/opensslv.h>
#include <openssl/pem.h>
#include <openssl/bio.h>
#include <openssl/ec.h>
#include <openssl/bn.h>
#include <openssl/rsa.h>

// Macros and constants Swift cannot import directly.
static inline int termind_evp_ctrl_gcm_set_ivlen(void) { return EVP_CTRL_GCM_SET_IVLEN; }
static inline int termind_evp_ctrl_gcm_get_tag(void) { return EVP_CTRL_GCM_GET_TAG; }
static inline int termind_evp_ctrl_gcm_set_tag(void) { return EVP_CTRL_GCM_SET_TAG; }
static inline const char *termind_openssl_version(void) { return OpenSSL_version(OPENSSL_VERSION); }
#endif
