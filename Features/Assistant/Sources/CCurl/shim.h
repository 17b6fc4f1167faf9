// libcurl (Debian's libcurl4-openssl-dev) for the Assistant's HTTP client. curl_easy_setopt
// and friends are variadic, which Swift cannot call: one typed shim per argument shape.
#ifndef TERMIND_CCURL_SHIM_H
#define TERMIND_CCURL_SHIM_H
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

static inline CURLcode termind_curl_long(CURL *handle, CURLoption option, long value) { return curl_easy_setopt(handle, option, value); }
static inline CURLcode termind_curl_offset(CURL *handle, CURLoption option, curl_off_t value) { return curl_easy_setopt(handle, option, value); }
static inline CURLcode termind_curl_string(CURL *handle, CURLoption option, const char *value) { return curl_easy_setopt(handle, option, value); }
static inline CURLcode termind_curl_pointer(CURL *handle, CURLoption option, void *value) { return curl_easy_setopt(handle, option, value); }
static inline CURLcode termind_curl_list(CURL *handle, CURLoption option, struct curl_slist *value) { return curl_easy_setopt(handle, option, value); }
static inline CURLcode termind_curl_write_function(CURL *handle, CURLoption option, size_t (*function)(char *, size_t, size_t, void *)) {
    return curl_easy_setopt(handle, option, function);
}
static inline CURLcode termind_curl_info_long(CURL *handle, CURLINFO info, long *value) { return curl_easy_getinfo(handle, info, value); }
static inline CURLcode termind_curl_info_string(CURL *handle, CURLINFO info, char **value) { return curl_easy_getinfo(handle, info, value); }
static inline CURLMcode termind_curl_multi_long(CURLM *multi, CURLMoption option, long value) { return curl_multi_setopt(multi, option, value); }

static const size_t termind_curl_writefunc_pause = CURL_WRITEFUNC_PAUSE;
static const int termind_curl_pause_continue = CURLPAUSE_CONT;
static const long termind_curl_global_default = CURL_GLOBAL_DEFAULT;
/// The message of a finished transfer (CURLMSG_DONE), its easy handle and result.
static inline CURLcode termind_curl_message_result(CURLMsg *message) { return message->data.result; }
#endif
