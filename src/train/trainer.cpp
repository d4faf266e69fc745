// The training loop. See trainer.hpp for the shape of a step.
#include "ringtrain/train/trainer.hpp"

#include <omp.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/shard.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/kernels/matmul.hpp"
#include "ringtrain/model/gpt.hpp"
#include "ringtrain/model/layout.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/evaluate.hpp"
#include "ringtrain/train/grad_sync.hpp"
#include "ringtrain/train/log.hpp"
#include "ringtrain/train/metrics.hpp"
#include "ringtrain/train/model_io.hpp"
#include "ringtrain/train/param_sync.hpp"
#include "ringtrain/train/peer_values.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rt::train {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// SIGINT/SIGTERM: the first asks for a clean stop (checkpoint at the end of this step),
// a second one aborts at once.
std::atomic<int> g_signals{0};
extern "C" void on_signal(int) { g_signals.fetch_add(1); }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal must not make library calls fail with EINTR
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

struct DataSet {
  std::shared_ptr<const data::Shard> train, val;
  std::vector<int32_t> token_bytes;
  uint32_t vocab = 0;
};

DataSet load_dataset(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw UsageError("--data " + dir + " is not a directory; create it with 'ringtrain data prepare --input TEXT... --out " +
                     dir + "'");
  for (const char* f : {"train.bin", "val.bin", "token_bytes.bin"})
    if (!fs::exists(fs::path(dir) / f))
      throw UsageError("--data " + dir + " has no " + f + "; it is not (or not completely) prepared: run 'ringtrain data prepare --input TEXT... --out " +
                       dir + "'");
  DataSet d;
  d.train = std::make_shared<const data::Shard>(data::read_shard((fs::path(dir) / "train.bin").string()));
  d.val = std::make_shared<const data::Shard>(data::read_shard((fs::path(dir) / "val.bin").string()));
  d.token_bytes = data::read_token_bytes((fs::path(dir) / "token_bytes.bin").string());
  d.vocab = d.train->vocab_size;
  if (d.val->vocab_size != d.vocab || d.token_bytes.size() != d.vocab)
    throw UsageError("--data " + dir + ": train.bin, val.bin and token_bytes.bin disagree on the vocabulary; prepare it again");
  if (d.train->num_docs() == 0) throw UsageError("--data " + dir + ": train.bin has no documents");
  if (d.val->num_docs() == 0) throw UsageError("--data " + dir + ": val.bin has no documents; prepare with a larger --val-fraction");
  return d;
}

// What every rank reports at the end of a step (gathered, so all ranks see every rank's).
struct RankStep {
  double loss_weighted = 0;  // this rank's share of the global mean loss
  double step_s = 0, comm_s = 0;
  double tokens = 0;
  double end_s = 0;       // when the step ended, seconds since this rank's run began
  double bytes_sent = 0;  // by this rank in this step
  int32_t stop = 0;
  int32_t pad = 0;
};

class Trainer {
 public:
  explicit Trainer(const TrainOptions& o) : o_(o) {}
  int run();

 private:
  void setup_distributed();
  void resume_or_init();
  void save_checkpoint(const char* why);
  void evaluate_and_log();
  void check_replicas();
  void check_memory();
  void assign_muon_shards();
  double step_sharded_optimizer(int64_t it);
  // The bytes this rank sent in the step that just ended (from the algorithms' formulas).
  double bytes_sent_this_step(uint64_t grad_elements_before) const;
  // Exchanges the pending step reports of every rank, writes their metrics records (rank 0),
  // the status (ETA to last_step) and the progress line. Returns true if any rank asked to stop.
  bool report_steps(Progress& progress, int64_t last_step);

  TrainOptions o_;
  DataSet data_;
  model::ModelConfig cfg_;
  std::unique_ptr<model::GPT> model_;
  std::unique_ptr<optim::MuonAdamW> opt_;
  std::unique_ptr<data::PackingLoader> loader_;
  std::unique_ptr<net::Communicator> comm_;
  std::unique_ptr<GradSync> grad_sync_;
  std::unique_ptr<ParamSync> param_sync_;
  MetricsWriter metrics_;

