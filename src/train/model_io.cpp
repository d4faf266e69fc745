#include "ringtrain/train/model_io.hpp"

#include <filesystem>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/safetensors.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace rt::train {

void save_weights(const std::string& path, const model::GPT& model) {
  std::vector<io::TensorRef> tensors;
  for (const auto& p : model.params().all())
    tensors.push_back({p.name, io::DType::F32, p.shape, p.data});
  io::write_safetensors(path, tensors, {{"ringtrain_config", model.config().to_json()}});
}

bool weights_config(const std::string& path, model::ModelConfig& out) {
  auto f = io::SafetensorsFile::load(path);
  auto it = f.metadata().find("ringtrain_config");
  if (it == f.metadata().end()) return false;
  out = model::ModelConfig::from_json(it->second);
  return true;
}

void load_weights(const std::string& path, model::GPT& model) {
  auto f = io::SafetensorsFile::load(path);
  for (auto& p : model.params().all()) {
    if (!f.has(p.name))
      throw UsageError(path + " has no tensor " + p.name + "; it was written for another model config");
    const auto& t = f.get(p.name);
    if (t.shape != p.shape)
      throw UsageError(path + ": " + p.name + " has shape " + io::shape_text(t.shape) + " but this model needs " +
                       io::shape_text(p.shape) + "; use the same --depth/--seq-len/--vocab as the run that wrote it");
    t.to_f32(p.data);  // F32, or BF16 widened exactly
  }
}

std::unique_ptr<model::GPT> load_model_from_checkpoint(const std::string& step_dir) {
  const auto meta = verify_checkpoint(step_dir);
  auto cfg = model::ModelConfig::from_json(meta.at("model_config").dump());
  auto gpt = std::make_unique<model::GPT>(cfg);
  load_weights((std::filesystem::path(step_dir) / "model.safetensors").string(), *gpt);
  return gpt;
}

}  // namespace rt::train
