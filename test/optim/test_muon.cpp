// The single-tensor updates (Polar Express, Muon, AdamW) against straightforward
// double-precision implementations of the spec, on tall, wide, square and tiny shapes.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "ringtrain/optim/adamw.hpp"
#include "ringtrain/optim/muon.hpp"
#include "ringtrain/optim/polar_express.hpp"

using namespace rt::optim;

namespace {

using Mat = std::vector<double>;  // row-major

Mat matmul(const Mat& A, const Mat& B, int64_t m, int64_t k, int64_t n) {
  Mat C(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) C[i * n + j] += A[i * k + p] * B[p * n + j];
  return C;
}

Mat transpose(const Mat& A, int64_t m, int64_t n) {
  Mat T(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) T[j * m + i] = A[i * n + j];
  return T;
}

double frob(const Mat& X) {
  double s = 0;
  for (double x : X) s += x * x;
  return std::sqrt(s);
}

// nanochat/optim.py, polar_express_coeffs (Polar Express, 5 iterations, safety factor 2e-2,
// cushion 2), written out here so that the reference does not share the implementation's table.
const double kNanochatPolarExpressCoeffs[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};

void polar_express_ref(Mat& X, int64_t m, int64_t n) {
  const bool tall = m > n;
  for (const auto& co : kNanochatPolarExpressCoeffs) {
    const double a = co[0], b = co[1], c = co[2];
    const int64_t s = tall ? n : m;
    const Mat Xt = transpose(X, m, n);
    const Mat A = tall ? matmul(Xt, X, n, m, n) : matmul(X, Xt, m, n, m);
    const Mat A2 = matmul(A, A, s, s, s);
    Mat B(A.size());
    for (size_t i = 0; i < B.size(); ++i) B[i] = b * A[i] + c * A2[i];
    const Mat P = tall ? matmul(X, B, m, n, n) : matmul(B, X, m, m, n);
    for (size_t i = 0; i < X.size(); ++i) X[i] = a * X[i] + P[i];
  }
}

// Spec steps 1-7 in double, state in double.
void muon_ref(Mat& p, const Mat& grad, Mat& buf, Mat& sbuf, int64_t m, int64_t n, double lr,
              double beta, double wd, double beta2) {
  Mat g(grad.size());
  for (size_t i = 0; i < g.size(); ++i) {
    buf[i] = beta * buf[i] + (1 - beta) * grad[i];
    g[i] = (1 - beta) * grad[i] + beta * buf[i];
  }
  const double target = frob(g) / std::sqrt(double(m));
  for (int64_t r = 0; r < m; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += g[r * n + j] * g[r * n + j];
    const double s = target / std::max(std::sqrt(ss), 1e-6);
    for (int64_t j = 0; j < n; ++j) g[r * n + j] *= s;
  }
  const double f = 1.01 * frob(g) + 1e-6;
  for (double& x : g) x /= f;
  polar_express_ref(g, m, n);
  const double r5 = std::sqrt(double(std::min(m, n))) / std::max(frob(g), 1e-6);
  for (double& x : g) x *= r5;
  const bool per_row = m >= n;
  const int64_t len = per_row ? m : n, Nr = per_row ? n : m;
  std::vector<double> v(size_t(len), 0.0), s(static_cast<size_t>(len));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) v[per_row ? r : j] += g[r * n + j] * g[r * n + j] / double(Nr);
  double vsum = 0, scaled = 0;
  for (int64_t k = 0; k < len; ++k) {
    vsum += v[k];
    sbuf[k] = sbuf[k] + (1 - beta2) * (v[k] - sbuf[k]);
    s[k] = 1.0 / std::sqrt(std::max(sbuf[k], 1e-10));
    scaled += v[k] * double(Nr) * s[k] * s[k];
  }
  const double ratio = std::sqrt(vsum * double(Nr)) / std::max(std::sqrt(scaled), 1e-10);
  const double lr_eff = lr * std::sqrt(std::max(1.0, double(m) / double(n)));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = r * n + j;
      const double u = g[i] * s[per_row ? r : j] * ratio;
      const double mask = u * p[i] >= 0 ? 1.0 : 0.0;
      p[i] -= lr_eff * u + lr_eff * wd * p[i] * mask;
    }
}

std::vector<float> random_vec(int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> N(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = N(rng);
  return v;
}

double rel_err(const std::vector<float>& got, const Mat& want) {
  double diff = 0, mx = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - want[i]));
    mx = std::max(mx, std::abs(want[i]));
  }
  return diff / std::max(mx, 1e-30);
}

struct Shape { int64_t m, n; };
const Shape kShapes[] = {{96, 32}, {32, 96}, {48, 48}, {2, 12}, {12, 2}, {1, 24}};

}  // namespace

BOOST_AUTO_TEST_SUITE(optim_muon)

BOOST_AUTO_TEST_CASE(polar_express_coefficients_are_nanochats) {
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      BOOST_TEST(kPolarExpressCoeffs[i][j] == kNanochatPolarExpressCoeffs[i][j], "iteration " << i << " coefficient " << j);
}

