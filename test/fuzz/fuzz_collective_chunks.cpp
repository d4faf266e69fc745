// The collectives' chunk checks (net/pipeline.cpp, ring_allreduce.cpp, chain_broadcast.cpp,
// ring_gather.cpp): rank 0 of a two-rank in-process ring runs one collective while rank 1 is
// the input, a script of data messages with any header and payload. Rank 0 must finish with
// finite values or refuse with ringtrain's error (rank 1's script ends as a lost peer);
// never crash, read out of bounds, allocate on a claim or hang.
//
// Input: byte 0 picks the collective and wire, bytes 1-2 the element count (at most 1023),
// then messages until the input ends, each: collective, wire, seq, item (one byte each),
// count (two bytes), payload length (two bytes, cut to what is left), payload.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fuzz_input.hpp"
#include "in_process_link.hpp"

using namespace rt::net;

namespace {

struct Reader {
  const uint8_t* p;
  size_t left;
  bool take(void* out, size_t n) {
    if (left < n) return false;
    std::memcpy(out, p, n);
    p += n, left -= n;
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  uint8_t pick = 0;
  uint16_t n16 = 0;
  if (!in.take(&pick, 1) || !in.take(&n16, 2)) return 0;
  const size_t n = n16 % 1024;
  InProcessRing::Options o;
  o.world = 2;
  o.chunk_bytes = 256;  // several chunks per segment
  o.stall_timeout_s = 5;
  InProcessRing ring(o);
  uint8_t head[8];
  while (in.take(head, sizeof head)) {
    Header h = ring.data_header(1);
    h.collective = head[0];
    h.wire = head[1];
    h.seq = head[2];
    h.item = head[3];
    h.count = uint64_t(head[4]) | uint64_t(head[5]) << 8;
    const size_t len = std::min<size_t>(size_t(head[6]) | size_t(head[7]) << 8, in.left);
    zmq::message_t payload(in.p, len);
    in.p += len, in.left -= len;
    ring.post(1, 0, h, std::move(payload));
  }
  ring.kill(1, "the input ended");  // sends to it are dropped; it is lost once its script is read

  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i % 7) - 3);
  std::vector<float> residual(n);
  fuzzing::refused_or_parsed([&] {
    Communicator c(ring.link(0));
    switch (pick % 10) {
      case 0: c.all_reduce(v.data(), n); break;
      case 1: c.all_reduce(v.data(), n, ReduceOp::Avg, Wire::Bf16); break;
      case 2: c.all_reduce(v.data(), n, ReduceOp::Sum, Wire::Int8, residual.data()); break;
      case 3: c.all_reduce(v.data(), n, ReduceOp::Sum, Wire::Int4, residual.data()); break;
      case 4: c.reduce_scatter(v.data(), n); break;
      case 5: c.all_gather(v.data(), n, Wire::Bf16); break;
      case 6: c.broadcast(v.data(), n, 1); break;
      case 7: (void)c.all_gather_bytes(std::string(n, 'x'), 4096); break;
      case 8: {
        int64_t values[3] = {1, 2, 3};
        c.all_reduce_values(values, ValueOp::Max);
        break;
      }
      default: {
        double record[4] = {0, 0, 0, 0};
        c.broadcast_record(record, sizeof record, 1);
        for (double x : record) (void)x;
        break;
      }
    }
    // What a collective finished with is finite: no NaN or infinity ever passes the checks.
    for (float x : v)
      if (!std::isfinite(x)) __builtin_trap();
  });
  return 0;
}
