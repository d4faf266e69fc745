// Model parameters as one contiguous f32 arena (and a gradient arena of the same layout),
// with a table of named views in nanochat's state_dict order. Contiguity lets the ring
// all-reduce and checkpoints treat all parameters, or any range of them, as one buffer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt::model {

struct Param {
  std::string name;            // nanochat state_dict key, e.g. "transformer.h.0.attn.c_q.weight"
  std::vector<int64_t> shape;  // as in nanochat
  int64_t offset = 0;          // element offset into the arena
  int64_t numel = 0;
  float* data = nullptr;       // arena + offset
  float* grad = nullptr;       // grad arena + offset
};

class ParamSet {
 public:
  ParamSet() = default;
  ParamSet(const ParamSet&) = delete;
  ParamSet& operator=(const ParamSet&) = delete;
  ParamSet(ParamSet&&) = default;
  ParamSet& operator=(ParamSet&&) = default;

  // Declares a tensor; call for every tensor, then finalize() to allocate (zeroed).
  void add(const std::string& name, std::vector<int64_t> shape);
  void finalize();

  std::vector<Param>& all() { return params_; }
  const std::vector<Param>& all() const { return params_; }
  Param& get(const std::string& name);  // throws if missing
  const Param& get(const std::string& name) const;
  const Param* find(const std::string& name) const;  // null if missing

  float* data() { return data_.data(); }
  float* grad() { return grad_.data(); }
  const float* data() const { return data_.data(); }
  const float* grad() const { return grad_.data(); }
  int64_t size() const { return int64_t(data_.size()); }
  void zero_grad();

 private:
  std::vector<Param> params_;
  std::vector<float> data_, grad_;
};

}  // namespace rt::model
