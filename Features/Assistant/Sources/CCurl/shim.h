// libcurl (Debian's libcurl4-openssl-dev) for the Assistant's HTTP client. curl_easy_setopt
// and friends are variadic, which Swift cannot call: one typed shim per argument shape.
#ifndef TERMIND_CCURL_SHIM_H
#define TERMIND_CCURL_SHIM_H
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

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

/// CURLOPT_OPENSOCKETFUNCTION for a pinned transfer: a socket only for the address in
/// `clientp` (numeric, NUL-terminated, as getnameinfo writes it); any other address curl is
/// about to connect to — another answer to a lookup, an address-literal URL — is refused.
static curl_socket_t termind_curl_open_pinned(void *clientp, curlsocktype purpose, struct curl_sockaddr *address) {
    (void)purpose;
    const char *pinned = (const char *)clientp;
    char text[INET6_ADDRSTRLEN];
    memset(text, 0, sizeof text);
    if (address->family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)&address->addr)->sin_addr, text, sizeof text);
    } else if (address->family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)&address->addr)->sin6_addr, text, sizeof text);
    } else {
        return CURL_SOCKET_BAD;
    }
    if (pinned == NULL || strcmp(text, pinned) != 0) return CURL_SOCKET_BAD;
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}
static inline CURLcode termind_curl_pin_sockets(CURL *handle, const char *pinned) {
    curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, termind_curl_open_pinned);
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETDATA, (void *)pinned);
}

static const size_t termind_curl_writefunc_pause = CURL_WRITEFUNC_PAUSE;
static const int termind_curl_pause_continue = CURLPAUSE_CONT;
static const long termind_curl_global_default = CURL_GLOBAL_DEFAULT;
/// The message of a finished transfer (CURLMSG_DONE), its easy handle and result.
static inline CURLcode termind_curl_message_result(CURLMsg *message) { return message->data.result; }
#endif
