// Model weights on disk: safetensors under nanochat's state_dict keys and shapes (float32),
// with the model config in the file's metadata so the file describes itself.
#pragma once
#include <memory>
#include <string>

#include "ringtrain/model/config.hpp"
#include "ringtrain/model/gpt.hpp"

namespace rt::train {

void save_weights(const std::string& path, const model::GPT& model);
// Reads a config from a weights file's metadata (written by save_weights); nullopt-like:
// returns false if the file has none.
bool weights_config(const std::string& path, model::ModelConfig& out);
// Copies every tensor into the model; throws rt::UsageError naming a missing tensor or a
// shape that differs (a file of another config).
void load_weights(const std::string& path, model::GPT& model);

// A model built from a checkpoint directory (its meta.json config and model.safetensors).
std::unique_ptr<model::GPT> load_model_from_checkpoint(const std::string& step_dir);

}  // namespace rt::train
