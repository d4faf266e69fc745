// A nanochat checkpoint read as a ringtrain model: what `ringtrain import --from` takes.
//
// nanochat's base_train writes base_checkpoints/dN/model_NNNNNN.pt (torch.save of the
// state_dict) beside meta_NNNNNN.json (model_config: sequence_len, vocab_size, n_layer,
// n_head, n_kv_head, n_embd, window_pattern). The shape is read from the meta json (or from
// ringtrain's own metadata in a safetensors file), never guessed from the tensors, and the
// tensors are then checked against it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/data/tokenizer.hpp"
#include "ringtrain/io/safetensors.hpp"
#include "ringtrain/model/config.hpp"
#include "ringtrain/model/gpt.hpp"

namespace rt::interop {

struct ImportSource {
  std::string weights;  // model_NNNNNN.pt or a .safetensors file
  std::string meta;     // nanochat's meta_NNNNNN.json, or empty
  int64_t step = 0;     // the step in nanochat's file names (0 when none)
  bool pytorch = false; // weights is a .pt (read through python3 and PyTorch)
};

// PATH: a checkpoint directory (its newest model_NNNNNN.pt, or `step` when >= 0), a
// model_NNNNNN.pt (meta_NNNNNN.json beside it), or a .safetensors file (`meta`, if given, is
// nanochat's meta json for it). Throws rt::UsageError naming what is missing.
ImportSource find_import_source(const std::string& path, int64_t step, const std::string& meta = "");

// The model config of nanochat's meta json (its "model_config"); throws rt::UsageError
// naming the file and the field.
model::ModelConfig config_from_meta(const std::string& meta_path);

// What the tensors cannot show, given on the command line for a bare safetensors file
// (--seq-len, --head-dim, --window-pattern); all three or none.
struct GivenShape {
  int64_t seq_len = 0, head_dim = 0;
  std::string window_pattern;
  bool complete() const { return seq_len > 0 && head_dim > 0 && !window_pattern.empty(); }
};

// What a ringtrain model does not hold of a nanochat file, kept so that an export gives the
// same tensors back: each tensor's dtype (in the file's order) and the padding rows of the
// embedding tables and lm_head, in their own dtype.
struct NanochatExtras {
  std::vector<std::pair<std::string, std::string>> dtypes;  // name, "F32" or "BF16"
  struct Rows {
    std::string name;
    io::DType dtype = io::DType::F32;
    std::vector<int64_t> shape;  // (padded - vocab, width)
    std::vector<char> bytes;
  };
  std::vector<Rows> padding;
  // As a checkpoint's nanochat.safetensors (padding rows as tensors, dtypes in the metadata),
  // which the export's helper reads back.
  void save(const std::string& path) const;
};

// The model, its weights loaded: F32 or BF16 (widened exactly), torch.compile's
// "_orig_mod." prefix stripped, nanochat's vocabulary padding cropped (and kept in `extras`
// when given). `scratch` is a directory for the .pt's conversion (removed file by file).
// Every tensor is checked against the config; a mismatch is an rt::UsageError naming the
// file and the tensor.
std::unique_ptr<model::GPT> load_imported(const ImportSource& src, const std::string& scratch, const GivenShape& given = {},
                                          NanochatExtras* extras = nullptr);

// A tokenizer from ringtrain's .tiktoken file, or from nanochat's tokenizer.pkl (a pickled
// tiktoken Encoding, read by python3 without running anything from it: see the helper). The
// .pkl must split with nanochat's pattern and carry nanochat's 9 special tokens.
data::Tokenizer load_tokenizer_file(const std::string& path, const std::string& scratch);
// Whether `path` names nanochat's pickled tokenizer (*.pkl) rather than a .tiktoken file.
bool is_tokenizer_pkl(const std::string& path);
// A .tiktoken file for `path`: itself, or for a tokenizer.pkl its conversion, written into
// `scratch` (which must outlive its use), for the commands that read a tokenizer by file name.
std::string tiktoken_file(const std::string& path, const std::string& scratch);

// `ringtrain export --format nanochat`: writes, under out_dir (nanochat's base directory,
// NANOCHAT_BASE_DIR), base_checkpoints/<model_tag>/model_NNNNNN.pt and meta_NNNNNN.json, and
// tokenizer/tokenizer.pkl and tokenizer/token_bytes.pt; each file staged and renamed into place
// at the end. Needs python3 with PyTorch. The helper prints the files it wrote.
struct NanochatExport {
  const model::GPT* model = nullptr;
  int64_t step = 0;
  std::string meta_json;       // nanochat's meta_NNNNNN.json, whole
  std::string tokenizer_path;  // .tiktoken
  std::string extras_path;     // a checkpoint's nanochat.safetensors, or empty
  std::string model_tag;       // "d8"
};
void export_nanochat(const NanochatExport& what, const std::string& out_dir, const std::string& scratch);

}  // namespace rt::interop