  std::vector<int64_t> rank_batch_;  // device batch of every rank
  int64_t accum_ = 1;                // micro-steps per step
  int64_t global_tokens_ = 0;        // tokens per optimizer step, all ranks
  int64_t step_ = 0;                 // steps done
  double tokens_seen_ = 0;
  double run_start_s_ = 0;
  std::vector<RankStep> pending_steps_;  // this rank's reports not yet exchanged
  double last_val_bpb_ = -1;
  int64_t last_eval_step_ = -1;
  double peak_gflops_ = 0;
  int64_t flops_per_token_ = 0;
  std::vector<std::vector<int>> muon_owned_;  // --sync grad: Muon matrices each rank orthogonalises
  std::vector<float> bcast_buf_;
  data::LoaderState step_start_loader_;  // loader position after step_ steps

  // For `ringtrain status`, read on the communicator's thread.
  std::mutex status_mu_;
  json status_ = json::object();
  std::atomic<bool> stop_requested_{false};
};

void Trainer::setup_distributed() {
  rank_batch_.assign(size_t(o_.world()), o_.device_batch);
  if (!o_.distributed()) return;
  net::CommOptions co;
  co.rank = o_.rank;
  co.peers = o_.peers;
  co.job_id = o_.job_id;
  co.config_text = o_.shared_config_text() + "data.train_docs=" + std::to_string(data_.train->num_docs()) +
                   "\ndata.vocab=" + std::to_string(data_.vocab) + "\n";
  co.connect_timeout_s = o_.connect_timeout_s;
  co.peer_timeout_s = o_.peer_timeout_s;
  co.stall_timeout_s = o_.stall_timeout_s;
  co.chunk_bytes = size_t(o_.chunk_bytes);
  co.key = o_.key;
  co.insecure = o_.insecure;
  co.log = [](const std::string& line) { logf("%s", line.c_str()); };
  co.service_handler = [this](const std::string& req) -> std::string {
    if (req == "stop") {
      stop_requested_ = true;
      logf("stop requested by 'ringtrain stop'; all ranks will checkpoint and exit");
      return "ok: the job will checkpoint and exit at the end of the current step";
    }
    if (req == "status") {
      std::lock_guard<std::mutex> lock(status_mu_);
      return status_.dump();
    }
    return "error: unknown request '" + req + "'; use status or stop";
  };
  logf("waiting for %d ranks (connect timeout %.0f s)", o_.world(), o_.connect_timeout_s);
  comm_ = std::make_unique<net::Communicator>(std::move(co));
  const auto batches = comm_->all_gather_bytes(std::to_string(o_.device_batch));
  for (size_t r = 0; r < batches.size(); ++r)
    rank_batch_[r] = peer_int(*comm_, int(r), batches[r], "a device batch", 1, int64_t(1) << 30);
  logf("ring of %d ranks is up", o_.world());
}

