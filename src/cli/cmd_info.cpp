// `ringtrain info`: parameter counts by group, FLOPs per token and attention windows of a
// config, computed from the layout alone (nothing is allocated).
#include <cstdio>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/model/config.hpp"
#include "ringtrain/model/layout.hpp"

namespace rt::cli {

namespace {
const char* kInfoExample = "ringtrain info --depth 8 --json\n  ringtrain info --depth 12 --seq-len 2048 --window-pattern SSSL";
}

int cmd_info(int argc, char** argv) {
  cxxopts::Options opts(argv[0], "Parameter counts, FLOPs per token and attention windows of a model config.");
  opts.add_options()
      ("depth", "model depth N (dN: n_embd 64N rounded up to whole heads, head_dim 128)", cxxopts::value<int64_t>()->default_value("8"))
      ("aspect-ratio", "n_embd = depth x this, rounded up to whole heads", cxxopts::value<int64_t>()->default_value("64"))
      ("seq-len", "sequence length T", cxxopts::value<int64_t>()->default_value("1024"))
      ("vocab", "vocabulary size V", cxxopts::value<int64_t>()->default_value("32768"))
      ("head-dim", "head dimension D (n_head = n_embd / D)", cxxopts::value<int64_t>()->default_value("128"))
      ("n-kv-head", "key/value heads (GQA), a divisor of n_head", cxxopts::value<int64_t>())
      ("window-pattern", "S/L letters tiled over layers, last layer L", cxxopts::value<std::string>()->default_value("SSSL"))
      ("json", "print one JSON object");
  cxxopts::ParseResult r;
  if (!parse(opts, argc, argv, r, kInfoExample)) return 0;
  auto cfg = model::ModelConfig::from_depth(r["depth"].as<int64_t>(), r["seq-len"].as<int64_t>(), r["vocab"].as<int64_t>(),
                                            r["aspect-ratio"].as<int64_t>(), r["head-dim"].as<int64_t>());
  if (r.count("n-kv-head")) cfg.n_kv_head = r["n-kv-head"].as<int64_t>();
  cfg.window_pattern = r["window-pattern"].as<std::string>();
  cfg.validate();

  const auto counts = model::count_params(cfg);
  const int64_t flops = model::flops_per_token(cfg);
  const auto windows = cfg.windows();
  if (r.count("json")) {
    nlohmann::ordered_json j;
    j["params_total"] = counts.total;
    nlohmann::ordered_json groups;
    for (int g = 0; g < model::kNumParamGroups; ++g)
      groups[model::group_name(model::ParamGroup(g))] = counts.by_group[g];
    j["params"] = groups;
    j["flops_per_token"] = flops;
    j["windows"] = windows;
    j["config"] = nlohmann::json::parse(cfg.to_json());
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("config   d%lld: n_layer %lld, n_embd %lld, n_head %lld, n_kv_head %lld, head_dim %lld, vocab %lld, seq_len %lld\n",
              (long long)cfg.n_layer, (long long)cfg.n_layer, (long long)cfg.n_embd, (long long)cfg.n_head,
              (long long)cfg.n_kv_head, (long long)cfg.head_dim, (long long)cfg.vocab_size,
              (long long)cfg.sequence_len);
  std::printf("%-22s %15s\n", "parameters", "count");
  for (int g = 0; g < model::kNumParamGroups; ++g)
    std::printf("  %-20s %15lld\n", model::group_name(model::ParamGroup(g)), (long long)counts.by_group[g]);
  std::printf("  %-20s %15lld\n", "total", (long long)counts.total);
  std::printf("%-22s %15lld\n", "flops per token", (long long)flops);
  std::printf("windows  ");
  for (size_t i = 0; i < windows.size(); ++i) std::printf("%s%lld", i ? " " : "", (long long)windows[i]);
  std::printf("\n");
  return 0;
}

}  // namespace rt::cli
