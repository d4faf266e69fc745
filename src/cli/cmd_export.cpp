// `ringtrain export`: a checkpoint's weights as safetensors (the default), or the checkpoint in
// nanochat's own layout (--format nanochat), for nanochat's base_eval, chat_sft, chat_cli and
// chat_web.
#include <cstdio>
#include <filesystem>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/interop/nanochat.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/model_io.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rt::cli {
namespace {

// nanochat's meta_NNNNNN.json: its keys only (model_config has no head_dim: nanochat derives
// it), and the batch fields chat_sft reads. An imported checkpoint gives back what nanochat had
// written; a run of ringtrain says its own settings under base_train's names.
json nanochat_meta(const json& ckpt_meta, const model::ModelConfig& c, int64_t step) {
  const json from = ckpt_meta.contains("nanochat_meta") && ckpt_meta["nanochat_meta"].is_object() ? ckpt_meta["nanochat_meta"] : json::object();
  const json user = ckpt_meta.contains("user_config") && ckpt_meta["user_config"].is_object() ? ckpt_meta["user_config"]
                    : from.contains("user_config")                                              ? from["user_config"]
                                                                                                : json::object();
  auto batch = [&](const char* key) -> json {
    if (from.contains(key)) return from[key];
    return user.contains(key) ? user[key] : json(nullptr);
  };
  const json bpb = ckpt_meta.contains("val_bpb") && ckpt_meta["val_bpb"].is_number() && ckpt_meta["val_bpb"].get<double>() > 0
                       ? ckpt_meta["val_bpb"]
                       : from.value("val_bpb", json(nullptr));
  return {{"step", step},
          {"val_bpb", bpb},
          {"model_config",
           {{"sequence_len", c.sequence_len}, {"vocab_size", c.vocab_size}, {"n_layer", c.n_layer}, {"n_head", c.n_head},
            {"n_kv_head", c.n_kv_head}, {"n_embd", c.n_embd}, {"window_pattern", c.window_pattern}}},
          {"user_config", user},
          {"device_batch_size", batch("device_batch_size")},
          {"max_seq_len", c.sequence_len},
          {"total_batch_size", batch("total_batch_size")}};
}

}  // namespace

int cmd_export(int argc, char** argv) {
  cxxopts::Options spec(argv[0],
                        "Write a checkpoint as safetensors under nanochat's state_dict keys (float32), or in nanochat's own layout "
                        "(--format nanochat: needs python3 with PyTorch, Debian: python3-torch; tiktoken is used when installed).");
  spec.add_options()("checkpoint", "a checkpoint, rank or run directory", cxxopts::value<std::string>())(
      "format", "safetensors, or nanochat: OUT becomes nanochat's base directory (NANOCHAT_BASE_DIR) with "
                "base_checkpoints/dN/model_NNNNNN.pt, meta_NNNNNN.json and tokenizer/tokenizer.pkl, token_bytes.pt",
      cxxopts::value<std::string>()->default_value("safetensors"))(
      "out", "the .safetensors file, or with --format nanochat the base directory to write into", cxxopts::value<std::string>())(
      "tokenizer", "with --format nanochat: the tokenizer (.tiktoken or tokenizer.pkl) when the checkpoint has none",
      cxxopts::value<std::string>()->default_value(""))(
      "model-tag", "with --format nanochat: the directory under base_checkpoints (default dN, N the depth)",
      cxxopts::value<std::string>()->default_value(""));
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain export --checkpoint runs/demo --format nanochat --out ~/.cache/nanochat")) return 0;
  const auto ckpt = train::resolve_checkpoint(need<std::string>(r, "checkpoint", argv[0]));
  const auto out = need<std::string>(r, "out", argv[0]);
  const auto format = r["format"].as<std::string>();
  if (format != "safetensors" && format != "nanochat")
    throw UsageError("--format " + format + " is not a format; use safetensors (one file) or nanochat (nanochat's base directory)");
  auto model = train::load_model_from_checkpoint(ckpt);
  if (format == "safetensors") {
    train::save_weights(out, *model);
    std::printf("wrote %s (%zu tensors, %lld parameters) from %s\n", out.c_str(), model->params().all().size(),
                (long long)model->params().size(), ckpt.c_str());
    return 0;
  }
  const json meta = train::verify_checkpoint(ckpt);
  ScratchDir scratch(out, "export");
  interop::NanochatExport what;
  what.model = model.get();
  // An import not trained since keeps nanochat's step number; a trained one is at its own step.
  what.step = meta.value("weights_only", false) ? meta.value("imported_step", int64_t(0)) : meta.value("step", int64_t(0));
  what.meta_json = nanochat_meta(meta, model->config(), what.step).dump();
  what.model_tag = r["model-tag"].as<std::string>();
  if (what.model_tag.empty()) what.model_tag = "d" + std::to_string(model->config().n_layer);
  if (what.model_tag.find('/') != std::string::npos || what.model_tag == "." || what.model_tag == "..")
    throw UsageError("--model-tag " + what.model_tag + " must be one directory name (nanochat's default: dN)");
  std::string tokenizer = r["tokenizer"].as<std::string>();
  if (tokenizer.empty()) {
    tokenizer = (fs::path(ckpt) / "tokenizer.tiktoken").string();
    if (!fs::exists(tokenizer))
      throw UsageError(ckpt + " holds no tokenizer (imported without --tokenizer); give --tokenizer FILE, the .tiktoken or tokenizer.pkl it was trained with");
  } else {
    tokenizer = interop::tiktoken_file(tokenizer, scratch.path());
  }
  what.tokenizer_path = tokenizer;
  if (fs::exists(fs::path(ckpt) / "nanochat.safetensors")) what.extras_path = (fs::path(ckpt) / "nanochat.safetensors").string();
  interop::export_nanochat(what, out, scratch.path());
  std::printf("wrote nanochat's files of %s under %s: load them with NANOCHAT_BASE_DIR=%s (e.g. python -m scripts.chat_cli)\n",
              ckpt.c_str(), out.c_str(), fs::absolute(out).string().c_str());
  return 0;
}

}  // namespace rt::cli
