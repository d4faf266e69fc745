// Parameter averaging (avg, diloco, overlapped) between two communicators on 127.0.0.1, one
// per thread, against the formulas written out in full: weighted average, DiLoCo's outer
// Nesterov step from the starting point, and the overlap's "average plus local progress".
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../common/spawn.hpp"
#include "ringtrain/io/state_file.hpp"
#include "ringtrain/model/params.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/model/config.hpp"
#include "ringtrain/model/layout.hpp"
#include "sync/fragments.hpp"
#include "sync/param_sync.hpp"

using rt::train::ParamSync;

namespace {

constexpr int64_t kN = 1003;  // odd: the ring's segments differ in size
const double kWeight[2] = {0.25, 0.75};  // uneven ranks: 1 and 3 rows of the same step

// Starting parameters, identical on both ranks (same seed), and each rank's local progress.
float start_value(int64_t i) { return float(i % 17) * 0.125f - 1.0f; }
float progress(int rank, int64_t i, int round) { return float((i * (rank + 3) + round) % 11) * 0.0625f - 0.3f; }

using Finals = std::array<std::vector<float>, 2>;  // each rank's parameters at the end

// Runs body(rank, sync, params) on two ranks at once, each in a thread of its own with its
// own communicator and a ParamSync(lr, mu) that has begun; returns the final parameters.
// Failures inside a rank are thrown (Boost.Test's checks are not for other threads).
Finals on_two_ranks(int slot, float lr, float mu,
                    const std::function<void(int, ParamSync&, rt::model::ParamSet&)>& body,
                    rt::net::Wire wire = rt::net::Wire::F32,
                    const std::vector<std::pair<std::string, int64_t>>& tensors = {{"w", kN}},
                    const std::function<void(int, rt::model::ParamSet&)>& before_begin = {},
                    const std::vector<rt::train::Fragment>& fragments = {}) {
  const int port = nettest::port_base(slot);
  Finals finals;
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        rt::net::CommOptions o;
        o.rank = r;
        o.peers = rt::net::parse_peers(nettest::loopback_peers(2, port));
        o.connect_timeout_s = 30;
        rt::net::Communicator comm(o);
        rt::model::ParamSet ps;
        for (const auto& [name, size] : tensors) ps.add(name, {size});
        ps.finalize();
        for (int64_t i = 0; i < ps.size(); ++i) ps.data()[i] = start_value(i);
        if (before_begin) before_begin(r, ps);
        ParamSync sync(comm, wire, ps, kWeight[r], lr, mu, fragments);
        sync.begin(/*overlapped=*/false);  // diloco's anchor: the common starting point
        body(r, sync, ps);
        finals[size_t(r)].assign(ps.data(), ps.data() + ps.size());
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return finals;
}

void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

// Local training between syncs, as each rank would do it.
void local_steps(rt::model::ParamSet& ps, int rank, int round) {
  for (int64_t i = 0; i < kN; ++i) ps.data()[i] += progress(rank, i, round);
}

// Rank r's parameters after round `round` of local steps from `from` (all ranks' copies).
float local_value(float from, int rank, int64_t i, int round) { return from + progress(rank, i, round); }

float weighted_average(float x0, float x1) { return float(x0 * float(kWeight[0])) + float(x1 * float(kWeight[1])); }

}  // namespace

BOOST_AUTO_TEST_SUITE(param_sync)

BOOST_AUTO_TEST_CASE(avg_is_the_token_weighted_average) {
  const Finals result = on_two_ranks(0, 1.0f, 0.0f, [](int r, ParamSync& sync, rt::model::ParamSet& ps) {
    local_steps(ps, r, 0);
    sync.sync();
  });
  for (int64_t i = 0; i < kN; ++i) {
    const float expect = weighted_average(local_value(start_value(i), 0, i, 0), local_value(start_value(i), 1, i, 0));
    BOOST_TEST(result[0][size_t(i)] == expect);
    BOOST_TEST(result[1][size_t(i)] == expect);
  }
}

BOOST_AUTO_TEST_CASE(diloco_takes_the_outer_step_from_the_common_start) {
  const float lr = 0.7f, mu = 0.9f;
  const Finals result = on_two_ranks(1, lr, mu, [](int r, ParamSync& sync, rt::model::ParamSet& ps) {
    for (int round = 0; round < 2; ++round) {
      local_steps(ps, r, round);
      sync.sync();
    }
  });
  // Replicas agree (a wrong anchor, e.g. each rank's own parameters, makes them differ).
  BOOST_TEST(result[0] == result[1]);
  for (int64_t i = 0; i < kN; i += 97) {
    float anchor = start_value(i), m = 0;
    for (int round = 0; round < 2; ++round) {
      const float avg = weighted_average(local_value(anchor, 0, i, round), local_value(anchor, 1, i, round));
      const float delta = anchor - avg;
      m = mu * m + delta;
      anchor = anchor - lr * (delta + mu * m);
    }
    BOOST_TEST(result[0][size_t(i)] == anchor);
  }
}

