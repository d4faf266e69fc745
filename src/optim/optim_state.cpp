// MuonAdamW state in the run's state file (io/state_file.hpp), for checkpoints.
//
// Per parameter <name> (nanochat's key), under the component "optimizer":
//   AdamW:  tensors optimizer.<name>.exp_avg and .exp_avg_sq, scalar <name>.step
//   Muon:   tensors optimizer.<name>.momentum and .variance
// The tensors are found by name, so a state saved for another model is refused with the
// name of the first tensor that does not fit.
#include <string>

#include "ringtrain/errors.hpp"
#include "ringtrain/optim/muon_adamw.hpp"

namespace rt::optim {
namespace {
constexpr const char* kComponent = "optimizer";
std::string tensor_name(const std::string& param, const char* buffer) {
  return std::string(kComponent) + "." + param + "." + buffer;
}
}  // namespace

void MuonAdamW::save_state(io::StateWriter& out) const {
  const auto& all = params_.all();
  std::vector<int> muon_of_param(all.size(), -1);
  for (size_t k = 0; k < muon_.size(); ++k) muon_of_param[size_t(muon_[k].param)] = int(k);
  out.scalars(kComponent)["tensors"] = all.size();
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& name = all[i].name;
    if (muon_of_param[i] >= 0) {
      const MuonState& s = muon_state_[size_t(muon_of_param[i])];
      out.floats(tensor_name(name, "momentum"), s.momentum);
      out.floats(tensor_name(name, "variance"), s.variance);
    } else {
      const AdamWState& s = adamw_state_[i];
      out.floats(tensor_name(name, "exp_avg"), s.exp_avg);
      out.floats(tensor_name(name, "exp_avg_sq"), s.exp_avg_sq);
      out.scalars(kComponent)[name + ".step"] = s.step;
    }
  }
}

void MuonAdamW::load_state(const io::StateReader& in) {
  const auto& all = params_.all();
  if (in.integer(kComponent, "tensors") != int64_t(all.size()))
    throw UsageError(in.what() + ": the optimizer state has " + std::to_string(in.integer(kComponent, "tensors")) +
                     " tensors, the model has " + std::to_string(all.size()) +
                     "; resume with the model config the checkpoint was saved with");
  std::vector<int> muon_of_param(all.size(), -1);
  for (size_t k = 0; k < muon_.size(); ++k) muon_of_param[size_t(muon_[k].param)] = int(k);
  // Read into copies first so that a failed load leaves the optimizer untouched.
  std::vector<AdamWState> adamw = adamw_state_;
  std::vector<MuonState> muon = muon_state_;
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& name = all[i].name;
    if (muon_of_param[i] >= 0) {
      MuonState& s = muon[size_t(muon_of_param[i])];
      in.floats(tensor_name(name, "momentum"), s.momentum);
      in.floats(tensor_name(name, "variance"), s.variance);
    } else {
      AdamWState& s = adamw[i];
      in.floats(tensor_name(name, "exp_avg"), s.exp_avg);
      in.floats(tensor_name(name, "exp_avg_sq"), s.exp_avg_sq);
      s.step = in.integer(kComponent, name + ".step");
      if (s.step < 0) throw UsageError(in.what() + ": " + name + ".step is negative; the checkpoint is corrupt");
    }
  }
  adamw_state_ = std::move(adamw);
  muon_state_ = std::move(muon);
}

std::vector<char> MuonAdamW::save_state() const {
  io::StateWriter w;
  save_state(w);
  const std::string bytes = w.bytes();
  return std::vector<char>(bytes.begin(), bytes.end());
}

void MuonAdamW::load_state(std::span<const char> bytes) {
  load_state(io::StateReader::parse(std::string(bytes.begin(), bytes.end()), "the optimizer state"));
}

// Vector assignment keeps the snapshot's capacity: after the first step this is a copy.
void MuonAdamW::take_snapshot(Snapshot& out) const {
  out.adamw = adamw_state_;
  out.muon = muon_state_;
}

void MuonAdamW::restore_snapshot(const Snapshot& in) {
  if (in.adamw.size() != adamw_state_.size() || in.muon.size() != muon_state_.size())
    throw RuntimeError("an optimizer snapshot of another model (internal error)");
  adamw_state_ = in.adamw;
  muon_state_ = in.muon;
}

void MuonAdamW::for_each_buffer(const std::function<void(int muon, float* data, size_t count)>& f) {
  for (auto& s : adamw_state_) {
    if (!s.exp_avg.empty()) f(-1, s.exp_avg.data(), s.exp_avg.size());
    if (!s.exp_avg_sq.empty()) f(-1, s.exp_avg_sq.data(), s.exp_avg_sq.size());
  }
  for (size_t k = 0; k < muon_state_.size(); ++k) {
    f(int(k), muon_state_[k].momentum.data(), muon_state_[k].momentum.size());
    f(int(k), muon_state_[k].variance.data(), muon_state_[k].variance.size());
  }
}

std::vector<int64_t> MuonAdamW::adamw_steps() const {
  std::vector<int64_t> steps;
  for (size_t i = 0; i < adamw_state_.size(); ++i)
    if (group_of_param_[i] >= 0) steps.push_back(adamw_state_[i].step);
  return steps;
}

void MuonAdamW::set_adamw_steps(const std::vector<int64_t>& steps) {
  size_t k = 0;
  for (size_t i = 0; i < adamw_state_.size(); ++i)
    if (group_of_param_[i] >= 0) {
      if (k >= steps.size() || steps[k] < 0) throw UsageError("AdamW step counters of another model, or negative");
      ++k;
    }
  if (k != steps.size()) throw UsageError("AdamW step counters of another model");
  k = 0;
  for (size_t i = 0; i < adamw_state_.size(); ++i)
    if (group_of_param_[i] >= 0) adamw_state_[i].step = steps[k++];
}

}  // namespace rt::optim
