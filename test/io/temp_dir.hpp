// A fresh directory under /tmp for one test, removed with everything in it at the end.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace iotest {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/ringtrain_io_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
};

}  // namespace iotest
