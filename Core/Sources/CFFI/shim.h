#ifndef TERMIND_CFFI_SHIM_H
#define TERMIND_CFFI_SHIM_H
#include <ffi.h>

// libffi's ffi_type_* are mutable globals, which Swift 6 strict concurrency rejects;
// hand their addresses out through functions instead.
static inline ffi_type *termind_ffi_void(void) { return &ffi_type_void; }
static inline ffi_type *termind_ffi_sint32(void) { return &ffi_type_sint32; }
static inline ffi_type *termind_ffi_uint8(void) { return &ffi_type_uint8; }
static inline ffi_type *termind_ffi_uint32(void) { return &ffi_type_uint32; }
static inline ffi_type *termind_ffi_sint64(void) { return &ffi_type_sint64; }
static inline ffi_type *termind_ffi_uint64(void) { return &ffi_type_uint64; }
static inline ffi_type *termind_ffi_double(void) { return &ffi_type_double; }
static inline ffi_type *termind_ffi_pointer(void) { return &ffi_type_pointer; }
static inline ffi_abi termind_ffi_default_abi(void) { return FFI_DEFAULT_ABI; }
#endif
