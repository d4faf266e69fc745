// The chunk pipeline every collective runs on: a stream of items sent to one neighbour
// and a stream received from the other. Sent item i may go once i < lead + (items
// received so far): in the ring, what arrives at step s is what leaves at step s + 1.
// Sending, receiving and reducing overlap, and receiving never stops, so the ring cannot
// deadlock and memory in flight stays bounded by the transport's high-water marks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include <zmq.hpp>

#include "link.hpp"

namespace rt::net {

struct Stream {
  CollectiveKind kind = CollectiveKind::AllReduce;
  uint64_t count = 0;  // n of the collective, checked on every message
  Wire wire = Wire::F32;
  int root = 0;
  int to = 0, from = 0;  // ring neighbours
  size_t send_items = 0, recv_items = 0;
  size_t lead = 0;  // items sendable before anything was received
  // Fills the message of sent item i.
  std::function<void(size_t i, zmq::message_t& out)> encode;
  // Consumes received item i (payload size already checked against expected_bytes).
  std::function<void(size_t i, const void* data, size_t bytes)> absorb;
  // Payload size of received item i; SIZE_MAX for "any".
  std::function<size_t(size_t i)> expected_bytes;
};

// Items of at most chunk_bytes for `bytes` raw bytes (at least one): the same bound on every
// data message as the ring's.
size_t byte_chunks(const Link& t, size_t bytes);

// Runs one collective's stream to completion and returns the payload bytes it sent.
// Throws PeerLost/Aborted/RuntimeError.
uint64_t run_stream(Link& t, uint64_t seq, const Stream& s);

}  // namespace rt::net
