// Sliding-window attention against a naive O(T^2) attention computed in double:
// forward values and lse, backward against the reference's analytic gradient, and the
// kernel's gradient against central finite differences of the double reference loss.
// Shapes cover windows below, at and above T, window 0, T not a multiple of any tile,
// GQA (KV = H/2 and KV = 1), B > 1, several tilings and two threads.
#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/kernels/attention.hpp"

using rt::kernels::AttentionShape;
using rt::kernels::AttentionTiling;
using rt::kernels::SlidingWindowAttention;

namespace {

std::string describe(const AttentionShape& s, const AttentionTiling& t) {
  std::ostringstream o;
  o << "B=" << s.B << " T=" << s.T << " H=" << s.H << " KV=" << s.KV << " D=" << s.D
    << " window=" << s.window << " tiles=" << t.q_tile << "/" << t.k_tile << "/" << t.max_chunk;
  return o.str();
}

struct Inputs {
  std::vector<float> q, k, v, dy;
};

Inputs random_inputs(const AttentionShape& s, unsigned seed) {
  std::mt19937 rng(seed);
  // Spread q so that softmax rows are far from uniform (a uniform row hides many bugs).
  std::uniform_real_distribution<float> wide(-2.5f, 2.5f), unit(-1.0f, 1.0f);
  Inputs in;
  in.q.resize(s.B * s.T * s.H * s.D);
  in.k.resize(s.B * s.T * s.KV * s.D);
  in.v.resize(in.k.size());
  in.dy.resize(in.q.size());
  for (auto& x : in.q) x = wide(rng);
  for (auto& x : in.k) x = unit(rng);
  for (auto& x : in.v) x = unit(rng);
  for (auto& x : in.dy) x = unit(rng);
  return in;
}

// Naive attention in double; also the loss sum(y * dy) used for finite differences.
struct Reference {
  explicit Reference(const AttentionShape& shape) : s(shape) {}
  AttentionShape s;
  std::vector<double> y, lse, dq, dk, dv;

  template <class V>
  void forward(const V& q, const V& k, const V& v) {
    const int64_t B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D, G = H / KV;
    const double scale = 1.0 / std::sqrt(double(D));
    y.assign(B * T * H * D, 0.0);
    lse.assign(B * H * T, 0.0);
    std::vector<double> sc(T);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t lo = std::max<int64_t>(0, t - s.window);
          const auto* qr = &q[((b * T + t) * H + h) * D];
          double m = -1e300;
          for (int64_t j = lo; j <= t; ++j) {
            const auto* kr = &k[((b * T + j) * KV + h / G) * D];
            double acc = 0;
            for (int64_t d = 0; d < D; ++d) acc += double(qr[d]) * double(kr[d]);
            sc[j] = acc * scale;
            m = std::max(m, sc[j]);
          }
          double l = 0;
          for (int64_t j = lo; j <= t; ++j) l += std::exp(sc[j] - m);
          double* yr = &y[((b * T + t) * H + h) * D];
          for (int64_t j = lo; j <= t; ++j) {
            const double p = std::exp(sc[j] - m) / l;
            const auto* vr = &v[((b * T + j) * KV + h / G) * D];
            for (int64_t d = 0; d < D; ++d) yr[d] += p * double(vr[d]);
          }
          lse[(b * H + h) * T + t] = m + std::log(l);
        }
  }

  // Analytic gradient of sum(y * dy); needs forward() first (uses lse).
  template <class V>
  void backward(const V& q, const V& k, const V& v, const std::vector<float>& dy) {
    const int64_t B = s.B, T = s.T, H = s.H, KV = s.KV, D = s.D, G = H / KV;
    const double scale = 1.0 / std::sqrt(double(D));
    dq.assign(q.size(), 0.0);
    dk.assign(k.size(), 0.0);
    dv.assign(v.size(), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t row = ((b * T + t) * H + h) * D;
          double delta = 0;
          for (int64_t d = 0; d < D; ++d) delta += double(dy[row + d]) * y[row + d];
          for (int64_t j = std::max<int64_t>(0, t - s.window); j <= t; ++j) {
            const int64_t kr = ((b * T + j) * KV + h / G) * D;
            double sc = 0, dp = 0;
            for (int64_t d = 0; d < D; ++d) {
              sc += double(q[row + d]) * double(k[kr + d]);
              dp += double(dy[row + d]) * double(v[kr + d]);
            }
            const double p = std::exp(sc * scale - lse[(b * H + h) * T + t]);
            const double ds = p * (dp - delta) * scale;
            for (int64_t d = 0; d < D; ++d) {
              dq[row + d] += ds * double(k[kr + d]);
              dk[kr + d] += ds * double(q[row + d]);
              dv[kr + d] += p * double(dy[row + d]);
            }
          }
        }
  }

