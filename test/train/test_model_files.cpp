// export/import/eval/sample on a trained checkpoint: nanochat's keys and shapes, a round
// trip that changes nothing, and text out of sample.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/spawn.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/pretokenize.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/io/safetensors.hpp"
#include "ringtrain/train/model_io.hpp"
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

// `ringtrain import --from` nanochat's own files, written here by the real torch.save: a
// checkpoint directory (the newest model_NNNNNN.pt and its meta_NNNNNN.json), keys with
// torch.compile's "_orig_mod." prefix, embedding tables padded to 64 rows, bf16 tables.
BOOST_AUTO_TEST_CASE(nanochat_checkpoint_directory) {
  const std::string bin = nettest::ringtrain_path(), dir = nettest::scratch_dir() + "/nanochat-import";
  const std::string py = std::getenv("RINGTRAIN_PYTHON"), root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  traintest::prepared_data();  // writes the corpus
  // A vocabulary of 300: nanochat pads its tables to 320 rows.
  sh(bin + " data prepare --input " + nettest::scratch_dir() + "/corpus --out " + dir + "/data --vocab 300 --val-fraction 0.1");
  std::string flags;
  for (const auto& f : traintest::tiny_model_flags()) flags += " " + f;
  sh(bin + " train --data " + dir + "/data --out " + dir + "/run" + flags + " --steps 3 --eval-every 0");
  sh(bin + " export --checkpoint " + dir + "/run --out " + dir + "/model.safetensors");
  std::ofstream(dir + "/to_nanochat.py") << R"PY(
import json, sys, torch
sys.path.insert(0, sys.argv[1] + "/tools/reference")
import safetensors_io
src, out, dtype = sys.argv[2], sys.argv[3], sys.argv[4]
import os
os.makedirs(out, exist_ok=True)
t = safetensors_io.load(src)
cfg = json.loads(open(src + ".config.json").read())
g = torch.Generator().manual_seed(0)
sd = {}
for k, v in t.items():
    x = torch.from_numpy(v.copy())
    if (k in ("transformer.wte.weight", "lm_head.weight") or k.startswith("value_embeds.")) and dtype != "f32-unpadded":
        x = torch.cat([x, torch.randn(320 - x.shape[0], x.shape[1], generator=g)])  # padding rows
        if dtype == "bf16" and k != "lm_head.weight":
            x = x.to(torch.bfloat16)  # nanochat on a GPU keeps its embeddings in bf16
    sd["_orig_mod." + k] = x
torch.save(sd, out + "/model_000003.pt")
torch.save({k: v for k, v in list(sd.items())[:2]}, out + "/model_000001.pt")  # older and broken: not the newest
meta = {"step": 3, "val_bpb": None, "model_config": {"sequence_len": cfg["sequence_len"], "vocab_size": cfg["vocab_size"],
        "n_layer": cfg["n_layer"], "n_head": cfg["n_head"], "n_kv_head": cfg["n_kv_head"], "n_embd": cfg["n_embd"],
        "window_pattern": cfg["window_pattern"]}, "user_config": {"depth": cfg["n_layer"]}, "device_batch_size": 2,
        "max_seq_len": cfg["sequence_len"], "total_batch_size": 64}
json.dump(meta, open(out + "/meta_000003.json", "w"))
json.dump(meta, open(out + "/meta_000001.json", "w"))
torch.save([1, 2, 3], out + "/list.pt")
)PY";
  {
    const auto f = rt::io::SafetensorsFile::load(dir + "/model.safetensors");
    std::ofstream(dir + "/model.safetensors.config.json") << f.metadata().at("ringtrain_config");
  }
  for (const char* dtype : {"f32", "bf16", "f32-unpadded"})
    sh(py + " " + dir + "/to_nanochat.py " + root + " " + dir + "/model.safetensors " + dir + "/nc-" + dtype + " " + dtype);

  const std::string eval = " --data " + dir + "/data --json --threads 1";
  const auto before = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/run" + eval));
  const std::string said = sh(bin + " import --from " + dir + "/nc-f32 --out " + dir + "/imp32 --tokenizer " + dir + "/data/tokenizer.tiktoken");
  BOOST_TEST(said.find("vocab 300") != std::string::npos, said);
  const auto after = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/imp32" + eval));
  BOOST_TEST(after["val_bpb"].get<double>() == before["val_bpb"].get<double>());  // the same weights, bit for bit
  // A file whose tables carry no padding rows (older nanochat, or a vocabulary of whole 64s).
  sh(bin + " import --from " + dir + "/nc-f32-unpadded --out " + dir + "/imp-unpadded");
  const auto unpadded = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/imp-unpadded" + eval));
  BOOST_TEST(unpadded["val_bpb"].get<double>() == before["val_bpb"].get<double>());
  sh(bin + " import --from " + dir + "/nc-bf16/model_000003.pt --out " + dir + "/imp16");
  const auto bf16 = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/imp16" + eval));
  BOOST_TEST(std::abs(bf16["val_bpb"].get<double>() - before["val_bpb"].get<double>()) < 0.05 * before["val_bpb"].get<double>());
  // An older step on request: this one lacks most tensors, and says which.
  const std::string old = sh(bin + " import --from " + dir + "/nc-f32 --step 1 --out " + dir + "/imp-old 2>&1", 2);
  BOOST_TEST(old.find("has no tensor") != std::string::npos, old);
  // Bad input: one line, exit 2, nothing in --out.
  struct Bad { std::string args, says; };
  {
    auto meta = nlohmann::json::parse(std::ifstream(dir + "/nc-f32/meta_000003.json"));
    meta["model_config"]["n_layer"] = 3;
    std::ofstream(dir + "/wrong_meta.json") << meta.dump();
  }
  for (const Bad& b : {Bad{"--from " + dir + "/nc-f32/list.pt --meta " + dir + "/nc-f32/meta_000003.json", "not a state_dict"},
                       Bad{"--from " + dir + "/nc-f32/list.pt", "meta_000000.json"},
                       Bad{"--from " + dir + "/nc-f32/model_000003.pt --meta " + dir + "/wrong_meta.json", "transformer.h.2"},
                       Bad{"--from " + dir + "/nc-f32 --step 7", "model_000007.pt"},
                       Bad{"--from " + dir + "/model.safetensors.config.json", "not a valid safetensors file"},
                       Bad{"--from " + dir + "/no-such", "does not exist"}}) {
    const std::string out = sh(bin + " import " + b.args + " --out " + dir + "/bad 2>&1", 2);
    BOOST_TEST(out.find(b.says) != std::string::npos, b.says << " not in: " << out);
    BOOST_TEST(traintest::count_lines(out) == 1, out);
    BOOST_TEST(!fs::exists(dir + "/bad"), b.args);
  }
  // A bare safetensors file without ringtrain's metadata: the flags to give are named.
  sh(py + " -c \"import sys; sys.path.insert(0, '" + root + "/tools/reference'); import safetensors_io as s; "
     "s.save('" + dir + "/bare.safetensors', s.load('" + dir + "/model.safetensors'))\"");
  const std::string bare = sh(bin + " import --from " + dir + "/bare.safetensors --out " + dir + "/bad 2>&1", 2);
  BOOST_TEST(bare.find("--meta") != std::string::npos, bare);
  BOOST_TEST(bare.find("--seq-len") != std::string::npos, bare);
  sh(bin + " import --from " + dir + "/bare.safetensors --meta " + dir + "/nc-f32/meta_000003.json --out " + dir + "/imp-bare");

  // The python3 on PATH has no PyTorch (a pyenv or venv interpreter ahead of Debian's): here a
  // real /usr/bin/python3 that does not see the system's packages (-S), as a venv without them.
  // With RINGTRAIN_PYTHON unset the import goes on with /usr/bin/python3 and says so; with
  // RINGTRAIN_PYTHON naming it, the one-line refusal names that interpreter and the fix.
  fs::create_directories(dir + "/venv-bin");
  std::ofstream(dir + "/venv-bin/python3") << "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n";
  fs::permissions(dir + "/venv-bin/python3", fs::perms::owner_all);
  const std::string venv = "env -u RINGTRAIN_PYTHON PATH=" + dir + "/venv-bin:/usr/bin:/bin ";
  const std::string fell_back = sh(venv + bin + " import --from " + dir + "/nc-f32 --out " + dir + "/imp-venv 2>&1");
  BOOST_TEST(nettest::contains(fell_back, "done with /usr/bin/python3 (" + dir + "/venv-bin/python3 has no PyTorch)"), fell_back);
  const auto via_venv = nlohmann::json::parse(sh(bin + " eval --checkpoint " + dir + "/imp-venv" + eval));
  BOOST_TEST(via_venv["val_bpb"].get<double>() == before["val_bpb"].get<double>());
  const std::string refused = sh("RINGTRAIN_PYTHON=" + dir + "/venv-bin/python3 " + bin + " import --from " + dir +
                                 "/nc-f32 --out " + dir + "/bad 2>&1", 2);
  for (const std::string& says : {dir + "/venv-bin/python3 (RINGTRAIN_PYTHON)", std::string("python3-torch"), std::string("set RINGTRAIN_PYTHON")})
    BOOST_TEST(nettest::contains(refused, says), says << " not in: " << refused);
  BOOST_TEST(traintest::count_lines(refused) == 1, refused);
  BOOST_TEST(!fs::exists(dir + "/bad"));
}

