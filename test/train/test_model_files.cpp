// export/import/eval/sample on a trained checkpoint: nanochat's keys and shapes, a round
// trip that changes nothing, and text out of sample.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../net/spawn.hpp"
#include "ringtrain/io/safetensors.hpp"
#include "train_fixture.hpp"
#include "train_ranks.hpp"

namespace fs = std::filesystem;

namespace {
std::string sh(const std::string& cmd, int expect = 0) {
  std::string out;
  const int rc = nettest::run_shell(cmd, &out);
  BOOST_REQUIRE_MESSAGE(rc == expect, cmd << " -> exit " << rc << ": " << out);
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(model_files)

BOOST_AUTO_TEST_CASE(export_import_eval_sample) {
  const std::string bin = nettest::ringtrain_path(), dir = nettest::scratch_dir() + "/files";
  const std::string data = traintest::prepared_data();
  std::string flags;
  for (const auto& f : traintest::tiny_model_flags()) flags += " " + f;
  sh(bin + " train --data " + data + " --out " + dir + "/run" + flags + " --steps 3 --eval-every 0");

  // export: every tensor under nanochat's key with nanochat's shape (the PyTorch reference's
  // init writes exactly its model's state_dict).
  sh(bin + " export --checkpoint " + dir + "/run --out " + dir + "/model.safetensors");
  const auto ours = rt::io::SafetensorsFile::load(dir + "/model.safetensors");
  const std::string root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  {
    const auto cfg = nlohmann::json::parse(ours.metadata().at("ringtrain_config"));
    std::ofstream(dir + "/config.json") << cfg.dump();
  }
  sh(std::string(std::getenv("RINGTRAIN_PYTHON")) + " " + root + "/tools/reference/nanochat_ref.py init --config " + dir +
     "/config.json --seed 1 --out " + dir + "/ref.safetensors");
  const auto ref = rt::io::SafetensorsFile::load(dir + "/ref.safetensors");
  auto a = ours.names(), b = ref.names();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  BOOST_TEST(a == b);
  for (const auto& n : b) BOOST_TEST(ours.get(n).shape == ref.get(n).shape, n);

  // import of the export: the same weights, so the same eval.
  sh(bin + " import --from " + dir + "/model.safetensors --out " + dir + "/imported --tokenizer " + data + "/tokenizer.tiktoken");
  const auto e1 = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/run --data " + data + " --json --threads 1"));
  const auto e2 = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/imported --data " + data + " --json --threads 1"));
  BOOST_TEST(e1["val_bpb"].get<double>() == e2["val_bpb"].get<double>());
  BOOST_TEST(e1["val_bpb"].get<double>() > 0.0);
  BOOST_TEST(e1["tokens"].get<double>() > 0.0);

  // sample: the prompt, then generated text.
  const std::string text = sh(bin + " sample --checkpoint " + dir + "/run --prompt 'the kernel' --tokens 20 --threads 1");
  BOOST_TEST(text.rfind("the kernel", 0) == 0u, text);
  BOOST_TEST(text.size() > std::string("the kernel\n").size(), text);

  // A damaged export is refused by import with exit 2.
  fs::resize_file(dir + "/model.safetensors", 100);
  sh(bin + " import --from " + dir + "/model.safetensors --out " + dir + "/bad", 2);
}

// `train --resume` from an imported file: a fresh optimizer and loader, the schedules from
// step 0, on one process and on two ranks (each host imports its own copy with --rank).
BOOST_AUTO_TEST_CASE(resume_after_import) {
  const std::string bin = nettest::ringtrain_path(), dir = nettest::scratch_dir() + "/resume-import";
  const std::string data = traintest::prepared_data();
  std::string flags;
  for (const auto& f : traintest::tiny_model_flags()) flags += " " + f;
  sh(bin + " train --data " + data + " --out " + dir + "/run" + flags + " --steps 3 --eval-every 0");
  sh(bin + " export --checkpoint " + dir + "/run --out " + dir + "/model.safetensors");
  sh(bin + " import --from " + dir + "/model.safetensors --out " + dir + "/one");
  const std::string log1 = sh(bin + " train --data " + data + " --out " + dir + "/one" + flags + " --resume --steps 4 --eval-every 0 2>&1");
  BOOST_TEST(log1.find("resumed from the imported weights") != std::string::npos, log1);
  const auto losses = traintest::losses(dir + "/one/metrics.jsonl");
  BOOST_TEST(losses.size() == 4u);  // steps 1..4: the schedule starts at 0
  for (int r : {0, 1}) sh(bin + " import --from " + dir + "/model.safetensors --out " + dir + "/two --rank " + std::to_string(r));
  auto ranks = traintest::start_ranks("resume-import/two", {2, 2}, nettest::port_base(0),
                                      {"--resume", "--steps", "3", "--eval-every", "0"});
  nettest::wait_all(ranks, 120);
  traintest::require_all_ok(ranks);
  BOOST_TEST(nettest::contains(ranks[1].err(), "resumed from the imported weights"), ranks[1].err());
  BOOST_TEST(traintest::newest_step(dir + "/two", 1) == 3);
  // A rank without its copy is told what to do.
  sh(bin + " import --from " + dir + "/model.safetensors --out " + dir + "/three --rank -1", 2);
}

BOOST_AUTO_TEST_SUITE_END()
