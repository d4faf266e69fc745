// ParamSet: one contiguous arena for all parameters and one for their gradients.
#include "ringtrain/model/params.hpp"

#include <algorithm>
#include <numeric>

#include "ringtrain/errors.hpp"

namespace rt::model {

void ParamSet::add(const std::string& name, std::vector<int64_t> shape) {
  if (!data_.empty()) throw RuntimeError("ParamSet::add after finalize: " + name);
  if (find(name)) throw RuntimeError("ParamSet: duplicate parameter " + name);
  Param p;
  p.name = name;
  p.numel = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  p.shape = std::move(shape);
  p.offset = params_.empty() ? 0 : params_.back().offset + params_.back().numel;
  params_.push_back(std::move(p));
}

void ParamSet::finalize() {
  const int64_t total = params_.empty() ? 0 : params_.back().offset + params_.back().numel;
  data_.assign(total, 0.0f);
  grad_.assign(total, 0.0f);
  for (auto& p : params_) {
    p.data = data_.data() + p.offset;
    p.grad = grad_.data() + p.offset;
  }
}

const Param* ParamSet::find(const std::string& name) const {
  auto it = std::find_if(params_.begin(), params_.end(),
                         [&](const Param& p) { return p.name == name; });
  return it == params_.end() ? nullptr : &*it;
}

const Param& ParamSet::get(const std::string& name) const {
  const Param* p = find(name);
  if (!p) throw RuntimeError("no parameter named " + name);
  return *p;
}

Param& ParamSet::get(const std::string& name) {
  return const_cast<Param&>(static_cast<const ParamSet*>(this)->get(name));
}

void ParamSet::zero_grad() { std::fill(grad_.begin(), grad_.end(), 0.0f); }

}  // namespace rt::model