void Trainer::resume_or_init() {
  model_->init_weights(o_.seed);
  if (!o_.resume) return;
  std::optional<std::string> dir = newest_valid_checkpoint(o_.out_dir, o_.rank);
  int64_t step = dir ? std::stoll(fs::path(*dir).filename().string().substr(5)) : -1;
  if (comm_) {
    // Every rank must resume from the same step: the newest one all of them have.
    const auto all = comm_->all_gather_bytes(std::to_string(step));
    int64_t common = step;
    for (size_t r = 0; r < all.size(); ++r)
      common = std::min(common, peer_int(*comm_, int(r), all[r], "a checkpoint step", -1, INT64_MAX));
    if (common != step) {
      const fs::path want = fs::path(rank_dir(o_.out_dir, o_.rank)) / step_dir_name(common);
      if (common >= 0 && fs::exists(want)) {
        verify_checkpoint(want.string());
        dir = want.string();
        step = common;
      } else {
        step = -1;
      }
    }
    const auto agreed = comm_->all_gather_bytes(std::to_string(step));
    for (size_t r = 0; r < agreed.size(); ++r)
      if (peer_int(*comm_, int(r), agreed[r], "a checkpoint step", -1, INT64_MAX) != step || step < 0)
        throw UsageError("--resume: the ranks have no checkpoint step in common (this rank: " +
                         (step < 0 ? std::string("none") : std::to_string(step)) +
                         "); copy the checkpoint directories or start without --resume");
  }
  if (!dir) throw UsageError("--resume: no valid checkpoint in " + rank_dir(o_.out_dir, o_.rank) + "; start without --resume");
  const json meta = verify_checkpoint(*dir);
  const auto saved_cfg = model::ModelConfig::from_json(meta.at("model_config").dump());
  if (saved_cfg.to_json() != cfg_.to_json())
    throw UsageError("--resume: checkpoint " + *dir + " is of another model (" + saved_cfg.to_json() +
                     " vs " + cfg_.to_json() + "); use the flags of that run or another --out");
  if (meta.value("world", 1) != o_.world() || meta.value("sync", std::string()) != sync_mode_name(o_.sync))
    throw UsageError("--resume: checkpoint " + *dir + " was written by a run with " +
                     std::to_string(meta.value("world", 1)) + " ranks and --sync " + meta.value("sync", std::string("?")) +
                     "; resume with the same ranks and --sync");
  load_weights((fs::path(*dir) / "model.safetensors").string(), *model_);
  // An imported checkpoint has weights only: the optimizer and the loader start fresh.
  const auto sections = fs::exists(*dir + "/state.bin")
                            ? unpack_sections(io::read_file(*dir + "/state.bin"), *dir + "/state.bin")
                            : std::vector<std::pair<std::string, std::string>>{};
  for (const auto& [name, bytes] : sections) {
    if (name == "optimizer") opt_->load_state(std::span<const char>(bytes.data(), bytes.size()));
    else if (name == "loader") loader_->restore(data::LoaderState::from_bytes(bytes));
    else if (name == "param_sync" && param_sync_) param_sync_->load_state(bytes);
  }
  step_ = meta.at("step").get<int64_t>();
  tokens_seen_ = meta.value("tokens_seen", 0.0);
  last_val_bpb_ = meta.value("val_bpb", -1.0);
  last_eval_step_ = step_;
  logf("resumed from %s (step %lld)", dir->c_str(), (long long)step_);
}

void Trainer::save_checkpoint(const char* why) {
  require_finite(model_->params(), step_);  // never a valid-looking checkpoint of NaN/Inf
  const double t0 = now_s();
  CheckpointWriter w(o_.out_dir, o_.rank, step_);
  save_weights(w.path("model.safetensors"), *model_);
  w.add_written_file("model.safetensors");
  const auto opt_state = opt_->save_state();
  std::vector<std::pair<std::string, std::string>> sections = {
      {"optimizer", std::string(opt_state.begin(), opt_state.end())},
      {"loader", step_start_loader_.to_bytes()}};
  if (param_sync_) sections.emplace_back("param_sync", param_sync_->save_state());
  const std::string state = pack_sections(sections);
  // The tokenizer travels with the weights, so that sample/eval need only the checkpoint.
  const std::string tok = io::read_file((fs::path(o_.data_dir) / "tokenizer.tiktoken").string());
  w.write_file("tokenizer.tiktoken", {{tok.data(), tok.size()}});
  w.write_file("state.bin", {{state.data(), state.size()}});
  json meta = {{"step", step_},
               {"model_config", json::parse(cfg_.to_json())},
               {"rank", o_.rank},
               {"world", o_.world()},
               {"sync", sync_mode_name(o_.sync)},
               {"tokens_seen", tokens_seen_},
               {"val_bpb", last_val_bpb_},
               {"steps", o_.steps},
               {"data", o_.data_dir},
               {"reason", why}};
  const std::string dir = w.commit(meta);
  logf("checkpoint %s (%s, %.1f s)", dir.c_str(), why, now_s() - t0);
}

