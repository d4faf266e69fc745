// Communicator: the public face (communicator.hpp). Each collective takes the link (Link::Hold),
// numbers itself, runs one of the ring algorithms (ring_allreduce.cpp, chain_broadcast.cpp,
// ring_gather.cpp) on the chunk pipeline, and adds what it sent to bytes_sent(). The typed
// small collectives are built on the all-gather of records. Every data message, of any
// collective, is at most chunk_bytes, and its size is checked on arrival.
#include "ringtrain/net/ring_order.hpp"
#include "ringtrain/net/communicator.hpp"

#include <algorithm>
#include <cstring>

#include "link.hpp"
#include "ring.hpp"
#include "transport.hpp"

namespace rt::net {

const char* wire_name(Wire w) {
  switch (w) {
    case Wire::F32: return "f32";
    case Wire::Bf16: return "bf16";
    case Wire::Int8: return "int8";
    case Wire::Int4: return "int4";
  }
  return "?";
}

Wire parse_wire(const std::string& text) {
  if (text == "f32") return Wire::F32;
  if (text == "bf16") return Wire::Bf16;
  if (text == "int8") return Wire::Int8;
  if (text == "int4") return Wire::Int4;
  throw UsageError("--wire '" + text + "' is not a wire format; use f32, bf16, int8 or int4");
}

ShardRange shard_range(size_t n, int world, int rank) {
  const size_t w = static_cast<size_t>(world), q = n / w, extra = n % w, r = static_cast<size_t>(rank);
  size_t begin = q * r + std::min(r, extra);
  return {begin, begin + q + (r < extra ? 1 : 0)};
}

Communicator::Communicator(CommOptions options) : link_(std::make_unique<Transport>(std::move(options))) {
  RingOrder(link_->options().ring_order, link_->world(), link_->rank());  // throws unless a permutation
}
Communicator::Communicator(std::unique_ptr<Link> link) : link_(std::move(link)) {
  if (!link_) throw RuntimeError("a communicator needs a link (internal error)");
  RingOrder(link_->options().ring_order, link_->world(), link_->rank());  // throws unless a permutation
}
Communicator::~Communicator() = default;

int Communicator::rank() const { return link_->rank(); }
int Communicator::world() const { return link_->world(); }
const std::vector<PeerAddress>& Communicator::peers() const { return link_->options().peers; }

// Any error breaks the communicator (the ranks are no longer in step), so later
// collectives throw the same error.
template <typename F>
void Communicator::collective(F&& body) {
  Link& t = *link_;
  Link::Hold hold(t);
  t.check_healthy();
  uint64_t seq = t.begin_collective();
  try {
    bytes_sent_ += body(seq);
  } catch (const PeerLost&) {
    throw;
  } catch (const Aborted&) {
    throw;
  } catch (const RuntimeError& e) {
    if (t.failure().empty()) t.fail(e.what(), false);
    throw;
  }
}

namespace {
// int8 and int4 need the all-reduce's one encoding per element (ring_allreduce.cpp).
void require_float_wire(Wire wire, const char* collective) {
  if (block_coded(wire))
    throw UsageError(std::string(collective) + " takes f32 or bf16 on the wire; int8 and int4 are for all_reduce only");
}
}  // namespace

void Communicator::all_reduce(float* data, size_t n, ReduceOp op, Wire wire, float* residual) {
  collective([&](uint64_t seq) {
    return ring_collective(*link_, seq, RingPhases::Both, data, n, op, wire, {}, residual);
  });
}

void Communicator::reduce_scatter(float* data, size_t n, ReduceOp op, Wire wire) {
  require_float_wire(wire, "reduce_scatter");
  collective([&](uint64_t seq) { return ring_collective(*link_, seq, RingPhases::ReduceScatter, data, n, op, wire); });
}

void Communicator::all_gather(float* data, size_t n, Wire wire) {
  require_float_wire(wire, "all_gather");
  collective([&](uint64_t seq) {
    return ring_collective(*link_, seq, RingPhases::AllGather, data, n, ReduceOp::Sum, wire);
  });
}

void Communicator::reduce_scatter(float* data, std::span<const size_t> bounds, ReduceOp op, Wire wire) {
  require_float_wire(wire, "reduce_scatter");
  collective([&](uint64_t seq) {
    return ring_collective(*link_, seq, RingPhases::ReduceScatter, data, bounds.back(), op, wire, bounds);
  });
}

void Communicator::all_gather(float* data, std::span<const size_t> bounds, Wire wire) {
  require_float_wire(wire, "all_gather");
  collective([&](uint64_t seq) {
    return ring_collective(*link_, seq, RingPhases::AllGather, data, bounds.back(), ReduceOp::Sum, wire, bounds);
  });
}

void Communicator::broadcast(float* data, size_t n, int root, Wire wire) {
  check_root(root);
  require_float_wire(wire, "broadcast");
  collective([&](uint64_t seq) { return chain_broadcast(*link_, seq, data, n, root, wire); });
}

void Communicator::barrier() {
  // An all-reduce of nothing: nobody leaves before every rank's messages went round.
  collective([&](uint64_t seq) {
    return ring_collective(*link_, seq, RingPhases::Both, nullptr, 0, ReduceOp::Sum, Wire::F32);
  });
}

void Communicator::all_gather_records(const void* mine, size_t record_bytes, void* out) {
  const std::vector<size_t> sizes(static_cast<size_t>(world()), record_bytes);
  std::vector<std::string> parts;
  collective([&](uint64_t seq) {
    return ring_gather_parts(*link_, seq, CollectiveKind::GatherBytes,
                             std::string_view(static_cast<const char*>(mine), record_bytes), sizes, parts);
  });
  for (size_t q = 0; q < parts.size(); ++q)
    if (record_bytes) std::memcpy(static_cast<char*>(out) + q * record_bytes, parts[q].data(), record_bytes);
}

std::vector<std::string> Communicator::all_gather_bytes(std::string_view mine, size_t max_bytes) {
  if (mine.size() > max_bytes)
    throw RuntimeError("all_gather_bytes: " + std::to_string(mine.size()) + " bytes exceed the bound of " +
                       std::to_string(max_bytes) + " (internal error)");
  const auto sizes = all_gather_record<uint64_t>(mine.size());
  std::vector<size_t> part_bytes(sizes.size());
  for (size_t q = 0; q < sizes.size(); ++q) {
    if (sizes[q] > max_bytes) {
      const std::string why = link_->describe(static_cast<int>(q)) + " announced a part of " +
                              std::to_string(sizes[q]) + " bytes, more than the bound of " + std::to_string(max_bytes) +
                              "; every rank must run the same ringtrain build";
      fail(why);
    }
    part_bytes[q] = static_cast<size_t>(sizes[q]);
  }
  std::vector<std::string> parts;
  collective([&](uint64_t seq) {
    return ring_gather_parts(*link_, seq, CollectiveKind::GatherBytes, mine, part_bytes, parts);
  });
  return parts;
}

namespace {
template <class T>
void reduce_in_rank_order(std::span<T> values, const std::vector<T>& all, ValueOp op) {
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) {
    T acc = all[i];
    for (size_t k = i + n; k < all.size(); k += n) {
      const T v = all[k];
      acc = op == ValueOp::Sum ? acc + v : op == ValueOp::Min ? std::min(acc, v) : std::max(acc, v);
    }
    values[i] = acc;
  }
}
}  // namespace

void Communicator::all_reduce_values(std::span<double> values, ValueOp op) {
  reduce_in_rank_order(values, all_gather_records(std::span<const double>(values)), op);
}

void Communicator::all_reduce_values(std::span<int64_t> values, ValueOp op) {
  reduce_in_rank_order(values, all_gather_records(std::span<const int64_t>(values)), op);
}

void Communicator::broadcast_record(void* record, size_t record_bytes, int root) {
  check_root(root);
  collective([&](uint64_t seq) { return chain_broadcast_bytes(*link_, seq, record, record_bytes, root); });
}

void Communicator::fail(const std::string& why) {
  Link::Hold hold(*link_);
  link_->fail(why, false);
}

void Communicator::check_root(int root) const {
  if (root < 0 || root >= world())
    throw UsageError("broadcast root " + std::to_string(root) + " is not a rank of this job");
}

void Communicator::set_service_handler(ServiceHandler handler) { link_->set_service_handler(std::move(handler)); }
void Communicator::abort(const std::string& reason) { link_->abort(reason); }
std::string Communicator::failure() const { return link_->failure(); }

std::vector<double> Communicator::silence_seconds() { return link_->silence_seconds(); }

}  // namespace rt::net