  template <class V>
  double loss(const V& q, const V& k, const V& v, const std::vector<float>& dy) {
    forward(q, k, v);
    double acc = 0;
    for (size_t i = 0; i < y.size(); ++i) acc += y[i] * double(dy[i]);
    return acc;
  }
};

template <class A, class B>
void expect_close(const std::string& what, const A& got, const B& want, double atol,
                  double rtol) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess =
        std::abs(double(got[i]) - double(want[i])) - (atol + rtol * std::abs(double(want[i])));
    if (i == 0 || excess > worst) worst = excess, worst_at = i;
  }
  BOOST_TEST(worst <= 0.0, what << ": element " << worst_at << " is " << got[worst_at]
                                << ", reference " << want[worst_at]);
}

struct Case {
  AttentionShape shape;
  AttentionTiling tiling;
};

// Windows <, =, > T; window 0; T = 1, 37, 130 (not multiples of any tile); GQA; B > 1; D = 128.
std::vector<Case> cases() {
  const AttentionTiling dflt{}, small{16, 8, 32}, odd{7, 5, 12};
  std::vector<Case> out;
  for (const auto& t : {dflt, small, odd}) {
    out.push_back({{1, 1, 1, 1, 16, 0}, t});
    out.push_back({{1, 1, 2, 1, 16, 3}, t});
    out.push_back({{2, 37, 4, 2, 16, 5}, t});
    out.push_back({{1, 37, 4, 1, 16, 36}, t});
    out.push_back({{1, 37, 2, 2, 16, 37}, t});
    out.push_back({{2, 37, 4, 4, 16, 100}, t});
    out.push_back({{2, 130, 4, 2, 32, 0}, t});
    out.push_back({{1, 130, 4, 1, 32, 50}, t});
    out.push_back({{2, 130, 2, 2, 16, 129}, t});
  }
  out.push_back({{1, 37, 2, 2, 16, int64_t(1) << 50}, dflt});  // huge window: no overflow
  out.push_back({{1, 200, 2, 1, 128, 64}, dflt});
  out.push_back({{1, 300, 2, 2, 128, 300}, dflt});
  return out;
}

void check_against_reference(const Case& c, unsigned seed) {
  const auto& s = c.shape;
  const std::string name = describe(s, c.tiling);
  const Inputs in = random_inputs(s, seed);
  SlidingWindowAttention attn(s, c.tiling);
  std::vector<float> y(in.q.size(), 7.0f), lse(s.B * s.H * s.T, 7.0f);
  attn.forward(in.q.data(), in.k.data(), in.v.data(), y.data(), lse.data());

  Reference ref(s);
  ref.forward(in.q, in.k, in.v);
  ref.backward(in.q, in.k, in.v, in.dy);
  const double tol = s.D >= 128 ? 4e-5 : 2e-5;
  expect_close(name + " y", y, ref.y, tol, 1e-4);
  expect_close(name + " lse", lse, ref.lse, tol, 1e-5);

  // Garbage in the outputs must be overwritten, not accumulated.
  std::vector<float> dq(in.q.size(), 3.0f), dk(in.k.size(), 3.0f), dv(in.v.size(), 3.0f);
  attn.backward(in.q.data(), in.k.data(), in.v.data(), y.data(), lse.data(), in.dy.data(),
                dq.data(), dk.data(), dv.data());
  expect_close(name + " dq", dq, ref.dq, 2 * tol, 2e-4);
  expect_close(name + " dk", dk, ref.dk, 2 * tol, 2e-4);
  expect_close(name + " dv", dv, ref.dv, 2 * tol, 2e-4);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_double_reference) {
  unsigned seed = 1;
  for (const auto& c : cases()) check_against_reference(c, seed++);
}

BOOST_AUTO_TEST_CASE(two_threads_match_double_reference) {
  // Run the OpenMP loops really parallel. B*H or B*KV even: each thread takes whole heads;
  // odd: tiles of one head run at once (backward: adding into shared dq rows under locks).
  const int before = omp_get_max_threads();
  omp_set_num_threads(2);
  unsigned seed = 100;
  for (const Case& c : {Case{{2, 130, 4, 2, 16, 40}, {16, 8, 32}},
                        Case{{2, 130, 4, 1, 16, 200}, {7, 5, 12}},
                        Case{{1, 150, 2, 2, 32, 60}, {}},
                        Case{{1, 130, 4, 1, 16, 40}, {16, 8, 32}},
                        Case{{3, 100, 2, 1, 16, 30}, {7, 5, 12}},
                        Case{{1, 300, 2, 1, 32, 300}, {}},
                        Case{{1, 90, 1, 1, 16, 20}, {16, 8, 32}}})
    check_against_reference(c, seed++);
  omp_set_num_threads(before);
}