BOOST_AUTO_TEST_CASE(polar_express_matches_double) {
  std::mt19937 rng(3);
  for (const Shape& sh : kShapes) {
    std::vector<float> x = random_vec(sh.m * sh.n, rng, 1.0f);
    // Scale into the domain the way Muon does (spectral norm below 1).
    double f = 0;
    for (float v : x) f += double(v) * v;
    for (float& v : x) v = float(v / (1.01 * std::sqrt(f)));
    Mat ref(x.begin(), x.end());
    PolarExpressWorkspace ws;
    polar_express(x.data(), sh.m, sh.n, ws);
    polar_express_ref(ref, sh.m, sh.n);
    const double e = rel_err(x, ref);
    BOOST_TEST_INFO("shape " << sh.m << "x" << sh.n << " rel err " << e);
    BOOST_TEST(e < 2e-5);
    // The result is near-orthogonal: every singular value pushed into roughly [0.7, 1.2],
    // so its Frobenius norm^2 is about min(m, n).
    double fr = 0;
    for (float v : x) fr += double(v) * v;
    BOOST_TEST(fr > 0.4 * double(std::min(sh.m, sh.n)));
    BOOST_TEST(fr < 1.5 * double(std::min(sh.m, sh.n)));
  }
}

BOOST_AUTO_TEST_CASE(muon_three_steps_match_double) {
  std::mt19937 rng(5);
  for (const Shape& sh : kShapes) {
    const int64_t numel = sh.m * sh.n;
    std::vector<float> p = random_vec(numel, rng, 0.05f);
    const std::vector<float> p0 = p;
    std::vector<float> buf(size_t(numel), 0.0f), sbuf(size_t(muon_variance_len(sh.m, sh.n)), 0.0f);
    Mat pr(p.begin(), p.end()), bufr(buf.size(), 0.0), sbufr(sbuf.size(), 0.0);
    MuonWorkspace ws;
    const double momenta[3] = {0.85, 0.9, 0.95};
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = random_vec(numel, rng, 0.01f * float(step + 1));
      const MuonHyper h{0.02, momenta[step], 0.2, 0.9};
      muon_update(p.data(), g.data(), buf.data(), sbuf.data(), sh.m, sh.n, h, ws);
      muon_ref(pr, Mat(g.begin(), g.end()), bufr, sbufr, sh.m, sh.n, 0.02, momenta[step], 0.2, 0.9);
    }
    // Compare the total change (not the parameter itself) so that the update is checked
    // at full resolution.
    std::vector<float> got(static_cast<size_t>(numel));
    Mat want(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) {
      got[i] = p[i] - p0[i];
      want[i] = pr[i] - double(p0[i]);
    }
    const double e_p = rel_err(got, want);
    const double e_buf = rel_err(buf, bufr);
    const double e_sbuf = rel_err(sbuf, sbufr);
    BOOST_TEST_INFO("shape " << sh.m << "x" << sh.n << " update " << e_p << " buf " << e_buf
                             << " sbuf " << e_sbuf);
    BOOST_TEST(e_p < 1e-4);
    BOOST_TEST(e_buf < 1e-6);
    BOOST_TEST(e_sbuf < 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(muon_update_has_the_spec_norms) {
  // With zero weight decay and zero parameters, the step is -lr_eff * g, and g has
  // Frobenius norm sqrt(min(m, n)) after step 6 (variance reduction preserves the norm).
  for (const Shape& sh : {Shape{64, 16}, Shape{16, 64}}) {
    std::mt19937 rng(7);
    const int64_t numel = sh.m * sh.n;
    std::vector<float> p(size_t(numel), 0.0f), buf(size_t(numel), 0.0f);
    std::vector<float> sbuf(size_t(muon_variance_len(sh.m, sh.n)), 0.0f);
    std::vector<float> g = random_vec(numel, rng, 1.0f);
    MuonWorkspace ws;
    muon_update(p.data(), g.data(), buf.data(), sbuf.data(), sh.m, sh.n, {1.0, 0.9, 0.0, 0.9}, ws);
    double f = 0;
    for (float v : p) f += double(v) * v;
    const double lr_eff = muon_shape_lr_factor(sh.m, sh.n);
    BOOST_TEST(std::abs(std::sqrt(f) / lr_eff - std::sqrt(double(std::min(sh.m, sh.n)))) < 1e-3);
  }
}

BOOST_AUTO_TEST_CASE(adamw_two_steps_match_double) {
  std::mt19937 rng(11);
  const int64_t n = 1000;
  std::vector<float> p = random_vec(n, rng, 0.5f), m(n, 0.0f), v(n, 0.0f);
  Mat pr(p.begin(), p.end()), mr(n, 0.0), vr(n, 0.0);
  const AdamWHyper h{0.01, 0.8, 0.95, 1e-10, 0.05};
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<float> g = random_vec(n, rng, 0.01f);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, h, step);
    const double b1 = 1 - std::pow(0.8, double(step)), b2 = 1 - std::pow(0.95, double(step));
    for (int64_t i = 0; i < n; ++i) {
      pr[i] *= 1 - h.lr * h.weight_decay;
      mr[i] = 0.8 * mr[i] + 0.2 * g[i];
      vr[i] = 0.95 * vr[i] + 0.05 * double(g[i]) * g[i];
      pr[i] -= h.lr / b1 * mr[i] / (std::sqrt(vr[i] / b2) + 1e-10);
    }
  }
  BOOST_TEST(rel_err(p, pr) < 1e-6);
  BOOST_TEST(rel_err(m, mr) < 1e-6);
  BOOST_TEST(rel_err(v, vr) < 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
