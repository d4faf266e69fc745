// The inputs the test ranks all-reduce: integer-valued, different on every rank, call and
// element, so that sums are exact and any wrong element shows. Shared by the rank driver
// and the hostile peer, which must send what a real rank would.
#pragma once
#include <cstddef>

inline float value(int rank, size_t i, int salt) {
  return static_cast<float>(static_cast<int>((i * 2654435761u + static_cast<size_t>(rank) * 97 + salt * 13) % 17) - 8);
}

inline float expected_sum(int world, size_t i, int salt) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += value(r, i, salt);
  return s;
}
