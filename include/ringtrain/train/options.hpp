// Everything `ringtrain train` is told on its command line, parsed and checked once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "ringtrain/model/config.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/job_key.hpp"
#include "ringtrain/net/peers.hpp"
#include "ringtrain/optim/schedule.hpp"

namespace rt::train {

enum class SyncMode { Grad, Avg, Diloco };

struct TrainOptions {
  static constexpr int64_t kAuto = -1;  // --total-batch auto, --steps auto: base_train's rules

  // model
  int64_t depth = 8;
  int64_t seq_len = 1024;
  int64_t head_dim = 128;
  int64_t n_kv_head = 0;  // 0: same as n_head
  std::string window_pattern = "SSSL";
  int64_t aspect_ratio = 64;  // n_embd = depth * aspect_ratio, rounded up to whole heads
  // batch and schedule
  int64_t device_batch = 2;   // rows per micro-step on this rank (0 with device_batch_auto, until measured)
  bool device_batch_auto = false;  // --device-batch auto: split --total-batch by measured speed
  int64_t total_batch = kAuto;  // tokens per optimizer step over all ranks; 0: one micro-step
  int64_t steps = kAuto;        // the schedule's length
  // base_train's horizon: train on R tokens per scaling parameter (--steps wins); <= 0: none.
  double target_param_data_ratio = 12;
  optim::TrainingHyper hyper;   // learning rates, weight decay, warm-up and warm-down
  int64_t stop_after = -1;    // save and exit 0 after this step (schedule unchanged)
  uint64_t seed = 42;
  int threads = 0;            // 0: all cores
  // --long-docs: a document longer than a row is cut into pieces (ours, the default) or
  // cropped to one row as nanochat does (to compare val bpb with nanochat's on the same tokens).
  bool crop_long_docs = false;
  bool long_docs_given = false;  // false: as the data directory says (its meta.json)
  // data, output
  std::string data_dir;
  std::string out_dir = "runs/latest";
  std::string metrics_path;   // default: <out>/metrics.jsonl (rank 0)
  int64_t eval_every = 100;
  int64_t eval_tokens = 1 << 16;
  int64_t save_every = 0;     // 0: only at the end (and on stop)
  int64_t keep_checkpoints = 0;  // 0: keep all; N: each rank keeps its newest N
  bool resume = false;
  // distribution
  int rank = 0;
  std::vector<net::PeerAddress> peers;  // per rank, parsed from --peers; empty: one process
  // per rank, the site it is at (--sites): the ring keeps each site's ranks together, so that
  // it crosses a slow link between sites twice; empty: one site, the ring in rank order
  std::vector<std::string> sites;
  SyncMode sync = SyncMode::Grad;
  int64_t sync_every = 1;
  int64_t sync_fragments = 1;  // avg/diloco: the model averaged in this many fragments, staggered
  bool sync_overlap = false;  // avg/diloco: average in the background, one step delayed
  int64_t overlap_steps = 1;  // ... or this many steps delayed (--overlap-steps)
  float outer_lr = 0.7f;
  float outer_momentum = 0.9f;
  net::Wire wire = net::Wire::F32;
  std::string job_id = "ringtrain";
  // Elastic training (--sync grad): the job goes on while at least this many ranks live.
  int min_ranks = 1;  // the flag's 0 (default) becomes a majority of 3+ ranks, 1 of 2
  // The watchdog: after this many re-forms of the ring with no step completed in between, every
  // rank saves its last good state and exits 1, naming the rank that keeps breaking the ring.
  int max_reforms = 10;  // 0: no watchdog
  // A job that reaches its last step without some of its ranks: each finished rank keeps
  // telling their restarts, for up to this long, that the job is done (0: not at all).
  double done_linger_s = 60;
  double connect_timeout_s = 120;
  double peer_timeout_s = net::kDefaultPeerTimeoutS;
  double stall_timeout_s = net::kDefaultStallTimeoutS;  // no progress in a collective: fail
  int64_t chunk_bytes = int64_t(net::kDefaultChunkBytes);
  int64_t streams = 1;  // TCP connections per ring link (--streams; net::CommOptions::streams)
  std::optional<net::JobKey> key;  // --key: encrypted, authenticated ranks
  bool insecure = false;           // --insecure: plaintext between hosts anyway
  bool progress_bar = true;   // only drawn on a terminal

  int world() const { return peers.empty() ? 1 : int(peers.size()); }
  bool distributed() const { return world() > 1; }
  // A lost rank does not stop the job, and a restarted one rejoins (not with --sync-overlap,
  // whose average in flight cannot be taken back).
  bool elastic() const { return distributed(); }
  model::ModelConfig model_config(int64_t vocab_size) const;
  // --total-batch auto and --steps auto resolved as base_train resolves them, for the model
  // the data makes (horizon.cpp); after this, total_batch and steps are numbers. Returns the
  // line that tells what was chosen and why. Throws rt::UsageError when a choice cannot be made.
  std::string resolve_horizon(const model::ModelConfig& model);
  // Flags that must agree on every rank, as "key=value" lines, checked at the handshake
  // (per-rank flags such as --threads and --device-batch are left out on purpose).
  std::string shared_config_text() const;
  // The settings as nanochat's base_train names them (its user_config, a JSON object), for a
  // checkpoint's meta and an export to nanochat; after resolve_horizon. tokens_per_step:
  // the run's (--total-batch 0 means one micro-step, which nanochat has no word for).
  std::string user_config_json(int64_t tokens_per_step) const;
};

const char* sync_mode_name(SyncMode m);

}  // namespace rt::train
