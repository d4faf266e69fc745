// One rank of a test job: `net_rank_driver --rank R --peers LIST --scenario NAME [options]`
// (options: --key FILE, --insecure 1, --stall-timeout S, --seconds S, ...), or a service
// client: `net_rank_driver --request HOST:PORT TEXT [KEYFILE]`.
// The tests in this folder start several of these as real processes on loopback (or in
// network namespaces) and check their exit codes and messages. Exit 0 when every check of
// the scenario passed, 1 on a runtime failure or a wrong result, 2 on bad usage or a
// handshake mismatch: the same codes as `ringtrain`.
#include <atomic>
#include <chrono>
#include <fstream>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ring_values.hpp"
#include "ringtrain/net/communicator.hpp"

using namespace rt::net;

namespace {

struct Args {
  int rank = 0;
  std::string peers, scenario = "exact", job = "test-job", config = "depth=4\n", key;
  double connect_timeout = 30, peer_timeout = 10, stall_timeout = kDefaultStallTimeoutS, seconds = 5;
  bool insecure = false;
  size_t chunk_bytes = 256 << 10;
  size_t big_floats = 16u << 20;  // 64 MB
};

[[noreturn]] void wrong(const std::string& what) { throw rt::RuntimeError("wrong result: " + what); }

void fill(std::vector<float>& v, int rank, int salt) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(rank, i, salt);
}

void check_all_reduce(Communicator& c, size_t n, ReduceOp op, Wire wire, int salt) {
  std::vector<float> v(n);
  fill(v, c.rank(), salt);
  c.all_reduce(v.data(), n, op, wire);
  for (size_t i = 0; i < n; ++i) {
    float want = expected_sum(c.world(), i, salt);
    if (op == ReduceOp::Avg) want /= static_cast<float>(c.world());
    if (v[i] != want)
      wrong("all_reduce n=" + std::to_string(n) + " element " + std::to_string(i) + " is " + std::to_string(v[i]) +
            ", want " + std::to_string(want));
  }
}

void check_reduce_scatter(Communicator& c, size_t n, int salt) {
  std::vector<float> v(n);
  fill(v, c.rank(), salt);
  c.reduce_scatter(v.data(), n, ReduceOp::Sum, Wire::F32);
  ShardRange own = shard_range(n, c.world(), c.rank());
  for (size_t i = own.begin; i < own.end; ++i)
    if (v[i] != expected_sum(c.world(), i, salt)) wrong("reduce_scatter n=" + std::to_string(n) + " element " + std::to_string(i));
}

void check_all_gather(Communicator& c, size_t n, Wire wire, int salt) {
  std::vector<float> v(n, -1000.0f);
  ShardRange own = shard_range(n, c.world(), c.rank());
  for (size_t i = own.begin; i < own.end; ++i) v[i] = value(0, i, salt);
  c.all_gather(v.data(), n, wire);
  for (size_t i = 0; i < n; ++i)
    if (v[i] != value(0, i, salt)) wrong("all_gather n=" + std::to_string(n) + " element " + std::to_string(i));
}

void check_broadcast(Communicator& c, size_t n, int root, int salt) {
  std::vector<float> v(n, -1000.0f);
  if (c.rank() == root) fill(v, root, salt);
  c.broadcast(v.data(), n, root, Wire::F32);
  for (size_t i = 0; i < n; ++i)
    if (v[i] != value(root, i, salt)) wrong("broadcast n=" + std::to_string(n) + " root " + std::to_string(root));
}

void check_gather_bytes(Communicator& c, int salt) {
  std::string mine = "rank " + std::to_string(c.rank()) + " salt " + std::to_string(salt) + std::string(c.rank() * 3, 'x');
  auto all = c.all_gather_bytes(mine);
  for (int r = 0; r < c.world(); ++r)
    if (all[r] != "rank " + std::to_string(r) + " salt " + std::to_string(salt) + std::string(r * 3, 'x'))
      wrong("all_gather_bytes piece of rank " + std::to_string(r) + " is '" + all[r] + "'");
}

