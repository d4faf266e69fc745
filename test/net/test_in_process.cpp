// Every collective, every wire and the hostile-chunk cases over the in-process ring
// (net/in_process_link.hpp): the ranks are threads, the links bounded queues, and the
// collectives the same code that runs over ZeroMQ. Milliseconds each; the real-socket suites
// (loopback, hostile, failures, netns) keep what only sockets do.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <array>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "block_codes.hpp"
#include "in_process_link.hpp"
#include "ring_plan.hpp"
#include "ring_values.hpp"
#include "ringtrain/net/communicator.hpp"

using namespace rt::net;

namespace {

// Runs body(comm) on `world` threads, one communicator each over one in-process ring, and
// returns each rank's exception (null when it returned).
std::vector<std::exception_ptr> run_ranks(InProcessRing& ring, int world,
                                          const std::function<void(Communicator&)>& body,
                                          std::vector<int> ranks = {}) {
  if (ranks.empty()) {
    ranks.resize(static_cast<size_t>(world));
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        Communicator comm(ring.link(r));
        body(comm);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

std::string what(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "unknown";
}

void require_all_ok(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) BOOST_REQUIRE_MESSAGE(!errors[r], "rank " << r << ": " << what(errors[r]));
}

InProcessRing::Options small_chunks(int world, size_t chunk_bytes = 1024) {
  InProcessRing::Options o;
  o.world = world;
  o.chunk_bytes = chunk_bytes;
  o.stall_timeout_s = 20;
  return o;
}

std::vector<float> inputs(int rank, size_t n, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i, salt);
  return v;
}

constexpr size_t kSizes[] = {0, 1, 7, 300, 5000};

// A ring order other than 0..N-1 (ranks of a site next to each other): 1, 3, 0, 2, ...
std::vector<int> shuffled_order(int world) {
  std::vector<int> order;
  for (int r = 1; r < world; r += 2) order.push_back(r);
  for (int r = 0; r < world; r += 2) order.push_back(r);
  return order;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(in_process)

// The ring's arithmetic alone: what rank r sends at step g is what rank r+1 receives at
// step g; the reduce-scatter ends with each rank's own segment, the all-gather brings every
// other one; chunks tile each segment.
BOOST_AUTO_TEST_CASE(ring_plan_sends_what_the_next_rank_receives) {
  for (int N = 2; N <= 6; ++N)
    for (size_t n : {size_t(1), size_t(10), size_t(1000), size_t(4097)})
      for (bool coded : {false, true}) {
        // In rank order, and with ranks 1, 3, ... first (next on the ring: the next in that order).
        const bool reordered = coded && N > 2;
        const std::vector<int> order = reordered ? shuffled_order(N) : std::vector<int>{};
        std::vector<RingPlan> plans;
        for (int r = 0; r < N; ++r) plans.emplace_back(RingOrder(order, N, r), n, RingPhases::Both, coded, 256);
        for (int r = 0; r < N; ++r) {
          const RingPlan& p = plans[size_t(r)];
          const RingPlan& next = plans[size_t(p.to())];
          BOOST_TEST(next.from() == r);
          BOOST_TEST(p.items() == size_t(2 * (N - 1)) * p.chunks_per_step());
          std::set<int> reduced, gathered;
          for (size_t i = 0; i < p.items(); ++i) {
            BOOST_TEST(p.send_segment(p.step_of(i)) == next.recv_segment(next.step_of(i)));
            (p.reducing(p.step_of(i)) ? reduced : gathered).insert(p.recv_segment(p.step_of(i)));
          }
          BOOST_TEST(p.recv_segment(N - 2) == r);  // the reduce-scatter's last step: our own segment
          BOOST_TEST(reduced.size() == size_t(N - 1));
          BOOST_TEST(!gathered.count(r));
          BOOST_TEST(gathered.size() == size_t(N - 1));
          size_t covered = 0;
          for (int s = 0; s < N; ++s) {
            size_t at = p.segment(s).begin;
            for (size_t c = 0; c < p.chunks_per_step(); ++c) {
              const ShardRange ch = p.chunk(s, c);
              if (!ch.size()) continue;
              BOOST_TEST(ch.begin == at);
              if (coded && ch.end != n) BOOST_TEST(ch.size() % kBlockValues == 0);
              at = ch.end;
            }
            BOOST_TEST(at == p.segment(s).end);
            covered += p.segment(s).size();
          }
          BOOST_TEST(covered == n);
        }
      }
  BOOST_CHECK_THROW(RingPlan(3, 0, 10, RingPhases::Both, false, 256, std::vector<size_t>{0, 5, 4, 10}), rt::RuntimeError);
}

// f32 sums of integer values are exact whatever the order, so every element is checked; in
// rank order and in another ring order (segments, pieces and roots stay named by rank).
BOOST_AUTO_TEST_CASE(every_collective_exact_on_rings_of_1_to_5) {
  for (int world = 1; world <= 5; ++world)
    for (bool reordered : {false, true})
    for (size_t n : kSizes) {
      InProcessRing::Options options = small_chunks(world);
      if (reordered) options.ring_order = shuffled_order(world);
      InProcessRing ring(options);
      std::vector<std::vector<float>> sums(static_cast<size_t>(world)), avgs(static_cast<size_t>(world)), scattered(static_cast<size_t>(world)),
          gathered(static_cast<size_t>(world)), broadcast(static_cast<size_t>(world));
      std::vector<std::vector<std::string>> parts(static_cast<size_t>(world));
      std::vector<std::array<int64_t, 2>> values(static_cast<size_t>(world));
      auto errors = run_ranks(ring, world, [&](Communicator& c) {
        const int r = c.rank();
        auto& sum = sums[size_t(r)] = inputs(r, n, 1);
        c.all_reduce(sum.data(), n);
        auto& avg = avgs[size_t(r)] = inputs(r, n, 2);
        c.all_reduce(avg.data(), n, ReduceOp::Avg);
        auto& rs = scattered[size_t(r)] = inputs(r, n, 3);
        c.reduce_scatter(rs.data(), n);
        auto& ag = gathered[size_t(r)] = std::vector<float>(n, -1000);
        const ShardRange own = shard_range(n, world, r);
        for (size_t i = own.begin; i < own.end; ++i) ag[i] = value(r, i, 4);
        c.all_gather(ag.data(), n);
        auto& bc = broadcast[size_t(r)] = inputs(r, n, 5);
        c.broadcast(bc.data(), n, world - 1);
        parts[size_t(r)] = c.all_gather_bytes(std::string(size_t(r) * 1000 + n, char('a' + r)));
        values[size_t(r)] = {r + 1, int64_t(n)};
        c.all_reduce_values(values[size_t(r)], ValueOp::Max);
        c.barrier();
      });
      require_all_ok(errors);
      for (int r = 0; r < world; ++r) {
        const ShardRange own = shard_range(n, world, r);
        for (size_t i = 0; i < n; ++i) {
          BOOST_REQUIRE_EQUAL(sums[size_t(r)][i], expected_sum(world, i, 1));
          BOOST_REQUIRE_EQUAL(avgs[size_t(r)][i], expected_sum(world, i, 2) / float(world));
          if (i >= own.begin && i < own.end) BOOST_REQUIRE_EQUAL(scattered[size_t(r)][i], expected_sum(world, i, 3));
          int owner = 0;
          while (!(i >= shard_range(n, world, owner).begin && i < shard_range(n, world, owner).end)) ++owner;
          BOOST_REQUIRE_EQUAL(gathered[size_t(r)][i], value(owner, i, 4));
          BOOST_REQUIRE_EQUAL(broadcast[size_t(r)][i], value(world - 1, i, 5));
        }
        for (int q = 0; q < world; ++q)
          BOOST_REQUIRE(parts[size_t(r)][size_t(q)] == std::string(size_t(q) * 1000 + n, char('a' + q)));
        BOOST_TEST(values[size_t(r)][0] == world);
      }
    }
}

// Segments of the caller's choosing (whole matrices for their owners), empty ones included.
BOOST_AUTO_TEST_CASE(uneven_segments) {
  const int world = 3;
  const std::vector<size_t> bounds = {0, 0, 700, 1000};
  InProcessRing ring(small_chunks(world, 256));
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  require_all_ok(run_ranks(ring, world, [&](Communicator& c) {
    auto& v = out[size_t(c.rank())] = inputs(c.rank(), 1000, 7);
    c.reduce_scatter(v.data(), bounds);
    c.all_gather(v.data(), bounds);
  }));
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < 1000; ++i) BOOST_REQUIRE_EQUAL(out[size_t(r)][i], expected_sum(world, i, 7));
}

// Lossy wires: every rank ends with the same bits, close to the sum; int8/int4 give each rank
// its rounding error back, and the result plus every rank's error is the exact sum.
BOOST_AUTO_TEST_CASE(bf16_int8_int4_same_bits_everywhere_and_errors_come_back) {
  for (Wire wire : {Wire::Bf16, Wire::Int8, Wire::Int4})
    for (int world : {2, 3, 4, -4}) {  // -4: four ranks in another ring order
      const bool reordered = world < 0;
      world = std::abs(world);
      const size_t n = 3000;
      InProcessRing::Options options = small_chunks(world, 1024);
      if (reordered) options.ring_order = shuffled_order(world);
      InProcessRing ring(options);
      std::vector<std::vector<float>> out(static_cast<size_t>(world)), residual(static_cast<size_t>(world), std::vector<float>(n));
      std::vector<std::vector<float>> data(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) {
        data[size_t(r)].resize(n);
        for (size_t i = 0; i < n; ++i) data[size_t(r)][i] = std::sin(0.37f * float(i) + float(r)) * (1 + float(i % 5));
      }
      require_all_ok(run_ranks(ring, world, [&](Communicator& c) {
        auto& v = out[size_t(c.rank())] = data[size_t(c.rank())];
        c.all_reduce(v.data(), n, ReduceOp::Sum, wire, block_coded(wire) ? residual[size_t(c.rank())].data() : nullptr);
      }));
      for (int r = 1; r < world; ++r)
        BOOST_REQUIRE(std::memcmp(out[0].data(), out[size_t(r)].data(), n * sizeof(float)) == 0);
      double worst = 0, worst_fed_back = 0;
      for (size_t i = 0; i < n; ++i) {
        double exact = 0, back = 0;
        for (int r = 0; r < world; ++r) exact += data[size_t(r)][i], back += residual[size_t(r)][i];
        worst = std::max(worst, std::fabs(out[0][i] - exact));
        worst_fed_back = std::max(worst_fed_back, std::fabs(out[0][i] + back - exact));
      }
      const double bound = wire == Wire::Bf16 ? 0.05 * world : wire == Wire::Int8 ? 0.05 * world : 0.8 * world;
      BOOST_TEST(worst < bound, wire_name(wire) << " world " << world << ": worst error " << worst);
      if (block_coded(wire)) BOOST_TEST(worst_fed_back < 1e-4, wire_name(wire) << ": " << worst_fed_back);
    }
}

// Many chunks per segment and a queue of one message: the pipeline neither deadlocks nor
// overwrites a chunk before it was sent.
BOOST_AUTO_TEST_CASE(many_chunks_with_a_queue_of_one) {
  const int world = 4;
  auto o = small_chunks(world, 64);
  o.queue_messages = 1;
  InProcessRing ring(o);
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  require_all_ok(run_ranks(ring, world, [&](Communicator& c) {
    for (int salt = 0; salt < 5; ++salt) {
      auto& v = out[size_t(c.rank())] = inputs(c.rank(), 2000, salt);
      c.all_reduce(v.data(), 2000);
      for (size_t i = 0; i < 2000; ++i)
        if (v[i] != expected_sum(world, i, salt)) throw rt::RuntimeError("element " + std::to_string(i) + " is wrong");
    }
  }));
}

// A rank that dies: every survivor's collective throws PeerLost naming it, and the
// communicator stays broken.
BOOST_AUTO_TEST_CASE(a_lost_rank_is_named_by_every_survivor) {
  const int world = 3;
  InProcessRing ring(small_chunks(world));
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ring.kill(2, "its process died");
  });
  auto errors = run_ranks(ring, world, [&](Communicator& c) {
    std::vector<float> v(1000, 1.0f);
    c.all_reduce(v.data(), v.size());  // rank 2 never calls it
    c.all_reduce(v.data(), v.size());
  }, {0, 1});
  killer.join();
  for (int r : {0, 1}) {
    BOOST_TEST(what(errors[size_t(r)]).find("lost rank 2 (in-process:2): its process died") != std::string::npos,
               what(errors[size_t(r)]));
    BOOST_CHECK_THROW(std::rethrow_exception(errors[size_t(r)]), PeerLost);
  }
}

