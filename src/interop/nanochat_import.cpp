// nanochat checkpoints into a ringtrain model (see interop/nanochat.hpp).
#include "ringtrain/interop/nanochat.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "python_helper.hpp"
#include "ringtrain/data/pretokenize.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/io/safetensors.hpp"


namespace rt::interop {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kVocabPad = 64;  // nanochat pads its embedding tables to a multiple of 64 rows

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// model_000123.pt -> 123; -1 for any other name.
int64_t step_of(const std::string& name, const std::string& prefix, const std::string& ext) {
  static const std::regex digits("[0-9]{1,12}");
  if (name.rfind(prefix, 0) != 0 || !ends_with(name, ext)) return -1;
  const std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - ext.size());
  if (!std::regex_match(mid, digits)) return -1;
  return std::stoll(mid);
}

std::string step_name(const std::string& prefix, int64_t step, const std::string& ext) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld", (long long)step);
  return prefix + buf + ext;
}


}  // namespace

ImportSource find_import_source(const std::string& path, int64_t step, const std::string& meta) {
  ImportSource s;
  s.meta = meta;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    int64_t newest = -1;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const int64_t k = step_of(e.path().filename().string(), "model_", ".pt");
      if (k >= 0 && (step < 0 ? k > newest : k == step)) newest = k;
    }
    if (newest < 0)
      throw UsageError(path + " holds no " + (step < 0 ? std::string("model_NNNNNN.pt") : step_name("model_", step, ".pt")) +
                       "; give nanochat's checkpoint directory (base_checkpoints/dN), a .pt or a .safetensors file");
    s.weights = (fs::path(path) / step_name("model_", newest, ".pt")).string();
    s.step = newest;
    s.pytorch = true;
  } else if (!fs::exists(path, ec)) {
    throw UsageError(path + " does not exist; give nanochat's checkpoint directory, a model_NNNNNN.pt or a .safetensors file");
  } else if (ends_with(path, ".pt")) {
    s.weights = path;
    s.step = std::max<int64_t>(0, step_of(fs::path(path).filename().string(), "model_", ".pt"));
    s.pytorch = true;
  } else {
    s.weights = path;  // safetensors
  }
  if (s.pytorch && s.meta.empty()) {
    const int64_t k = step_of(fs::path(s.weights).filename().string(), "model_", ".pt");
    const fs::path beside = fs::path(s.weights).parent_path() / step_name("meta_", k < 0 ? 0 : k, ".json");
    if (k < 0 || !fs::exists(beside, ec))
      throw UsageError(s.weights + " has no " + beside.filename().string() +
                       " beside it (nanochat writes the model config there); copy it beside the .pt or give --meta FILE");
    s.meta = beside.string();
  }
  return s;
}

model::ModelConfig config_from_meta(const std::string& meta_path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(meta_path));
  } catch (const nlohmann::json::exception&) {
    throw UsageError(meta_path + " is not JSON; give nanochat's meta_NNNNNN.json");
  }
  if (!j.is_object() || !j.contains("model_config") || !j["model_config"].is_object())
    throw UsageError(meta_path + " has no \"model_config\" object; give nanochat's meta_NNNNNN.json");
  const auto& m = j["model_config"];
  auto get = [&](const char* key, int64_t lo, int64_t hi) {
    if (!m.contains(key) || !m[key].is_number_integer() || m[key].get<int64_t>() < lo || m[key].get<int64_t>() > hi)
      throw UsageError(meta_path + ": model_config." + key + " is missing or not an integer in " + std::to_string(lo) + ".." +
                       std::to_string(hi) + "; fix the meta json");
    return m[key].get<int64_t>();
  };
  model::ModelConfig c;
  c.n_layer = get("n_layer", 1, 1024);
  c.n_embd = get("n_embd", 1, 1 << 16);
  c.n_head = get("n_head", 1, 4096);
  c.n_kv_head = get("n_kv_head", 1, 4096);
  c.vocab_size = get("vocab_size", 2, (int64_t(1) << 31) - 1);
  c.sequence_len = get("sequence_len", 1, 1 << 20);
  if (c.n_embd % c.n_head != 0)
    throw UsageError(meta_path + ": n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " + std::to_string(c.n_head) +
                     "; fix the meta json");
  c.head_dim = c.n_embd / c.n_head;
  if (m.contains("window_pattern")) {
    if (!m["window_pattern"].is_string()) throw UsageError(meta_path + ": model_config.window_pattern is not a string; fix it");
    c.window_pattern = m["window_pattern"].get<std::string>();
  } else {
    c.window_pattern = "L";  // nanochat before sliding windows: full attention everywhere
  }
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(meta_path + ": " + e.what());
  }
  return c;
}

