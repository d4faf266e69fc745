// Embedding gather and grouped scatter-add (repeated ids must all land).
#include <boost/test/unit_test.hpp>

#include "gradcheck.hpp"
#include "ringtrain/kernels/embedding.hpp"

using namespace gradcheck;
namespace k = rt::kernels;

BOOST_AUTO_TEST_SUITE(embedding)

BOOST_AUTO_TEST_CASE(gather_and_scatter_add) {
  std::mt19937 rng(6);
  const int64_t V = 11, dim = 5, n = 30;
  auto table = random_vec(V * dim, rng);
  std::vector<int32_t> ids(n);
  for (auto& i : ids) i = int32_t(rng() % 7) * 1 + 2;  // repeats, and rows 0, 1, 9, 10 untouched
  std::vector<float> out(n * dim);
  k::embedding_gather(table.data(), ids.data(), n, dim, out.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) BOOST_TEST(out[i * dim + j] == table[ids[i] * dim + j]);
  k::TokenGroups g;
  g.build(ids.data(), n);
  BOOST_TEST(std::is_sorted(g.unique_ids.begin(), g.unique_ids.end()));
  for (size_t i = 1; i < g.unique_ids.size(); ++i) BOOST_TEST(g.unique_ids[i] != g.unique_ids[i - 1]);
  auto dout = random_vec(n * (dim + 2), rng);  // row stride dim + 2
  std::vector<float> grad(V * dim, 1.0f);
  k::embedding_scatter_add(grad.data(), g, dout.data(), dim, dim + 2, 0.5f);
  std::vector<double> ref(V * dim, 1.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) ref[ids[i] * dim + j] += 0.5 * dout[i * (dim + 2) + j];
  BOOST_TEST(rel_err(grad, ref) < 1e-6);
}

BOOST_AUTO_TEST_SUITE_END()
