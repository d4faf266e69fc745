// What the members of a newly formed ring send each other so that every replica is the
// same, bit for bit, before the first step (elastic training; net/rendezvous.hpp decides
// the ring and which members hold the state).
#pragma once
#include <cstdint>

#include "ringtrain/model/params.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/rendezvous.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "run_state.hpp"

namespace rt::train {

// Every member ends with the state of ring.target_step: the parameters, AdamW's buffers, the
// counters and the sync state come from the lowest stateful member. With muon_sharded
// (--sync grad) each Muon matrix's buffers come from the member that owned (updated) it in
// the ring the state comes from, or are zero when that rank is gone (its momentum restarts);
// otherwise every rank ran all of Muon and they come from the lowest stateful member too.
// When every member holds the state (no rank joins), only the sharded Muon buffers move:
// the rest is the same on all of them already, and each keeps its own sync state.
// Does nothing when no member has state (a fresh start: every rank initialised the same
// parameters from the seed). Collective: every member calls it. What a member receives is
// checked before use: counters within the job's --steps (`max_step`), every value finite.
void share_ring_state(net::Communicator& comm, const net::Membership& ring, bool muon_sharded, int64_t max_step,
                      model::ParamSet& params, optim::MuonAdamW& opt, RunState& run);

}  // namespace rt::train
