// Subcommands around a training run: train, eval, sample, export, import.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#include "flags.hpp"
#include "train_flags.hpp"
#include "commands.hpp"
#include "ringtrain/data/shard.hpp"
#include "ringtrain/data/tokenizer.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/interop/nanochat.hpp"
#include "ringtrain/io/safetensors.hpp"
#include "ringtrain/model/layout.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/job_key.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/train/evaluate.hpp"
#include "ringtrain/train/model_io.hpp"
#include "ringtrain/train/trainer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rt::cli {

int cmd_train(int argc, char** argv) {
  train::TrainOptions o;
  if (!parse_train_flags(argc, argv, o)) return 0;
  return train::run_training(o);
}

int cmd_eval(int argc, char** argv) {
  cxxopts::Options spec(argv[0], "Validation loss and bits per byte of a checkpoint.");
  spec.add_options()("checkpoint", "a checkpoint, rank or run directory", cxxopts::value<std::string>())(
      "data", "prepared data directory (its val.bin)", cxxopts::value<std::string>())(
      "eval-tokens", "val tokens to evaluate", cxxopts::value<int64_t>()->default_value("65536"))(
      "long-docs", "a val document longer than a row: pieces or crop (nanochat's)", cxxopts::value<std::string>()->default_value("pieces"))(
      "batch", "rows per forward", cxxopts::value<int64_t>()->default_value("4"))(
      "threads", "compute threads (0: all cores)", cxxopts::value<int>()->default_value("0"))(
      "json", "print one JSON object");
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain eval --checkpoint runs/demo --data data/kdoc --json")) return 0;
  const auto ckpt = train::resolve_checkpoint(need<std::string>(r, "checkpoint", argv[0]));
  const auto data_dir = need<std::string>(r, "data", argv[0]);
  set_threads(r["threads"].as<int>());
  auto model = train::load_model_from_checkpoint(ckpt);
  const auto val_path = (fs::path(data_dir) / "val.bin").string();
  if (!fs::exists(val_path)) throw UsageError("--data " + data_dir + " has no val.bin; run 'ringtrain data prepare' first");
  auto val = std::make_shared<const data::Shard>(data::read_shard(val_path));
  const auto token_bytes = data::read_token_bytes((fs::path(data_dir) / "token_bytes.bin").string());
  if (int64_t(val->vocab_size) != model->config().vocab_size)
    throw UsageError("--data " + data_dir + " has vocab " + std::to_string(val->vocab_size) + " but the checkpoint's model has " +
                     std::to_string(model->config().vocab_size) + "; evaluate on the data it was trained on");
  const int64_t T = model->config().sequence_len, B = r["batch"].as<int64_t>();
  model->reserve(B, T);
  auto s = train::evaluate(*model, val, token_bytes, 0, 1, T, B, r["eval-tokens"].as<int64_t>(),
                           data::parse_long_docs(r["long-docs"].as<std::string>()));
  const json out = {{"val_loss", s.val_loss()}, {"val_bpb", s.bpb.bpb()}, {"tokens", s.tokens}, {"checkpoint", ckpt}};
  if (r.count("json")) std::printf("%s\n", out.dump().c_str());
  else std::printf("%s: val loss %.4f, val bpb %.4f over %.0f tokens\n", ckpt.c_str(), s.val_loss(), s.bpb.bpb(), s.tokens);
  return 0;
}

int cmd_sample(int argc, char** argv) {
  cxxopts::Options spec(argv[0], "Generate text from a checkpoint.");
  spec.add_options()("checkpoint", "a checkpoint, rank or run directory", cxxopts::value<std::string>())(
      "prompt", "text to continue", cxxopts::value<std::string>()->default_value(""))(
      "tokens", "tokens to generate", cxxopts::value<int>()->default_value("64"))(
      "temperature", "sampling temperature (0: greedy)", cxxopts::value<float>()->default_value("0.8"))(
      "top-k", "sample among the k most likely tokens (0: all)", cxxopts::value<int>()->default_value("50"))(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1"))(
      "threads", "compute threads (0: all cores)", cxxopts::value<int>()->default_value("0"));
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain sample --checkpoint runs/demo --prompt 'The kernel' --tokens 80")) return 0;
  const auto ckpt = train::resolve_checkpoint(need<std::string>(r, "checkpoint", argv[0]));
  set_threads(r["threads"].as<int>());
  const auto tok_path = (fs::path(ckpt) / "tokenizer.tiktoken").string();
  if (!fs::exists(tok_path)) throw UsageError("checkpoint " + ckpt + " has no tokenizer.tiktoken; it was imported without one");
  const auto tok = data::Tokenizer::load(tok_path);
  auto model = train::load_model_from_checkpoint(ckpt);
  const int64_t V = model->config().vocab_size, T = model->config().sequence_len;
  if (int64_t(tok.vocab_size()) != V) throw UsageError("checkpoint " + ckpt + ": tokenizer and model disagree on the vocabulary");
  std::vector<uint32_t> ids = {tok.bos_id()};
  tok.encode_append(r["prompt"].as<std::string>(), ids);
  const float temp = r["temperature"].as<float>();
  const int top_k = r["top-k"].as<int>();
  std::mt19937_64 rng(r["seed"].as<uint64_t>());
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<int32_t> ctx;
  std::string text = r["prompt"].as<std::string>();
  std::printf("%s", text.c_str());
  std::fflush(stdout);
  const size_t prompt_len = ids.size();
  model->reserve(1, T);
  for (int i = 0; i < r["tokens"].as<int>(); ++i) {
    const size_t start = ids.size() > size_t(T) ? ids.size() - size_t(T) : 0;
    ctx.assign(ids.begin() + int64_t(start), ids.end());
    model->forward_last_logits(ctx.data(), 1, int64_t(ctx.size()), logits.data());
    for (uint32_t s = tok.bos_id(); s < uint32_t(V); ++s) logits[s] = -INFINITY;  // no special tokens
    uint32_t next;
    if (temp <= 0) {
      next = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::vector<uint32_t> order(static_cast<size_t>(V));
      for (uint32_t j = 0; j < uint32_t(V); ++j) order[j] = j;
      const size_t k = top_k > 0 ? std::min<size_t>(size_t(top_k), order.size()) : order.size();
      std::partial_sort(order.begin(), order.begin() + int64_t(k), order.end(),
                        [&](uint32_t a, uint32_t b) { return logits[a] > logits[b]; });
      std::vector<double> w(k);
      for (size_t j = 0; j < k; ++j) w[j] = std::exp(double(logits[order[j]] - logits[order[0]]) / temp);
      std::discrete_distribution<size_t> pick(w.begin(), w.end());
      next = order[pick(rng)];
    }
    ids.push_back(next);
    const std::vector<uint32_t> all(ids.begin() + int64_t(prompt_len), ids.end());
    const std::string decoded = tok.decode(all);
    // Print only what is new; a multi-byte character may span tokens.
    if (decoded.size() > text.size() - r["prompt"].as<std::string>().size()) {
      const std::string fresh = decoded.substr(text.size() - r["prompt"].as<std::string>().size());
      std::printf("%s", fresh.c_str());
      std::fflush(stdout);
      text += fresh;
    }
  }
  std::printf("\n");
  return 0;
}

}  // namespace rt::cli
