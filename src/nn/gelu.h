// Internal: GELU (tanh approximation, GPT-2's) and its derivative at one
// value, shared by the GELU layer and the fused bias + GELU of Linear
// (bias_gelu.h). Include after tensor/simd.h.
#pragma once

namespace braid::nn::gelu {

constexpr float kK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kC = 0.044715f;

inline float value(float v) {
  const float t = simd::tanh_approx(kK * (v + kC * v * v * v));
  return 0.5f * v * (1.0f + t);
}

inline float grad(float v) {
  const float t = simd::tanh_approx(kK * (v + kC * v * v * v));
  const float dt = (1.0f - t * t) * kK * (1.0f + 3.0f * kC * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * dt;
}

}  // namespace braid::nn::gelu
