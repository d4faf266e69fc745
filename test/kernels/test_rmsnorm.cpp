// RMSNorm (plain and QK-norm scale) against a double reference and finite differences.
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/rmsnorm.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

namespace {
std::vector<double> ref_rmsnorm(const std::vector<double>& x, int64_t rows, int64_t dim, double scale) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    const double rs = 1.0 / std::sqrt(ss / dim + double(k::kNormEps));
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = scale * x[r * dim + i] * rs;
  }
  return y;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(rmsnorm)

BOOST_AUTO_TEST_CASE(forward_and_gradient) {
  std::mt19937 rng(3);
  const int64_t rows = 5, dim = 24;
  for (float scale : {1.0f, 1.2f}) {
    auto x = random_vec(rows * dim, rng);
    auto dy = random_vec(rows * dim, rng);
    std::vector<float> y(x.size()), rstd(rows), dx(x.size(), 0.5f);
    k::rmsnorm_forward(x.data(), y.data(), rstd.data(), rows, dim, scale);
    BOOST_TEST(rel_err(y, ref_rmsnorm(to_double(x), rows, dim, scale)) < 1e-6);
    auto f = [&](const std::vector<double>& xd) { return dot(ref_rmsnorm(xd, rows, dim, scale), dy); };
    auto g = numeric_grad(to_double(x), f);
    k::rmsnorm_backward(y.data(), rstd.data(), dy.data(), dx.data(), rows, dim, scale, false);
    BOOST_TEST(rel_err(dx, g) < 1e-5);
    // accumulate adds on top
    std::vector<float> acc(x.size(), 0.5f);
    k::rmsnorm_backward(y.data(), rstd.data(), dy.data(), acc.data(), rows, dim, scale, true);
    for (size_t i = 0; i < acc.size(); ++i) BOOST_TEST(std::abs(acc[i] - 0.5f - dx[i]) < 1e-6);
    // in place (dx aliases dy)
    std::vector<float> inplace = dy;
    k::rmsnorm_backward(y.data(), rstd.data(), inplace.data(), inplace.data(), rows, dim, scale, false);
    BOOST_TEST(rel_err(inplace, dx) < 1e-7);
  }
}

BOOST_AUTO_TEST_SUITE_END()