double Trainer::bytes_sent_this_step(uint64_t grad_elements_before) const {
  if (!comm_) return 0;
  // An all-reduce of n values sends 2(p-1)/p * n values per rank; a broadcast forwards n.
  const double p = o_.world(), wire = o_.wire_bf16 ? 2.0 : 4.0;
  if (grad_sync_) {
    const auto& all = model_->params().all();
    const double reduced = double(grad_sync_->elements_synced() - grad_elements_before);
    double bcast = 0;
    for (int r = 0; r < o_.world(); ++r)
      for (int i : muon_owned_[size_t(r)]) bcast += double(all[size_t(opt_->muon_matrices()[size_t(i)].param)].numel);
    return 2.0 * (p - 1) / p * reduced * wire + bcast * 4.0 * (p - 1) / p;  // matrices go as f32
  }
  if (param_sync_ && step_ % o_.sync_every == 0) return 2.0 * (p - 1) / p * double(model_->params().size()) * wire;
  return 0;
}

bool Trainer::report_steps(Progress& progress, int64_t last_step) {
  const size_t n = pending_steps_.size();
  std::vector<std::vector<RankStep>> ranks(size_t(o_.world()));  // [rank][pending step]
  if (!comm_) {
    ranks[0].swap(pending_steps_);
  } else {
    const auto all = comm_->all_gather_bytes(
        std::string_view(reinterpret_cast<const char*>(pending_steps_.data()), n * sizeof(RankStep)));
    for (size_t r = 0; r < all.size(); ++r) {
      expect_part_size(*comm_, int(r), all[r], n * sizeof(RankStep), "a step report");
      ranks[r].resize(n);
      std::memcpy(ranks[r].data(), all[r].data(), all[r].size());
    }
  }
  pending_steps_.clear();
  bool stop = false;
  for (size_t k = 0; k < n; ++k) {
    const int64_t step = step_ - int64_t(n - 1 - k);
    double loss = 0, step_s = 0;
    json per_rank = json::array();
    for (const auto& r : ranks) {
      loss += r[k].loss_weighted;
      step_s = std::max(step_s, r[k].step_s);
      if (r[k].stop) stop = true;
      per_rank.push_back({{"step_s", r[k].step_s}, {"comm_s", r[k].comm_s}});
    }
    const RankStep& mine = ranks[size_t(o_.rank)][k];
    const double tok_s = double(global_tokens_) / step_s;
    const double mfu = double(flops_per_token_) * (mine.tokens / mine.step_s) / (peak_gflops_ * 1e9);
    json rec = {{"step", step}, {"loss", loss}, {"lr_mult", opt_->schedule(step - 1).lr_multiplier},
                {"tok_per_s", tok_s}, {"step_s", step_s}, {"comm_s", mine.comm_s}, {"mfu", mfu},
                {"tokens", tokens_seen_ - double(n - 1 - k) * double(global_tokens_)},
                {"elapsed_s", mine.end_s}};
    if (comm_) {
      rec["ranks"] = per_rank;
      rec["bytes_sent"] = mine.bytes_sent;
    }
    metrics_.write(rec);
    if (k + 1 < n) continue;
    {
      std::lock_guard<std::mutex> lock(status_mu_);
      status_ = {{"step", step}, {"steps", o_.steps}, {"loss", loss}, {"tok_per_s", tok_s},
                 {"eta_s", step_s * double(last_step - step)}, {"val_bpb", last_val_bpb_},
                 {"ranks", per_rank}};
    }
    char stats[160];
    std::snprintf(stats, sizeof stats, "loss %.4f | %.0f tok/s | mfu %.0f%% | comm %.2fs", loss, tok_s, 100 * mfu,
                  mine.comm_s);
    progress.update(step, stats);
  }
  return stop;
}

