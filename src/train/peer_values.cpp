#include "peer_values.hpp"

namespace rt::train {

void bad_peer_value(net::Communicator& comm, int rank, const std::string& what) {
  const std::string message = "rank " + std::to_string(rank) + " (" + comm.peers()[size_t(rank)].text() + ") sent " + what +
                              "; it runs a modified or broken ringtrain: stopping without using it (rebuild that host "
                              "from the same commit, then --resume)";
  comm.abort(message);
  throw net::PeerLost(message);
}

}  // namespace rt::train