BOOST_AUTO_TEST_CASE(overlapped_average_adds_the_progress_made_meanwhile) {
  const Finals result = on_two_ranks(2, 1.0f, 0.0f, [](int r, ParamSync& sync, rt::model::ParamSet& ps) {
    local_steps(ps, r, 0);
    sync.start();  // averages the parameters as they are now...
    require(sync.in_flight(), "start() left no average in flight");
    local_steps(ps, r, 1);  // ...while the next step computes
    sync.finish();
    require(!sync.in_flight(), "finish() left the average in flight");
  });
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < kN; ++i) {
      const float x0 = local_value(start_value(i), 0, i, 0), x1 = local_value(start_value(i), 1, i, 0);
      const float mine = r == 0 ? x0 : x1;
      const float now = local_value(mine, r, i, 1);
      BOOST_TEST(result[r][size_t(i)] == weighted_average(x0, x1) + (now - mine));
    }
}

// --wire int8 and int4: the ranks send their change since the common point, with error feedback.
// Local progress here does not depend on the parameters, so after any number of syncs the
// int8 run differs from the f32 run by exactly the rounding errors still held back (at most
// half a step of each rank's block), never by their sum over syncs; and both ranks hold the
// same bits after every sync.
BOOST_AUTO_TEST_CASE(int8_average_stays_identical_and_within_one_rounding_of_f32) {
  const int rounds = 6;
  struct Mode {
    const char* name;
    float lr, mu, tolerance;
  };
  // A rounding error e moves diloco's outer step by lr * (1 + mu) * e in the worst case.
  for (Mode m : {Mode{"avg", 1.0f, 0.0f, 0.003f}, Mode{"diloco", 0.7f, 0.9f, 0.003f * 0.7f * 1.9f * 1.5f}}) {
    auto run = [&](rt::net::Wire wire, int slot) {
      return on_two_ranks(slot, m.lr, m.mu, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
        for (int round = 0; round < rounds; ++round) {
          local_steps(ps, r, round);
          if (round % 2 == 0) {
            sync.sync();
          } else {  // the overlapped form sends the same
            sync.start();
            sync.finish();
          }
        }
      }, wire);
    };
    const Finals exact = run(rt::net::Wire::F32, 3);
    // int4's step is 127 / 7 times int8's.
    for (const auto& [wire, scale] : {std::pair{rt::net::Wire::Int8, 1.0f}, std::pair{rt::net::Wire::Int4, 127.0f / 7.0f}}) {
      const Finals packed = run(wire, 3);
      const char* w = rt::net::wire_name(wire);
      BOOST_TEST((packed[0] == packed[1]), m.name << ": " << w << " replicas differ");
      float worst = 0;
      for (int64_t i = 0; i < kN; ++i) worst = std::max(worst, std::fabs(packed[0][size_t(i)] - exact[0][size_t(i)]));
      BOOST_TEST(worst <= m.tolerance * scale, m.name << ": " << w << " is " << worst << " from f32 after " << rounds << " syncs");
      BOOST_TEST(worst > (scale > 1 ? m.tolerance : 0.0f), m.name << ": " << w << " is " << worst << " from f32; was it rounded this coarsely?");
    }
  }
}

// With int8 every tensor has blocks (scales) of its own: a few values that barely move,
// packed in the arena between two matrices whose values move a lot, still arrive within a
// rounding of their own size (sharing a block, they would round to 0 and reach the
// average only syncs later, through the error feedback).
BOOST_AUTO_TEST_CASE(int8_gives_each_tensor_its_own_scales) {
  const std::vector<std::pair<std::string, int64_t>> layout = {{"big", 1000}, {"small", 5}, {"big2", 100}};
  auto change = [](int rank, int64_t i) {
    const float sign = (i + rank) % 2 ? 1.0f : -1.0f;
    return (i >= 1000 && i < 1005 ? 1e-4f : 1.0f) * sign * float(1 + (i * (rank + 1)) % 7);
  };
  auto run = [&](rt::net::Wire wire, int slot) {
    return on_two_ranks(slot, 1.0f, 0.0f, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
      for (int64_t i = 0; i < ps.size(); ++i) ps.data()[i] += change(r, i);
      sync.sync();
    }, wire, layout);
  };
  const Finals exact = run(rt::net::Wire::F32, 3), packed = run(rt::net::Wire::Int8, 3);
  BOOST_TEST((packed[0] == packed[1]));
  for (int64_t i = 1000; i < 1005; ++i) {
    const float moved = exact[0][size_t(i)] - start_value(i), off = std::fabs(packed[0][size_t(i)] - exact[0][size_t(i)]);
    BOOST_TEST(off <= 0.02f * 7e-4f, "small[" << i - 1000 << "] moved " << moved << " but int8 is " << off << " off");
  }
}

