// A ringtrain model into nanochat's base directory (see interop/nanochat.hpp): the C++ side
// writes the weights as safetensors and a plan; the helper (python3, PyTorch, tiktoken where
// installed) writes nanochat's .pt, .pkl and .json files from them.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "python_helper.hpp"
#include "ringtrain/data/pretokenize.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/interop/nanochat.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/io/safetensors.hpp"

namespace rt::interop {
namespace fs = std::filesystem;

void export_nanochat(const NanochatExport& what, const std::string& out_dir, const std::string& scratch) {
  const auto& cfg = what.model->config();
  const auto tok = data::Tokenizer::load(what.tokenizer_path);
  if (int64_t(tok.vocab_size()) != cfg.vocab_size)
    throw UsageError("the tokenizer " + what.tokenizer_path + " has " + std::to_string(tok.vocab_size()) + " tokens but the model " +
                     std::to_string(cfg.vocab_size) + "; give the tokenizer the model was trained with (--tokenizer)");
  const std::string weights = (fs::path(scratch) / ".export.safetensors").string();
  const std::string plan_path = (fs::path(scratch) / ".export-plan.json").string();
  io::RemoveOnExit remove{{weights, plan_path}};
  std::vector<io::TensorRef> tensors;
  for (const auto& p : what.model->params().all()) tensors.push_back({p.name, io::DType::F32, p.shape, p.data});
  io::write_safetensors(weights, tensors);
  constexpr int64_t kVocabPad = 64;  // nanochat's GPT pads its tables to a multiple of 64 rows
  nlohmann::json specials = nlohmann::json::array();
  for (const char* name : data::kSpecialTokens) specials.push_back(name);
  const nlohmann::json plan = {
      {"out", fs::absolute(out_dir).string()},
      {"model_dir", "base_checkpoints/" + what.model_tag},
      {"step", what.step},
      {"weights", weights},
      {"nanochat_extras", what.extras_path},
      {"vocab_size", cfg.vocab_size},
      {"padded_vocab_size", (cfg.vocab_size + kVocabPad - 1) / kVocabPad * kVocabPad},
      {"meta", nlohmann::json::parse(what.meta_json)},
      {"tokenizer", {{"tiktoken", fs::absolute(what.tokenizer_path).string()}, {"pattern", data::kSplitPattern},
                     {"special_tokens", specials}}},
      {"token_bytes", tok.token_byte_lengths()},
  };
  const std::string text = plan.dump();
  io::write_file_atomic(plan_path, text.data(), text.size());
  run_helper({"st2nc", plan_path}, scratch, "writing nanochat's .pt files");
}

}  // namespace rt::interop
