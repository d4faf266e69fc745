// A fresh directory under the temporary directory for one test, removed with everything in
// it at the end (every test folder uses this one).
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

#include <boost/test/unit_test.hpp>

namespace testcommon {

struct TempDir {
  std::filesystem::path path;
  // `prefix` names the test folder in the directory's name: /tmp/<prefix>_XXXXXX.
  explicit TempDir(const std::string& prefix = "ringtrain") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    BOOST_REQUIRE_MESSAGE(mkdtemp(tmpl.data()) != nullptr, "cannot make a directory like " << tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
};

}  // namespace testcommon