// avg with int8 needs one common point on every rank. A fresh start has it (only checksums
// cross); a start from a checkpoint of a step between averages does not, and rank 0's point
// is sent: both ranks then hold the same bits after the first average, which is the
// weighted average of where each started, to within int8 rounding.
BOOST_AUTO_TEST_CASE(int8_avg_from_different_starting_points_takes_rank_0s_as_common) {
  auto moved = [](int r, int64_t i) { return r == 1 ? float(i % 5) * 0.1f - 0.2f : 0.0f; };
  const Finals result = on_two_ranks(0, 1.0f, 0.0f, [](int, ParamSync& sync, rt::model::ParamSet&) { sync.sync(); },
                                     rt::net::Wire::Int8, {{"w", kN}}, [&](int r, rt::model::ParamSet& ps) {
                                       for (int64_t i = 0; i < ps.size(); ++i) ps.data()[i] += moved(r, i);
                                     });
  BOOST_TEST((result[0] == result[1]), "replicas differ after the first int8 average");
  float worst = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const float expect = weighted_average(start_value(i) + moved(0, i), start_value(i) + moved(1, i));
    worst = std::max(worst, std::fabs(result[0][size_t(i)] - expect));
  }
  BOOST_TEST(worst <= 0.003f, "int8 average is " << worst << " from the f32 one");
}

// The error feedback and avg's common point are part of the checkpoint: a run that saves
// and loads them continues with the same bits as one that did not stop.
BOOST_AUTO_TEST_CASE(int8_state_travels_in_the_checkpoint) {
  std::string saved[2];
  const Finals straight = on_two_ranks(0, 1.0f, 0.0f, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
    local_steps(ps, r, 0);
    sync.sync();
    rt::io::StateWriter w;
    sync.save_state(w, "sync");
    saved[r] = w.bytes();
    local_steps(ps, r, 1);
    sync.sync();
  }, rt::net::Wire::Int8);
  for (int r = 0; r < 2; ++r) {
    const auto state = rt::io::StateReader::parse(saved[r], "test state");
    BOOST_TEST(state.has("sync.error"));
    BOOST_TEST(state.has("sync.anchor"));
  }
  // Resumed: the parameters of the first sync (identical on both ranks) plus the state.
  const std::vector<float> after_first = [&] {
    Finals f = on_two_ranks(1, 1.0f, 0.0f, [](int r, ParamSync& sync, rt::model::ParamSet& ps) {
      local_steps(ps, r, 0);
      sync.sync();
    }, rt::net::Wire::Int8);
    return f[0];
  }();
  const Finals resumed = on_two_ranks(2, 1.0f, 0.0f, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
    std::copy(after_first.begin(), after_first.end(), ps.data());
    sync.load_state(rt::io::StateReader::parse(saved[r], "test state"), "sync");
    local_steps(ps, r, 1);
    sync.sync();
  }, rt::net::Wire::Int8);
  BOOST_TEST((resumed[0] == straight[0]));
  BOOST_TEST((resumed[1] == straight[1]));
}