// Segments of the caller's choosing, deliberately uneven (one is empty): the reduce-scatter
// leaves the sum in rank r's segment, the all-gather fills every segment from its owner.
void check_segmented(Communicator& c, size_t n, int salt) {
  std::vector<size_t> bounds(static_cast<size_t>(c.world()) + 1, 0);
  for (int r = 1; r < c.world(); ++r) bounds[size_t(r)] = std::min(n, n * size_t(r * r) / size_t(c.world() * c.world()));
  bounds[1] = 0;  // rank 0 owns nothing
  bounds.back() = n;
  std::vector<float> v(n);
  fill(v, c.rank(), salt);
  c.reduce_scatter(v.data(), bounds, ReduceOp::Sum, Wire::F32);
  for (size_t i = bounds[size_t(c.rank())]; i < bounds[size_t(c.rank()) + 1]; ++i)
    if (v[i] != expected_sum(c.world(), i, salt)) wrong("segmented reduce_scatter n=" + std::to_string(n) + " element " + std::to_string(i));
  std::fill(v.begin(), v.end(), -1000.0f);
  for (size_t i = bounds[size_t(c.rank())]; i < bounds[size_t(c.rank()) + 1]; ++i) v[i] = value(0, i, salt);
  c.all_gather(v.data(), bounds, Wire::F32);
  for (size_t i = 0; i < n; ++i)
    if (v[i] != value(0, i, salt)) wrong("segmented all_gather n=" + std::to_string(n) + " element " + std::to_string(i));
}

// The small typed collectives: values reduced in rank order, records gathered and
// broadcast whole (one record larger than a chunk).
void check_small_typed(Communicator& c, int salt) {
  double d[3] = {0.5 * c.rank() + salt, -1.0 * c.rank(), 1e308};  // the last overflows to inf
  c.all_reduce_values(d, ValueOp::Sum);
  const double w = c.world();
  if (d[0] != 0.25 * w * (w - 1) + w * salt || d[1] != -0.5 * w * (w - 1) || !std::isinf(d[2]))
    wrong("all_reduce_values(double) gave " + std::to_string(d[0]) + ", " + std::to_string(d[1]));
  int64_t k[2] = {int64_t(c.rank()) * 3 - salt, -int64_t(c.rank())};
  c.all_reduce_values(k, ValueOp::Min);
  if (k[0] != -salt || k[1] != -(c.world() - 1)) wrong("all_reduce_values(int64, min)");
  c.all_reduce_values(k, ValueOp::Max);
  if (k[0] != -salt || k[1] != -(c.world() - 1)) wrong("all_reduce_values of equal values");
  struct Rec {
    int64_t rank;
    double x;
  };
  const auto recs = c.all_gather_record(Rec{c.rank(), salt * 0.5});
  for (int r = 0; r < c.world(); ++r)
    if (recs[size_t(r)].rank != r || recs[size_t(r)].x != salt * 0.5) wrong("all_gather_record of rank " + std::to_string(r));
  std::string big(size_t(c.world()) * 300000 + 3, '\0');  // several chunks of 256 KiB
  const int root = salt % c.world();
  if (c.rank() == root)
    for (size_t i = 0; i < big.size(); ++i) big[i] = char('a' + (i * 7 + salt) % 26);
  c.broadcast_record(big.data(), big.size(), root);
  for (size_t i = 0; i < big.size(); ++i)
    if (big[i] != char('a' + (i * 7 + salt) % 26)) wrong("broadcast_record byte " + std::to_string(i));
}

