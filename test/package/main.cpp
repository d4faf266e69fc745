// The package test changes the system (installs and purges a package), so it needs root and
// dpkg; without them it reports "skipped" to meson (exit 77) instead of passing untested.
#define BOOST_TEST_MODULE ringtrain_package
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

std::string why_not_runnable() {
  if (geteuid() != 0) return "installing a package needs root";
  for (const char* tool : {"/usr/bin/dpkg", "/usr/bin/dpkg-deb", "/usr/bin/dpkg-query", "/usr/bin/apt-get"})
    if (access(tool, X_OK) != 0) return std::string(tool) + " is missing (not a Debian system?)";
  // An installed ringtrain package is someone's: the test would replace and then purge it.
  if (std::system("dpkg-query -W -f='${Status}' ringtrain 2>/dev/null | grep -q 'ok installed'") == 0)
    return "a ringtrain package is installed here; remove it (dpkg --purge ringtrain) to run this test";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string why = why_not_runnable();
  if (!why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
