// split_step_rows: which rows of a step each rank computes, for a full ring and for fewer ranks.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <vector>

#include "ringtrain/errors.hpp"
#include "row_split.hpp"

BOOST_AUTO_TEST_SUITE(row_split)

BOOST_AUTO_TEST_CASE(full_ring_is_the_fixed_layout_and_fewer_ranks_accumulate) {
  using rt::train::split_step_rows;
  // Full ring of batches 1, 2, 1 and 8 rows: two rounds of 4, each rank at its offset.
  auto r1 = split_step_rows({1, 2, 1}, 1, 8);
  BOOST_REQUIRE_EQUAL(r1.size(), 2u);
  BOOST_TEST(r1[0].first_row == 1);
  BOOST_TEST(r1[0].rows == 2);
  BOOST_TEST(r1[1].first_row == 5);
  // Two ranks of 2 left of three: 6 rows in rounds of 4, the last round cut at 6.
  auto a = split_step_rows({2, 2}, 0, 6), b = split_step_rows({2, 2}, 1, 6);
  BOOST_REQUIRE_EQUAL(a.size(), 2u);
  BOOST_REQUIRE_EQUAL(b.size(), 1u);
  BOOST_TEST(a[1].first_row == 4);
  BOOST_TEST(a[1].rows == 2);
  // Every row of the step to exactly one rank, for uneven batches too.
  for (const auto& batches : std::vector<std::vector<int64_t>>{{3, 1, 2}, {5}, {1, 1}, {4, 3}}) {
    std::vector<int> owner(12, 0);
    for (size_t i = 0; i < batches.size(); ++i)
      for (const auto& m : split_step_rows(batches, int(i), 12))
        for (int64_t row = m.first_row; row < m.first_row + m.rows; ++row) ++owner[size_t(row)];
    for (int n : owner) BOOST_TEST(n == 1);
  }
  // A rank that would get no row at all is refused with the fix.
  BOOST_CHECK_THROW(split_step_rows({4, 4}, 1, 3), rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
