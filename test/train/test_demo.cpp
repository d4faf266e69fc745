// The README's main command, shortened: tools/demo.sh end to end on a small slice of the
// default corpus, two ranks on loopback.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>

#include "../common/spawn.hpp"
#include "ringtrain/data/prepare.hpp"

namespace fs = std::filesystem;

BOOST_AUTO_TEST_SUITE(demo)

BOOST_AUTO_TEST_CASE(short_demo_trains_evaluates_samples_and_plots) {
  const std::string docs = rt::data::default_corpus();
  BOOST_REQUIRE_MESSAGE(!docs.empty(), "no kernel documentation installed: run tools/setup.sh (it installs linux-doc)");
  const std::string corpus = docs + "/process";
  BOOST_REQUIRE_MESSAGE(fs::exists(corpus), corpus + " is missing: run tools/setup.sh (it installs linux-doc)");
  const std::string root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  const std::string dir = nettest::scratch_dir() + "/demo";
  const std::string env = "RINGTRAIN_SKIP_SETUP=1 RINGTRAIN_DEMO_STEPS=4 RINGTRAIN_DEMO_DEPTH=1 RINGTRAIN_DEMO_VOCAB=512 "
                          "RINGTRAIN_DEMO_SEQ_LEN=64 RINGTRAIN_DEMO_BATCH=2 RINGTRAIN_DEMO_EVAL_EVERY=2 "
                          "RINGTRAIN_DEMO_EVAL_TOKENS=512 RINGTRAIN_DEMO_PORT=" + std::to_string(nettest::port_base(3)) +
                          " RINGTRAIN_DEMO_OUT=" + dir + "/run RINGTRAIN_DEMO_DATA=" + dir + "/data RINGTRAIN_DEMO_INPUT=" + corpus;
  std::string out;
  const int rc = nettest::run_shell("cd " + root + " && " + env + " timeout 600 bash tools/demo.sh", &out);
  BOOST_REQUIRE_MESSAGE(rc == 0, out);
  BOOST_TEST(out.find("[rank 0/2] step 4/4") != std::string::npos, out);
  BOOST_TEST(out.find("val bpb") != std::string::npos);
  BOOST_TEST(fs::file_size(dir + "/run/curves.png") > 1000u);
  BOOST_TEST(fs::exists(dir + "/run/rank0/step_000004/meta.json"));
  BOOST_TEST(fs::exists(dir + "/run/rank1/step_000004/meta.json"));
  BOOST_TEST(out.find("done in ") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
