#include "run_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/state_file.hpp"

namespace rt::train {
namespace {
constexpr const char* kComponent = "run";
}  // namespace

std::string RunState::to_bytes(const std::vector<int64_t>& adamw_steps) const {
  io::StateWriter w;
  auto& s = w.scalars(kComponent);
  s["step"] = step;
  s["tokens_seen"] = tokens_seen;
  s["val_bpb"] = val_bpb;
  s["last_eval_step"] = last_eval_step;
  w.int64s(std::string(kComponent) + ".adamw_steps", adamw_steps);
  loader.save(w);
  // The counters' state file, after its length (8 bytes, little-endian), then the sync state.
  const std::string head = w.bytes();
  const uint64_t n = head.size();
  return std::string(reinterpret_cast<const char*>(&n), sizeof n) + head + sync_state;
}

RunState::Received RunState::from_bytes(const std::string& bytes, const std::string& what, int64_t max_step) {
  uint64_t n = 0;
  if (bytes.size() < sizeof n) throw RuntimeError(what + " is too short; every rank must run the same ringtrain build");
  std::memcpy(&n, bytes.data(), sizeof n);
  if (n > bytes.size() - sizeof n) throw RuntimeError(what + " is shorter than it says; every rank must run the same ringtrain build");
  const auto r = io::StateReader::parse(bytes.substr(sizeof n, n), what);
  Received received;
  RunState& in = received.run;
  in.sync_state = bytes.substr(sizeof n + n);
  in.step = r.integer(kComponent, "step");
  in.tokens_seen = r.number(kComponent, "tokens_seen");
  in.val_bpb = r.number(kComponent, "val_bpb");
  in.last_eval_step = r.integer(kComponent, "last_eval_step");
  if (in.step < 0 || in.step > max_step || !std::isfinite(in.tokens_seen) || in.tokens_seen < 0 || !std::isfinite(in.val_bpb) ||
      in.last_eval_step < -1 || in.last_eval_step > in.step)
    throw RuntimeError(what + " holds impossible counters; every rank must run the same ringtrain build");
  in.loader = data::LoaderState::load(r);
  received.adamw_steps = r.int64s(std::string(kComponent) + ".adamw_steps");
  return received;
}

}  // namespace rt::train
