// write_file_atomic: the whole new file or the old one, never a temporary left behind.
#include <boost/test/unit_test.hpp>

#include <cstdlib>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "../common/temp_dir.hpp"

namespace io = rt::io;
using testcommon::TempDir;

BOOST_AUTO_TEST_SUITE(atomic_file)

BOOST_AUTO_TEST_CASE(replaces_whole_file_and_leaves_no_temporaries) {
  TempDir d;
  const std::string path = d.str() + "/f.bin";
  io::write_file_atomic(path, "first version, long", 19);
  io::write_file_atomic(path, "second", 6);
  BOOST_TEST(io::read_file(path) == "second");
  // A producer that fails leaves the old file intact and removes its temporary.
  BOOST_CHECK_THROW(io::write_file_atomic(path, [](const io::ByteSink& sink) {
                      sink("partial", 7);
                      throw rt::RuntimeError("producer failed");
                    }),
                    rt::RuntimeError);
  BOOST_TEST(io::read_file(path) == "second");
  const int n = std::system(("test $(ls " + d.str() + " | wc -l) -eq 1").c_str());
  BOOST_TEST(n == 0);
  BOOST_CHECK_THROW(io::write_file_atomic(d.str() + "/no/such/dir/x", "x", 1), rt::RuntimeError);
}

BOOST_AUTO_TEST_SUITE_END()