// Sizes 0, 1, 7, 1000, 1,000,003 and 64 MB of floats; every collective type; then many
// mixed collectives back to back.
void scenario_exact(Communicator& c, const Args& a) {
  int salt = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{1000003}, a.big_floats})
    check_all_reduce(c, n, ReduceOp::Sum, Wire::F32, ++salt);
  for (size_t n : {size_t{0}, size_t{7}, size_t{1000003}}) {
    check_all_reduce(c, n, ReduceOp::Avg, Wire::F32, ++salt);
    check_all_reduce(c, n, ReduceOp::Sum, Wire::Bf16, ++salt);  // small integers are exact in bf16
    check_reduce_scatter(c, n, ++salt);
    check_all_gather(c, n, Wire::F32, ++salt);
    check_all_gather(c, n, Wire::Bf16, ++salt);
    for (int root = 0; root < c.world(); ++root) check_broadcast(c, n, root, ++salt);
    check_segmented(c, n, ++salt);
  }
  const uint64_t before = c.bytes_sent();
  check_small_typed(c, ++salt);
  check_all_reduce(c, 1000003, ReduceOp::Sum, Wire::F32, ++salt);
  // The counter is what the ring sent: more than the all-reduce's 2(p-1)/p x 4 MB alone.
  if (c.bytes_sent() - before < 2 * (c.world() - 1) * 4000012ull / c.world()) wrong("bytes_sent() too small");
  for (int k = 0; k < 200; ++k) {  // back to back, mixed types and sizes
    size_t n = static_cast<size_t>((k * 7919) % 5000);
    switch (k % 6) {
      case 0: check_all_reduce(c, n, ReduceOp::Sum, Wire::F32, ++salt); break;
      case 1: check_reduce_scatter(c, n, ++salt); break;
      case 2: check_all_gather(c, n, Wire::F32, ++salt); break;
      case 3: check_broadcast(c, n, k % c.world(), ++salt); break;
      case 4: c.barrier(); break;
      case 5: check_gather_bytes(c, ++salt); break;
    }
  }
  std::printf("rank %d: exact ok after %d checks\n", c.rank(), salt);
}

// bf16 on the wire: every partial sum is rounded once per hop (relative error 2^-9 each),
// so |result - exact| <= (world) * 2^-8 * sum |x_r|, and every rank holds the same bits.
void scenario_bf16(Communicator& c, const Args&) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    std::vector<float> v(n);
    std::vector<double> exact(n, 0.0), magnitude(n, 0.0);
    auto x = [](int r, size_t i) { return static_cast<float>(std::sin(0.37 * i + 1.3 * r) * (1 + r)); };
    for (size_t i = 0; i < n; ++i) {
      v[i] = x(c.rank(), i);
      for (int r = 0; r < c.world(); ++r) exact[i] += x(r, i), magnitude[i] += std::fabs(x(r, i));
    }
    c.all_reduce(v.data(), n, ReduceOp::Sum, Wire::Bf16);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      double bound = c.world() * std::ldexp(1.0, -8) * magnitude[i] + 1e-30;
      worst = std::max(worst, std::fabs(v[i] - exact[i]) / bound);
      if (std::fabs(v[i] - exact[i]) > bound)
        wrong("bf16 all_reduce n=" + std::to_string(n) + " element " + std::to_string(i) + " off by " +
              std::to_string(v[i] - exact[i]) + ", bound " + std::to_string(bound));
    }
    // Identical bits on every rank.
    std::string digest(reinterpret_cast<const char*>(v.data()), std::min<size_t>(n, 4096) * 4);
    auto all = c.all_gather_bytes(digest);
    for (int r = 0; r < c.world(); ++r)
      if (all[r] != digest) wrong("bf16 all_reduce results differ between rank " + std::to_string(c.rank()) + " and rank " + std::to_string(r));
    std::printf("rank %d: bf16 n=%zu worst error %.3f of the bound\n", c.rank(), n, worst);
  }
}

