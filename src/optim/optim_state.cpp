// MuonAdamW state to and from bytes, for checkpoints.
//
// Layout (little-endian, this machine's float): "RTOPTIM\0", u32 version, u32 entry count,
// then per entry: u32 name length, name, u8 kind (0 AdamW, 1 Muon), i64 step,
// u64 length and floats of the first buffer, u64 length and floats of the second buffer.
// AdamW buffers are exp_avg and exp_avg_sq; Muon's are momentum and variance.
#include <cstring>
#include <string>

#include "ringtrain/errors.hpp"
#include "ringtrain/optim/muon_adamw.hpp"

namespace rt::optim {
namespace {

constexpr char kMagic[8] = {'R', 'T', 'O', 'P', 'T', 'I', 'M', '\0'};
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  template <class T>
  void put(const T& v) { raw(&v, sizeof v); }
  void raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    out.insert(out.end(), c, c + n);
  }
  void floats(const std::vector<float>& v) {
    put(uint64_t(v.size()));
    raw(v.data(), v.size() * sizeof(float));
  }
  std::vector<char> out;
};

class Reader {
 public:
  explicit Reader(std::span<const char> b) : bytes(b) {}
  void raw(void* p, size_t n) {
    if (pos + n > bytes.size())
      throw UsageError("optimizer state is truncated; use a complete optim checkpoint file");
    std::memcpy(p, bytes.data() + pos, n);
    pos += n;
  }
  template <class T>
  T get() {
    T v;
    raw(&v, sizeof v);
    return v;
  }
  void floats(std::vector<float>& v, const std::string& name) {
    const uint64_t n = get<uint64_t>();
    if (n != v.size())
      throw UsageError("optimizer state for " + name + " has " + std::to_string(n) +
                       " values, the model needs " + std::to_string(v.size()) +
                       "; resume with the model config the checkpoint was saved with");
    raw(v.data(), n * sizeof(float));
  }
  std::span<const char> bytes;
  size_t pos = 0;
};

}  // namespace

std::vector<char> MuonAdamW::save_state() const {
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.put(kVersion);
  const auto& all = params_.all();
  w.put(uint32_t(all.size()));
  std::vector<int> muon_of_param(all.size(), -1);
  for (size_t k = 0; k < muon_.size(); ++k) muon_of_param[muon_[k].param] = int(k);
  for (size_t i = 0; i < all.size(); ++i) {
    w.put(uint32_t(all[i].name.size()));
    w.raw(all[i].name.data(), all[i].name.size());
    if (muon_of_param[i] >= 0) {
      const MuonState& s = muon_state_[muon_of_param[i]];
      w.put(uint8_t(1));
      w.put(int64_t(0));
      w.floats(s.momentum);
      w.floats(s.variance);
    } else {
      const AdamWState& s = adamw_state_[i];
      w.put(uint8_t(0));
      w.put(s.step);
      w.floats(s.exp_avg);
      w.floats(s.exp_avg_sq);
    }
  }
  return std::move(w.out);
}

void MuonAdamW::load_state(std::span<const char> bytes) {
  Reader r(bytes);
  char magic[8];
  r.raw(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw UsageError("not a ringtrain optimizer state (bad magic); pass an optim checkpoint file");
  const uint32_t version = r.get<uint32_t>();
  if (version != kVersion)
    throw UsageError("optimizer state version " + std::to_string(version) + ", this build reads " +
                     std::to_string(kVersion) + "; resume with the matching ringtrain");
  const auto& all = params_.all();
  const uint32_t count = r.get<uint32_t>();
  if (count != all.size())
    throw UsageError("optimizer state has " + std::to_string(count) + " tensors, the model has " +
                     std::to_string(all.size()) +
                     "; resume with the model config the checkpoint was saved with");
  std::vector<int> muon_of_param(all.size(), -1);
  for (size_t k = 0; k < muon_.size(); ++k) muon_of_param[muon_[k].param] = int(k);
  // Read into copies first so that a failed load leaves the optimizer untouched.
  std::vector<AdamWState> adamw = adamw_state_;
  std::vector<MuonState> muon = muon_state_;
  for (size_t i = 0; i < all.size(); ++i) {
    std::string name(r.get<uint32_t>(), '\0');
    r.raw(name.data(), name.size());
    if (name != all[i].name)
      throw UsageError("optimizer state tensor " + std::to_string(i) + " is " + name +
                       ", the model's is " + all[i].name +
                       "; resume with the model config the checkpoint was saved with");
    const uint8_t kind = r.get<uint8_t>();
    const int64_t step = r.get<int64_t>();
    if (kind != (muon_of_param[i] >= 0 ? 1 : 0))
      throw UsageError("optimizer state of " + name + " is for another optimizer group; " +
                       "resume with the same ringtrain version and model");
    if (kind == 1) {
      MuonState& s = muon[muon_of_param[i]];
      r.floats(s.momentum, name);
      r.floats(s.variance, name);
    } else {
      AdamWState& s = adamw[i];
      s.step = step;
      r.floats(s.exp_avg, name);
      r.floats(s.exp_avg_sq, name);
    }
  }
  if (r.pos != bytes.size())
    throw UsageError("optimizer state has trailing bytes; pass an uncorrupted optim checkpoint");
  adamw_state_ = std::move(adamw);
  muon_state_ = std::move(muon);
}

}  // namespace rt::optim
