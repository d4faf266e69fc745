// `ringtrain train`'s flags (see train_flags.hpp).
#include "train_flags.hpp"

#include <cxxopts.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "flags.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/job_key.hpp"
#include "ringtrain/net/peers.hpp"
#include "ringtrain/optim/schedule.hpp"

namespace rt::cli {

using train::SyncMode;
using train::TrainOptions;

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

// "a,a,b,b" -> {"a", "a", "b", "b"} (an empty name stays, for the check to name it).
std::vector<std::string> split_sites(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string site; std::getline(in, site, ',');) out.push_back(site);
  if (!list.empty() && list.back() == ',') out.push_back("");
  return out;
}

// A count, or "auto" (nullopt); anything else is refused naming the flag.
std::optional<int64_t> parse_count_or_auto(const std::string& flag, const std::string& text, const std::string& what) {
  if (text == "auto") return std::nullopt;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < 0) throw UsageError(flag + " '" + text + "' is neither " + what + " nor auto");
  return v;
}

// --device-batch: a number of rows, or "auto" (then 0 until the ranks have measured).
int64_t parse_device_batch(const std::string& text, bool& is_auto) {
  const auto rows = parse_count_or_auto("--device-batch", text, "a number of rows");
  is_auto = !rows;
  return rows.value_or(0);
}

// A default value as cxxopts shows it: 30, not 30.000000.
std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

