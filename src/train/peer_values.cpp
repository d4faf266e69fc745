#include "ringtrain/train/peer_values.hpp"

namespace rt::train {

void bad_peer_value(net::Communicator& comm, int rank, const std::string& what) {
  const std::string message = "rank " + std::to_string(rank) + " (" + comm.peers()[size_t(rank)].text() + ") sent " + what +
                              "; it runs a modified or broken ringtrain: stopping without using it (rebuild that host "
                              "from the same commit, then --resume)";
  comm.abort(message);
  throw net::PeerLost(message);
}

int64_t peer_int(net::Communicator& comm, int rank, const std::string& text, const char* what, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    used = 0;
  }
  if (text.empty() || used != text.size() || v < lo || v > hi)
    bad_peer_value(comm, rank,
                   std::string(what) + " '" + text.substr(0, 32) + "', not a number from " + std::to_string(lo) + " to " +
                       std::to_string(hi));
  return v;
}

void expect_part_size(net::Communicator& comm, int rank, const std::string& part, size_t bytes, const char* what) {
  if (part.size() != bytes)
    bad_peer_value(comm, rank, std::string(what) + " of " + std::to_string(part.size()) + " bytes where " +
                                   std::to_string(bytes) + " were due");
}

}  // namespace rt::train
