// The ABI is header-only; this file gives SwiftPM a translation unit to build.
#include "termind_plugin.h"
