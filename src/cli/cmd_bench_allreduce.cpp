// `ringtrain bench allreduce --rank R --peers LIST [--key FILE] [--json]`: ring all-reduce bandwidth for
// sizes from 4 KB to 256 MB, reported like nccl-tests:
//   algbw = bytes / time,   busbw = algbw * 2 (N-1) / N   (MB = 10^6 bytes)
// Every run's result is checked (integer-valued inputs make the sums exact; with int8 on the
// wire, within its rounding), so a number is only printed for a correct all-reduce. Size 0
// times an all-reduce of nothing, which is the barrier. Rank 0 prints; all ranks must run
// the command.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include <cxxopts.hpp>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/train/log.hpp"

namespace rt::cli {
namespace {

size_t parse_size(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw UsageError("size '" + text + "' is not a number; write e.g. 4K, 16M, 256M");
  }
  std::string unit = text.substr(pos);
  double mult = unit.empty() || unit == "B" ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (mult < 0 || v < 0) throw UsageError("size '" + text + "' has an unknown unit; use K, M or G (powers of 1024)");
  return static_cast<size_t>(v * mult);
}

std::vector<size_t> size_list(const cxxopts::ParseResult& r) {
  std::vector<size_t> sizes;
  if (r.count("sizes")) {
    std::string list = r["sizes"].as<std::string>();
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = std::min(list.find(',', start), list.size());
      sizes.push_back(parse_size(list.substr(start, comma - start)));
      start = comma + 1;
    }
  } else {
    size_t lo = parse_size(r["min-bytes"].as<std::string>()), hi = parse_size(r["max-bytes"].as<std::string>());
    int factor = r["factor"].as<int>();
    if (factor < 2 || lo == 0 || lo > hi) throw UsageError("need 0 < --min-bytes <= --max-bytes and --factor >= 2");
    for (size_t s = lo; s <= hi; s *= factor) sizes.push_back(s);
  }
  return sizes;
}

float input_value(int rank, size_t i, int iter) {
  return static_cast<float>(static_cast<int>((i * 2654435761u + rank * 97u + iter * 13u) % 17) - 8);
}