void Trainer::evaluate_and_log() {
  const double t0 = now_s();
  EvalSums s = evaluate(*model_, data_.val, data_.token_bytes, uint32_t(o_.rank), uint32_t(o_.world()),
                        o_.seq_len, o_.device_batch, o_.eval_tokens);
  if (comm_) {
    double mine[4] = {s.nats_all, s.tokens, s.bpb.nats, s.bpb.bytes};
    const auto all = comm_->all_gather_bytes(std::string_view(reinterpret_cast<const char*>(mine), sizeof mine));
    s = EvalSums();
    for (size_t r = 0; r < all.size(); ++r) {
      expect_part_size(*comm_, int(r), all[r], sizeof mine, "evaluation sums");
      double v[4];
      std::memcpy(v, all[r].data(), sizeof v);
      s.nats_all += v[0];
      s.tokens += v[1];
      s.bpb.nats += v[2];
      s.bpb.bytes += v[3];
    }
  }
  last_val_bpb_ = s.bpb.bpb();
  last_eval_step_ = step_;
  check_replicas();
  logf("step %lld: val loss %.4f, val bpb %.4f (%.0f tokens, %.1f s)", (long long)step_, s.val_loss(),
       last_val_bpb_, s.tokens, now_s() - t0);
  metrics_.write({{"step", step_}, {"tokens", tokens_seen_}, {"val_loss", s.val_loss()}, {"val_bpb", last_val_bpb_}});
}

// Bytes of memory the system can still give us (MemAvailable), or -1 if unknown.
int64_t available_memory() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

// Parameters, gradients and optimizer state exist by now; what the step still needs is the
// activation arena for the device batch and the sync buffers. Refuse up front, with the
// largest batch that fits, rather than die of OOM in the middle of a run.
void Trainer::check_memory() {
  const int64_t avail = available_memory();
  if (avail < 0) return;
  const double P = double(model_->params().size()) * sizeof(float);
  // Parameter-sized buffers: the all-reduce's, plus diloco's anchor and momentum, plus the
  // snapshot of an overlapped average.
  const double sync = !o_.distributed() ? 0
                      : (o_.sync == SyncMode::Diloco ? 3 * P : P) + (o_.sync_overlap ? P : 0);
  auto need = [&](int64_t b) { return double(model_->activation_bytes_for(b, o_.seq_len)) + sync; };
  const double budget = 0.9 * double(avail);
  if (need(o_.device_batch) <= budget) return;
  int64_t lo = 0, hi = o_.device_batch;  // largest b with need(b) <= budget is in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (need(mid) <= budget ? lo : hi) = mid;
  }
  char msg[512];
  std::snprintf(msg, sizeof msg,
                "--device-batch %lld at --seq-len %lld needs about %.1f GB more memory, but %.1f GB is available; "
                "%s (use --total-batch to keep the tokens per step)",
                (long long)o_.device_batch, (long long)o_.seq_len, need(o_.device_batch) / 1e9, double(avail) / 1e9,
                lo > 0 ? ("the largest device batch that fits is " + std::to_string(lo)).c_str()
                       : "even a device batch of 1 does not fit: use a smaller --seq-len or model");
  throw UsageError(msg);
}

// With --sync grad every rank applies the same update to the same parameters, so replicas
// must stay bit-identical; compare a checksum of the whole arena to catch any drift.
void Trainer::check_replicas() {
  if (!grad_sync_) return;
  const auto& ps = model_->params();
  const uint32_t crc = crc32_of(ps.data(), size_t(ps.size()) * sizeof(float));
  const auto all = comm_->all_gather_bytes(std::to_string(crc));
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw RuntimeError("replicas have drifted at step " + std::to_string(step_) + ": rank " + std::to_string(r) +
                         "'s parameters differ from rank 0's; build every host with the same compiler and -Dnative=false, then --resume");
}

// Muon's orthogonalisation dominates the optimizer's cost, so with --sync grad each rank
// orthogonalises only its share of the matrices (as nanochat's distributed optimizer does)
// and then sends the updated matrices to the others. Shares are balanced by the cost of
// Polar Express (rows * cols * min(rows, cols)), deterministically, so every rank agrees.
void Trainer::assign_muon_shards() {
  const auto& mats = opt_->muon_matrices();
  std::vector<int> order(mats.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  auto cost = [&](int i) { return double(mats[size_t(i)].rows) * double(mats[size_t(i)].cols) * double(std::min(mats[size_t(i)].rows, mats[size_t(i)].cols)); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost(a) > cost(b); });
  muon_owned_.assign(size_t(o_.world()), {});
  std::vector<double> load(size_t(o_.world()), 0.0);
  for (int i : order) {
    const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    muon_owned_[r].push_back(i);
    load[r] += cost(i);
  }
  for (auto& v : muon_owned_) std::sort(v.begin(), v.end());
}