// With --overlap-steps equal to --sync-every, one average is applied and the next started at
// the same step, in one pass over the parameters: the same bits as finish() then start(), for
// every mode (a refill from the anchor before the outer step, or without the error feedback,
// would differ), whether the network was awaited separately first or not.
BOOST_AUTO_TEST_CASE(finish_and_start_gives_the_bits_of_finish_then_start) {
  struct Mode {
    const char* name;
    float lr, mu;
    rt::net::Wire wire;
  };
  for (Mode m : {Mode{"avg f32", 1.0f, 0.0f, rt::net::Wire::F32}, Mode{"diloco f32", 0.7f, 0.9f, rt::net::Wire::F32},
                 Mode{"avg int8", 1.0f, 0.0f, rt::net::Wire::Int8}, Mode{"diloco int4", 0.7f, 0.9f, rt::net::Wire::Int4}}) {
    auto run = [&](bool fused) {
      return on_two_ranks(3, m.lr, m.mu, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
        local_steps(ps, r, 0);
        sync.start();
        for (int round = 1; round <= 3; ++round) {
          local_steps(ps, r, round);
          if (!fused) {
            if (round == 3) {  // the same as finish(), in the two calls a checkpoint may come between
              sync.finish_network();
              sync.apply_arrived();
            } else {
              sync.finish();
            }
            require(!sync.in_flight(), "the average is still in flight after it was applied");
            sync.start();
            continue;
          }
          if (round != 2) sync.finish_network();  // as the trainer does; round 2 leaves it to the call
          require(sync.in_flight(), "the average stopped being in flight before it was applied");
          sync.finish_and_start();
          require(sync.in_flight(), "finish_and_start() started no average");
        }
        local_steps(ps, r, 4);
        sync.finish();
      }, m.wire);
    };
    const Finals separate = run(false), fused = run(true);
    for (int r = 0; r < 2; ++r) BOOST_TEST((fused[r] == separate[r]), m.name << ": rank " << r << " differs");
    BOOST_TEST((separate[0] != separate[1]), m.name << ": the ranks' local progress did not show");
  }
}

// --sync-fragments: three tensors in two fragments, [a] and [b, c], averaged in turn with
// diloco's outer step. Each average moves its own fragment by the formula, written out here
// per value, and leaves the other fragment's parameters and state alone (an average of the
// whole model, or an anchor or momentum shared across fragments, breaks the equalities).
BOOST_AUTO_TEST_CASE(a_fragment_average_moves_its_fragment_only) {
  const std::vector<std::pair<std::string, int64_t>> layout = {{"a", 300}, {"b", 5}, {"c", 698}};
  const std::vector<rt::train::Fragment> fragments = {{0, 1, 0, 300}, {1, 3, 300, 703}};
  const float lr = 0.7f, mu = 0.9f;
  const int order[] = {1, 0, 1, 1, 0};  // the fragment averaged after each round
  const Finals result = on_two_ranks(0, lr, mu, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
    require(sync.fragments() == 2, "two fragments were given");
    for (int round = 0; round < 5; ++round) {
      local_steps(ps, r, round);
      sync.sync(size_t(order[round]));
    }
    local_steps(ps, r, 5);  // the last average's fragment stays together only until now
  }, rt::net::Wire::F32, layout, {}, fragments);
  for (int64_t i = 0; i < kN; ++i) {
    const int frag = i < 300 ? 0 : 1;
    float x[2] = {start_value(i), start_value(i)}, anchor = start_value(i), m = 0;
    for (int round = 0; round < 5; ++round) {
      for (int r = 0; r < 2; ++r) x[r] = local_value(x[r], r, i, round);
      if (order[round] != frag) continue;
      const float avg = weighted_average(x[0], x[1]);
      const float delta = anchor - avg;
      m = mu * m + delta;
      anchor = anchor - lr * (delta + mu * m);
      x[0] = x[1] = anchor;
    }
    for (int r = 0; r < 2; ++r) BOOST_TEST(result[r][size_t(i)] == local_value(x[r], r, i, 5), "rank " << r << " value " << i);
  }
}

