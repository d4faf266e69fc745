// Communicator: the public face. Each collective takes the sockets from the background
// thread (Transport::Hold), numbers itself, and runs on the chunk pipeline. Also the small
// collectives: broadcast (a pipelined chain along the ring) and the all-gather of bytes.
#include <algorithm>
#include <cstring>

#include "bf16.hpp"
#include "pipeline.hpp"
#include "ring.hpp"
#include "zero_copy.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::net {

const char* wire_name(Wire w) { return w == Wire::Bf16 ? "bf16" : "f32"; }

Wire parse_wire(const std::string& text) {
  if (text == "f32") return Wire::F32;
  if (text == "bf16") return Wire::Bf16;
  throw UsageError("--wire '" + text + "' is not a wire format; use f32 or bf16");
}

ShardRange shard_range(size_t n, int world, int rank) {
  const size_t w = static_cast<size_t>(world), q = n / w, extra = n % w, r = static_cast<size_t>(rank);
  size_t begin = q * r + std::min(r, extra);
  return {begin, begin + q + (r < extra ? 1 : 0)};
}

void chain_broadcast(Transport& t, uint64_t seq, float* data, size_t n, int root, Wire wire) {
  const int N = t.world();
  if (N == 1) return;
  const bool bf16 = wire == Wire::Bf16;
  const size_t elem_bytes = bf16 ? 2 : 4;
  const size_t chunk_elems = std::max<size_t>(1, t.options().chunk_bytes / 4);
  const size_t C = std::max<size_t>(1, (n + chunk_elems - 1) / chunk_elems);
  const int position = (t.rank() - root + N) % N;  // 0 at the root, N-1 at the chain's end
  auto chunk = [&](size_t c) {
    size_t b = std::min(n, c * chunk_elems);
    return ShardRange{b, std::min(n, b + chunk_elems)};
  };
  if (position == 0 && bf16) round_bf16_inplace(data, n);  // the root keeps what others get

  Stream s;
  s.kind = CollectiveKind::Broadcast;
  s.count = n;
  s.wire = wire;
  s.root = root;
  s.to = (t.rank() + 1) % N;
  s.from = (t.rank() - 1 + N) % N;
  s.send_items = position == N - 1 ? 0 : C;
  s.recv_items = position == 0 ? 0 : C;
  s.lead = position == 0 ? C : 0;  // others forward each chunk once it arrived
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
  run_stream(t, seq, s);
  in_flight.wait_all();  // the caller may change data once we return
}

std::vector<std::string> ring_gather_bytes(Transport& t, uint64_t seq, std::string_view mine) {
  const int N = t.world(), r = t.rank();
  // Pieces travel as single messages; receivers (and their sockets) take no larger ones.
  if (mine.size() > kMaxGatherPieceBytes)
    throw RuntimeError("all_gather_bytes of " + std::to_string(mine.size()) + " bytes: at most " +
                       std::to_string(kMaxGatherPieceBytes) + " bytes per rank travel in one piece (internal error)");
  std::vector<std::string> pieces(N);
  pieces[r] = std::string(mine);
  if (N == 1) return pieces;
  auto mod = [N](int s) { return ((s % N) + N) % N; };
  // Step k: send the piece of rank r-k, receive the piece of rank r-1-k.
  Stream s;
  s.kind = CollectiveKind::GatherBytes;
  s.to = mod(r + 1);
  s.from = mod(r - 1);
  s.send_items = s.recv_items = static_cast<size_t>(N - 1);
  s.lead = 1;
  s.encode = [&](size_t k, zmq::message_t& out) {
    const std::string& p = pieces[mod(r - static_cast<int>(k))];
    out.rebuild(p.data(), p.size());
  };
  s.expected_bytes = [](size_t) { return SIZE_MAX; };
  s.absorb = [&](size_t k, const void* payload, size_t bytes) {
    if (bytes > kMaxGatherPieceBytes)
      t.fail("protocol error: " + t.describe(s.from) + " sent a piece of " + std::to_string(bytes) +
                 " bytes in all_gather_bytes, more than any rank may send",
             true);
    pieces[mod(r - 1 - static_cast<int>(k))].assign(static_cast<const char*>(payload), bytes);
  };
  run_stream(t, seq, s);
  return pieces;
}

Communicator::Communicator(CommOptions options) : transport_(std::make_unique<Transport>(std::move(options))) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return transport_->rank(); }
int Communicator::world() const { return transport_->world(); }
const std::vector<PeerAddress>& Communicator::peers() const { return transport_->options().peers; }

namespace {
// Runs one collective while holding the sockets; any error breaks the communicator
// (the ranks are no longer in step), so later collectives throw the same error.
template <typename F>
auto collective(Transport& t, F&& body) {
  Transport::Hold hold(t);
  t.check_healthy();
  uint64_t seq = t.begin_collective();
  try {
    return body(seq);
  } catch (const PeerLost&) {
    throw;
  } catch (const Aborted&) {
    throw;
  } catch (const RuntimeError& e) {
    if (t.failure().empty()) t.fail(e.what(), false);
    throw;
  }
}
}  // namespace

void Communicator::all_reduce(float* data, size_t n, ReduceOp op, Wire wire) {
  collective(*transport_, [&](uint64_t seq) { ring_collective(*transport_, seq, RingPhases::Both, data, n, op, wire); });
}

void Communicator::reduce_scatter(float* data, size_t n, ReduceOp op, Wire wire) {
  collective(*transport_,
             [&](uint64_t seq) { ring_collective(*transport_, seq, RingPhases::ReduceScatter, data, n, op, wire); });
}

void Communicator::all_gather(float* data, size_t n, Wire wire) {
  collective(*transport_, [&](uint64_t seq) {
    ring_collective(*transport_, seq, RingPhases::AllGather, data, n, ReduceOp::Sum, wire);
  });
}

void Communicator::broadcast(float* data, size_t n, int root, Wire wire) {
  if (root < 0 || root >= world())
    throw UsageError("broadcast root " + std::to_string(root) + " is not a rank of this job");
  collective(*transport_, [&](uint64_t seq) { chain_broadcast(*transport_, seq, data, n, root, wire); });
}

void Communicator::barrier() {
  // An all-reduce of nothing: nobody leaves before every rank's messages went round.
  collective(*transport_,
             [&](uint64_t seq) { ring_collective(*transport_, seq, RingPhases::Both, nullptr, 0, ReduceOp::Sum, Wire::F32); });
}

std::vector<std::string> Communicator::all_gather_bytes(std::string_view mine) {
  return collective(*transport_, [&](uint64_t seq) { return ring_gather_bytes(*transport_, seq, mine); });
}

void Communicator::set_service_handler(ServiceHandler handler) { transport_->set_service_handler(std::move(handler)); }
void Communicator::abort(const std::string& reason) { transport_->abort(reason); }
std::string Communicator::failure() const { return transport_->failure(); }

}  // namespace rt::net
