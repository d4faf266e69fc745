// The rendezvous lines (net/rendezvous_wire.cpp): a check-in to the coordinator, its
// decision ("elastic go ...") and a status answer, from any process holding the key. What
// is accepted must lie within the job's bounds, and a decision read back must say exactly
// what was written.
#include "fuzz_input.hpp"
#include "rendezvous_wire.hpp"

namespace {
constexpr int kWorld = 5, kMe = 1;
constexpr int64_t kSteps = 1000;

bool ranks_ok(const std::vector<int>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || v[i] >= kWorld || (i > 0 && v[i] <= v[i - 1])) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rt::net;
  const std::string in = fuzzing::text(data, size);
  const auto w = wire::words(in);
  if (auto c = wire::decode_checkin(w, kWorld, kMe, kSteps)) {
    const auto& [rank, s] = *c;
    if (rank < 0 || rank >= kWorld || rank == kMe) __builtin_trap();
    if (s.epoch < -1 || s.epoch >= wire::kMaxEpoch || s.step < 0 || s.step > kSteps) __builtin_trap();
    if (s.oldest_step < 0 || s.oldest_step > s.step || !ranks_ok(s.members)) __builtin_trap();
    if ((s.epoch >= 0) != (s.lineage != 0) || s.lineage >> 63) __builtin_trap();  // state names its lineage
    auto again = wire::decode_checkin(wire::words(wire::encode_checkin(rank, s)), kWorld, kMe, kSteps);
    if (!again || again->first != rank || again->second.epoch != s.epoch || again->second.step != s.step ||
        again->second.oldest_step != s.oldest_step || again->second.members != s.members ||
        again->second.lineage != s.lineage)
      __builtin_trap();
  }
  if (auto m = wire::decode_go(w, kWorld)) {
    if (m->members.empty() || !ranks_ok(m->members) || !ranks_ok(m->state_members) || !ranks_ok(m->stateful))
      __builtin_trap();
    for (int r : m->stateful)
      if (m->index_of(r) < 0) __builtin_trap();  // only members hold the state that goes on
    if (m->epoch < 1 || m->target_step < 0 || m->lineage == 0 || m->lineage >> 63) __builtin_trap();
    auto again = wire::decode_go(wire::words(wire::encode_go(*m)), kWorld);
    if (!again || again->epoch != m->epoch || again->members != m->members || again->state_epoch != m->state_epoch ||
        again->state_members != m->state_members || again->stateful != m->stateful ||
        again->target_step != m->target_step || again->lineage != m->lineage)
      __builtin_trap();
  }
  const auto st = wire::parse_status(in);
  if (st.kind != wire::StatusAnswer::Other && (st.epoch < -1 || st.epoch > wire::kMaxEpoch || st.lineage >> 63)) __builtin_trap();
  if (st.kind == wire::StatusAnswer::Done) {  // a finished job: its step is within bounds and reads back the same
    if (st.step < 0 || st.step > wire::kMaxStep) __builtin_trap();
    const auto again = wire::parse_status(wire::encode_done(st.epoch, st.lineage, st.step));
    if (again.kind != st.kind || again.epoch != st.epoch || again.lineage != st.lineage || again.step != st.step) __builtin_trap();
  }
  int asker = -2;
  if (wire::is_status_request(w, kWorld, &asker) && (asker < -1 || asker >= kWorld)) __builtin_trap();
  if (auto merge = wire::decode_merge(w)) {
    if (merge->first == 0 || merge->first >> 63 || merge->second < 0 || merge->second > wire::kMaxStep) __builtin_trap();
    if (wire::decode_merge(wire::words(wire::encode_merge(merge->first, merge->second))) != merge) __builtin_trap();
  }
  return 0;
}
