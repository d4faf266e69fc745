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

// The model, its weights loaded: F32 or BF16 (widened exactly), torch.compile's
// "_orig_mod." prefix stripped, nanochat's vocabulary padding cropped. `scratch` is a
// directory for the .pt's conversion (removed file by file). Every tensor is checked
// against the config; a mismatch is an rt::UsageError naming the file and the tensor.
std::unique_ptr<model::GPT> load_imported(const ImportSource& src, const std::string& scratch, const GivenShape& given = {});

}  // namespace rt::interop