BOOST_AUTO_TEST_CASE(window_zero_copies_values) {
  // Each query sees only its own key: y = v of its kv head, lse = own scaled score.
  const AttentionShape s{2, 9, 4, 2, 16, 0};
  const Inputs in = random_inputs(s, 5);
  SlidingWindowAttention attn(s);
  std::vector<float> y(in.q.size()), lse(s.B * s.H * s.T);
  attn.forward(in.q.data(), in.k.data(), in.v.data(), y.data(), lse.data());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t row = ((b * s.T + t) * s.H + h) * s.D;
        const int64_t kv = ((b * s.T + t) * s.KV + h / 2) * s.D;
        double score = 0;
        for (int64_t d = 0; d < s.D; ++d) {
          BOOST_TEST(std::abs(y[row + d] - in.v[kv + d]) <= 1e-6);
          score += double(in.q[row + d]) * in.k[kv + d];
        }
        BOOST_TEST(std::abs(lse[(b * s.H + h) * s.T + t] - score / 4.0) <= 1e-5);
      }
}

BOOST_AUTO_TEST_CASE(gradient_matches_finite_differences) {
  // The kernel's float gradient against central differences of the double reference loss
  // sum(y * dy), on a sample of elements of q, k and v that includes both ends of T.
  unsigned seed = 200;
  for (const Case& c : {Case{{2, 37, 4, 2, 16, 5}, {16, 8, 32}},
                        Case{{1, 70, 4, 1, 16, 69}, {7, 5, 12}},
                        Case{{1, 21, 2, 2, 16, 0}, {}},
                        Case{{1, 40, 2, 1, 128, 17}, {}}}) {
    const auto& s = c.shape;
    const std::string name = describe(s, c.tiling);
    const Inputs in = random_inputs(s, seed++);
    SlidingWindowAttention attn(s, c.tiling);
    std::vector<float> y(in.q.size()), lse(s.B * s.H * s.T);
    std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
    attn.forward(in.q.data(), in.k.data(), in.v.data(), y.data(), lse.data());
    attn.backward(in.q.data(), in.k.data(), in.v.data(), y.data(), lse.data(), in.dy.data(),
                  dq.data(), dk.data(), dv.data());

    std::vector<double> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end()),
        v(in.v.begin(), in.v.end());
    Reference ref(s);
    std::mt19937 rng(seed);
    const double eps = 1e-5;
    auto check = [&](const char* which, std::vector<double>& x, const std::vector<float>& grad) {
      std::uniform_int_distribution<size_t> pick(0, x.size() - 1);
      std::vector<size_t> sample = {0, x.size() - 1};
      for (int i = 0; i < 40; ++i) sample.push_back(pick(rng));
      for (size_t i : sample) {
        const double keep = x[i];
        x[i] = keep + eps;
        const double up = ref.loss(q, k, v, in.dy);
        x[i] = keep - eps;
        const double down = ref.loss(q, k, v, in.dy);
        x[i] = keep;
        const double fd = (up - down) / (2 * eps);
        BOOST_TEST(std::abs(grad[i] - fd) <= 5e-5 + 2e-4 * std::abs(fd),
                   name << " d" << which << "[" << i << "] = " << grad[i] << ", finite difference "
                        << fd);
      }
    };
    check("q", q, dq);
    check("k", k, dk);
    check("v", v, dv);
  }
}

BOOST_AUTO_TEST_CASE(bad_shapes_are_usage_errors) {
  BOOST_CHECK_THROW(SlidingWindowAttention({1, 8, 4, 3, 16, 2}), rt::UsageError);
  BOOST_CHECK_THROW(SlidingWindowAttention({1, 0, 4, 4, 16, 2}), rt::UsageError);
  BOOST_CHECK_THROW(SlidingWindowAttention({0, 8, 4, 4, 16, 2}), rt::UsageError);
  BOOST_CHECK_THROW(SlidingWindowAttention({1, 8, 4, 4, 0, 2}), rt::UsageError);
  BOOST_CHECK_THROW(SlidingWindowAttention({1, 8, 4, 4, 16, -1}), rt::UsageError);
  BOOST_CHECK_THROW(SlidingWindowAttention({1, 8, 4, 4, 16, 2}, {64, 64, 32}), rt::UsageError);
  BOOST_CHECK_THROW(SlidingWindowAttention({1, 8, 4, 4, 16, 2}, {0, 64, 512}), rt::UsageError);
  BOOST_CHECK_NO_THROW(SlidingWindowAttention({1, 8, 4, 4, 16, 2}));
}

BOOST_AUTO_TEST_SUITE_END()