bool parse_train_flags(int argc, char** argv, TrainOptions& o) {
  cxxopts::Options spec(argv[0], "Train a nanochat GPT on one process, or on several hosts with --rank and --peers.");
  spec.custom_help("[options]");
  spec.add_options("model")
      ("depth", "model depth N (nanochat dN: n_embd 64N)", cxxopts::value<int64_t>()->default_value("8"))
      ("seq-len", "sequence length T", cxxopts::value<int64_t>()->default_value("1024"))
      ("head-dim", "attention head dim", cxxopts::value<int64_t>()->default_value("128"))
      ("n-kv-head", "key/value heads (GQA); 0 = n_head", cxxopts::value<int64_t>()->default_value("0"))
      ("window-pattern", "attention windows per layer, S short, L long", cxxopts::value<std::string>()->default_value("SSSL"))
      ("aspect-ratio", "model width per layer: n_embd = depth x this, rounded up to whole heads", cxxopts::value<int64_t>()->default_value("64"));
  spec.add_options("batch and schedule")
      ("device-batch", "rows per micro-step on this rank (may differ per rank), or auto: --total-batch split between the ranks by their measured speed",
       cxxopts::value<std::string>()->default_value("2"))
      ("total-batch", "tokens per optimizer step over all ranks; auto: nanochat's rule (2^19 at d12, growing as the horizon^0.383, a power of two); 0: one micro-step per rank",
       cxxopts::value<std::string>()->default_value("auto"))
      ("steps", "optimizer steps; sets the LR, momentum and weight-decay schedules; auto: the tokens of --target-param-data-ratio over the batch",
       cxxopts::value<std::string>()->default_value("auto"))
      ("target-param-data-ratio", "the horizon as nanochat sets it: train on this many tokens per scaling parameter (transformer matrices + lm_head); --steps wins",
       cxxopts::value<double>()->default_value("12"))
      ("stop-after", "save a checkpoint after this step and exit 0 (schedule unchanged); resume with --resume", cxxopts::value<int64_t>()->default_value("-1"))
      ("seed", "initialisation and data-order seed", cxxopts::value<uint64_t>()->default_value("42"))
      ("long-docs", "a document longer than a row: pieces (each piece packs like a document) or crop (nanochat's packing: the rest is dropped); train and val; default: as 'data prepare --long-docs' said, else pieces",
       cxxopts::value<std::string>())
      ("threads", "compute threads on this rank (0: all cores)", cxxopts::value<int>()->default_value("0"));
  const optim::TrainingHyper nanochat;
  spec.add_options("learning rates (nanochat's base_train defaults, at 2^19 tokens; scaled by sqrt(batch/2^19))")
      ("matrix-lr", "Muon's, every matrix of the blocks", cxxopts::value<double>()->default_value(number_text(nanochat.matrix_lr)))
      ("embedding-lr", "wte's (value_embeds take half), also scaled by (n_embd/768)^-0.5", cxxopts::value<double>()->default_value(number_text(nanochat.embedding_lr)))
      ("unembedding-lr", "lm_head's, also scaled by (n_embd/768)^-0.5", cxxopts::value<double>()->default_value(number_text(nanochat.unembedding_lr)))
      ("scalar-lr", "x0_lambdas' (resid_lambdas take a hundredth)", cxxopts::value<double>()->default_value(number_text(nanochat.scalar_lr)))
      ("weight-decay", "Muon's cautious weight decay at d12 (scaled by the batch and the model's size, decays to 0 over the run)",
       cxxopts::value<double>()->default_value(number_text(nanochat.weight_decay)))
      ("warmup-steps", "steps of linear LR warm-up", cxxopts::value<int64_t>()->default_value(std::to_string(nanochat.warmup_steps)))
      ("warmdown-ratio", "share of the steps at the end over which the LR decays", cxxopts::value<double>()->default_value(number_text(nanochat.warmdown_ratio)))
      ("final-lr-frac", "LR at the last step, as a share of the LR", cxxopts::value<double>()->default_value(number_text(nanochat.final_lr_frac)));
  spec.add_options("data and output")
      ("data", "directory written by 'ringtrain data prepare'", cxxopts::value<std::string>())
      ("out", "run directory: checkpoints, metrics, log", cxxopts::value<std::string>()->default_value("runs/latest"))
      ("metrics", "JSONL metrics file (default: <out>/metrics.jsonl on rank 0)", cxxopts::value<std::string>()->default_value(""))
      ("eval-every", "val bpb every K steps (and at step 0 and the end); 0: only at the end", cxxopts::value<int64_t>()->default_value("100"))
      ("eval-tokens", "val tokens per evaluation", cxxopts::value<int64_t>()->default_value("65536"))
      ("save-every", "checkpoint every K steps (0: only at the end)", cxxopts::value<int64_t>()->default_value("0"))
      ("keep-checkpoints", "each rank keeps only its newest N checkpoints, deleting older ones after each save (0: keep all)",
       cxxopts::value<int64_t>()->default_value("0"))
      ("resume", "continue from the newest valid checkpoint in --out")
      ("no-progress", "plain log lines even on a terminal");
  spec.add_options("distributed")
      ("rank", "this process's rank, 0-based", cxxopts::value<int>()->default_value("0"))
      ("peers", "every rank's HOST:PORT in rank order; rank R binds entry R's port and no other", cxxopts::value<std::string>()->default_value(""))
      ("sync", "grad (average gradients every step), avg (average parameters every --sync-every steps) or diloco", cxxopts::value<std::string>()->default_value("grad"))
      ("sync-every", "steps between parameter averages for avg and diloco", cxxopts::value<int64_t>()->default_value("1"))
      ("sync-fragments", "avg and diloco: average the model in this many fragments (whole layers, embeddings their own), one every --sync-every/F steps, so that no step sends the whole model (streaming DiLoCo)",
       cxxopts::value<int64_t>()->default_value("1"))
      ("sync-overlap", "avg and diloco: average in the background while the next step computes, then add that step's local progress (hides the network time)")
      ("overlap-steps", "with --sync-overlap: steps the background average may take before it is applied (1 to --sync-every; more hides a slower link)",
       cxxopts::value<int64_t>()->default_value("1"))
      ("outer-lr", "DiLoCo outer learning rate", cxxopts::value<float>()->default_value("0.7"))
      ("outer-momentum", "DiLoCo outer Nesterov momentum", cxxopts::value<float>()->default_value("0.9"))
      ("wire", "f32, bf16, int8 or int4 (int8/int4: avg and diloco only, blocks of 64 values with a scale, error feedback) on the wire", cxxopts::value<std::string>()->default_value("f32"))
      ("job-id", "job name checked at the handshake", cxxopts::value<std::string>()->default_value("ringtrain"))
      ("min-ranks", "a lost rank does not stop the job while at least this many ranks live (the others re-form the ring and go on; a restarted rank rejoins); below it, the ranks checkpoint and exit 1. Default: a majority (more than half) of 3 or more ranks, so the two sides of a network partition never both train on; 1 of 2 ranks",
       cxxopts::value<int>()->default_value("0"))
      ("done-linger", "a job that reaches its last step without some ranks: each finished rank tells their restarts for up to this many seconds that the job is done, so that they exit 0 instead of waiting for a ring that never runs again (0: not at all)",
       cxxopts::value<double>()->default_value("60"))
      ("max-reforms", "the watchdog: after K re-forms of the ring with no step completed in between, every rank saves its last good state and exits 1, naming the rank that keeps breaking the ring (0: never)",
       cxxopts::value<int>()->default_value("10"))
      ("connect-timeout", "seconds to wait for every rank to arrive", cxxopts::value<double>()->default_value("120"))
      ("peer-timeout", "seconds of silence after which a rank counts as lost", cxxopts::value<double>()->default_value(number_text(net::kDefaultPeerTimeoutS)))
      ("stall-timeout", "seconds without progress in one collective (a live rank that does not take part) before the job stops (0: never)",
       cxxopts::value<double>()->default_value(number_text(net::kDefaultStallTimeoutS)))
      ("key", "the job key file (ringtrain keygen), the same on every rank: only its holders can join, read or stop the job, and all traffic is encrypted",
       cxxopts::value<std::string>())
      ("sites", "every rank's site (a name), in --peers order, e.g. home,home,office,office: ranks of a site sit next to each other on the ring, which then crosses the slow link between two sites twice whatever the order of --peers",
       cxxopts::value<std::string>()->default_value(""))
      ("insecure", "allow plaintext between hosts without --key (anyone who reaches the ports can join, read or stop the job)")
      ("chunk-bytes", "ring all-reduce chunk size", cxxopts::value<int64_t>()->default_value(std::to_string(net::kDefaultChunkBytes)))
      ("streams", "TCP connections per ring link, 1 to 16, all to the listed ports: on a long, lossy path one TCP stream fills little of the link (each loss halves it), several share the losses",
       cxxopts::value<int64_t>()->default_value("1"));

  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r,
             "one process:  ringtrain train --data data/kdoc --out runs/d4 --depth 4 --seq-len 512 --steps 2000\n"
             "  two hosts:    ringtrain keygen --out job.key   (then copy job.key to the other host)\n"
             "                ringtrain train --data data/kdoc --out runs/d8 --key job.key --rank 0 --peers 10.0.0.1:29500,10.0.0.2:29500\n"
             "                ringtrain train --data data/kdoc --out runs/d8 --key job.key --rank 1 --peers 10.0.0.1:29500,10.0.0.2:29500"))
    return false;

  try {
    o.depth = r["depth"].as<int64_t>();
    o.seq_len = r["seq-len"].as<int64_t>();
    o.head_dim = r["head-dim"].as<int64_t>();
    o.n_kv_head = r["n-kv-head"].as<int64_t>();
    o.window_pattern = r["window-pattern"].as<std::string>();
    o.aspect_ratio = r["aspect-ratio"].as<int64_t>();
    o.target_param_data_ratio = r["target-param-data-ratio"].as<double>();
    o.hyper.matrix_lr = r["matrix-lr"].as<double>();
    o.hyper.embedding_lr = r["embedding-lr"].as<double>();
    o.hyper.unembedding_lr = r["unembedding-lr"].as<double>();
    o.hyper.scalar_lr = r["scalar-lr"].as<double>();
    o.hyper.weight_decay = r["weight-decay"].as<double>();
    o.hyper.warmup_steps = r["warmup-steps"].as<int64_t>();
    o.hyper.warmdown_ratio = r["warmdown-ratio"].as<double>();
    o.hyper.final_lr_frac = r["final-lr-frac"].as<double>();
    o.device_batch = parse_device_batch(r["device-batch"].as<std::string>(), o.device_batch_auto);
    // --total-batch and --steps auto: base_train's rules (TrainOptions::resolve_horizon).
    o.total_batch = parse_count_or_auto("--total-batch", r["total-batch"].as<std::string>(), "a number of tokens")
                        .value_or(TrainOptions::kAuto);
    o.steps = parse_count_or_auto("--steps", r["steps"].as<std::string>(), "a number of steps").value_or(TrainOptions::kAuto);
    o.stop_after = r["stop-after"].as<int64_t>();
    o.seed = r["seed"].as<uint64_t>();
    if (r.count("long-docs")) o.crop_long_docs = data::parse_long_docs(r["long-docs"].as<std::string>()), o.long_docs_given = true;
    o.threads = r["threads"].as<int>();
    if (r.count("data")) o.data_dir = r["data"].as<std::string>();
    o.out_dir = r["out"].as<std::string>();
    o.metrics_path = r["metrics"].as<std::string>();
    o.eval_every = r["eval-every"].as<int64_t>();
    o.eval_tokens = r["eval-tokens"].as<int64_t>();
    o.save_every = r["save-every"].as<int64_t>();
    o.keep_checkpoints = r["keep-checkpoints"].as<int64_t>();
    o.resume = r.count("resume") > 0;
    o.progress_bar = r.count("no-progress") == 0;
    o.rank = r["rank"].as<int>();
    if (const auto list = r["peers"].as<std::string>(); !list.empty()) o.peers = net::parse_peers(list);
    if (const auto list = r["sites"].as<std::string>(); !list.empty()) o.sites = split_sites(list);
    o.sync_every = r["sync-every"].as<int64_t>();
    o.sync_overlap = r.count("sync-overlap") > 0;
    o.sync_fragments = r["sync-fragments"].as<int64_t>();
    o.overlap_steps = r["overlap-steps"].as<int64_t>();
    o.outer_lr = r["outer-lr"].as<float>();
    o.outer_momentum = r["outer-momentum"].as<float>();
    o.job_id = r["job-id"].as<std::string>();
    o.min_ranks = r["min-ranks"].as<int>();
    o.max_reforms = r["max-reforms"].as<int>();
    o.done_linger_s = r["done-linger"].as<double>();
    o.connect_timeout_s = r["connect-timeout"].as<double>();
    o.peer_timeout_s = r["peer-timeout"].as<double>();
    o.stall_timeout_s = r["stall-timeout"].as<double>();
    if (r.count("key")) o.key = net::load_job_key(r["key"].as<std::string>());
    o.insecure = r.count("insecure") > 0;
    o.chunk_bytes = r["chunk-bytes"].as<int64_t>();
    o.streams = r["streams"].as<int64_t>();
    const std::string sync = r["sync"].as<std::string>();
    if (sync == "grad") o.sync = SyncMode::Grad;
    else if (sync == "avg") o.sync = SyncMode::Avg;
    else if (sync == "diloco") o.sync = SyncMode::Diloco;
    else throw UsageError("--sync " + sync + " is not a sync mode; use grad, avg or diloco");
    o.wire = net::parse_wire(r["wire"].as<std::string>());
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(std::string(e.what()) + "; run 'ringtrain train --help'");
  }

  require(!o.data_dir.empty(), "--data is required: a directory written by 'ringtrain data prepare'");
  require(o.depth >= 1, "--depth must be at least 1");
  require(o.seq_len >= 1, "--seq-len must be at least 1");
  require(o.device_batch_auto || o.device_batch >= 1, "--device-batch must be at least 1");
  require(o.aspect_ratio >= 1, "--aspect-ratio must be at least 1 (nanochat: 64)");
  require(o.steps == TrainOptions::kAuto || o.steps >= 1, "--steps must be at least 1, or auto");
  require(o.total_batch == TrainOptions::kAuto || o.total_batch >= 0,
          "--total-batch must be auto, 0 (one micro-step) or a token count");
  require(std::isfinite(o.target_param_data_ratio), "--target-param-data-ratio must be a number (0 or less: none)");
  {
    const auto& h = o.hyper;
    for (auto [flag, v] : {std::pair{"--matrix-lr", h.matrix_lr}, {"--embedding-lr", h.embedding_lr},
                           {"--unembedding-lr", h.unembedding_lr}, {"--scalar-lr", h.scalar_lr},
                           {"--weight-decay", h.weight_decay}})
      require(std::isfinite(v) && v >= 0, std::string(flag) + " must be a number, 0 or more");
    require(h.warmup_steps >= 0, "--warmup-steps must be 0 or more");
    require(std::isfinite(h.warmdown_ratio) && h.warmdown_ratio >= 0 && h.warmdown_ratio <= 1,
            "--warmdown-ratio must be from 0 to 1 (the share of the steps at the end)");
    require(std::isfinite(h.final_lr_frac) && h.final_lr_frac >= 0 && h.final_lr_frac <= 1,
            "--final-lr-frac must be from 0 to 1");
  }
  require(o.threads >= 0, "--threads must be 0 (all cores) or more");
  require(o.eval_every >= 0 && o.save_every >= 0, "--eval-every and --save-every must be 0 or more");
  require(o.keep_checkpoints >= 0, "--keep-checkpoints must be 0 (keep all) or the number of checkpoints each rank keeps");
  require(o.eval_tokens >= o.seq_len, "--eval-tokens must be at least --seq-len");
  require(o.sync_every >= 1, "--sync-every must be at least 1");
  require(!o.sync_overlap || o.sync != SyncMode::Grad,
          "--sync-overlap applies to --sync avg and --sync diloco; drop it with --sync grad");
  require(!net::block_coded(o.wire) || o.sync != SyncMode::Grad,
          "--wire " + std::string(net::wire_name(o.wire)) +
              " applies to --sync avg and --sync diloco; with --sync grad use --wire f32 or bf16");
  require(o.overlap_steps >= 1 && o.overlap_steps <= o.sync_every && (o.sync_overlap || o.overlap_steps == 1),
          "--overlap-steps goes with --sync-overlap and must be 1 to --sync-every (the average is applied before the next one starts)");
  require(o.sync_fragments >= 1 && (o.sync_fragments == 1 || o.sync != SyncMode::Grad),
          "--sync-fragments applies to --sync avg and --sync diloco and must be at least 1");
  require(o.sync_fragments <= o.sync_every,
          "--sync-fragments must be at most --sync-every (each fragment averages once every --sync-every steps, at its own step)");
  require(o.sync_fragments == 1 || o.overlap_steps <= o.sync_every / o.sync_fragments,
          "--overlap-steps must be at most --sync-every / --sync-fragments (" + std::to_string(o.sync_every / std::max<int64_t>(1, o.sync_fragments)) +
              "): a fragment's average is applied before the next fragment's starts");
  require(o.sites.empty() || o.sites.size() == o.peers.size(),
          "--sites names " + std::to_string(o.sites.size()) + " sites for " + std::to_string(o.peers.size()) +
              " entries of --peers; give one site per rank, in --peers order");
  for (const auto& site : o.sites)
    require(!site.empty() && site.size() <= 64 &&
                std::all_of(site.begin(), site.end(), [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_' || c == '.'; }),
            "--sites: '" + site.substr(0, 64) + "' is not a site name; use 1 to 64 letters, digits, '-', '_' or '.'");
  require(o.peers.size() != 1, "--peers lists every rank's HOST:PORT; with one rank, leave --peers out");
  require(o.rank >= 0 && o.rank < o.world(),
          "--rank " + std::to_string(o.rank) + " is outside --peers (" + std::to_string(o.world()) +
              " ranks, 0-based)");
  // 0: the default. With 3 or more ranks a majority, so that at most one side of a partition
  // goes on; with 2, going on alone is what a reboot of the other host needs (docs/elastic.md).
  require(o.done_linger_s >= 0 && o.done_linger_s <= 86400, "--done-linger must be 0 to 86400 seconds");
  require(o.max_reforms >= 0, "--max-reforms must be 0 (no watchdog) or the number of re-forms without a step after which the job stops");
  if (o.min_ranks == 0) o.min_ranks = o.world() >= 3 ? o.world() / 2 + 1 : 1;
  require(o.min_ranks >= 1 && o.min_ranks <= o.world(),
          "--min-ranks " + std::to_string(o.min_ranks) + " must be from 1 to the number of ranks (" +
              std::to_string(o.world()) + ")");
  require(o.connect_timeout_s > 0 && o.peer_timeout_s > 0, "timeouts must be positive");
  require(o.stall_timeout_s >= 0, "--stall-timeout must be 0 (never) or a number of seconds");
  require(o.chunk_bytes >= 4096, "--chunk-bytes must be at least 4096");
  require(o.streams >= 1 && o.streams <= net::kMaxStreams,
          "--streams must be 1 to " + std::to_string(net::kMaxStreams) + " (TCP connections per ring link)");
  return true;
}

}  // namespace rt::cli
