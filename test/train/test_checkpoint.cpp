// Checkpoint files: atomic commit, verification, refusal of corrupt or incomplete ones.
#include <boost/test/unit_test.hpp>

#include "../common/temp_dir.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace rt::train;

namespace {
using testcommon::TempDir;

std::string save(const fs::path& run, int64_t step, const std::vector<float>& data) {
  CheckpointWriter w(run.string(), 0, step);
  w.write_file("model.bin", {{data.data(), data.size() * sizeof(float)}});
  w.write_file("state.bin", {{"abc", 3}, {"de", 2}});
  return w.commit({{"step", step}});
}
}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint)

BOOST_AUTO_TEST_CASE(commit_and_verify) {
  TempDir t;
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(i) * 0.5f;
  const std::string dir = save(t.path, 7, data);
  BOOST_TEST(dir == (t.path / "rank0" / "step_000007").string());
  auto meta = verify_checkpoint(dir);
  BOOST_TEST(meta["step"].get<int>() == 7);
  BOOST_TEST(meta["files"]["state.bin"]["bytes"].get<int>() == 5);
  auto back = rt::io::read_file(dir + "/model.bin");
  BOOST_TEST(back.size() == data.size() * sizeof(float));
  BOOST_TEST(std::memcmp(back.data(), data.data(), back.size()) == 0);
  // No temporary directory is left behind.
  int entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(t.path / "rank0")) ++entries;
  BOOST_TEST(entries == 1);
}

BOOST_AUTO_TEST_CASE(corrupt_and_truncated_are_refused) {
  TempDir t;
  std::vector<float> data(256, 1.0f);
  const std::string d1 = save(t.path, 1, data);
  const std::string d2 = save(t.path, 2, data);
  const std::string d3 = save(t.path, 3, data);
  {  // flip one byte of step 3
    std::fstream f(d3 + "/model.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put(char(0x7f));
  }
  fs::resize_file(d2 + "/state.bin", 2);  // truncate step 2
  BOOST_CHECK_THROW(verify_checkpoint(d3), rt::UsageError);
  BOOST_CHECK_THROW(verify_checkpoint(d2), rt::UsageError);
  try {
    verify_checkpoint(d3);
  } catch (const rt::UsageError& e) {
    BOOST_TEST(std::string(e.what()).find("CRC-32") != std::string::npos);
  }
  auto newest = newest_valid_checkpoint(t.path.string(), 0);
  BOOST_REQUIRE(newest.has_value());
  BOOST_TEST(*newest == d1);
  BOOST_TEST(resolve_checkpoint(t.path.string()) == d1);
  BOOST_CHECK_THROW(resolve_checkpoint(d3), rt::UsageError);
}

BOOST_AUTO_TEST_CASE(interrupted_write_leaves_no_checkpoint) {
  TempDir t;
  std::vector<float> data(16, 2.0f);
  save(t.path, 1, data);
  {
    CheckpointWriter w(t.path.string(), 0, 2);
    w.write_file("model.bin", {{data.data(), data.size() * sizeof(float)}});
    // destroyed without commit: as if the process died while writing
  }
  BOOST_TEST(checkpoint_steps(t.path.string(), 0) == std::vector<int64_t>{1});
  // A directory that looks like a step but has no meta.json is skipped, not used.
  fs::create_directories(t.path / "rank0" / "step_000005");
  BOOST_TEST(*newest_valid_checkpoint(t.path.string(), 0) == (t.path / "rank0" / "step_000001").string());
  // Re-saving an existing step replaces it whole.
  std::vector<float> other(16, 3.0f);
  const std::string d = save(t.path, 1, other);
  auto back = rt::io::read_file(d + "/model.bin");
  BOOST_TEST(reinterpret_cast<const float*>(back.data())[0] == 3.0f);
}

// --keep-checkpoints: the newest N up to the step just saved remain; later steps (another
// run's, or one --resume skipped) are left alone; nothing is removed with keep 0.
BOOST_AUTO_TEST_CASE(retention_keeps_the_newest_up_to_the_saved_step) {
  TempDir t;
  const std::string run = t.path.string();
  std::vector<float> data(10, 1.0f);
  for (int64_t step : {2, 4, 6, 8, 20}) save(t.path, step, data);
  BOOST_TEST(prune_checkpoints(run, 0, 8, 0).empty());
  BOOST_TEST((prune_checkpoints(run, 0, 8, 2) == std::vector<int64_t>{2, 4}));
  BOOST_TEST((checkpoint_steps(run, 0) == std::vector<int64_t>{6, 8, 20}));
  BOOST_TEST(prune_checkpoints(run, 0, 8, 2).empty());
  BOOST_TEST((prune_checkpoints(run, 0, 8, 1) == std::vector<int64_t>{6}));
  BOOST_TEST((checkpoint_steps(run, 0) == std::vector<int64_t>{8, 20}));
  verify_checkpoint(rank_dir(run, 0) + "/step_000008");
  // Nothing hidden is left behind by a removal that finished.
  for (const auto& e : fs::directory_iterator(rank_dir(run, 0)))
    BOOST_TEST(e.path().filename().string().rfind("step_", 0) == 0, e.path());
}

// A removal killed half-way leaves a hidden directory that the next start removes.
BOOST_AUTO_TEST_CASE(interrupted_retention_is_cleaned_at_start) {
  TempDir t;
  const std::string run = t.path.string();
  std::vector<float> data(10, 1.0f);
  save(t.path, 2, data);
  const fs::path half = fs::path(rank_dir(run, 0)) / ".step_000002.del-999999999";
  fs::rename(fs::path(rank_dir(run, 0)) / "step_000002", half);
  fs::remove(half / "meta.json");
  clean_checkpoint_leftovers(run, 0);
  BOOST_TEST(!fs::exists(half));
  BOOST_TEST(checkpoint_steps(run, 0).empty());
}

BOOST_AUTO_TEST_SUITE_END()