// Returns the seconds spent sending and receiving the orthogonalised matrices.
double Trainer::step_sharded_optimizer(int64_t it) {
  opt_->step_adamw(it);
  opt_->step_muon(it, muon_owned_[size_t(o_.rank)]);
  const double t0 = now_s();
  const auto& mats = opt_->muon_matrices();
  auto& all = model_->params().all();
  for (int owner = 0; owner < o_.world(); ++owner) {
    int64_t n = 0;
    for (int i : muon_owned_[size_t(owner)]) n += all[size_t(mats[size_t(i)].param)].numel;
    bcast_buf_.resize(size_t(n));
    float* at = bcast_buf_.data();
    if (owner == o_.rank)
      for (int i : muon_owned_[size_t(owner)]) {
        const auto& p = all[size_t(mats[size_t(i)].param)];
        std::memcpy(at, p.data, size_t(p.numel) * sizeof(float));
        at += p.numel;
      }
    // Parameters always travel as float32: rounding them would make the replicas differ.
    comm_->broadcast(bcast_buf_.data(), size_t(n), owner, net::Wire::F32);
    if (owner != o_.rank) {
      at = bcast_buf_.data();
      for (int i : muon_owned_[size_t(owner)]) {
        auto& p = all[size_t(mats[size_t(i)].param)];
        std::memcpy(p.data, at, size_t(p.numel) * sizeof(float));
        at += p.numel;
      }
    }
  }
  return now_s() - t0;
}