std::unique_ptr<model::GPT> load_imported(const ImportSource& src, const std::string& scratch, const GivenShape& given,
                                          NanochatExtras* extras) {
  std::string st_path = src.weights;
  std::string converted;
  if (src.pytorch) {
    converted = (fs::path(scratch) / ".import.safetensors").string();
    run_helper({"pt2st", src.weights, converted}, scratch);
    st_path = converted;
  }
  io::RemoveOnExit remove_converted{{converted}};
  const auto f = io::SafetensorsFile::load(st_path);
  model::ModelConfig cfg;
  if (!src.meta.empty()) {
    cfg = config_from_meta(src.meta);
  } else if (auto it = f.metadata().find("ringtrain_config"); it != f.metadata().end()) {
    cfg = model::ModelConfig::from_json(it->second);
  } else if (given.complete()) {
    // The rest is in the tensors' shapes: layers, vocabulary, width, key/value heads.
    auto shape = [&](const std::string& name) -> const std::vector<int64_t>& {
      const std::string key = f.has(name) ? name : "_orig_mod." + name;
      if (!f.has(key)) throw UsageError(src.weights + " has no tensor " + name + "; it is not a nanochat model");
      return f.get(key).shape;
    };
    const auto& wte = shape("transformer.wte.weight");
    if (wte.size() != 2) throw UsageError(src.weights + ": transformer.wte.weight is not a matrix; it is not a nanochat model");
    cfg.vocab_size = wte[0], cfg.n_embd = wte[1];
    while (f.has("transformer.h." + std::to_string(cfg.n_layer) + ".attn.c_q.weight") ||
           f.has("_orig_mod.transformer.h." + std::to_string(cfg.n_layer) + ".attn.c_q.weight"))
      ++cfg.n_layer;
    cfg.head_dim = given.head_dim;
    cfg.n_head = cfg.n_embd / cfg.head_dim;
    const auto& ck = shape("transformer.h.0.attn.c_k.weight");
    cfg.n_kv_head = ck.empty() ? 0 : ck[0] / cfg.head_dim;
    cfg.sequence_len = given.seq_len;
    cfg.window_pattern = given.window_pattern;
    cfg.validate();
  } else {
    throw UsageError(src.weights + " says nothing of its model config (the sequence length, windows and head size are not in "
                     "the tensors); give nanochat's meta json with --meta meta_NNNNNN.json, or all of --seq-len, --head-dim and "
                     "--window-pattern");
  }
  auto gpt = std::make_unique<model::GPT>(cfg);
  const std::string named = src.weights;  // errors name the user's file, not the conversion
  std::vector<std::string> used;
  for (auto& p : gpt->params().all()) {
    const std::string key = f.has(p.name) ? p.name : "_orig_mod." + p.name;
    if (!f.has(key))
      throw UsageError(named + " has no tensor " + p.name + "; it is not a nanochat model of the config in " +
                       (src.meta.empty() ? "its metadata" : src.meta));
    used.push_back(key);
    const auto& t = f.get(key);
    std::vector<int64_t> want = p.shape;
    // Embedding tables and lm_head may carry nanochat's padding rows past the vocabulary.
    const bool table = p.name == "transformer.wte.weight" || p.name == "lm_head.weight" || p.name.rfind("value_embeds.", 0) == 0;
    const int64_t padded = (cfg.vocab_size + kVocabPad - 1) / kVocabPad * kVocabPad;
    if (table && t.shape.size() == 2 && t.shape[0] == padded && t.shape[0] != cfg.vocab_size && t.shape[1] == p.shape[1])
      want[0] = padded;
    if (t.shape != want)
      throw UsageError(named + ": " + p.name + " has shape " + io::shape_text(t.shape) + " but the config in " +
                       (src.meta.empty() ? "its metadata" : src.meta) + " needs " + io::shape_text(p.shape) +
                       "; give the meta json of the same checkpoint");
    if (t.dtype != io::DType::F32 && t.dtype != io::DType::BF16)
      throw UsageError(named + ": " + p.name + " is " + io::dtype_name(t.dtype) + "; nanochat's weights are float32 or bfloat16");
    if (want[0] == p.shape[0] || !table) {
      t.to_f32(p.data);
    } else {  // the first vocab_size rows; the padding is never looked up
      std::vector<float> all(size_t(t.numel()));
      t.to_f32(all.data());
      std::copy(all.begin(), all.begin() + p.numel, p.data);
      if (extras) {
        const size_t row_bytes = size_t(p.shape[1]) * io::dtype_size(t.dtype);
        extras->padding.push_back({p.name, t.dtype, {want[0] - p.shape[0], p.shape[1]},
                                   std::vector<char>(t.bytes.begin() + int64_t(size_t(p.shape[0]) * row_bytes), t.bytes.end())});
      }
    }
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(p.data[i])) throw UsageError(named + ": " + p.name + " holds a NaN or an infinity; the checkpoint is broken");
  }
  // A tensor the model does not have means another architecture: refuse rather than drop it.
  for (const auto& name : f.names())
    if (std::find(used.begin(), used.end(), name) == used.end())
      throw UsageError(named + " has a tensor " + name + " that nanochat's model of this config does not; it is another model");
  if (extras)
    for (const auto& name : f.names()) {
      const std::string plain = name.rfind("_orig_mod.", 0) == 0 ? name.substr(10) : name;
      extras->dtypes.emplace_back(plain, io::dtype_name(f.get(name).dtype));
    }
  return gpt;
}

