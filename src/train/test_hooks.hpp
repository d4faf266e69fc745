// The test hooks that act on one rank, RINGTRAIN_TEST_...=R:V (e.g. RINGTRAIN_TEST_POISON=1:4):
// one reading of that form for all of them. Each hook says what its V means where it is used.
#pragma once
#include <cstdlib>
#include <cstring>

namespace rt::train {

// The text of V when the variable is set to R:V and R is `rank`, else nullptr.
inline const char* test_hook_value(const char* variable, int rank) {
  const char* spec = std::getenv(variable);
  if (!spec || std::atoi(spec) != rank) return nullptr;
  const char* colon = std::strchr(spec, ':');
  return colon ? colon + 1 : nullptr;
}

}  // namespace rt::train
