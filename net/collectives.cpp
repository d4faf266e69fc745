// Communicator: the public face. Each collective takes the sockets from the background
// thread (Transport::Hold), numbers itself, runs on the chunk pipeline, and adds what it
// sent to bytes_sent(). Also the small collectives: broadcast (a pipelined chain along the
// ring), the all-gather of bytes and records, and the typed ones built on them. Every data
// message, of any collective, is at most chunk_bytes, and its size is checked on arrival.
#include <algorithm>
#include <cstring>

#include "bf16.hpp"
#include "pipeline.hpp"
#include "ring.hpp"
#include "zero_copy.hpp"
#include "ringtrain/net/communicator.hpp"

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

namespace {
// A broadcast's stream of C items from root along the ring: the root sends, the ranks
// after it forward each item once it arrived, the last one only receives.
Stream chain_stream(const Transport& t, CollectiveKind kind, uint64_t count, int root, size_t C) {
  const int N = t.world();
  const int position = (t.rank() - root + N) % N;  // 0 at the root, N-1 at the chain's end
  Stream s;
  s.kind = kind;
  s.count = count;
  s.root = root;
  s.to = (t.rank() + 1) % N;
  s.from = (t.rank() - 1 + N) % N;
  s.send_items = position == N - 1 ? 0 : C;
  s.recv_items = position == 0 ? 0 : C;
  s.lead = position == 0 ? C : 0;
  return s;
}
}  // namespace

uint64_t chain_broadcast(Transport& t, uint64_t seq, float* data, size_t n, int root, Wire wire) {
  const int N = t.world();
  if (N == 1) return 0;
  const bool bf16 = wire == Wire::Bf16;
  const size_t elem_bytes = bf16 ? 2 : 4;
  const size_t chunk_elems = std::max<size_t>(1, t.options().chunk_bytes / 4);
  const size_t C = std::max<size_t>(1, (n + chunk_elems - 1) / chunk_elems);
  auto chunk = [&](size_t c) {
    size_t b = std::min(n, c * chunk_elems);
    return ShardRange{b, std::min(n, b + chunk_elems)};
  };
  if (t.rank() == root && bf16) round_bf16_inplace(data, n);  // the root keeps what others get

  Stream s = chain_stream(t, CollectiveKind::Broadcast, n, root, C);
  s.wire = wire;
  // f32 chunks go out straight from data (zero copy); each is written at most once, before
  // it is sent, so only the return has to wait for their release.
  ZeroCopySends in_flight(t, 1);
  s.encode = [&](size_t i, zmq::message_t& out) {
    ShardRange c = chunk(i);
    if (bf16) {
      out.rebuild(c.size() * elem_bytes);
      encode_bf16(data + c.begin, static_cast<uint16_t*>(out.data()), c.size());
    } else {
      out = in_flight.borrow(data + c.begin, c.size() * 4, 0);
    }
  };
  s.expected_bytes = [&](size_t i) { return chunk(i).size() * elem_bytes; };
  s.absorb = [&](size_t i, const void* payload, size_t) {
    ShardRange c = chunk(i);
    if (bf16) decode_bf16(payload, data + c.begin, c.size());
    else if (c.size()) std::memcpy(data + c.begin, payload, c.size() * 4);
  };
  const uint64_t sent = run_stream(t, seq, s);
  in_flight.wait_all();  // the caller may change data once we return
  return sent;
}

namespace {
// Pieces of at most chunk_bytes: the same bound on every data message as the ring's.
size_t chunks_for(const Transport& t, size_t bytes) {
  const size_t chunk = std::max<size_t>(1, t.options().chunk_bytes);
  return std::max<size_t>(1, (bytes + chunk - 1) / chunk);
}
std::string_view chunk_of(std::string_view part, size_t c, size_t chunk) {
  const size_t b = std::min(part.size(), c * chunk);
  return part.substr(b, std::min(part.size() - b, chunk));
}
}  // namespace

uint64_t ring_gather_parts(Transport& t, uint64_t seq, CollectiveKind kind, std::string_view mine,
                           std::span<const size_t> part_bytes, std::vector<std::string>& parts) {
  const int N = t.world(), r = t.rank();
  parts.assign(static_cast<size_t>(N), std::string());
  parts[static_cast<size_t>(r)] = std::string(mine);
  if (N == 1) return 0;
  auto mod = [N](int s) { return ((s % N) + N) % N; };
  size_t largest = 0, total = 0;
  for (size_t b : part_bytes) largest = std::max(largest, b), total += b;
  for (int q = 0; q < N; ++q)
    if (q != r) parts[static_cast<size_t>(q)].resize(part_bytes[static_cast<size_t>(q)]);
  const size_t chunk = std::max<size_t>(1, t.options().chunk_bytes), C = chunks_for(t, largest);
  // Step k: send the piece of rank r-k, receive the piece of rank r-1-k; chunk by chunk, so
  // what arrives at step k leaves at step k+1 as soon as it is here.
  auto piece_of_send = [&](size_t i) { return mod(r - static_cast<int>(i / C)); };
  auto piece_of_recv = [&](size_t i) { return mod(r - 1 - static_cast<int>(i / C)); };
  Stream s;
  s.kind = kind;
  s.count = total;  // the same on every rank; a rank with other sizes fails the header check
  s.to = mod(r + 1);
  s.from = mod(r - 1);
  s.send_items = s.recv_items = static_cast<size_t>(N - 1) * C;
  s.lead = C;
  s.encode = [&](size_t i, zmq::message_t& out) {
    const std::string_view c = chunk_of(parts[static_cast<size_t>(piece_of_send(i))], i % C, chunk);
    out.rebuild(c.data(), c.size());
  };
  s.expected_bytes = [&](size_t i) {
    return chunk_of(parts[static_cast<size_t>(piece_of_recv(i))], i % C, chunk).size();
  };
  s.absorb = [&](size_t i, const void* payload, size_t bytes) {
    std::string& p = parts[static_cast<size_t>(piece_of_recv(i))];
    if (bytes) std::memcpy(p.data() + std::min(p.size(), (i % C) * chunk), payload, bytes);
  };
  return run_stream(t, seq, s);
}

