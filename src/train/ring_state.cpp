#include "ring_state.hpp"

#include <algorithm>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/state_file.hpp"
#include "ringtrain/net/finite_values.hpp"
#include "sync/muon_shards.hpp"

namespace rt::train {
namespace {

// The counters and the loader position are small (the loader keeps ~1000 buffered pieces);
// the sync state is at most a few parameter-sized buffers.
size_t max_counter_bytes(const model::ParamSet& params) { return (size_t(16) << 20) + 4 * sizeof(float) * size_t(params.size()); }

// Per Muon matrix, the new ring's index of the member that holds its buffers, or -1.
std::vector<int> muon_sources(const net::Membership& ring, bool sharded, const model::ParamSet& params,
                              const optim::MuonAdamW& opt) {
  std::vector<int> source(opt.muon_matrices().size(), -1);
  if (!sharded) std::fill(source.begin(), source.end(), ring.index_of(ring.stateful.front()));
  if (!sharded || ring.state_members.empty()) return source;
  const auto shards = assign_muon_shards(opt.muon_matrices(), params, int(ring.state_members.size()));
  for (size_t i = 0; i < shards.owned.size(); ++i) {
    const int rank = ring.state_members[i];
    const bool has = std::binary_search(ring.stateful.begin(), ring.stateful.end(), rank);
    for (int k : shards.owned[i]) source[size_t(k)] = has ? ring.index_of(rank) : -1;
  }
  return source;
}

RunState without_sync_state(const RunState& run) {
  RunState out = run;
  out.sync_state.clear();
  return out;
}

}  // namespace

void share_ring_state(net::Communicator& comm, const net::Membership& ring, bool muon_sharded, int64_t max_step,
                      model::ParamSet& params, optim::MuonAdamW& opt, RunState& run) {
  if (ring.stateful.empty()) return;
  const int root = ring.index_of(ring.stateful.front());
  if (root < 0 || root >= comm.world()) throw RuntimeError("the ring's state holder is not in the ring (internal error)");
  // When every member holds the state (survivors of a lost rank, all gone back to the same
  // step), the parameters and whatever every rank updates alike are the same bits on all of
  // them already (the replica check after this says so): only the Muon buffers of sharded
  // owners move, and each keeps its own sync state (its int8 error feedback is its own).
  const bool everyone_holds_it = ring.stateful.size() == ring.members.size();
  // A NaN or an infinity in what arrives would become this rank's state, and its next
  // checkpoint's: the sender is named instead.
  auto received = [&](const float* data, size_t count, int from, const char* what) {
    if (from != comm.rank() && !net::all_finite(data, count))
      throw RuntimeError("ring member " + std::to_string(from) + " sent " + what +
                         " holding a NaN or an infinity; restart that rank with --resume from a good checkpoint");
  };
  if (!everyone_holds_it) {
    comm.broadcast(params.data(), size_t(params.size()), root);
    received(params.data(), size_t(params.size()), root, "parameters");
  }
  const auto source = muon_sources(ring, muon_sharded, params, opt);
  opt.for_each_buffer([&](int muon, float* data, size_t count) {
    const bool own = muon < 0 || !muon_sharded;  // updated alike by every rank
    if (own && everyone_holds_it) return;
    const int from = own ? root : source[size_t(muon)];
    if (from < 0) std::fill(data, data + count, 0.0f);
    else comm.broadcast(data, count, from), received(data, count, from, "optimizer state");
  });
  // No sync state is decoded as "keep your own".
  const auto parts = comm.all_gather_bytes(comm.rank() != root  ? std::string()
                                           : everyone_holds_it ? without_sync_state(run).encode(opt)
                                                               : run.encode(opt),
                                           max_counter_bytes(params));
  for (int r = 0; r < comm.world(); ++r)
    if (r != root && !parts[size_t(r)].empty())
      throw RuntimeError("ring member " + std::to_string(r) + " sent a state it does not hold; every rank must run the same ringtrain build");
  if (comm.rank() != root)
    run = RunState::decode(parts[size_t(root)], "the run's state from ring member " + std::to_string(root), max_step, opt);
}

}  // namespace rt::train