// int8 and int4 on the wire: the result is the exact sum minus the ranks' residuals (each
// at most half a step of the block it was encoded in), every rank holds the same bits, and
// with the residuals fed back, 20 all-reduces add up to 20 exact sums within one step's error.
void scenario_int8(Communicator& c, const Args&) {
  const int W = c.world();
  for (const auto& [wire, levels] : {std::pair{Wire::Int8, 127.0}, std::pair{Wire::Int4, 7.0}})
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    const std::string name = wire_name(wire);
    auto x = [](int r, size_t i) { return static_cast<float>(std::sin(0.37 * i + 1.3 * r) * (1 + r)); };
    std::vector<double> exact(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (int r = 0; r < W; ++r) exact[i] += x(r, i);
    // A partial sum is at most sum_r (1 + r) in magnitude: half a step of that bounds an error.
    const double half_step = 0.5 * (W * (W + 1) / 2.0) / levels * 1.001;
    std::vector<float> v(n), residual(n, 0.0f), feedback(n, 0.0f);
    std::vector<double> applied(n, 0.0);
    const int rounds = 20;
    for (int k = 0; k < rounds; ++k) {
      for (size_t i = 0; i < n; ++i) v[i] = x(c.rank(), i) + feedback[i];
      c.all_reduce(v.data(), n, ReduceOp::Sum, wire, residual.data());
      for (size_t i = 0; i < n; ++i) {
        if (k == 0 && std::fabs(residual[i]) > half_step)
          wrong(name + " residual n=" + std::to_string(n) + " element " + std::to_string(i) + " is " + std::to_string(residual[i]));
        applied[i] += v[i];
      }
      feedback = residual;
      if (k == 0) {  // identical bits everywhere, and result + all residuals = exact sum
        std::string digest(reinterpret_cast<const char*>(v.data()), std::min<size_t>(n, 4096) * 4);
        auto all = c.all_gather_bytes(digest);
        for (int r = 0; r < W; ++r)
          if (all[r] != digest) wrong(name + " all_reduce results differ between rank " + std::to_string(c.rank()) + " and " + std::to_string(r));
        std::vector<float> lost = residual;
        c.all_reduce(lost.data(), n, ReduceOp::Sum, Wire::F32);
        for (size_t i = 0; i < n; ++i)
          if (std::fabs(v[i] + lost[i] - exact[i]) > 1e-5 * (1 + std::fabs(exact[i])))
            wrong(name + " all_reduce n=" + std::to_string(n) + " element " + std::to_string(i) + ": result " + std::to_string(v[i]) +
                  " + residuals " + std::to_string(lost[i]) + " != exact " + std::to_string(exact[i]));
      }
    }
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(applied[i] - rounds * exact[i]));
    if (worst > 1.05 * W * half_step + 1e-5 * rounds * W * W)
      wrong(name + " with error feedback drifted by " + std::to_string(worst) + " over " + std::to_string(rounds) + " all-reduces");
    std::printf("rank %d: %s n=%zu drift after %d rounds %.2e (one step %.2e)\n", c.rank(), name.c_str(), n, rounds, worst, 2 * half_step);
  }
}

// Large all-reduces in a loop, until a peer is lost (the SIGKILL test).
void scenario_loop(Communicator& c, const Args& a) {
  std::vector<float> v(a.big_floats, 1.0f);
  for (int k = 0; k < 100000; ++k) {
    c.all_reduce(v.data(), v.size(), ReduceOp::Avg, Wire::F32);
    if (k == 0) std::printf("rank %d: looping\n", c.rank()), std::fflush(stdout);
  }
}

// Answers service requests until one says "quit".
void scenario_serve(Communicator& c, const Args&) {
  std::atomic<bool> quit{false};
  int r = c.rank();
  c.set_service_handler([&quit, r](const std::string& text) {
    if (text == "quit" || text == "stop") quit = true;
    return "rank " + std::to_string(r) + " got '" + text + "'";
  });
  c.barrier();
  std::printf("rank %d: serving\n", r), std::fflush(stdout);
  for (int k = 0; k < 1200 && !quit; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (!quit) wrong("no quit request came");
  c.barrier();
}

// Exact all-reduces back to back for about --seconds (rank 0's clock decides for all, so
// every rank runs the same collectives): the job under attack must go on.
void scenario_soak(Communicator& c, const Args& a) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.seconds);
  int k = 0;
  while (true) {
    float go = k < 3 || std::chrono::steady_clock::now() < end ? 1.0f : 0.0f;
    c.broadcast(&go, 1, 0, Wire::F32);
    if (go == 0) break;
    check_all_reduce(c, a.big_floats, ReduceOp::Sum, Wire::F32, ++k);
    if (k == 1) std::printf("rank %d: soaking\n", c.rank()), std::fflush(stdout);
  }
  std::printf("rank %d: soak ok after %d all-reduces\n", c.rank(), k);
}

// One all-reduce of --big-floats with salt 1: the victim of a hostile peer (hostile_peer.cpp
// plays rank 1 and knows these values).
void scenario_single(Communicator& c, const Args& a) {
  check_all_reduce(c, a.big_floats, ReduceOp::Sum, Wire::F32, 1);
  std::printf("rank %d: single ok\n", c.rank());
}