uint64_t chain_broadcast_bytes(Transport& t, uint64_t seq, void* record, size_t bytes, int root) {
  const int N = t.world();
  if (N == 1) return 0;
  const size_t chunk = std::max<size_t>(1, t.options().chunk_bytes);
  char* data = static_cast<char*>(record);
  auto piece = [&](size_t c) {
    const size_t b = std::min(bytes, c * chunk);
    return std::pair<size_t, size_t>{b, std::min(bytes - b, chunk)};
  };
  Stream s = chain_stream(t, CollectiveKind::BroadcastBytes, bytes, root, chunks_for(t, bytes));
  s.encode = [&](size_t i, zmq::message_t& out) {
    const auto [b, len] = piece(i);
    out.rebuild(data + b, len);
  };
  s.expected_bytes = [&](size_t i) { return piece(i).second; };
  s.absorb = [&](size_t i, const void* payload, size_t len) {
    if (len) std::memcpy(data + piece(i).first, payload, len);
  };
  return run_stream(t, seq, s);
}

Communicator::Communicator(CommOptions options) : transport_(std::make_unique<Transport>(std::move(options))) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return transport_->rank(); }
int Communicator::world() const { return transport_->world(); }
const std::vector<PeerAddress>& Communicator::peers() const { return transport_->options().peers; }

// Any error breaks the communicator (the ranks are no longer in step), so later
// collectives throw the same error.
template <typename F>
void Communicator::collective(F&& body) {
  Transport& t = *transport_;
  Transport::Hold hold(t);
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
    return ring_collective(*transport_, seq, RingPhases::Both, data, n, op, wire, {}, residual);
  });
}

void Communicator::reduce_scatter(float* data, size_t n, ReduceOp op, Wire wire) {
  require_float_wire(wire, "reduce_scatter");
  collective([&](uint64_t seq) { return ring_collective(*transport_, seq, RingPhases::ReduceScatter, data, n, op, wire); });
}

void Communicator::all_gather(float* data, size_t n, Wire wire) {
  require_float_wire(wire, "all_gather");
  collective([&](uint64_t seq) {
    return ring_collective(*transport_, seq, RingPhases::AllGather, data, n, ReduceOp::Sum, wire);
  });
}

void Communicator::reduce_scatter(float* data, std::span<const size_t> bounds, ReduceOp op, Wire wire) {
  require_float_wire(wire, "reduce_scatter");
  collective([&](uint64_t seq) {
    return ring_collective(*transport_, seq, RingPhases::ReduceScatter, data, bounds.back(), op, wire, bounds);
  });
}

void Communicator::all_gather(float* data, std::span<const size_t> bounds, Wire wire) {
  require_float_wire(wire, "all_gather");
  collective([&](uint64_t seq) {
    return ring_collective(*transport_, seq, RingPhases::AllGather, data, bounds.back(), ReduceOp::Sum, wire, bounds);
  });
}

void Communicator::broadcast(float* data, size_t n, int root, Wire wire) {
  check_root(root);
  require_float_wire(wire, "broadcast");
  collective([&](uint64_t seq) { return chain_broadcast(*transport_, seq, data, n, root, wire); });
}

void Communicator::barrier() {
  // An all-reduce of nothing: nobody leaves before every rank's messages went round.
  collective([&](uint64_t seq) {
    return ring_collective(*transport_, seq, RingPhases::Both, nullptr, 0, ReduceOp::Sum, Wire::F32);
  });
}

void Communicator::all_gather_records(const void* mine, size_t record_bytes, void* out) {
  const std::vector<size_t> sizes(static_cast<size_t>(world()), record_bytes);
  std::vector<std::string> parts;
  collective([&](uint64_t seq) {
    return ring_gather_parts(*transport_, seq, CollectiveKind::GatherBytes,
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
      const std::string why = transport_->describe(static_cast<int>(q)) + " announced a part of " +
                              std::to_string(sizes[q]) + " bytes, more than the bound of " + std::to_string(max_bytes) +
                              "; every rank must run the same ringtrain build";
      fail(why);
    }
    part_bytes[q] = static_cast<size_t>(sizes[q]);
  }
  std::vector<std::string> parts;
  collective([&](uint64_t seq) {
    return ring_gather_parts(*transport_, seq, CollectiveKind::GatherBytes, mine, part_bytes, parts);
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
  collective([&](uint64_t seq) { return chain_broadcast_bytes(*transport_, seq, record, record_bytes, root); });
}

void Communicator::fail(const std::string& why) {
  Transport::Hold hold(*transport_);
  transport_->fail(why, false);
}

void Communicator::check_root(int root) const {
  if (root < 0 || root >= world())
    throw UsageError("broadcast root " + std::to_string(root) + " is not a rank of this job");
}

void Communicator::set_service_handler(ServiceHandler handler) { transport_->set_service_handler(std::move(handler)); }
void Communicator::abort(const std::string& reason) { transport_->abort(reason); }
std::string Communicator::failure() const { return transport_->failure(); }

std::vector<double> Communicator::silence_seconds() { return transport_->silence_seconds(); }

}  // namespace rt::net
