// docs/troubleshooting.md is read once per test process, from the source tree meson test names.
#include "readme_messages.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace traintest::readme {

bool has(const std::string& text) {
  static const std::string table = [] {
    const char* root = std::getenv("RINGTRAIN_SOURCE_ROOT");
    BOOST_REQUIRE_MESSAGE(root, "RINGTRAIN_SOURCE_ROOT is not set (meson test sets it)");
    std::ifstream in(std::string(root) + "/docs/troubleshooting.md", std::ios::binary);
    BOOST_REQUIRE_MESSAGE(in, "cannot read " << root << "/docs/troubleshooting.md");
    std::ostringstream all;
    all << in.rdbuf();
    return all.str();
  }();
  return table.find(text) != std::string::npos;
}

}  // namespace traintest::readme