// nanochat -> ringtrain -> nanochat: a base directory as nanochat leaves it (bf16 embeddings,
// padded tables, tokenizer.pkl pickled by tiktoken where installed: Debian 13) is imported
// with its tokenizer and exported back; every tensor comes back bit for bit with its dtype,
// the meta and the tokenizer the same. The imported model's loss equals the PyTorch
// reference's on nanochat's own file, and the exported tokenizer.pkl prepares the same data.
BOOST_AUTO_TEST_CASE(nanochat_round_trip) {
  const std::string bin = nettest::ringtrain_path(), dir = nettest::scratch_dir() + "/nanochat-round-trip";
  const std::string py = std::getenv("RINGTRAIN_PYTHON"), root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  const std::string helper = py + " " + root + "/test/train/scripts/nanochat_files.py ";
  traintest::prepared_data();  // writes the corpus
  const std::string corpus = nettest::scratch_dir() + "/corpus";
  sh(bin + " data prepare --input " + corpus + " --out " + dir + "/data --vocab 300 --val-fraction 0.1 --quiet");
  std::string flags;
  for (const auto& f : traintest::tiny_model_flags()) flags += " " + f;
  sh(bin + " train --data " + dir + "/data --out " + dir + "/run" + flags + " --steps 3 --eval-every 0");
  sh(bin + " export --checkpoint " + dir + "/run --out " + dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << rt::io::SafetensorsFile::load(dir + "/model.safetensors").metadata().at("ringtrain_config");
  std::ofstream(dir + "/pattern.txt") << rt::data::kSplitPattern;
  BOOST_TEST_MESSAGE(sh(helper + "make " + root + " " + dir + "/model.safetensors " + dir + "/config.json " + dir +
                        "/data/tokenizer.tiktoken " + dir + "/pattern.txt " + dir + "/nc"));

  sh(bin + " import --from " + dir + "/nc/base_checkpoints/d2 --tokenizer " + dir + "/nc/tokenizer/tokenizer.pkl --out " + dir + "/imp");
  // The tokenizer read from the .pkl is the one the data was prepared with, byte for byte.
  BOOST_TEST((rt::io::read_file(dir + "/imp/rank0/step_000000/tokenizer.tiktoken") == rt::io::read_file(dir + "/data/tokenizer.tiktoken")));
  const std::string said = sh(bin + " export --checkpoint " + dir + "/imp --format nanochat --out " + dir + "/nc2");
  BOOST_TEST(said.find("NANOCHAT_BASE_DIR=") != std::string::npos, said);
  const std::string same = sh(helper + "compare " + dir + "/nc " + dir + "/nc2");
  BOOST_TEST_MESSAGE(same);
  BOOST_TEST(same.find("bit-identical") != std::string::npos, same);
  for (const auto& e : fs::recursive_directory_iterator(dir + "/nc2"))
    BOOST_TEST(e.path().filename().string().find(".tmp") == std::string::npos, e.path());

  // The same loss as the PyTorch reference (float64) on the same rows of val data.
  auto model = rt::train::load_model_from_checkpoint(dir + "/imp/rank0/step_000000");
  const int64_t T = model->config().sequence_len;
  auto val = std::make_shared<const rt::data::Shard>(rt::data::read_shard(dir + "/data/val.bin"));
  const auto rows = rt::data::val_rows(val, 0, 1, uint32_t(T), 4);
  BOOST_TEST_REQUIRE(!rows.empty());
  const int64_t B = int64_t(rows.size());
  std::vector<int32_t> idx, tgt;
  std::vector<int64_t> idx64, tgt64;
  for (const auto& r : rows)
    for (int64_t t = 0; t < T; ++t) idx.push_back(r[size_t(t)]), tgt.push_back(r[size_t(t) + 1]);
  idx64.assign(idx.begin(), idx.end()), tgt64.assign(tgt.begin(), tgt.end());
  rt::io::write_safetensors(dir + "/batch.safetensors", {{"idx", rt::io::DType::I64, {B, T}, idx64.data()},
                                                         {"tgt", rt::io::DType::I64, {B, T}, tgt64.data()}});
  model->reserve(B, T);
  std::vector<float> losses(size_t(B * T));
  const double ours = model->forward(idx.data(), tgt.data(), B, T, losses.data(), /*need_backward=*/false);
  const double ref = std::stod(sh(helper + "loss " + root + " " + dir + "/nc " + dir + "/batch.safetensors"));
  BOOST_TEST_MESSAGE("loss: ringtrain " << ours << ", reference " << ref);
  BOOST_TEST(std::abs(ours - ref) <= 1e-5 * std::abs(ref), "ringtrain " << ours << " reference " << ref);

  // The exported tokenizer.pkl prepares the same data as the .tiktoken it came from (and
  // tiktoken itself agrees with it where installed: tools/reference/tokenizer_check.py).
  sh(bin + " data prepare --input " + corpus + " --out " + dir + "/data2 --tokenizer " + dir +
     "/nc2/tokenizer/tokenizer.pkl --val-fraction 0.1 --quiet");
  BOOST_TEST((rt::io::read_file(dir + "/data2/train.bin") == rt::io::read_file(dir + "/data/train.bin")));
  BOOST_TEST((rt::io::read_file(dir + "/data2/tokenizer.tiktoken") == rt::io::read_file(dir + "/data/tokenizer.tiktoken")));
  sh(py + " " + root + "/tools/reference/tokenizer_check.py " + dir + "/data2");
  // And on the kernel docs (data prepare's default corpus): tiktoken, loading the exported
  // tokenizer.pkl as nanochat does, gives ringtrain's ids.
  sh(bin + " data prepare --out " + dir + "/kdoc --tokenizer " + dir + "/nc2/tokenizer/tokenizer.pkl --threads 2 --quiet");
  const std::string ids = sh(helper + "ids " + dir + "/nc2 " + dir + "/kdoc 400");
  BOOST_TEST_MESSAGE("kernel docs: " << ids);
  BOOST_TEST(ids.find(" documents: ") != std::string::npos, ids);

  // Bad input: one line, exit 2, nothing half-written.
  std::ofstream(dir + "/evil.pkl") << "cos\nsystem\n(S'true'\ntR.";  // pickle that would run a command
  std::ofstream(dir + "/text.pkl") << "not a pickle";
  struct Bad { std::string cmd, says; };
  for (const Bad& b : {Bad{" import --from " + dir + "/nc/base_checkpoints/d2 --tokenizer " + dir + "/evil.pkl --out " + dir + "/bad",
                           "refers to os.system"},
                       Bad{" import --from " + dir + "/nc/base_checkpoints/d2 --tokenizer " + dir + "/text.pkl --out " + dir + "/bad",
                           "not a pickled tiktoken Encoding"},
                       Bad{" data prepare --input " + corpus + " --tokenizer " + dir + "/evil.pkl --out " + dir + "/bad", "refers to os.system"},
                       Bad{" import --from " + dir + "/nc/base_checkpoints/d2 --tokenizer " + dir + "/data/token_bytes.bin --out " + dir + "/bad",
                           "token_bytes.bin"},
                       Bad{" export --checkpoint " + dir + "/imp --format onnx --out " + dir + "/bad", "--format onnx"},
                       Bad{" export --checkpoint " + dir + "/imp --format nanochat --tokenizer " + dir + "/evil.pkl --out " + dir + "/bad",
                           "refers to os.system"}}) {
    const std::string out = sh(bin + b.cmd + " 2>&1", 2);
    BOOST_TEST(out.find(b.says) != std::string::npos, b.says << " not in: " << out);
    BOOST_TEST(traintest::count_lines(out) == 1, out);
    BOOST_TEST(!fs::exists(dir + "/bad"), b.cmd);
  }
  // An export over another tokenizer's base directory is refused: its checkpoints need theirs.
  sh(bin + " data prepare --input " + corpus + " --out " + dir + "/data3 --vocab 310 --val-fraction 0.1 --quiet");
  sh(bin + " train --data " + dir + "/data3 --out " + dir + "/run3" + flags + " --steps 1 --eval-every 0");
  const std::string before = traintest::tree_fingerprint(dir + "/nc2");
  const std::string clash = sh(bin + " export --checkpoint " + dir + "/run3 --format nanochat --model-tag d2x --out " + dir + "/nc2 2>&1", 2);
  BOOST_TEST(clash.find("is another tokenizer") != std::string::npos, clash);
  BOOST_TEST(traintest::tree_fingerprint(dir + "/nc2") == before);
}

BOOST_AUTO_TEST_SUITE_END()