void NanochatExtras::save(const std::string& path) const {
  std::vector<io::TensorRef> refs;
  for (const auto& r : padding) refs.push_back({r.name, r.dtype, r.shape, r.bytes.data()});
  nlohmann::json order = nlohmann::json::array();
  for (const auto& [name, dtype] : dtypes) order.push_back({name, dtype});
  io::write_safetensors(path, refs, {{"dtypes", order.dump()}});
}

bool is_tokenizer_pkl(const std::string& path) { return ends_with(path, ".pkl"); }

std::string tiktoken_file(const std::string& path, const std::string& scratch) {
  if (!is_tokenizer_pkl(path)) return path;
  const std::string converted = (fs::path(scratch) / "tokenizer.tiktoken").string();
  load_tokenizer_file(path, scratch).save(converted);
  return converted;
}

data::Tokenizer load_tokenizer_file(const std::string& path, const std::string& scratch) {
  if (!is_tokenizer_pkl(path)) return data::Tokenizer::load(path);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw UsageError("--tokenizer " + path + " does not exist; give nanochat's tokenizer/tokenizer.pkl or a .tiktoken file");
  const std::string pattern = (fs::path(scratch) / ".split_pattern.txt").string();
  const std::string converted = (fs::path(scratch) / ".tokenizer.tiktoken").string();
  io::write_file_atomic(pattern, data::kSplitPattern, std::strlen(data::kSplitPattern));
  io::RemoveOnExit remove{{pattern, converted}};
  run_helper({"pkl2tt", path, converted, pattern}, scratch, "reading a tokenizer.pkl");
  try {
    return data::Tokenizer::load(converted);
  } catch (const UsageError& e) {
    throw UsageError(path + ": its merges are not a byte-level BPE ringtrain can rebuild (" + e.what() + ")");
  }
}

}  // namespace rt::interop
