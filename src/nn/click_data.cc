// Synthetic click data from a known teacher; the contract is in
// include/braid/data.h (ClickData).
#include <algorithm>
#include <cmath>

#include "braid/data.h"
#include "braid/error.h"
#include "braid/rng.h"

namespace braid::nn {

namespace {

constexpr int64_t kMaxRows = int64_t(1) << 24;  // ids stay exact as f32

// Domain tags keep the teacher's and the samples' streams apart.
constexpr uint64_t kTeacherIds = 0x7eac1d5, kTeacherDense = 0x7eacde5, kSample = 0xc11c;

void check_config(const ClickConfig& c) {
  auto positive = [](int64_t v, const char* name) {
    BRAID_CHECK_ARG(v >= 1, std::string("click data: ") + name + " must be at least 1, got " +
                                std::to_string(v));
  };
  positive(c.samples, "samples");
  positive(c.test_samples, "test_samples");
  positive(c.dense, "dense");
  positive(c.features, "features");
  positive(c.bag, "bag");
  BRAID_CHECK_ARG(c.rows >= 1 && c.rows <= kMaxRows,
                  "click data: rows must be in [1, 2^24], got " + std::to_string(c.rows));
  BRAID_CHECK_ARG(c.zipf >= 0 && std::isfinite(c.zipf),
                  "click data: zipf must be finite and >= 0, got " + std::to_string(c.zipf));
  BRAID_CHECK_ARG(c.id_std >= 0 && c.dense_std >= 0,
                  "click data: id_std and dense_std must be >= 0");
}

// Unnormalised cumulative Zipf weights: cdf[k] = Σ_{i ≤ k} (i+1)^−alpha.
std::vector<double> zipf_cdf(int64_t rows, double alpha) {
  std::vector<double> cdf(static_cast<size_t>(rows));
  double s = 0;
  for (int64_t k = 0; k < rows; ++k) cdf[size_t(k)] = s += std::pow(double(k + 1), -alpha);
  return cdf;
}

// Binary entropy in nats; 0 at the ends.
double entropy(double p) {
  double h = 0;
  if (p > 0) h -= p * std::log(p);
  if (p < 1) h -= (1 - p) * std::log1p(-p);
  return h;
}

}  // namespace

double ClickData::zipf_probability(int64_t rows, double alpha, int64_t k) {
  BRAID_CHECK_ARG(rows >= 1 && k >= 0 && k < rows, "zipf_probability: id " + std::to_string(k) +
                                                       " outside [0, " + std::to_string(rows) +
                                                       ")");
  return std::pow(double(k + 1), -alpha) / zipf_cdf(rows, alpha).back();
}

ClickData::ClickData(const ClickConfig& cfg, const std::string& split) : cfg_(cfg) {
  check_config(cfg);
  BRAID_CHECK_ARG(split == "train" || split == "test",
                  "click data: split must be train or test, got " + split);
  const bool train = split == "train";
  n_ = train ? cfg.samples : cfg.test_samples;
  const int64_t first = train ? 0 : cfg.samples;
  const int64_t F = cfg.features, D = cfg.dense, bag = cfg.bag;

  // The teacher, the same for both splits.
  std::vector<float> w(static_cast<size_t>(F * cfg.rows)), v(static_cast<size_t>(D));
  CounterRng tw(counter_hash(cfg.seed, kTeacherIds));
  for (float& x : w) x = tw.normal() * float(cfg.id_std);
  CounterRng tv(counter_hash(cfg.seed, kTeacherDense));
  for (float& x : v) x = tv.normal() * float(cfg.dense_std / std::sqrt(double(D)));

  const std::vector<double> cdf = zipf_cdf(cfg.rows, cfg.zipf);
  dense_.resize(size_t(n_ * D));
  ids_.resize(size_t(n_ * F * bag));
  label_.resize(size_t(n_));
  prob_.resize(size_t(n_));
  double floor = 0;
  for (int64_t i = 0; i < n_; ++i) {
    CounterRng rng(counter_hash(cfg.seed, kSample, uint64_t(first + i)));
    double logit = cfg.bias;
    float* x = dense_.data() + i * D;
    for (int64_t d = 0; d < D; ++d) {
      x[d] = rng.normal();
      logit += double(v[size_t(d)]) * double(x[d]);
    }
    int32_t* ids = ids_.data() + i * F * bag;
    for (int64_t f = 0; f < F; ++f) {
      double sum = 0;
      for (int64_t j = 0; j < bag; ++j) {
        const double u = uniform01_f64(rng.next_u64()) * cdf.back();
        const auto k = std::min<int64_t>(
            int64_t(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()), cfg.rows - 1);
        ids[f * bag + j] = int32_t(k);
        sum += w[size_t(f * cfg.rows + k)];
      }
      logit += sum / double(bag);
    }
    const double p = 1.0 / (1.0 + std::exp(-logit));
    prob_[size_t(i)] = p;
    label_[size_t(i)] = uniform01_f64(rng.next_u64()) < p ? 1 : 0;
    floor += entropy(p);
  }
  best_log_loss_ = floor / double(n_);
}

double ClickData::base_log_loss() const {
  double clicks = 0;
  for (uint8_t l : label_) clicks += l;
  return entropy(clicks / double(n_));
}

void ClickData::gather(const int64_t* idx, int64_t n, Tensor& x, Tensor& y) const {
  const int64_t W = width(), D = cfg_.dense, K = cfg_.features * cfg_.bag;
  x.resize({n, W}, DType::kF32);
  y.resize({n}, DType::kI32);
  float* xp = x.f32();
  int32_t* yp = y.i32();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = idx[r];
    if (i < 0 || i >= n_)
      throw Error(Errc::kInvalidArgument, "click data: sample " + std::to_string(i) +
                                              " outside [0, " + std::to_string(n_) + ")");
    float* row = xp + r * W;
    std::copy_n(dense_.data() + i * D, D, row);
    const int32_t* ids = ids_.data() + i * K;
    for (int64_t k = 0; k < K; ++k) row[D + k] = float(ids[k]);
    yp[r] = label_[size_t(i)];
  }
}

}  // namespace braid::nn
