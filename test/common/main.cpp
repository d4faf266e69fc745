// main() of every test executable: Boost.Test's own, except that a run in which a case was
// skipped (see skip.hpp) and nothing failed exits 77, which meson reports as SKIP.
// The module's name (ringtrain_<folder>) comes from the folder's meson.build.
#define BOOST_TEST_MODULE RINGTRAIN_TEST_MODULE
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>
#include <cstdio>

#include "skip.hpp"

namespace testskip {
namespace {
bool g_skipped = false;
}  // namespace

bool require(bool ok, const std::string& why) {
  if (!ok) {
    BOOST_TEST_MESSAGE("skipped: " << why);
    std::fprintf(stderr, "skipped: %s\n", why.c_str());
    g_skipped = true;
  }
  return ok;
}

bool skipped() { return g_skipped; }

}  // namespace testskip

int main(int argc, char* argv[]) {
  const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
  return rc == 0 && testskip::skipped() ? 77 : rc;
}
