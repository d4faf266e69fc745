// README.md is read once per test process, from the source tree meson test names.
#include "readme_messages.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace traintest::readme {

bool has(const std::string& text) {
  static const std::string readme = [] {
    const char* root = std::getenv("RINGTRAIN_SOURCE_ROOT");
    BOOST_REQUIRE_MESSAGE(root, "RINGTRAIN_SOURCE_ROOT is not set (meson test sets it)");
    std::ifstream in(std::string(root) + "/README.md", std::ios::binary);
    BOOST_REQUIRE_MESSAGE(in, "cannot read " << root << "/README.md");
    std::ostringstream all;
    all << in.rdbuf();
    return all.str();
  }();
  return readme.find(text) != std::string::npos;
}

}  // namespace traintest::readme