// SIGINT/SIGTERM abort the communicator from a watcher thread: collectives throw, and the
// process exits 1 through the normal error path with sockets closed.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  }
  void watch(net::Communicator& comm) {
    thread_ = std::thread([this, &comm] {
      timespec tick{0, 100 * 1000 * 1000};
      while (!done_) {
        int sig = sigtimedwait(&set_, nullptr, &tick);
        if (sig > 0) comm.abort(std::string("interrupted by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
      }
    });
  }
  ~SignalWatcher() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

int cmd_bench_allreduce(int argc, char** argv) {
  cxxopts::Options opts(argv[0], "ring all-reduce bandwidth between ranks (nccl-tests algbw/busbw)");
  opts.add_options()
      ("rank", "this process's rank", cxxopts::value<int>())
      ("peers", "HOST:PORT of every rank, in rank order, comma-separated", cxxopts::value<std::string>())
      ("json", "one JSON object per size")
      ("sizes", "explicit sizes, e.g. 16M,64M (overrides the range)", cxxopts::value<std::string>())
      ("min-bytes", "smallest size", cxxopts::value<std::string>()->default_value("4K"))
      ("max-bytes", "largest size", cxxopts::value<std::string>()->default_value("256M"))
      ("factor", "size step", cxxopts::value<int>()->default_value("4"))
      ("iters", "timed runs per size (0: by size)", cxxopts::value<int>()->default_value("0"))
      ("warmup", "untimed runs per size", cxxopts::value<int>()->default_value("1"))
      ("wire", "f32, bf16, int8 or int4 on the wire", cxxopts::value<std::string>()->default_value("f32"))
      ("op", "sum or avg", cxxopts::value<std::string>()->default_value("sum"))
      ("streams", "TCP connections per ring link (1 to 16)", cxxopts::value<int>()->default_value("1"))
      ("chunk-bytes", "pipeline chunk", cxxopts::value<std::string>()->default_value(std::to_string(net::kDefaultChunkBytes / 1024) + "K"))
      ("job", "job id (must match on every rank)", cxxopts::value<std::string>()->default_value("bench-allreduce"))
      ("connect-timeout", "seconds to wait for every rank", cxxopts::value<double>()->default_value("120"))
      ("peer-timeout", "seconds of silence before a peer counts as lost", cxxopts::value<double>()->default_value(std::to_string(int(net::kDefaultPeerTimeoutS))))
      ("stall-timeout", "seconds without progress in one all-reduce before it fails (0: never)",
       cxxopts::value<double>()->default_value(std::to_string(static_cast<int>(net::kDefaultStallTimeoutS))))
      ("key", "the job key file (ringtrain keygen): encrypted, authenticated ranks; the same on every rank",
       cxxopts::value<std::string>())
      ("insecure", "allow plaintext between hosts without --key (anyone reaching the ports can join)");
  cxxopts::ParseResult r;
  if (!parse(opts, argc, argv, r, "ringtrain bench allreduce --rank 0 --peers 10.0.0.1:29500,10.0.0.2:29500 --key job.key --json"))
    return 0;
  if (!r.count("rank") || !r.count("peers"))
    throw UsageError("bench allreduce needs --rank R and --peers HOST:PORT,...; e.g. --rank 0 --peers 127.0.0.1:29500,127.0.0.1:29501");
  const bool json = r.count("json") > 0;
  const net::Wire wire = net::parse_wire(r["wire"].as<std::string>());
  const std::string op_name = r["op"].as<std::string>();
  if (op_name != "sum" && op_name != "avg") throw UsageError("--op must be sum or avg");
  const net::ReduceOp op = op_name == "avg" ? net::ReduceOp::Avg : net::ReduceOp::Sum;
  const std::vector<size_t> sizes = size_list(r);

  net::CommOptions o;
  o.rank = r["rank"].as<int>();
  o.peers = net::parse_peers(r["peers"].as<std::string>());
  o.job_id = r["job"].as<std::string>();
  o.chunk_bytes = parse_size(r["chunk-bytes"].as<std::string>());
  o.streams = r["streams"].as<int>();
  o.connect_timeout_s = r["connect-timeout"].as<double>();
  o.peer_timeout_s = r["peer-timeout"].as<double>();
  o.stall_timeout_s = r["stall-timeout"].as<double>();
  if (r.count("key")) o.key = net::load_job_key(r["key"].as<std::string>());
  o.insecure = r.count("insecure") > 0;
  // Settings that change what the ranks exchange must agree; the handshake checks them.
  o.config_text = "--wire=" + r["wire"].as<std::string>() + "\n--op=" + op_name + "\n--chunk-bytes=" +
                  std::to_string(o.chunk_bytes) + "\n--streams=" + std::to_string(o.streams) + "\n--sizes=" + [&] {
                    std::string s;
                    for (size_t b : sizes) s += std::to_string(b) + " ";
                    return s;
                  }() + "\n";

  SignalWatcher signals;  // before the communicator's threads start, so they inherit the mask
  net::Communicator comm(o);
  signals.watch(comm);
  const int N = comm.world(), me = comm.rank();
  // On every rank, once the ring is up and signals are handled (scripts and tests wait for it).
  train::log_set_rank(me, N);
  train::logf("ring of %d ranks is up; measuring %zu sizes", N, sizes.size());
  if (me == 0 && !json)
    std::printf("# ring all-reduce, %d ranks, %s wire, op %s, chunk %zu bytes (MB = 10^6 bytes)\n"
                "%14s %10s %12s %12s %6s\n",
                N, net::wire_name(wire), op_name.c_str(), o.chunk_bytes, "bytes", "time_ms", "algbw_MBps", "busbw_MBps", "iters");

  for (size_t bytes : sizes) {
    const size_t n = bytes / 4;
    int iters = r["iters"].as<int>();
    if (iters <= 0) iters = bytes <= (1u << 20) ? 20 : bytes <= (16u << 20) ? 10 : 5;
    const int warmup = r["warmup"].as<int>();
    std::vector<float> buf(n);
    std::vector<double> times;
    // Inputs are within [-8, 8]: each rank's rounding of a partial sum is at most half a
    // step of 8 N / L (L = 127 levels for int8, 7 for int4).
    const bool coded = net::block_coded(wire);
    const float coded_tolerance =
        static_cast<float>(N) * 0.5f * 8.0f * static_cast<float>(N) / static_cast<float>(net::block_code_levels(wire)) * 1.01f;
    for (int it = 0; it < warmup + iters; ++it) {
      for (size_t i = 0; i < n; ++i) buf[i] = input_value(me, i, it);
      comm.barrier();  // start together, so the time is the all-reduce's own
      auto t0 = std::chrono::steady_clock::now();
      comm.all_reduce(buf.data(), n, op, wire);
      auto t1 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int q = 0; q < N; ++q) want += input_value(q, i, it);
        if (op == net::ReduceOp::Avg) want /= static_cast<float>(N);
        if (coded ? std::fabs(buf[i] - want) > coded_tolerance : buf[i] != want)
          throw RuntimeError("wrong all-reduce result at " + std::to_string(bytes) + " bytes, element " + std::to_string(i) +
                             ": " + std::to_string(buf[i]) + " instead of " + std::to_string(want));
      }
      if (it >= warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];  // median
    const double algbw = static_cast<double>(n * 4) / t / 1e6;
    const double busbw = algbw * 2.0 * (N - 1) / N;
    if (me != 0) continue;
    if (json)
      std::printf("{\"bytes\":%zu,\"time_s\":%.6g,\"algbw_MBps\":%.2f,\"busbw_MBps\":%.2f,\"ranks\":%d,\"wire\":\"%s\","
                  "\"op\":\"%s\",\"iters\":%d,\"correct\":true}\n",
                  n * 4, t, algbw, busbw, N, net::wire_name(wire), op_name.c_str(), iters);
    else
      std::printf("%14zu %10.3f %12.1f %12.1f %6d\n", n * 4, t * 1e3, algbw, busbw, iters);
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

}  // namespace rt::cli
