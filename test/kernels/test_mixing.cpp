// Smear, value-embedding mix, residual lambdas and backout: every input's gradient
// against central differences of a double-precision reference.
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/mixing.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

namespace {
double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

std::vector<float> slice(const std::vector<double>& g, size_t from, size_t n) {
  return std::vector<float>(g.begin() + from, g.begin() + from + n);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(mixing)

BOOST_AUTO_TEST_CASE(smear) {
  std::mt19937 rng(7);
  const int64_t B = 2, T = 5, C = 30;
  auto x = random_vec(B * T * C, rng);
  auto gw = random_vec(24, rng);
  const float lambda = 0.7f;
  auto dout = random_vec(x.size(), rng);
  // packed inputs: x, gate_w, lambda
  auto ref = [&](const std::vector<double>& p) {
    const double* xd = p.data();
    const double* g = p.data() + B * T * C;
    const double lam = p[B * T * C + 24];
    std::vector<double> out(B * T * C);
    for (int64_t r = 0; r < B * T; ++r) {
      double gate = 0;
      if (r % T) {
        double z = 0;
        for (int j = 0; j < 24; ++j) z += g[j] * xd[r * C + j];
        gate = lam * sig(z);
      }
      for (int64_t i = 0; i < C; ++i)
        out[r * C + i] = xd[r * C + i] + (r % T ? gate * xd[(r - 1) * C + i] : 0.0);
    }
    return out;
  };
  std::vector<double> packed = to_double(x);
  packed.insert(packed.end(), gw.begin(), gw.end());
  packed.push_back(lambda);
  std::vector<float> out(x.size()), s(B * T), dx(x.size());
  k::smear_forward(x.data(), gw.data(), lambda, out.data(), s.data(), B, T, C);
  BOOST_TEST(rel_err(out, ref(packed)) < 1e-6);
  auto g = numeric_grad(packed, [&](const std::vector<double>& p) { return dot(ref(p), dout); });
  std::vector<float> dgw(24, 0.0f);
  float dl = 0.0f;
  k::smear_backward(x.data(), gw.data(), lambda, s.data(), dout.data(), dx.data(), dgw.data(), &dl, B, T, C);
  BOOST_TEST(rel_err(dx, slice(g, 0, x.size())) < 1e-5);
  BOOST_TEST(rel_err(dgw, slice(g, x.size(), 24)) < 1e-5);
  BOOST_TEST(std::abs(dl - g.back()) < 1e-5 * (1 + std::abs(g.back())));
}

BOOST_AUTO_TEST_CASE(value_embedding_mix) {
  std::mt19937 rng(8);
  const int64_t N = 9, KV = 2, D = 4, C = 16, V = 5;
  auto v = random_vec(N * KV * D, rng);
  auto table = random_vec(V * KV * D, rng);
  auto u = random_vec(N * C, rng);
  auto wg = random_vec(KV * 12, rng);
  auto dv = random_vec(v.size(), rng);
  std::vector<int32_t> ids(N);
  for (auto& i : ids) i = int32_t(rng() % 4);  // repeats; row 4 untouched
  // packed inputs: v, table, u, wg
  const size_t ov = 0, ot = v.size(), ou = ot + table.size(), ow = ou + u.size();
  auto ref = [&](const std::vector<double>& p) {
    std::vector<double> out(p.begin(), p.begin() + v.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < KV; ++h) {
        double z = 0;
        for (int j = 0; j < 12; ++j) z += p[ou + n * C + j] * p[ow + h * 12 + j];
        const double gate = 3 * sig(z);
        for (int64_t i = 0; i < D; ++i)
          out[(n * KV + h) * D + i] += gate * p[ot + ids[n] * KV * D + h * D + i];
      }
    return out;
  };
  std::vector<double> packed = to_double(v);
  for (auto* src : {&table, &u, &wg}) packed.insert(packed.end(), src->begin(), src->end());
  auto mixed = v;
  std::vector<float> gate(N * KV);
  k::ve_mix_forward(mixed.data(), table.data(), ids.data(), u.data(), C, wg.data(), gate.data(), N, KV, D);
  BOOST_TEST(rel_err(mixed, ref(packed)) < 1e-6);
  auto g = numeric_grad(packed, [&](const std::vector<double>& p) { return dot(ref(p), dv); });
  k::TokenGroups groups;
  groups.build(ids.data(), N);
  std::vector<float> dtable(table.size(), 0.0f), dwg(wg.size(), 0.0f), du(u.size(), 0.0f);
  k::ve_mix_backward(dv.data(), table.data(), ids.data(), groups, u.data(), C, wg.data(), gate.data(),
                     dtable.data(), dwg.data(), du.data(), N, KV, D);
  BOOST_TEST(rel_err(dv, slice(g, ov, v.size())) < 1e-6);  // identity path
  BOOST_TEST(rel_err(dtable, slice(g, ot, table.size())) < 1e-5);
  BOOST_TEST(rel_err(du, slice(g, ou, u.size())) < 1e-5);
  BOOST_TEST(rel_err(dwg, slice(g, ow, wg.size())) < 1e-5);
}

BOOST_AUTO_TEST_CASE(lambda_mix_and_backout) {
  std::mt19937 rng(9);
  const int64_t n = 50;
  auto x = random_vec(n, rng), x0 = random_vec(n, rng), d = random_vec(n, rng);
  const float a = 1.1f, b = 0.2f, lam = 0.3f;
  std::vector<float> out(n);
  k::lambda_mix_forward(x.data(), x0.data(), a, b, out.data(), n);
  for (int64_t i = 0; i < n; ++i) BOOST_TEST(std::abs(out[i] - (a * x[i] + b * x0[i])) < 1e-6);
  // packed: x, x0, a, b
  std::vector<double> p = to_double(x);
  p.insert(p.end(), x0.begin(), x0.end());
  p.push_back(a);
  p.push_back(b);
  auto g = numeric_grad(p, [&](const std::vector<double>& q) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += d[i] * (q[2 * n] * q[i] + q[2 * n + 1] * q[n + i]);
    return s;
  });
  std::vector<float> dx(n), dx0(n, 0.0f);
  float da = 0, db = 0;
  k::lambda_mix_backward(d.data(), x.data(), x0.data(), a, b, dx.data(), dx0.data(), &da, &db, n);
  BOOST_TEST(rel_err(dx, slice(g, 0, n)) < 1e-6);
  BOOST_TEST(rel_err(dx0, slice(g, n, n)) < 1e-6);
  BOOST_TEST(std::abs(da - g[2 * n]) < 1e-5);
  BOOST_TEST(std::abs(db - g[2 * n + 1]) < 1e-5);

  k::backout_forward(x.data(), x0.data(), lam, out.data(), n);
  for (int64_t i = 0; i < n; ++i) BOOST_TEST(std::abs(out[i] - (x[i] - lam * x0[i])) < 1e-6);
  std::vector<double> p2 = to_double(x0);
  p2.push_back(lam);
  auto g2 = numeric_grad(p2, [&](const std::vector<double>& q) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += d[i] * (x[i] - q[n] * q[i]);
    return s;
  });
  std::vector<float> dxb(n, 0.0f);
  float dl = 0;
  k::backout_backward(d.data(), x0.data(), lam, dxb.data(), &dl, n);
  BOOST_TEST(rel_err(dxb, slice(g2, 0, n)) < 1e-6);
  BOOST_TEST(std::abs(dl - g2[n]) < 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
