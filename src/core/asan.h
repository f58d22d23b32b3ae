// BRAID_ASAN: 1 in a translation unit built with AddressSanitizer, else 0.
// gcc says so with __SANITIZE_ADDRESS__; clang 14 (Debian 12's) only with
// __has_feature(address_sanitizer).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define BRAID_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BRAID_ASAN 1
#endif
#endif
#ifndef BRAID_ASAN
#define BRAID_ASAN 0
#endif
