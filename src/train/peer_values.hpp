// Values that other ranks send (batch sizes, steps, token ids, reports) are checked before
// use. A bad one means that rank runs a modified or broken build: the job stops as it does
// for a lost peer (every rank is told why, each saves a checkpoint and exits 1), and the
// value is never used.
#pragma once
#include <cstdint>
#include <string>

#include "ringtrain/net/communicator.hpp"

namespace rt::train {

// Breaks the communicator (so the other ranks stop too) and throws net::PeerLost naming
// `rank`: "rank 1 (10.0.0.2:29500) sent <what>; ...".
[[noreturn]] void bad_peer_value(net::Communicator& comm, int rank, const std::string& what);

}  // namespace rt::train
