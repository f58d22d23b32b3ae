// What this CPU (and the kernel, which must save the wider registers on a
// context switch) lets the tensor kernels use, asked of CPUID once.
//
// gcc's and clang's __builtin_cpu_supports would do, but the two accept
// different feature names (Debian 12's clang 14 knows neither "f16c" nor
// "avx512bf16"), and BRAID_FUZZ builds the library with clang.
#pragma once

namespace braid {

// F16C (vcvtph2ps / vcvtps2ph) with the AVX state enabled by the OS.
bool cpu_has_f16c();
// AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16) with the AVX-512 state enabled.
bool cpu_has_avx512_bf16();

}  // namespace braid
