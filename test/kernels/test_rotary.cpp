// Rotary embedding: table values, the rotation, and its backward (finite differences).
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/rotary.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

namespace {
std::vector<double> ref_rotary(const std::vector<double>& x, int64_t B, int64_t T, int64_t H, int64_t D) {
  std::vector<double> y(x.size());
  const int64_t half = D / 2;
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < half; ++j) {
        const double ang = double(r % T) * std::pow(100000.0, -2.0 * j / D);
        const double a = x[(r * H + h) * D + j], b = x[(r * H + h) * D + half + j];
        y[(r * H + h) * D + j] = a * std::cos(ang) + b * std::sin(ang);
        y[(r * H + h) * D + half + j] = -a * std::sin(ang) + b * std::cos(ang);
      }
  return y;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(rotary)

BOOST_AUTO_TEST_CASE(forward_and_gradient) {
  std::mt19937 rng(4);
  const int64_t B = 2, T = 7, H = 3, D = 8;
  auto table = k::RotaryTable::build(10 * T, D);
  BOOST_TEST(table.cos[0] == 1.0f);
  BOOST_TEST(std::abs(table.sin[1 * (D / 2) + 0] - std::sin(1.0)) < 1e-7);
  auto x = random_vec(B * T * H * D, rng);
  auto dy = random_vec(x.size(), rng);
  auto y = x;
  k::rotary_forward(y.data(), B, T, H, D, table);
  BOOST_TEST(rel_err(y, ref_rotary(to_double(x), B, T, H, D)) < 1e-5);
  auto g = numeric_grad(to_double(x), [&](const std::vector<double>& xd) {
    return dot(ref_rotary(xd, B, T, H, D), dy);
  });
  auto dx = dy;
  k::rotary_backward(dx.data(), B, T, H, D, table);
  BOOST_TEST(rel_err(dx, g) < 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