BOOST_AUTO_TEST_CASE(abort_ends_a_waiting_collective) {
  InProcessRing ring(small_chunks(2));
  Communicator c0(ring.link(0));
  auto link1 = ring.link(1);  // rank 1 never calls the collective
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c0.abort("SIGTERM");
  });
  std::vector<float> v(100, 1.0f);
  BOOST_CHECK_THROW(c0.all_reduce(v.data(), v.size()), Aborted);
  stopper.join();
  BOOST_CHECK_THROW(c0.barrier(), Aborted);  // broken for good
  BOOST_TEST(c0.failure() == "SIGTERM");
}

// --- hostile chunks: rank 1 is a script of messages, posted before rank 0 runs ---

namespace {

struct Chunk {
  Header header;
  std::string payload;
};

// Rank 0 all-reduces n floats (world 2, one chunk per step) against rank 1's script, which
// is queued before rank 0 starts; rank 1 reads (and drops) what rank 0 sends it. With
// `dies`, rank 1 is gone once rank 0 has read the script. Returns rank 0's error (empty: it
// finished).
std::string against_script(const std::vector<Chunk>& script, size_t n = 100, Wire wire = Wire::F32,
                           std::vector<float>* result = nullptr, bool dies = true) {
  InProcessRing ring(small_chunks(2, 1 << 16));
  for (const Chunk& c : script) ring.post(1, 0, c.header, zmq::message_t(c.payload.data(), c.payload.size()));
  if (dies) ring.kill(1, "its script ended");
  std::atomic<bool> done{false};
  std::thread reader([&, link = ring.link(1)] {
    Header h;
    while (!done) {
      zmq::message_t m;
      if (!link->try_recv(0, h, m)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<float> v(n, 1.0f);
  std::string error;
  try {
    Communicator c0(ring.link(0));
    c0.all_reduce(v.data(), n, ReduceOp::Sum, wire, nullptr);
  } catch (const PeerLost& e) {
    error = std::string("PeerLost: ") + e.what();
  } catch (const std::exception& e) {
    error = std::string("error: ") + e.what();
  }
  done = true;
  reader.join();
  if (result) *result = v;
  return error;
}

// What a correct rank 1 sends as item `item` of the first all-reduce of n floats when every
// rank's values are 1.0: its own values at the reduce-scatter's step, the finished sum (2.0)
// of its segment at the all-gather's.
Chunk honest(size_t n, uint64_t item, Wire wire = Wire::F32) {
  InProcessRing ring(small_chunks(2));
  Chunk c{ring.data_header(1), ""};
  c.header.collective = static_cast<uint8_t>(CollectiveKind::AllReduce);
  c.header.wire = static_cast<uint8_t>(wire);
  c.header.seq = 1;
  c.header.item = item;
  c.header.count = n;
  const RingPlan plan(2, 1, n, RingPhases::Both, block_coded(wire), 1 << 16);
  const size_t elems = plan.sent_chunk(item).size();
  std::vector<float> vals(elems, item == 0 ? 1.0f : 2.0f);
  if (block_coded(wire)) {
    c.payload.resize(coded_bytes(wire, elems));
    encode_blocks(wire, vals.data(), elems, c.payload.data(), nullptr, nullptr);
  } else {
    c.payload.assign(reinterpret_cast<const char*>(vals.data()), elems * 4);
  }
  return c;
}

void expect(const std::string& error, const std::string& part) {
  BOOST_TEST(error.find(part) != std::string::npos, "error: '" << error << "', expected '" << part << "'");
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_honest_script_finishes_with_the_right_sum) {
  std::vector<float> out;
  BOOST_TEST(against_script({honest(100, 0), honest(100, 1)}, 100, Wire::F32, &out, false) == "");
  BOOST_REQUIRE(out.size() == 100u);
  for (float x : out) BOOST_REQUIRE_EQUAL(x, 2.0f);  // 1 + 1
}

BOOST_AUTO_TEST_CASE(hostile_chunks_are_refused_naming_the_sender) {
  {  // a chunk of another collective
    Chunk c = honest(100, 0);
    c.header.collective = static_cast<uint8_t>(CollectiveKind::Broadcast);
    expect(against_script({c}), "PeerLost: rank 1 (in-process:1) sent broadcast #1");
  }
  {  // a future sequence number
    Chunk c = honest(100, 0);
    c.header.seq = 7;
    expect(against_script({c}), "every rank must call the same collectives in the same order");
  }
  {  // another count
    Chunk c = honest(100, 0);
    c.header.count = 1u << 30;
    expect(against_script({c}), "sent all_reduce #1 of 1073741824 elements");
  }
  {  // the wrong item, and a payload of the wrong size
    Chunk c = honest(100, 1);
    c.header.item = 1;
    expect(against_script({c}), "sent chunk 1 of 200 bytes where chunk 0 was due");
    Chunk d = honest(100, 0);
    d.payload.resize(d.payload.size() + 4);
    expect(against_script({d}), "sent chunk 0 of 204 bytes where chunk 0 was due");
    Chunk e = honest(100, 0);
    e.payload.clear();
    expect(against_script({e}), "sent chunk 0 of 0 bytes where chunk 0 was due");
  }
  {  // NaN and infinity in f32, NaN in bf16
    Chunk c = honest(100, 0);
    const float nan = std::nanf("");
    std::memcpy(c.payload.data() + 8, &nan, 4);
    expect(against_script({c}), "sent chunk 0 of all_reduce #1 holding a NaN or an infinity");
    Chunk d = honest(100, 1);
    const float inf = INFINITY;
    std::memcpy(d.payload.data(), &inf, 4);
    expect(against_script({honest(100, 0), d}), "sent chunk 1 of all_reduce #1 holding a NaN or an infinity");
  }
  {  // block codes (200 values: segments of 64 and 136 on the grid): a negative scale, an
     // infinite one, a value no encoder makes (-128 in int8, -8 in int4)
    for (Wire w : {Wire::Int8, Wire::Int4}) {
      Chunk c = honest(200, 0, w);
      const float bad = -1.0f;
      std::memcpy(c.payload.data(), &bad, 4);
      expect(against_script({c}, 200, w), "scale or value out of range");
      Chunk d = honest(200, 0, w);
      const float inf = INFINITY;
      std::memcpy(d.payload.data(), &inf, 4);
      expect(against_script({d}, 200, w), "scale or value out of range");
      Chunk e = honest(200, 1, w);
      e.payload[coded_blocks(136) * 4] = w == Wire::Int8 ? char(-128) : char(0x08);
      expect(against_script({honest(200, 0, w), e}, 200, w), "scale or value out of range");
      BOOST_TEST(against_script({honest(200, 0, w), honest(200, 1, w)}, 200, w, nullptr, false) == "");
    }
  }
  {  // a sum that overflows float32: rank 0's own result, not the sender's values
    Chunk c = honest(100, 0);
    std::vector<float> big(50, 3e38f);
    c.payload.assign(reinterpret_cast<const char*>(big.data()), 200);
    InProcessRing ring(small_chunks(2, 1 << 16));
    ring.post(1, 0, c.header, zmq::message_t(c.payload.data(), c.payload.size()));
    ring.kill(1, "its script ended");
    Communicator c0(ring.link(0));
    std::vector<float> v(100, 3e38f);
    try {
      c0.all_reduce(v.data(), 100);
      BOOST_ERROR("an overflowing sum went through");
    } catch (const PeerLost& e) {
      BOOST_ERROR("the overflow was blamed on the sender: " << e.what());
    } catch (const std::exception& e) {
      expect(e.what(), "the sum overflowed float32");
    }
  }
}

// A broadcast's root whose values hold a NaN: the receiver names it, and stores nothing it
// could pass on.
BOOST_AUTO_TEST_CASE(a_broadcast_of_a_nan_is_refused) {
  InProcessRing ring(small_chunks(2, 1 << 16));
  Header h = ring.data_header(1);
  h.collective = static_cast<uint8_t>(CollectiveKind::Broadcast);
  h.root = 1;
  h.seq = 1;
  h.count = 4;
  const float bad[4] = {1, std::nanf(""), 3, 4};
  ring.post(1, 0, h, zmq::message_t(bad, sizeof bad));
  ring.kill(1, "its script ended");
  Communicator c0(ring.link(0));
  std::vector<float> v(4, 0.0f);
  try {
    c0.broadcast(v.data(), 4, 1);
    BOOST_ERROR("a NaN was broadcast");
  } catch (const PeerLost& e) {
    expect(e.what(), "rank 1 (in-process:1) sent chunk 0 of broadcast #1 holding a NaN or an infinity");
  }
  InProcessRing ring2(small_chunks(2));
  auto errors = run_ranks(ring2, 2, [&](Communicator& c) {
    std::vector<float> w(4, c.rank() == 0 ? std::nanf("") : 0.0f);
    c.broadcast(w.data(), 4, 0);
  });
  expect(what(errors[0]), "this rank's own values in chunk 0 of broadcast #1 hold a NaN or an infinity");
}

// What is not current data is skipped, never used: another job's messages, stale ones of an
// earlier collective, control messages; then the script's end is a lost peer.
BOOST_AUTO_TEST_CASE(strays_are_skipped_and_the_end_of_the_script_is_a_lost_peer) {
  Chunk other_job = honest(100, 0);
  other_job.header.job ^= 1;
  Chunk stale = honest(100, 0);
  stale.header.seq = 0;
  Chunk control = honest(100, 0);
  control.header.kind = MsgKind::Heartbeat;
  std::vector<float> out;
  BOOST_TEST(against_script({other_job, stale, control, honest(100, 0), stale, honest(100, 1)}, 100, Wire::F32, &out,
                            false) == "");
  for (float x : out) BOOST_REQUIRE_EQUAL(x, 2.0f);
  expect(against_script({other_job, stale, control, honest(100, 0)}),
         "PeerLost: lost rank 1 (in-process:1): its script ended");
}

BOOST_AUTO_TEST_SUITE_END()
