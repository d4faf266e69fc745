// nanochat's parameter initialisation. Each tensor is filled in blocks of 64K values,
// each block from its own generator seeded by (seed, tensor index, block), so the result
// does not depend on the thread count.
#include <cmath>
#include <cstdint>
#include <random>

#include "ringtrain/model/gpt.hpp"

namespace rt::model {
namespace {

constexpr int64_t kBlock = 65536;

uint64_t mix(uint64_t a, uint64_t b) {
  // splitmix64 of a combination: decorrelates neighbouring seeds.
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double uniform01(std::mt19937_64& g) { return double(g() >> 11) * (1.0 / 9007199254740992.0); }

enum class Dist { zeros, normal, uniform };

void fill(float* p, int64_t n, uint64_t seed, Dist d, double a, double b) {
  if (d == Dist::zeros) {
    for (int64_t i = 0; i < n; ++i) p[i] = 0.0f;
    return;
  }
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(dynamic)
  for (int64_t k = 0; k < blocks; ++k) {
    std::mt19937_64 g(mix(seed, uint64_t(k)));
    const int64_t end = std::min(n, (k + 1) * kBlock);
    if (d == Dist::uniform) {
      for (int64_t i = k * kBlock; i < end; ++i) p[i] = float(a + (b - a) * uniform01(g));
    } else {
      // Box-Muller: (mean a, std b).
      for (int64_t i = k * kBlock; i < end; i += 2) {
        const double u1 = 1.0 - uniform01(g), u2 = uniform01(g);
        const double r = std::sqrt(-2.0 * std::log(u1));
        p[i] = float(a + b * r * std::cos(2.0 * M_PI * u2));
        if (i + 1 < end) p[i + 1] = float(a + b * r * std::sin(2.0 * M_PI * u2));
      }
    }
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void GPT::init_weights(uint64_t seed) {
  const double C = double(cfg_.n_embd);
  const double s = std::sqrt(3.0) / std::sqrt(C);
  const int64_t L = cfg_.n_layer;
  const double denom = double(std::max<int64_t>(L - 1, 1));
  auto& ps = params_.all();
  for (size_t t = 0; t < ps.size(); ++t) {
    Param& p = ps[t];
    const uint64_t ts = mix(seed, 1000 + t);
    const std::string& n = p.name;
    if (n == "transformer.wte.weight") fill(p.data, p.numel, ts, Dist::normal, 0.0, 0.8);
    else if (n == "lm_head.weight") fill(p.data, p.numel, ts, Dist::normal, 0.0, 0.001);
    else if (n.rfind("value_embeds.", 0) == 0) fill(p.data, p.numel, ts, Dist::uniform, -s, s);
    else if (ends_with(n, "attn.c_q.weight") || ends_with(n, "attn.c_k.weight") ||
             ends_with(n, "attn.c_v.weight"))
      fill(p.data, p.numel, ts, Dist::uniform, -s, s);
    else if (ends_with(n, "c_proj.weight")) fill(p.data, p.numel, ts, Dist::zeros, 0, 0);
    else if (ends_with(n, "ve_gate.weight")) fill(p.data, p.numel, ts, Dist::uniform, 0.0, 0.02);
    else if (ends_with(n, "mlp.c_fc.weight")) fill(p.data, p.numel, ts, Dist::uniform, -0.4 * s, 0.4 * s);
    else if (n == "resid_lambdas")
      for (int64_t i = 0; i < L; ++i) p.data[i] = float(1.15 - 0.10 * double(i) / denom);
    else if (n == "x0_lambdas")
      for (int64_t i = 0; i < L; ++i) p.data[i] = float(0.20 - 0.15 * double(i) / denom);
    else if (n == "smear_gate.weight") fill(p.data, p.numel, ts, Dist::uniform, 0.0, 0.02);
    else if (n == "smear_lambda") p.data[0] = 0.0f;
    else if (n == "backout_lambda") p.data[0] = 0.2f;
  }
}

}  // namespace rt::model
