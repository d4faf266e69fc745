// What a checkpoint must never be: NaN or Inf parameters written as valid, an old copy of a
// step lost before its new copy is in place, or a malformed meta.json taken at its word.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace rt::train;

namespace {

fs::path fresh_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("rt-ckpt-safety-" + std::to_string(::getpid()) + "-" + tag);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string save(const fs::path& run, int64_t step, float fill) {
  std::vector<float> data(64, fill);
  CheckpointWriter w(run.string(), 0, step);
  w.write_file("model.bin", {{data.data(), data.size() * sizeof(float)}});
  return w.commit({{"step", step}});
}

float first_value(const std::string& dir) {
  const auto bytes = rt::io::read_file(dir + "/model.bin");
  return reinterpret_cast<const float*>(bytes.data())[0];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_safety)

BOOST_AUTO_TEST_CASE(nan_or_inf_parameters_are_refused_naming_the_step) {
  rt::model::ParamSet ps;
  ps.add("transformer.wte.weight", {4, 3});
  ps.add("lm_head.weight", {4, 3});
  ps.finalize();
  BOOST_CHECK_NO_THROW(require_finite(ps, 12));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    ps.get("lm_head.weight").data[5] = bad;
    try {
      require_finite(ps, 12);
      BOOST_FAIL("non-finite parameters passed");
    } catch (const rt::RuntimeError& e) {
      const std::string m = e.what();
      BOOST_TEST(m.find(std::isnan(bad) ? "NaN" : "Inf") != std::string::npos, m);
      BOOST_TEST(m.find("at step 12 (first in lm_head.weight, element 5)") != std::string::npos, m);
      BOOST_TEST(m.find("no checkpoint of step 12 is written") != std::string::npos, m);
    }
  }
}

BOOST_AUTO_TEST_CASE(saving_a_step_again_keeps_the_old_copy_until_the_new_one_is_in) {
  const fs::path run = fresh_dir("resave");
  const std::string dir = save(run, 4, 1.0f);
  BOOST_TEST(save(run, 4, 2.0f) == dir);
  BOOST_TEST(first_value(dir) == 2.0f);
  BOOST_TEST(std::distance(fs::directory_iterator(run / "rank0"), fs::directory_iterator{}) == 1);  // nothing left aside
  // A save interrupted between its two renames: the old copy is aside, the new one not in.
  fs::rename(dir, dir + ".old-4242");
  auto found = newest_valid_checkpoint(run.string(), 0);
  BOOST_REQUIRE(found.has_value());
  BOOST_TEST(*found == dir + ".old-4242");
  BOOST_TEST(first_value(*found) == 2.0f);
  // Once the step is saved again, its directory is the one used.
  save(run, 4, 3.0f);
  BOOST_TEST(*newest_valid_checkpoint(run.string(), 0) == dir);
  fs::remove_all(run);
}

BOOST_AUTO_TEST_CASE(malformed_meta_json_is_skipped_like_a_corrupt_file) {
  const fs::path run = fresh_dir("meta");
  const std::string good = save(run, 1, 1.0f);
  const std::vector<std::string> bad_metas = {
      "{\"format\": \"ringtrain-checkpoint\", \"files\": [1, 2]}",
      "{\"format\": \"ringtrain-checkpoint\", \"files\": {\"model.bin\": {\"bytes\": \"many\", \"crc32\": 1}}}",
      "{\"format\": \"ringtrain-checkpoint\", \"files\": {\"model.bin\": 7}}",
      "{\"format\": \"ringtrain-checkpoint\", \"files\": {\"../../etc/passwd\": {\"bytes\": 1, \"crc32\": 1}}}",
      "{\"format\": \"ringtrain-checkpoint\", \"step\": \"two\", \"files\": {}}",
      "{\"format\": 3, \"files\": {}}",
      "[1, 2, 3]",
      "{\"format\": \"ringtrain-checkpoint\", \"files\": {\"model.bin\": {\"bytes\": -1, \"crc32\": 1}}}",
      "{not json",
  };
  int step = 2;
  for (const auto& text : bad_metas) {
    const std::string dir = save(run, step, 1.0f);
    rt::io::write_file_atomic(dir + "/meta.json", text.data(), text.size());
    BOOST_CHECK_THROW(verify_checkpoint(dir), rt::UsageError);
    auto found = newest_valid_checkpoint(run.string(), 0);
    BOOST_REQUIRE(found.has_value());
    BOOST_TEST(*found == good, text);
    ++step;
  }
  fs::remove_all(run);
}

BOOST_AUTO_TEST_SUITE_END()
