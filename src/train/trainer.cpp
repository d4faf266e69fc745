// The training run: set up, resume, the step loop, evaluation. The loop reads as the
// algorithm (next batch, forward/backward, sync, update, report/eval/save); what depends on
// the --sync mode is behind the Sync interface (sync/sync.hpp), who is in the ring behind
// ElasticRing (elastic/elastic_ring.hpp), and each other concern lives in a file named for
// it (trainer_checkpoints, trainer_ring, resume_step, step_reports, memory_check, ...).
#include "ringtrain/train/trainer.hpp"

#include <omp.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "auto_batch.hpp"
#include "memory_check.hpp"
#include "sync/fragments.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/kernels/matmul.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/evaluate.hpp"
#include "stop_signals.hpp"
#include "sync/replica_check.hpp"
#include "trainer_class.hpp"

namespace fs = std::filesystem;

namespace rt::train {

std::optional<std::string> Trainer::answer(const std::string& req) {
  if (req == "stop") {
    stop_requested_ = true;
    logf("stop requested by 'ringtrain stop'; all ranks will checkpoint and exit");
    return "ok: the job will checkpoint and exit at the end of the current step";
  }
  if (req == "status") return status_.text();
  // `ringtrain watch`: the metric records after the watcher's last one, a reply's worth.
  if (req.rfind("metrics after ", 0) == 0) {
    const auto after = MetricHistory::parse_seq(std::string_view(req).substr(14));
    if (!after) return "error: 'metrics after N' takes a record number N >= 0";
    return metrics_.history().after(*after, kHistoryReplyBytes);
  }
  return std::nullopt;
}

void Trainer::build() {
  if (o_.device_batch_auto && !joining_) {  // the split needs a model to time
    model_ = std::make_unique<model::GPT>(cfg_);
    rank_batch_ = auto_device_batches(comm(), *model_, o_.total_batch / o_.seq_len, o_.seq_len);
    o_.device_batch = rank_batch_[size_t(o_.rank)];
  }
  if (!joining_) {  // a joining rank learnt the job's batch from the ring
    const int64_t round_rows = std::accumulate(rank_batch_.begin(), rank_batch_.end(), int64_t(0));
    const int64_t round_tokens = round_rows * o_.seq_len;
    if (o_.total_batch != 0 && o_.total_batch % round_tokens != 0)
      throw UsageError("--total-batch " + std::to_string(o_.total_batch) +
                       " is not a multiple of the tokens of one micro-step over all ranks (" +
                       std::to_string(round_tokens) + " = sum of --device-batch x --seq-len); use a multiple of it");
    accum_ = o_.total_batch == 0 ? 1 : o_.total_batch / round_tokens;
    global_tokens_ = accum_ * round_tokens;
  }
  split_rows();
  step_idx_.resize(size_t(global_tokens_));
  step_tgt_.resize(size_t(global_tokens_));

  if (!model_) model_ = std::make_unique<model::GPT>(cfg_);
  optim::MuonAdamWOptions oo;
  oo.total_batch_tokens = global_tokens_;
  oo.num_iterations = o_.steps;
  oo.model_dim = cfg_.n_embd;
  oo.hyper = o_.hyper;
  oo.scaling_params_ref = optim::reference_scaling_param_count(cfg_.vocab_size, o_.aspect_ratio, cfg_.head_dim);
  opt_ = std::make_unique<optim::MuonAdamW>(model_->params(), oo);
  sync_ = new_sync();
  // Elastic training keeps a copy of the parameters and the optimizer state (about two
  // more floats per parameter, plus the sync's own buffers) to undo a step.
  const double param_bytes = double(model_->params().size()) * sizeof(float);
  const double sync_bytes = sync_->traits().extra_bytes;
  const double snapshot_bytes = o_.elastic() ? 3 * param_bytes + sync_bytes : 0;
  check_memory(*model_, o_.device_batch, o_.seq_len, sync_bytes + snapshot_bytes);
  model_->reserve(o_.device_batch, o_.seq_len);
  // The one stream of the whole job (see next_rows).
  data::LoaderOptions lo;
  lo.seed = o_.seed;
  lo.seq_len = uint32_t(o_.seq_len);
  lo.split_long_docs = !o_.crop_long_docs;
  loader_ = std::make_unique<data::PackingLoader>(data_.train, lo);
}

// Every rank packs the same stream and each step takes its next global_tokens / T rows, so
// the loader's position is a function of the step alone; row_split.hpp says which of them
// this rank trains (ranks train disjoint rows, uneven --device-batch is fine, and N ranks
// of B see exactly the rows one rank of N*B would: the basis of the equivalence of --sync
// grad with one big batch).
void Trainer::split_rows() {
  micro_ = split_step_rows(rank_batch_, ring_->index(), global_tokens_ / o_.seq_len);
  if (int64_t(micro_.size()) != accum_ && o_.elastic())
    logf("this ring of %zu ranks takes %zu micro-steps per step here (tokens per step unchanged: %lld)",
         ring_->members().size(), micro_.size(), (long long)global_tokens_);
}

void Trainer::resume_or_init() {
  model_->init_weights(o_.seed);
  if (joining_) take_joined_state();
  else if (o_.resume) resume_from_checkpoint();
  sync_->begin();
  run_.loader = loader_->state();
  exchanged_step_ = run_.step;
}

void Trainer::evaluate_and_log() {
  const double t0 = now_s();
  EvalSums s = evaluate(*model_, data_.val, data_.token_bytes, uint32_t(ring_->index()), uint32_t(ring_->members().size()),
                        o_.seq_len, o_.device_batch, o_.eval_tokens, o_.crop_long_docs);
  if (comm()) {
    double sums[4] = {s.nats_all, s.tokens, s.bpb.nats, s.bpb.bytes};
    comm()->all_reduce_values(sums, net::ValueOp::Sum);
    for (double v : sums)
      if (!std::isfinite(v) || v < 0) throw RuntimeError("the ranks' evaluation sums are invalid (" + std::to_string(v) + "); every rank must run the same ringtrain build");
    s.nats_all = sums[0], s.tokens = sums[1], s.bpb.nats = sums[2], s.bpb.bytes = sums[3];
  }
  run_.val_bpb = s.bpb.bpb();
  run_.last_eval_step = run_.step;
  if (comm() && sync_->traits().replicas_identical) check_replicas(*comm(), model_->params(), run_.step);
  logf("step %lld: val loss %.4f, val bpb %.4f (%.0f tokens, %.1f s)", (long long)run_.step, s.val_loss(),
       run_.val_bpb, s.tokens, now_s() - t0);
  metrics_.write({{"step", run_.step}, {"tokens", run_.tokens_seen}, {"val_loss", s.val_loss()}, {"val_bpb", run_.val_bpb}});
}

bool Trainer::train(int64_t last_step) {
  bool stopping = false;
  while (run_.step < last_step && !stopping) {
    try {
      stopping = train_step(last_step);
    } catch (const net::PeerLost& e) {
      if (!o_.elastic() || ring_->giving_up()) throw;
      ring_->recover(e.what(), *this);
    }
  }
  return stopping;
}

std::unique_ptr<Sync> Trainer::new_sync() {
  int64_t rows = 0;
  for (const auto& m : micro_) rows += m.rows;
  return make_sync({comm(), model_.get(), opt_.get(), &o_, rank_batch_, int64_t(micro_.size()), global_tokens_,
                    rows * o_.seq_len});
}

bool Trainer::train_step(int64_t last_step) {
  const int64_t T = o_.seq_len;
  const double t0 = now_s();
  const uint64_t bytes_before = comm() ? comm()->bytes_sent() : 0;
  model_->params().zero_grad();
  poison_for_test();
  break_ring_for_test();
  // The step's rows, every rank's: the loader's position stays a function of the step.
  loader_->next_batch(step_idx_.size() / size_t(T), step_idx_.data(), step_tgt_.data());
  double loss_sum = 0, loss_rows = 0;
  int64_t rows = 0;
  for (size_t m = 0; m < micro_.size(); ++m) {
    const MicroStep& ms = micro_[m];
    const float loss = model_->forward(step_idx_.data() + ms.first_row * T, step_tgt_.data() + ms.first_row * T, ms.rows, T);
    loss_sum += loss;
    loss_rows += double(loss) * double(ms.rows);
    rows += ms.rows;
    sync_->backward(ms.rows, m + 1 == micro_.size());
  }
  const double micro_steps = double(micro_.size());
  sync_->after_backward();
  // Before the update: a NaN or an infinite loss never reaches the parameters.
  if (!std::isfinite(loss_sum))
    throw RuntimeError("loss is " + std::string(std::isnan(loss_sum) ? "NaN" : "infinite") + " at step " +
                       std::to_string(run_.step + 1) + " on rank " + std::to_string(o_.rank) +
                       ", before its update; lower the learning rate or check the data");
  // A lost rank may cut the update short, or (avg, diloco) the steps until the next average.
  if (o_.elastic() && comm() && last_synced_) take_snapshot();
  // An update cut short (Muon's shards are exchanged inside it) is no state of any step.
  // An average that fails after it leaves this rank's own state of run_.step, as between averages.
  state_whole_ = false;
  sync_->update(run_.step);
  ++run_.step;
  run_.loader = loader_->state();  // the position that goes with run_.step in a checkpoint
  state_whole_ = true;
  StepPlan plan;
  plan.step = run_.step;
  plan.eval = o_.eval_every > 0 && run_.step % o_.eval_every == 0 && run_.step < o_.steps;
  plan.save = o_.save_every > 0 && run_.step % o_.save_every == 0 && run_.step < last_step;
  plan.last = run_.step >= last_step;
  const StepSync after = sync_->after_update(plan);
  last_synced_ = after.synced;
  run_.tokens_seen += double(global_tokens_);

  StepReport mine;
  mine.loss_weighted = loss_rows * double(T) / double(global_tokens_);
  mine.step_s = now_s() - t0;
  mine.comm_s = sync_->take_comm_seconds();
  mine.tokens = double(rows * T);
  mine.end_s = now_s() - run_start_s_;
  mine.bytes_sent = comm() ? double(comm()->bytes_sent() - bytes_before) : 0;
  mine.stop = (stop_requested_ || stop_signals_received() > 0) ? 1 : 0;
  reports_->add(mine);
  bool stopping = false;
  if (after.report) {
    stopping = reports_->exchange(run_.step, run_.tokens_seen, run_.val_bpb);
    exchanged_step_ = run_.step;
  } else reports_->show_local(run_.step, loss_sum / micro_steps, mine.step_s, mine.comm_s);

  if (plan.eval) evaluate_and_log();
  if (plan.save) save_periodic_checkpoint();
  // Joins are let in before an overlapped average starts (it holds the communicator).
  if (!stopping && o_.elastic() && comm() && last_synced_) ring_->after_step(*this);
  sync_->step_end(stopping);
  return stopping;
}

Trainer::~Trainer() {
  // The communicator's thread answers `status`, `metrics after` and membership requests by
  // reading status_, metrics_ and the ring's members: stop it first (a request answered
  // during the teardown read freed memory; ASan saw it in train/watch). The sync goes before
  // it, since its own thread may still use the ring.
  sync_.reset();
  if (ring_) ring_->close();
}

int Trainer::run() {
  run_start_s_ = now_s();
  // A second SIGINT/SIGTERM does not wait for the step to end: it aborts the collectives
  // (or the process, when there are none) at once.
  SecondSignalWatcher watcher([this] {
    if (comm()) return comm()->abort("interrupted twice (SIGINT/SIGTERM)");
    logf("interrupted twice: exiting without a checkpoint");
    std::_Exit(1);
  });
  if (o_.threads > 0) omp_set_num_threads(o_.threads);
  log_set_rank(o_.rank, o_.world());
  install_stop_signals();
  data_ = load_dataset(o_.data_dir);
  if (!o_.long_docs_given) o_.crop_long_docs = data_.crop_long_docs;
  if (o_.crop_long_docs) logf("packing: --long-docs crop (nanochat's): a document longer than a row fills one row, the rest of it is dropped");
  tokenizer_text_ = io::read_file((fs::path(o_.data_dir) / "tokenizer.tiktoken").string());
  clean_checkpoint_leftovers(o_.out_dir, o_.rank);
  if (job_already_done()) return 0;
  cfg_ = o_.model_config(data_.vocab);
  check_fragment_count(cfg_, o_.sync_fragments);  // before the ring forms
  if (o_.sync == SyncMode::Diloco && o_.sync_fragments >= 3 && o_.sync_overlap && o_.overlap_steps >= 2)
    logf("note: --sync-fragments %lld --overlap-steps %lld: 3 or more diloco fragments applied 2 or more steps late ended "
         "2-10%% above whole-model diloco in val bpb where 1 step ended at or below it (docs/benchmarks.md); "
         "--overlap-steps 1 unless a fragment needs longer to cross the link",
         (long long)o_.sync_fragments, (long long)o_.overlap_steps);
  const std::string schedule = o_.resolve_horizon(cfg_);
  // Elastic: any rank may become the lowest live one, which writes the metrics.
  if (o_.metrics_path.empty() && (o_.rank == 0 || o_.elastic())) o_.metrics_path = (fs::path(o_.out_dir) / "metrics.jsonl").string();
  try {
    connect();
  } catch (const net::JobFinished& e) {
    return finished_without_this_rank(e);
  }
  build();
  resume_or_init();
  if (ring_->index() == 0) metrics_.open(o_.metrics_path, o_.resume || joining_ ? run_.step : -1);
  if (joining_) write_membership_events(ring_->joined_ring().state_members, ring_->members());
  ring_->show_membership();

  ReportSetup& rs = report_setup_;
  rs.rank = ring_->index();
  rs.steps = o_.steps;
  rs.last_step = o_.stop_after >= 0 ? o_.stop_after : o_.steps;
  rs.global_tokens = global_tokens_;
  rs.flops_per_token = model::flops_per_token(cfg_);
  rs.peak_gflops = kernels::measure_matmul_gflops(1024, 512, 1024, 5);
  rs.run_start_s = run_start_s_;
  rs.members = ring_->members();
  std::vector<std::string> addresses;
  for (const auto& p : o_.peers) addresses.push_back(p.text());
  status_.set_addresses(addresses);
  logf("model d%lld: %lld parameters, %lld FLOPs/token, vocab %u, T %lld; batch %lld tokens/step (%lld micro-steps of %lld x %lld here); %d threads; matmul peak %.0f GFLOP/s (oneDNN %s)",
       (long long)cfg_.n_layer, (long long)model::count_params(cfg_).total, (long long)rs.flops_per_token, data_.vocab,
       (long long)o_.seq_len, (long long)global_tokens_, (long long)accum_, (long long)o_.device_batch,
       (long long)o_.seq_len, omp_get_max_threads(), rs.peak_gflops, kernels::onednn_version().c_str());
  logf("%s", schedule.c_str());
  progress_ = std::make_unique<Progress>(o_.steps, o_.progress_bar && ring_->index() == 0);
  reports_ = std::make_unique<StepReports>(comm(), *opt_, metrics_, *progress_, status_, rs);

  if (run_.step == 0 && !o_.resume && !joining_) evaluate_and_log();
  bool stopping = false;
  try {
    stopping = train(rs.last_step);
  } catch (const net::Aborted& e) {  // interrupted twice: out at once
    progress_->finish();
    logf("%s", e.what());
    throw;
  } catch (const net::JobFinished& e) {  // cut off, the others ended the job meanwhile
    progress_->finish();
    return finished_without_this_rank(e);
  } catch (const std::exception& e) {  // any other failure: keep the last good state
    progress_->finish();
    logf("%s", e.what());
    save_last_good_state();
    throw;
  }
  progress_->finish();
  if (run_.step >= o_.steps && run_.last_eval_step != run_.step) evaluate_and_log();
  save_checkpoint(stopping ? "stop requested" : run_.step >= o_.steps ? "final" : "--stop-after");
  if (stopping) logf("stopped on request at step %lld; continue with --resume", (long long)run_.step);
  else logf("done: step %lld, val bpb %.4f", (long long)run_.step, run_.val_bpb);
  if (!stopping && run_.step >= o_.steps) {
    sync_.reset();  // nothing in flight after the last step; the ring closes next
    ring_->tell_missing_ranks_done(run_.step);
  }
  return 0;
}

int Trainer::finished_without_this_rank(const net::JobFinished& e) {
  logf("the job finished without this rank: %s (its final checkpoint is in that rank's --out); nothing to train",
       e.what());
  return 0;
}

int run_training(const TrainOptions& options) {
  Trainer t(options);
  return t.run();
}

}  // namespace rt::train