int Trainer::run() {
  run_start_s_ = now_s();
  // A second SIGINT/SIGTERM does not wait for the step to end: it aborts the collectives
  // (or the process, when there are none) at once.
  std::atomic<bool> watching{true};
  std::thread watcher([&] {
    while (watching) {
      if (g_signals.load() >= 2) {
        if (comm_) comm_->abort("interrupted twice (SIGINT/SIGTERM)");
        else {
          logf("interrupted twice: exiting without a checkpoint");
          std::_Exit(1);
        }
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  struct Join {
    std::atomic<bool>& w;
    std::thread& t;
    ~Join() {
      w = false;
      t.join();
    }
  } join{watching, watcher};
  if (o_.threads > 0) omp_set_num_threads(o_.threads);
  log_set_rank(o_.rank, o_.world());
  install_signal_handlers();
  data_ = load_dataset(o_.data_dir);
  cfg_ = o_.model_config(data_.vocab);
  if (o_.metrics_path.empty() && o_.rank == 0) o_.metrics_path = (fs::path(o_.out_dir) / "metrics.jsonl").string();
  setup_distributed();

  int64_t round_tokens = 0;
  for (int64_t b : rank_batch_) round_tokens += b * o_.seq_len;
  if (o_.total_batch == 0) {
    accum_ = 1;
  } else {
    if (o_.total_batch % round_tokens != 0)
      throw UsageError("--total-batch " + std::to_string(o_.total_batch) +
                       " is not a multiple of the tokens of one micro-step over all ranks (" +
                       std::to_string(round_tokens) + " = sum of --device-batch x --seq-len); use a multiple of it");
    accum_ = o_.total_batch / round_tokens;
  }
  global_tokens_ = accum_ * round_tokens;

  model_ = std::make_unique<model::GPT>(cfg_);
  optim::MuonAdamWOptions oo;
  oo.total_batch_tokens = global_tokens_;
  oo.num_iterations = o_.steps;
  oo.model_dim = cfg_.n_embd;
  opt_ = std::make_unique<optim::MuonAdamW>(model_->params(), oo);
  check_memory();
  model_->reserve(o_.device_batch, o_.seq_len);
  // One packed stream for the whole job, the same on every rank: each micro-step takes the
  // next sum(B_r) rows and rank r keeps rows [sum_{q<r} B_q, + B_r). So ranks train on
  // disjoint rows, uneven --device-batch is fine, and N ranks of B see exactly the rows one
  // rank of N*B would (the basis of the equivalence of --sync grad with one big batch).
  data::LoaderOptions lo;
  lo.rank = 0;
  lo.world = 1;
  lo.seed = o_.seed;
  lo.seq_len = uint32_t(o_.seq_len);
  loader_ = std::make_unique<data::PackingLoader>(data_.train, lo);
  if (comm_) {
    const auto wire = o_.wire_bf16 ? net::Wire::Bf16 : net::Wire::F32;
    if (o_.sync == SyncMode::Grad) grad_sync_ = std::make_unique<GradSync>(*comm_, wire);
    else
      param_sync_ = std::make_unique<ParamSync>(*comm_, wire, model_->params(),
                                                double(o_.device_batch) * double(o_.seq_len) / double(round_tokens),
                                                o_.sync == SyncMode::Diloco ? o_.outer_lr : 1.0f,
                                                o_.sync == SyncMode::Diloco ? o_.outer_momentum : 0.0f);
  }
  resume_or_init();
  if (param_sync_) param_sync_->begin();
  step_start_loader_ = loader_->state();
  if (grad_sync_) assign_muon_shards();
  if (o_.rank == 0) metrics_.open(o_.metrics_path, o_.resume ? step_ : -1);

  const auto counts = model::count_params(cfg_);
  flops_per_token_ = model::flops_per_token(cfg_);
  peak_gflops_ = kernels::measure_matmul_gflops(1024, 512, 1024, 5);
  logf("model d%lld: %lld parameters, %lld FLOPs/token, vocab %u, T %lld; batch %lld tokens/step (%lld micro-steps of %lld x %lld here); %d threads; matmul peak %.0f GFLOP/s",
       (long long)cfg_.n_layer, (long long)counts.total, (long long)flops_per_token_, data_.vocab,
       (long long)o_.seq_len, (long long)global_tokens_, (long long)accum_, (long long)o_.device_batch,
       (long long)o_.seq_len, omp_get_max_threads(), peak_gflops_);

  const int64_t last_step = o_.stop_after >= 0 ? o_.stop_after : o_.steps;
  if (step_ == 0 && !o_.resume) evaluate_and_log();

  const int64_t T = o_.seq_len, B = o_.device_batch;
  const int64_t round_rows = round_tokens / T;
  int64_t my_first_row = 0;
  for (int r = 0; r < o_.rank; ++r) my_first_row += rank_batch_[size_t(r)];
  std::vector<int32_t> round_idx(size_t(round_rows * T)), round_tgt(size_t(round_rows * T));
  const auto& all = model_->params().all();
  // The embedding tables form the arena's suffix: dense gradients are everything before.
  int64_t dense_end = model_->params().size();
  std::vector<GradSync::Table> tables;
  for (const auto& p : all) {
    const auto g = model::param_group(p.name);
    if (g == model::ParamGroup::wte || g == model::ParamGroup::value_embeds) {
      dense_end = std::min(dense_end, p.offset);
      tables.push_back({p.grad, p.shape[1], p.shape[0]});
    }
  }
  const double loss_scale_grad = double(B * T) / double(global_tokens_);
  Progress progress(o_.steps, o_.progress_bar && o_.rank == 0);
  bool stopping = false;

  try {
  while (step_ < last_step && !stopping) {
    const double t0 = now_s();
    const uint64_t synced_before = grad_sync_ ? grad_sync_->elements_synced() : 0;
    model_->params().zero_grad();
    double loss_sum = 0, comm_s = 0;
    for (int64_t m = 0; m < accum_; ++m) {
      loader_->next_batch(size_t(round_rows), round_idx.data(), round_tgt.data());
      const int32_t* idx = round_idx.data() + my_first_row * T;
      const int32_t* tgt = round_tgt.data() + my_first_row * T;
      loss_sum += model_->forward(idx, tgt, B, T);
      const bool last_micro = m == accum_ - 1;
      if (grad_sync_ && last_micro) {
        // Dense gradients go out as soon as each block's backward is done.
        float* base = model_->params().grad();
        model_->backward(float(loss_scale_grad), [&](int64_t off, int64_t n) {
          const int64_t end = std::min(off + n, dense_end);
          if (end > off) grad_sync_->enqueue(base + off, end - off);
        });
      } else {
        model_->backward(grad_sync_ ? float(loss_scale_grad) : float(1.0 / double(accum_)));
      }
    }
    if (grad_sync_) {
      comm_s += grad_sync_->wait();
      const double t1 = now_s();
      grad_sync_->sync_rows(tables, model_->touched_tokens());
      comm_s += now_s() - t1;
    }
    if (grad_sync_) comm_s += step_sharded_optimizer(step_);
    else opt_->step(step_);
    ++step_;
    step_start_loader_ = loader_->state();  // the position that goes with step_ in a checkpoint
    const bool eval_now = o_.eval_every > 0 && step_ % o_.eval_every == 0 && step_ < o_.steps;
    const bool save_now = o_.save_every > 0 && step_ % o_.save_every == 0 && step_ < last_step;
    bool start_average = false;
    if (param_sync_) {
      const double t1 = now_s();
      param_sync_->finish();  // an overlapped average started one step ago (no-op otherwise)
      if (step_ % o_.sync_every == 0) {
        // Overlap unless this step evaluates, checkpoints or ends: those must see the average.
        if (o_.sync_overlap && !eval_now && !save_now && step_ < last_step) start_average = true;
        else param_sync_->sync();
      }
      comm_s += now_s() - t1;
    }
    tokens_seen_ += double(global_tokens_);

    RankStep mine;
    mine.loss_weighted = loss_sum / double(accum_) * double(B * T) / double(round_tokens);
    mine.step_s = now_s() - t0;
    mine.comm_s = comm_s;
    mine.tokens = double(accum_ * B * T);
    mine.end_s = now_s() - run_start_s_;
    mine.stop = (stop_requested_ || g_signals.load() > 0) ? 1 : 0;
    mine.bytes_sent = bytes_sent_this_step(synced_before);
    pending_steps_.push_back(mine);
    // With parameter averaging the ranks run free between syncs: the step reports travel
    // together at the next sync (or evaluation, or the end), so that no rank waits for the
    // slowest one at every step. Stop requests take effect there too.
    const bool exchange_now = !param_sync_ || step_ % o_.sync_every == 0 || eval_now || step_ >= last_step;
    if (exchange_now) {
      if (report_steps(progress, last_step)) stopping = true;
    } else {
      // No collective until the next exchange: notice a lost rank (or an abort) now.
      if (comm_ && !comm_->failure().empty()) {
        if (g_signals.load() >= 2) throw net::Aborted(comm_->failure());
        throw net::PeerLost(comm_->failure());
      }
      char stats[160];
      std::snprintf(stats, sizeof stats, "loss %.4f (this rank) | %.0f tok/s | comm %.2fs",
                    loss_sum / double(accum_), double(global_tokens_) / mine.step_s, comm_s);
      progress.update(step_, stats);
    }

    if (std::isnan(loss_sum)) throw RuntimeError("loss is NaN at step " + std::to_string(step_) + "; lower the learning rate or check the data");
    if (eval_now) evaluate_and_log();
    if (save_now) save_checkpoint("periodic");
    // After the step's own exchange, so that the communicator is free until finish().
    if (start_average) {
      if (stopping) param_sync_->sync();  // the stop checkpoint holds the average
      else param_sync_->start();
    }
  }
  } catch (const net::PeerLost& e) {
    progress.finish();
    logf("%s", e.what());
    logf("saving a checkpoint of step %lld before exiting; restart every rank with --resume", (long long)step_);
    save_checkpoint("peer lost");  // needs no peer
    throw;
  } catch (const net::Aborted& e) {
    progress.finish();
    logf("%s", e.what());
    throw;
  }
  progress.finish();
  if (step_ >= o_.steps && last_eval_step_ != step_) evaluate_and_log();
  save_checkpoint(stopping ? "stop requested" : step_ >= o_.steps ? "final" : "--stop-after");
  if (stopping) logf("stopped on request at step %lld; continue with --resume", (long long)step_);
  else logf("done: step %lld, val bpb %.4f", (long long)step_, last_val_bpb_);
  return 0;
}

}  // namespace

int run_training(const TrainOptions& options) {
  Trainer t(options);
  return t.run();
}

}  // namespace rt::train
