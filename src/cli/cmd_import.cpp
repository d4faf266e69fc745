// `ringtrain import`: a nanochat checkpoint (its directory, a model_NNNNNN.pt or a safetensors
// file) into a ringtrain checkpoint, to evaluate, sample, train on with --resume or export back.
#include <cstdio>
#include <filesystem>
#include <optional>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/interop/nanochat.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/model_io.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rt::cli {

int cmd_import(int argc, char** argv) {
  cxxopts::Options spec(argv[0],
                        "Read a nanochat checkpoint into a ringtrain checkpoint, to evaluate, sample or train on with --resume. "
                        "A .pt is read with PyTorch: it needs python3 with torch (Debian: python3-torch; RINGTRAIN_PYTHON names "
                        "another interpreter); a .safetensors file needs nothing.");
  spec.add_options()("from", "nanochat's checkpoint directory (base_checkpoints/dN: its newest model_NNNNNN.pt), a model_NNNNNN.pt, or a .safetensors file",
                     cxxopts::value<std::string>())(
      "step", "with a directory: this step's model_NNNNNN.pt instead of the newest", cxxopts::value<int64_t>()->default_value("-1"))(
      "meta", "nanochat's meta_NNNNNN.json (default: the one beside the .pt)", cxxopts::value<std::string>()->default_value(""))(
      "out", "run directory to create the checkpoint in (rank<R>/step_000000)", cxxopts::value<std::string>())(
      "seq-len", "for a safetensors file with neither ringtrain's metadata nor --meta: the sequence length", cxxopts::value<int64_t>()->default_value("0"))(
      "head-dim", "... and the head size", cxxopts::value<int64_t>()->default_value("0"))(
      "window-pattern", "... and the window pattern", cxxopts::value<std::string>()->default_value(""))(
      "tokenizer", "the tokenizer to put in the checkpoint (for sample, eval and export): nanochat's tokenizer/tokenizer.pkl or a .tiktoken file",
      cxxopts::value<std::string>()->default_value(""))(
      "rank", "write the checkpoint as this rank's (OUT/rank<R>/): import on every host of a job, each with its --rank, then train --resume",
      cxxopts::value<int>()->default_value("0"));
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain import --from base_checkpoints/d8 --out runs/imported --tokenizer data/kdoc/tokenizer.tiktoken"))
    return 0;
  const auto from = need<std::string>(r, "from", argv[0]);
  const auto out = need<std::string>(r, "out", argv[0]);
  const int rank = r["rank"].as<int>();
  if (rank < 0 || rank > 4095) throw UsageError("--rank " + std::to_string(rank) + " is outside 0..4095; give this host's --rank");
  const auto src = interop::find_import_source(from, r["step"].as<int64_t>(), r["meta"].as<std::string>());
  interop::GivenShape given{r["seq-len"].as<int64_t>(), r["head-dim"].as<int64_t>(), r["window-pattern"].as<std::string>()};
  const int n_given = (given.seq_len > 0) + (given.head_dim > 0) + !given.window_pattern.empty();
  if (n_given != 0 && n_given != 3)
    throw UsageError("give all of --seq-len, --head-dim and --window-pattern, or none (the meta json or the file's metadata says them)");
  // Nothing is half-written: the checkpoint is assembled in a temporary directory and renamed
  // into place only when complete; the .pt's conversion happens beside it.
  ScratchDir scratch(out, "import");
  interop::NanochatExtras extras;
  auto gpt = interop::load_imported(src, scratch.path(), given, &extras);
  const auto& cfg = gpt->config();
  // The tokenizer first: a bad one must fail before anything is written.
  const auto tok = r["tokenizer"].as<std::string>();
  std::optional<data::Tokenizer> tokenizer;
  if (!tok.empty()) {
    tokenizer.emplace(interop::load_tokenizer_file(tok, scratch.path()));
    if (int64_t(tokenizer->vocab_size()) != cfg.vocab_size)
      throw UsageError("--tokenizer " + tok + " has " + std::to_string(tokenizer->vocab_size()) + " tokens but the model " +
                       std::to_string(cfg.vocab_size) + "; give the tokenizer the model was trained with");
  }
  train::CheckpointWriter w(out, rank, 0);
  train::save_weights(w.path("model.safetensors"), *gpt);
  w.add_written_file("model.safetensors");
  if (tokenizer) {
    tokenizer->save(w.path("tokenizer.tiktoken"));
    w.add_written_file("tokenizer.tiktoken");
  }
  // What the model does not hold (dtypes, padding rows), so that an export gives it back.
  extras.save(w.path("nanochat.safetensors"));
  w.add_written_file("nanochat.safetensors");
  // Weights only: `train --resume` takes it on any number of ranks and any --sync, with a
  // fresh optimizer and loader and the schedules from step 0.
  json meta = {{"step", 0}, {"model_config", json::parse(cfg.to_json())}, {"rank", rank}, {"world", 1},
               {"weights_only", true}, {"imported_from", from}, {"imported_step", src.step}};
  if (!src.meta.empty()) meta["nanochat_meta"] = json::parse(io::read_file(src.meta));  // parsed once already
  const auto dir = w.commit(meta);
  std::printf("wrote checkpoint %s (d%lld, n_embd %lld, vocab %lld, T %lld, windows %s)\n", dir.c_str(), (long long)cfg.n_layer,
              (long long)cfg.n_embd, (long long)cfg.vocab_size, (long long)cfg.sequence_len, cfg.window_pattern.c_str());
  return 0;
}


}  // namespace rt::cli