// Overlapped fragments, one in flight at a time: fragment 0's average applied as fragment
// 1's starts (finish_and_start of another fragment applies the one and snapshots the other),
// each with the local progress made while it travelled. With int8 and int4 the fragment
// just averaged holds the same bits on both ranks, and the error feedback of the other
// fragment is not touched: the result stays within a rounding of f32's.
BOOST_AUTO_TEST_CASE(overlapped_fragments_add_the_progress_made_meanwhile) {
  const std::vector<std::pair<std::string, int64_t>> layout = {{"a", 300}, {"b", 5}, {"c", 698}};
  const std::vector<rt::train::Fragment> fragments = {{0, 1, 0, 300}, {1, 3, 300, 703}};
  auto run = [&](rt::net::Wire wire, int slot) {
    return on_two_ranks(slot, 1.0f, 0.0f, [&](int r, ParamSync& sync, rt::model::ParamSet& ps) {
      local_steps(ps, r, 0);
      sync.start(0);
      local_steps(ps, r, 1);
      sync.finish_network();
      sync.finish_and_start(1);
      require(sync.in_flight(), "fragment 1's average did not start");
      local_steps(ps, r, 2);
      sync.finish();
    }, wire, layout, {}, fragments);
  };
  const Finals exact = run(rt::net::Wire::F32, 1);
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < kN; ++i) {
      float x[2] = {local_value(start_value(i), 0, i, 0), local_value(start_value(i), 1, i, 0)};
      if (i >= 300)  // fragment 1's snapshot is taken one round later
        for (int q = 0; q < 2; ++q) x[q] = local_value(x[q], q, i, 1);
      const float mine = x[r];
      float now = local_value(mine, r, i, 1);
      if (i >= 300) now = local_value(mine, r, i, 2);
      float expect = weighted_average(x[0], x[1]) + (now - mine);
      if (i < 300) expect = local_value(expect, r, i, 2);  // the round after it was applied
      BOOST_TEST(exact[r][size_t(i)] == expect, "rank " << r << " value " << i);
    }
  for (rt::net::Wire wire : {rt::net::Wire::Int8, rt::net::Wire::Int4}) {
    const Finals packed = run(wire, 2);
    float worst = 0;
    for (int64_t i = 0; i < kN; ++i) worst = std::max(worst, std::fabs(packed[0][size_t(i)] - exact[0][size_t(i)]));
    BOOST_TEST(worst <= (wire == rt::net::Wire::Int8 ? 0.003f : 0.06f), rt::net::wire_name(wire) << " is " << worst << " from f32");
    BOOST_TEST(worst > 0.0f);
  }
}

// The fragments of the real d8 (125,829,354 parameters, 15 units: the head, 8 layers, the
// scalars, 4 value embeddings, wte): contiguous, covering every tensor, whole layers, and as
// even as whole units allow; a count above the units is refused naming the flag.
BOOST_AUTO_TEST_CASE(d8_splits_into_even_fragments_of_whole_layers) {
  const rt::model::ModelConfig cfg = rt::model::ModelConfig::from_depth(8);
  rt::model::ParamSet ps;  // shapes and offsets only: nothing is allocated
  for (const auto& spec : rt::model::param_specs(cfg)) ps.add(spec.name, spec.shape);
  const int64_t total = ps.all().back().offset + ps.all().back().numel;
  BOOST_TEST(total == 125829354);
  for (int64_t count : {1, 2, 4, 8, 15}) {
    const auto f = rt::train::split_into_fragments(ps, count);
    BOOST_REQUIRE_EQUAL(int64_t(f.size()), count);
    int64_t at = 0, largest = 0;
    size_t next = 0;
    for (const auto& fr : f) {
      BOOST_TEST(fr.first == next);
      BOOST_TEST(fr.at == at);
      BOOST_TEST(fr.end > fr.first);
      at += fr.size, next = fr.end;
      largest = std::max(largest, fr.size);
      // A layer's tensors never straddle two fragments.
      const auto block = [&](size_t t) { return rt::model::classify_param(ps.all()[t].name).block; };
      if (fr.first > 0 && block(fr.first) >= 0) BOOST_TEST(block(fr.first - 1) != block(fr.first));
    }
    BOOST_TEST(next == ps.all().size());
    BOOST_TEST(at == total);
    // The largest unit is an embedding of 32768 x 512 values; no fragment exceeds what an
    // even split would give by more than one unit.
    BOOST_TEST(largest <= total / count + 32768 * 512, count << " fragments: the largest holds " << largest);
  }
  BOOST_CHECK_EXCEPTION(rt::train::split_into_fragments(ps, 16), std::exception, [](const std::exception& e) {
    return std::string(e.what()).find("--sync-fragments 16") != std::string::npos &&
           std::string(e.what()).find("use 1 to 15") != std::string::npos;
  });
  // The schedule: fragment i at steps s with s mod H = i*H/F.
  BOOST_TEST(rt::train::fragment_due(8, 8, 4) == 0);
  BOOST_TEST(rt::train::fragment_due(10, 8, 4) == 1);
  BOOST_TEST(rt::train::fragment_due(14, 8, 4) == 3);
  BOOST_TEST(rt::train::fragment_due(15, 8, 4) == -1);
  BOOST_TEST(rt::train::fragment_due(16, 8, 1) == 0);
  BOOST_TEST(rt::train::fragment_due(7, 8, 1) == -1);
  BOOST_TEST(rt::train::fragment_due(3, 8, 3) == -1);
  BOOST_TEST(rt::train::fragment_due(5, 8, 3) == 2);  // offsets 0, 2, 5
}

BOOST_AUTO_TEST_SUITE_END()
