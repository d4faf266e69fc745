// Softcap cross entropy and the chunked LM head: loss against a double reference,
// gradients of logits, x and W against central differences; ignored targets.
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/cross_entropy.hpp"
#include "ringtrain/kernels/fastmath.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

namespace {
// sum of losses over valid rows of softcap(logits)
double ref_loss(const std::vector<double>& l, int64_t rows, int64_t V, const std::vector<int32_t>& tgt,
                double cap, std::vector<double>* per_row = nullptr) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double loss = 0;
    if (tgt[r] >= 0) {
      double m = -1e300;
      std::vector<double> z(V);
      for (int64_t j = 0; j < V; ++j) m = std::max(m, z[j] = cap * std::tanh(l[r * V + j] / cap));
      double s = 0;
      for (int64_t j = 0; j < V; ++j) s += std::exp(z[j] - m);
      loss = m + std::log(s) - z[tgt[r]];
    }
    if (per_row) per_row->push_back(loss);
    total += loss;
  }
  return total;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(cross_entropy)

BOOST_AUTO_TEST_CASE(fast_math_accuracy) {
  double worst_exp = 0, worst_tanh = 0;
  for (double xd = -80; xd < 80; xd += 0.01) {
    const double x = double(float(xd));  // compare on the float input itself
    worst_exp = std::max(worst_exp, std::abs(k::fast_exp(float(x)) - std::exp(x)) / std::exp(x));
    if (std::abs(x) < 40) worst_tanh = std::max(worst_tanh, std::abs(k::fast_tanh(float(x)) - std::tanh(x)));
  }
  BOOST_TEST(worst_exp < 4e-7);
  BOOST_TEST(worst_tanh < 3e-7);
}

BOOST_AUTO_TEST_CASE(softcap_rows_loss_and_gradient) {
  std::mt19937 rng(10);
  const int64_t rows = 4, V = 37;
  auto l = random_vec(rows * V, rng, -30, 30);  // beyond the cap, so tanh saturates somewhere
  std::vector<int32_t> tgt = {3, -1, 36, 0};
  const float scale = 0.25f;
  std::vector<double> per_row;
  const double want = ref_loss(to_double(l), rows, V, tgt, 15, &per_row);
  std::vector<float> losses(rows), work = l;
  const double got = k::softcap_xent_rows(work.data(), rows, V, tgt.data(), 15, losses.data(), scale, true);
  BOOST_TEST(std::abs(got - want) < 1e-5 * std::abs(want));
  BOOST_TEST(rel_err(losses, per_row) < 1e-5);
  BOOST_TEST(losses[1] == 0.0f);
  auto g = numeric_grad(to_double(l), [&](const std::vector<double>& x) {
    return scale * ref_loss(x, rows, V, tgt, 15);
  }, 1e-5);
  BOOST_TEST(rel_err(work, g) < 1e-4);
  for (int64_t j = 0; j < V; ++j) BOOST_TEST(work[1 * V + j] == 0.0f);
}

BOOST_AUTO_TEST_CASE(chunked_head_gradients) {
  std::mt19937 rng(11);
  const int64_t N = 7, C = 6, V = 19, chunk = 3;
  auto x = random_vec(N * C, rng);
  auto W = random_vec(V * C, rng, -2, 2);
  std::vector<int32_t> tgt = {1, 18, -1, 5, 5, 0, 7};
  const float scale = 1.0f / 6;
  // packed: x, W
  auto f = [&](const std::vector<double>& p) {
    std::vector<double> l(N * V);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t v = 0; v < V; ++v) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += p[r * C + c] * p[N * C + v * C + c];
        l[r * V + v] = s;
      }
    return ref_loss(l, N, V, tgt, 15);
  };
  std::vector<double> packed = to_double(x);
  packed.insert(packed.end(), W.begin(), W.end());
  std::vector<float> scratch(chunk * V), losses(N), dx(N * C), dW(V * C, 0.0f);
  const double got = k::lm_head_xent(x.data(), W.data(), tgt.data(), N, C, V, 15, scale, losses.data(),
                                     dx.data(), dW.data(), scratch.data(), chunk);
  BOOST_TEST(std::abs(got - f(packed)) < 1e-5 * f(packed));
  auto g = numeric_grad(packed, [&](const std::vector<double>& p) { return scale * f(p); });
  BOOST_TEST(rel_err(dx, std::vector<double>(g.begin(), g.begin() + N * C)) < 1e-4);
  BOOST_TEST(rel_err(dW, std::vector<double>(g.begin() + N * C, g.end())) < 1e-4);
  // Loss only: same value, no gradient buffers touched.
  const double again = k::lm_head_xent(x.data(), W.data(), tgt.data(), N, C, V, 15, scale, nullptr,
                                       nullptr, nullptr, scratch.data(), chunk);
  BOOST_TEST(std::abs(again - got) < 1e-6 * got);
}

BOOST_AUTO_TEST_SUITE_END()
