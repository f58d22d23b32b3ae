// One fuzz target: BRAID_FUZZ_TARGET(name) { body over (data, size) }.
//
// Each fuzz/<name>_fuzz.cc defines its target with this macro. Built by
// BRAID_FUZZ (fuzz/CMakeLists.txt defines BRAID_LIBFUZZER) it becomes
// libFuzzer's entry point; included by tests/fuzz/replay_test.cc it is a
// plain function, braid_fuzz_<name>, which that test calls on every input
// in fuzz/corpus/<name>/ and fuzz/regressions/<name>/ with the ordinary
// compiler, so each input a fuzzer ever found stays a test in `make test`.
//
// A target returns normally for any input: braid's parsers answer bad
// bytes with braid::Error, which the target catches (and only that).
// Anything else -- a crash, a sanitizer report, another exception, a
// hang -- is a finding.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef BRAID_LIBFUZZER
#define BRAID_FUZZ_TARGET(name)                                                  \
  void braid_fuzz_##name(const uint8_t* data, size_t size);                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {     \
    braid_fuzz_##name(data, size);                                               \
    return 0;                                                                    \
  }                                                                              \
  void braid_fuzz_##name(const uint8_t* data, size_t size)
#else
#define BRAID_FUZZ_TARGET(name) void braid_fuzz_##name(const uint8_t* data, size_t size)
#endif
