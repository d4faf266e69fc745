// `ringtrain bench model`: tok/s of a full forward+backward on random tokens, the oneDNN
// f32 matmul rate measured in the same run with the same threads, MFU against it, and
// peak RSS. One JSON line per measured step, then one with the medians.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/kernels/matmul.hpp"
#include "ringtrain/model/gpt.hpp"

namespace rt::cli {

namespace {

const char* kBenchExample = "ringtrain bench model --depth 8 --device-batch 2 --seq-len 1024 --threads 2 --steps 10 --warmup 3 --json";

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int cmd_bench_model(int argc, char** argv) {
  cxxopts::Options opts(argv[0], "Forward+backward throughput of the model, MFU against the oneDNN matmul rate, peak RSS.");
  opts.add_options()
      ("depth", "model depth N", cxxopts::value<int64_t>()->default_value("8"))
      ("device-batch", "rows per step", cxxopts::value<int64_t>()->default_value("2"))
      ("seq-len", "tokens per row", cxxopts::value<int64_t>()->default_value("1024"))
      ("vocab", "vocabulary size", cxxopts::value<int64_t>()->default_value("32768"))
      ("window-pattern", "S/L pattern", cxxopts::value<std::string>()->default_value("SSSL"))
      ("threads", "OpenMP threads", cxxopts::value<int>()->default_value("2"))
      ("steps", "measured steps", cxxopts::value<int>()->default_value("10"))
      ("warmup", "steps before measuring", cxxopts::value<int>()->default_value("3"))
      ("optimizer", "optimizer after each backward: none", cxxopts::value<std::string>()->default_value("none"))
      ("seed", "weights and tokens seed", cxxopts::value<uint64_t>()->default_value("0"))
      ("json", "JSON lines");
  cxxopts::ParseResult r;
  if (!parse(opts, argc, argv, r, kBenchExample)) return 0;
  const int64_t B = r["device-batch"].as<int64_t>(), T = r["seq-len"].as<int64_t>();
  const int threads = r["threads"].as<int>(), steps = r["steps"].as<int>(), warmup = r["warmup"].as<int>();
  if (B < 1 || T < 1) throw UsageError("--device-batch and --seq-len must be positive");
  if (threads < 1) throw UsageError("--threads must be positive");
  if (steps < 1 || warmup < 0) throw UsageError("--steps must be >= 1 and --warmup >= 0");
  if (r["optimizer"].as<std::string>() != "none")
    throw UsageError("--optimizer " + r["optimizer"].as<std::string>() + " is not available here; use --optimizer none");
  const bool json = r.count("json") != 0;
  omp_set_num_threads(threads);

  auto cfg = model::ModelConfig::from_depth(r["depth"].as<int64_t>(), T, r["vocab"].as<int64_t>());
  cfg.window_pattern = r["window-pattern"].as<std::string>();
  cfg.validate();
  model::GPT m(cfg);
  m.init_weights(r["seed"].as<uint64_t>());
  m.reserve(B, T);
  std::mt19937 rng(uint32_t(r["seed"].as<uint64_t>()) + 1);
  std::vector<int32_t> idx(B * T), tgt(B * T);
  for (auto& x : idx) x = int32_t(rng() % cfg.vocab_size);
  for (auto& x : tgt) x = int32_t(rng() % cfg.vocab_size);

  const double flops_tok = double(model::flops_per_token(cfg));
  // The peak: oneDNN's f32 matmul on the same threads, before and after the steps (the
  // larger one, so MFU is never flattered by a slow moment).
  double peak = kernels::measure_matmul_gflops();
  std::vector<double> times;
  float loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    m.params().zero_grad();
    const auto t0 = std::chrono::steady_clock::now();
    loss = m.forward(idx.data(), tgt.data(), B, T);
    m.backward(1.0f);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < warmup) continue;
    times.push_back(dt);
  }
  peak = std::max(peak, kernels::measure_matmul_gflops());
  const double rss = peak_rss_mb();
  auto line = [&](nlohmann::ordered_json j, double dt) {
    const double tps = double(B * T) / dt;
    j["impl"] = "ringtrain";
    j["tok_per_s"] = tps;
    j["step_s"] = dt;
    j["flops_per_token"] = int64_t(flops_tok);
    j["peak_gflops"] = peak;
    j["mfu"] = tps * flops_tok / (peak * 1e9);
    j["peak_rss_mb"] = rss;
    j["loss"] = loss;
    j["depth"] = cfg.n_layer;
    j["device_batch"] = B;
    j["seq_len"] = T;
    j["threads"] = threads;
    j["onednn"] = kernels::onednn_version();
    return j;
  };
  if (json) {
    for (size_t i = 0; i < times.size(); ++i) {
      nlohmann::ordered_json j;
      j["step"] = int(i);
      std::printf("%s\n", line(j, times[i]).dump().c_str());
    }
    nlohmann::ordered_json j;
    j["summary"] = "median";
    std::printf("%s\n", line(j, median(times)).dump().c_str());
  } else {
    const double dt = median(times);
    const double tps = double(B * T) / dt;
    std::printf("d%lld  batch %lld x %lld  threads %d  steps %d (+%d warm-up)\n", (long long)cfg.n_layer,
                (long long)B, (long long)T, threads, steps, warmup);
    std::printf("  tok/s (median)   %10.1f\n  step s           %10.3f\n  matmul GFLOP/s   %10.1f\n"
                "  MFU              %10.3f\n  peak RSS MB      %10.0f\n  loss             %10.4f\n",
                tps, dt, peak, tps * flops_tok / (peak * 1e9), rss, loss);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace rt::cli
