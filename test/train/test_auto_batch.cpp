// --device-batch auto's split of the global batch (auto_batch.hpp): in proportion to the
// ranks' speeds, every rank at least one row, the total exact, the same on every rank.
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <vector>

#include "ringtrain/errors.hpp"
#include "auto_batch.hpp"

using rt::train::split_rows;

namespace {
int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }
}  // namespace

BOOST_AUTO_TEST_SUITE(auto_batch)

BOOST_AUTO_TEST_CASE(rows_follow_the_rates_and_add_up) {
  // Twice as fast gets twice the rows (after the one row each).
  BOOST_TEST(split_rows(14, {1.0, 2.0}) == (std::vector<int64_t>{5, 9}));
  // Equal speeds: even; the row rounding leaves over goes to the lower rank.
  BOOST_TEST(split_rows(8, {3.0, 3.0}) == (std::vector<int64_t>{4, 4}));
  BOOST_TEST(split_rows(7, {3.0, 3.0}) == (std::vector<int64_t>{4, 3}));
  // Half a core next to a full one (the benchmark's setting).
  BOOST_TEST(split_rows(16, {1000.0, 500.0}) == (std::vector<int64_t>{11, 5}));
  // A rank far slower than the rest still gets its one row.
  const auto v = split_rows(8, {1e-6, 1.0, 1.0, 1.0});
  BOOST_TEST(v[0] == 1);
  BOOST_TEST(sum(v) == 8);
  // Largest remainders: shares 10 * (0.2, 0.3, 0.5) of the 10 spare rows, exact here.
  BOOST_TEST(split_rows(13, {2.0, 3.0, 5.0}) == (std::vector<int64_t>{3, 4, 6}));
  for (int64_t rows : {3, 10, 97, 1000})
    for (const std::vector<double>& rates : {std::vector<double>{1, 1, 1}, {0.3, 7.1, 2.2}, {5, 1e-3, 5}}) {
      const auto s = split_rows(rows, rates);
      BOOST_TEST(sum(s) == rows);
      for (int64_t b : s) BOOST_TEST(b >= 1);
    }
}

BOOST_AUTO_TEST_CASE(fewer_rows_than_ranks_is_refused) {
  BOOST_CHECK_THROW(split_rows(2, {1.0, 1.0, 1.0}), rt::RuntimeError);
}

BOOST_AUTO_TEST_SUITE_END()