// Rank 0's own values hold a NaN (a diverged rank): it must stop before sending any of
// them, saying so; the others hear that it left.
void scenario_own_nan(Communicator& c, const Args& a) {
  std::vector<float> v(a.big_floats, 1.0f);
  if (c.rank() == 0) v[v.size() * 3 / 4] = std::nanf("");  // in the segment it sends first
  c.all_reduce(v.data(), v.size(), ReduceOp::Sum, Wire::F32);
  wrong("an all-reduce of a NaN returned");
}

// One int8 all-reduce of --big-floats: the victim of hostile_peer's int8 attacks, which
// must stop it before any result exists.
void scenario_single_int8(Communicator& c, const Args& a) {
  std::vector<float> v(a.big_floats, 1.0f);
  c.all_reduce(v.data(), v.size(), ReduceOp::Sum, Wire::Int8);
  wrong("the int8 all-reduce accepted what the hostile peer sent");
}

// Rank 0 runs an all-reduce; the others stay alive (heartbeats go on) and never join it.
void scenario_stall(Communicator& c, const Args& a) {
  if (c.rank() == 0) {
    check_all_reduce(c, 1000, ReduceOp::Sum, Wire::F32, 1);
    wrong("the all-reduce returned although rank 1 never took part");
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
}

// Peak resident memory of this process, in MB (VmHWM), for the bounded-memory checks.
long peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6)) / 1024;
  return -1;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank") a.rank = std::stoi(v);
    else if (k == "--peers") a.peers = v;
    else if (k == "--scenario") a.scenario = v;
    else if (k == "--job") a.job = v;
    else if (k == "--config") a.config = v;
    else if (k == "--connect-timeout") a.connect_timeout = std::stod(v);
    else if (k == "--peer-timeout") a.peer_timeout = std::stod(v);
    else if (k == "--chunk-bytes") a.chunk_bytes = std::stoul(v);
    else if (k == "--big-floats") a.big_floats = std::stoul(v);
    else if (k == "--key") a.key = v;
    else if (k == "--insecure") a.insecure = v == "1";
    else if (k == "--stall-timeout") a.stall_timeout = std::stod(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else throw rt::UsageError("unknown option " + k);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if ((argc == 4 || argc == 5) && std::string(argv[1]) == "--request") {  // client mode: one service request
      std::optional<JobKey> key;
      if (argc == 5) key = load_job_key(argv[4]);
      std::printf("%s\n", request(argv[2], argv[3], 5, key).c_str());
      return 0;
    }
    Args a = parse(argc, argv);
    CommOptions o;
    o.rank = a.rank;
    o.peers = parse_peers(a.peers);
    o.job_id = a.job;
    o.config_text = a.config;
    o.connect_timeout_s = a.connect_timeout;
    o.peer_timeout_s = a.peer_timeout;
    o.chunk_bytes = a.chunk_bytes;
    o.stall_timeout_s = a.stall_timeout;
    if (!a.key.empty()) o.key = load_job_key(a.key);
    o.insecure = a.insecure;
    // Readiness lines for the tests: this rank now waits for the others, then the ring is up.
    std::printf("rank %d: waiting for %zu ranks\n", a.rank, o.peers.size()), std::fflush(stdout);
    Communicator c(o);
    std::printf("rank %d: joined the ring of %d ranks\n", c.rank(), c.world()), std::fflush(stdout);
    if (a.scenario == "exact") scenario_exact(c, a);
    else if (a.scenario == "bf16") scenario_bf16(c, a);
    else if (a.scenario == "int8") scenario_int8(c, a);
    else if (a.scenario == "loop") scenario_loop(c, a);
    else if (a.scenario == "serve") scenario_serve(c, a);
    else if (a.scenario == "exact_then_serve") scenario_exact(c, a), scenario_serve(c, a);
    else if (a.scenario == "hello") c.barrier();
    else if (a.scenario == "soak") scenario_soak(c, a);
    else if (a.scenario == "single") scenario_single(c, a);
    else if (a.scenario == "single_int8") scenario_single_int8(c, a);
    else if (a.scenario == "own_nan") scenario_own_nan(c, a);
    else if (a.scenario == "stall") scenario_stall(c, a);
    else throw rt::UsageError("unknown scenario " + a.scenario);
    std::printf("rank %d: peak RSS %ld MB\n", a.rank, peak_rss_mb());
    return 0;
  } catch (const rt::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::printf("peak RSS %ld MB\n", peak_rss_mb());
    return 1;
  }
}
