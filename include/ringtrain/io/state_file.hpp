// The saved state of a training run, everything but the weights, in one documented format
// (docs/checkpoints.md): a safetensors file whose tensors are the state's arrays, named
// "<component>.<name>" (e.g. "optimizer.transformer.wte.weight.exp_avg"), and whose
// __metadata__ key "scalars" holds one JSON object with each component's numbers, e.g.
// {"optimizer": {...}, "loader": {...}, "sync": {...}}. Python reads it with
// safetensors.safe_open(path, "np") and json.loads(f.metadata()["scalars"]).
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringtrain/io/safetensors.hpp"

namespace rt::io {

class StateWriter {
 public:
  // The floats are not copied: they must stay alive and unchanged until bytes()/write().
  void floats(const std::string& name, const float* data, std::vector<int64_t> shape);
  void floats(const std::string& name, const std::vector<float>& v);
  // A temporary (e.g. a state laid out for saving) is kept by the writer instead.
  void floats(const std::string& name, std::vector<float>&& v);
  // Small integer arrays are copied.
  void int64s(const std::string& name, std::vector<int64_t> values);
  // The component's scalars: scalars(component)[key] = value.
  nlohmann::json& scalars(const std::string& component) { return scalars_[component]; }

  std::string bytes() const;
  void write(const std::string& path) const;  // atomically
  void write(const std::function<void(const void* data, size_t size)>& sink) const;

 private:
  std::map<std::string, std::string> metadata() const;
  std::vector<TensorRef> tensors_;
  std::deque<std::vector<int64_t>> owned_;  // stable addresses for the copied integers
  std::deque<std::vector<float>> owned_floats_;
  nlohmann::json scalars_ = nlohmann::json::object();
};

// Every accessor checks what it reads and throws rt::UsageError naming the state and the
// entry: a state written for another model or run is refused, never misread.
class StateReader {
 public:
  static StateReader parse(const std::string& bytes, const std::string& what);
  static StateReader load(const std::string& path);

  bool has(const std::string& name) const { return file_.has(name); }
  bool has_scalars(const std::string& component) const { return scalars_.contains(component); }
  // Copies tensor `name` into `out`, whose size says how many floats the caller expects.
  void floats(const std::string& name, std::vector<float>& out) const;
  void floats(const std::string& name, float* out, size_t count) const;
  std::vector<int64_t> int64s(const std::string& name) const;
  // scalars(component)[key] as an integer or a number.
  int64_t integer(const std::string& component, const std::string& key) const;
  uint64_t count(const std::string& component, const std::string& key) const;  // unsigned
  double number(const std::string& component, const std::string& key) const;
  // scalars(component)[key] as a string; has_scalar: whether the key is there at all.
  std::string text(const std::string& component, const std::string& key) const;
  bool has_scalar(const std::string& component, const std::string& key) const;
  const std::string& what() const { return what_; }

 private:
  const nlohmann::json& scalar(const std::string& component, const std::string& key) const;
  std::string what_;
  SafetensorsFile file_;
  nlohmann::json scalars_;
};

}  // namespace rt::io
