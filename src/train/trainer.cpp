// The training run: set up, resume, the step loop, evaluation and checkpoints. The loop
// reads as the algorithm; what depends on the --sync mode is behind the Sync interface
// (sync.hpp), and each other concern lives in a file named for it (resume_step,
// replica_check, step_reports, memory_check, stop_signals, dataset). What a lost or
// restarted rank sets off (elastic training) is in elastic.cpp; the state both files work
// on is the Trainer class (trainer_class.hpp).
#include "ringtrain/train/trainer.hpp"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>

#include <nlohmann/json.hpp>

#include "ringtrain/data/loader.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/kernels/matmul.hpp"
#include "ringtrain/model/gpt.hpp"
#include "ringtrain/net/communicator.hpp"
#include "ringtrain/net/finite_values.hpp"
#include "ringtrain/net/rendezvous.hpp"
#include "ringtrain/optim/muon_adamw.hpp"
#include "auto_batch.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "dataset.hpp"
#include "ringtrain/train/evaluate.hpp"
#include "ringtrain/train/log.hpp"
#include "memory_check.hpp"
#include "metrics.hpp"
#include "ringtrain/train/model_io.hpp"
#include "peer_values.hpp"
#include "sync/replica_check.hpp"
#include "resume_step.hpp"
#include "ring_state.hpp"
#include "row_split.hpp"
#include "step_reports.hpp"
#include "stop_signals.hpp"
#include "sync/sync.hpp"

#include "trainer_class.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rt::train {

net::ServiceHandler Trainer::service_handler() {
  return [this](const std::string& req) -> std::string {
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
    auto is_member = [this](int rank) {
      std::lock_guard lk(members_mu_);
      return std::binary_search(members_.begin(), members_.end(), rank);
    };
    auto wants_to_join = [this](int rank) {
      // Each admitted join costs the live ranks a re-form: one rank is let in at most once a
      // --peer-timeout, however often it (or a broken process holding the key) asks. It asks
      // again every second, so a real rejoin only waits for the window to pass.
      {
        std::lock_guard lk(join_mu_);
        const double now = now_s();
        auto [it, first] = join_admitted_at_.try_emplace(rank, now);
        if (!first && now - it->second < o_.peer_timeout_s) return;
        it->second = now;
      }
      join_requested_ = true;
      status_.set_rank_state(rank, "joining");
    };
    // While the first ring still forms, a process that probes us must not take it for a
    // running job (it would try to join instead of starting with us).
    if (!ring_up_ && req.rfind("elastic ", 0) == 0) return std::string("elastic starting");
    if (auto a = net::answer_while_running(req, epoch_, o_.world(), is_member, wants_to_join)) return *a;
    return "error: unknown request '" + req + "'; use status or stop";
  };
}

net::CommOptions Trainer::ring_options(int64_t epoch, const std::vector<int>& members) {
  net::CommOptions co;
  for (int r : members) co.peers.push_back(o_.peers[size_t(r)]);
  co.rank = int(std::find(members.begin(), members.end(), o_.rank) - members.begin());
  co.job_id = net::ring_job_id(o_.job_id, epoch);
  std::string shared = o_.shared_config_text();
  // A rank restarted to rejoin runs the job's command, with or without --resume.
  if (epoch > 0) shared.replace(shared.find("\n--resume="), std::string("\n--resume=0").size(), "");
  co.config_text = shared + "data.train_docs=" + std::to_string(data_.train->num_docs()) +
                   "\ndata.vocab=" + std::to_string(data_.vocab) + "\n";
  co.connect_timeout_s = epoch > 0 ? std::min(o_.connect_timeout_s, 30.0) : o_.connect_timeout_s;
  co.peer_timeout_s = o_.peer_timeout_s;
  co.stall_timeout_s = o_.stall_timeout_s;
  co.chunk_bytes = size_t(o_.chunk_bytes);
  co.key = o_.key;
  co.insecure = o_.insecure;
  co.log = [](const std::string& line) { logf("%s", line.c_str()); };
  co.service_handler = service_handler();
  return co;
}

net::RendezvousOptions Trainer::rendezvous_options(double timeout_s, std::vector<double> silent_for_s) {
  net::RendezvousOptions ro;
  ro.rank = o_.rank;
  ro.peers = o_.peers;
  ro.job_id = o_.job_id;
  ro.key = o_.key;
  ro.insecure = o_.insecure;
  ro.timeout_s = timeout_s;
  ro.probe_timeout_s = std::clamp(o_.peer_timeout_s / 2, 1.0, 5.0);
  ro.silent_timeout_s = o_.peer_timeout_s;
  ro.max_step = o_.steps;
  ro.silent_for_s = std::move(silent_for_s);
  ro.log = [](const std::string& line) { logf("%s", line.c_str()); };
  ro.other_requests = service_handler();
  return ro;
}

void Trainer::connect() {
  rank_batch_.assign(size_t(o_.world()), o_.device_batch);
  {
    std::lock_guard lk(members_mu_);
    members_.resize(size_t(o_.world()));
    std::iota(members_.begin(), members_.end(), 0);
  }
  state_members_ = members_;
  index_ = o_.rank;
  if (!o_.distributed()) return;
  net::RendezvousOptions probe = rendezvous_options(0);
  probe.probe_timeout_s = kJobProbeS;
  if (o_.elastic() && net::job_is_running(probe)) {
    logf("the job is running on these ports: joining it");
    joining_ = true;
    if (o_.device_batch_auto) {
      // Timing needs every rank at once (build()); a rank joining a running job takes its even
      // share of the rows instead.
      o_.device_batch = std::max<int64_t>(1, o_.total_batch / o_.seq_len / o_.world());
      logf("--device-batch auto: joining a running job, this rank trains %lld rows per micro-step (its even share)",
           (long long)o_.device_batch);
    }
    for (int attempt = 0;; ++attempt) {
      joined_ring_ = net::rendezvous(rendezvous_options(o_.connect_timeout_s), net::MemberState{});
      if (open_ring(joined_ring_)) break;
      if (attempt == 4) throw RuntimeError("could not join the running job after 5 attempts; restart this rank");
    }
    return;
  }
  logf("waiting for %d ranks (connect timeout %.0f s)", o_.world(), o_.connect_timeout_s);
  comm_ = std::make_unique<net::Communicator>(ring_options(0, members_));
  ring_up_ = true;
  rank_batch_ = comm_->all_gather_record<int64_t>(o_.device_batch);  // all 0 with auto (build() measures)
  for (size_t r = 0; r < rank_batch_.size(); ++r)
    if (o_.device_batch_auto ? rank_batch_[r] != 0 : rank_batch_[r] < 1 || rank_batch_[r] > kMaxDeviceBatch)
      bad_peer_value(*comm_, int(r), "--device-batch " + std::to_string(rank_batch_[r]));
  logf("ring of %d ranks is up", o_.world());
}

void Trainer::build() {
  if (o_.device_batch_auto && !joining_) {  // the split needs a model to time
    model_ = std::make_unique<model::GPT>(cfg_);
    rank_batch_ = auto_device_batches(comm_.get(), *model_, o_.total_batch / o_.seq_len, o_.seq_len);
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
  const double snapshot_bytes = o_.elastic() ? 3 * param_bytes + sync_->extra_bytes() : 0;
  check_memory(*model_, o_.device_batch, o_.seq_len, sync_->extra_bytes() + snapshot_bytes);
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
  micro_ = split_step_rows(rank_batch_, index_, global_tokens_ / o_.seq_len);
  if (int64_t(micro_.size()) != accum_ && o_.elastic())
    logf("this ring of %zu ranks takes %zu micro-steps per step here (tokens per step unchanged: %lld)",
         members_.size(), micro_.size(), (long long)global_tokens_);
}

void Trainer::resume_or_init() {
  model_->init_weights(o_.seed);
  if (joining_) {
    // The running job's state, from its live ranks (its checkpoints here are older). When no
    // member has state (every rank started afresh through the rendezvous) it keeps its own.
    RunCounters c{step_, tokens_seen_, last_val_bpb_, last_eval_step_, loader_->state(), ""};
    share_ring_state(*comm_, joined_ring_, o_.sync == SyncMode::Grad, o_.steps, model_->params(), *opt_, c);
    step_ = c.step, tokens_seen_ = c.tokens_seen, last_val_bpb_ = c.val_bpb, last_eval_step_ = c.last_eval_step;
    loader_->restore(c.loader);
    load_sync_state(c.sync_state);
    state_epoch_ = joined_ring_.epoch, state_members_ = joined_ring_.members;
    check_replicas(*comm_, model_->params(), step_);
    logf("joined the running job at step %lld (ring of %zu ranks)", (long long)step_, members_.size());
  } else if (o_.resume) {
    const std::string dir = agree_resume_checkpoint(comm_.get(), o_.out_dir, o_.rank);
    const json meta = verify_checkpoint(dir);
    const auto saved_cfg = model::ModelConfig::from_json(meta.at("model_config").dump());
    if (saved_cfg.to_json() != cfg_.to_json())
      throw UsageError("--resume: checkpoint " + dir + " is of another model (" + saved_cfg.to_json() + " vs " +
                       cfg_.to_json() + "); use the flags of that run or another --out");
    // Imported weights (ringtrain import) belong to no run: any ranks and --sync take them.
    const bool weights_only = meta.value("weights_only", false) || meta.contains("imported_from");
    if (!weights_only && (meta.value("world", 1) != o_.world() || meta.value("sync", std::string()) != sync_mode_name(o_.sync)))
      throw UsageError("--resume: checkpoint " + dir + " was written by a run with " +
                       std::to_string(meta.value("world", 1)) + " ranks and --sync " +
                       meta.value("sync", std::string("?")) + "; resume with the same ranks and --sync");
    if (meta["files"].contains("state.bin"))
      throw UsageError("--resume: checkpoint " + dir +
                       " keeps its state in the old state.bin layout, which this version does not read; resume it with "
                       "the ringtrain that wrote it, or start a new run (eval, sample and export still read it)");
    load_weights((fs::path(dir) / "model.safetensors").string(), *model_);
    // An imported checkpoint has weights only: the optimizer, loader and sync start fresh.
    if (meta["files"].contains("state.safetensors")) {
      const auto state = io::StateReader::load((fs::path(dir) / "state.safetensors").string());
      opt_->load_state(state);
      loader_->restore(data::LoaderState::load(state));
      sync_->load_state(state);
    }
    step_ = meta.at("step").get<int64_t>();
    tokens_seen_ = meta.value("tokens_seen", 0.0);
    last_val_bpb_ = meta.value("val_bpb", -1.0);
    last_eval_step_ = step_;
    // Checkpoints of different runs (or lineages) under one step number must not train on
    // as one job: under grad every replica is the same bits, so compare them now.
    if (comm_ && o_.sync == SyncMode::Grad) check_replicas(*comm_, model_->params(), step_);
    if (weights_only)
      logf("resumed from the imported weights %s: a fresh optimizer and loader, the schedules from step %lld", dir.c_str(),
           (long long)step_);
    else logf("resumed from %s (step %lld)", dir.c_str(), (long long)step_);
    newest_checkpoint_step_ = step_;
  }
  sync_->begin();
  step_start_loader_ = loader_->state();
  exchanged_step_ = step_;
}

void Trainer::save_periodic_checkpoint() {
  try {
    save_checkpoint("periodic");
    newest_checkpoint_step_ = step_;
  } catch (const WriteError& e) {
    const std::string kept = newest_checkpoint_step_ >= 0 ? "step " + std::to_string(newest_checkpoint_step_) : "none yet";
    logf("checkpoint of step %lld not saved: %s; training goes on, the next save (step %lld) tries again "
         "(the newest checkpoint on disk: %s)",
         (long long)step_, e.what(), (long long)(step_ + o_.save_every), kept.c_str());
  }
}

// For the tests of a diverged rank only: RINGTRAIN_TEST_POISON=R:S makes rank R set one
// parameter (of lm_head, so every loss sees it) to NaN before the forward pass of step S, as
// a diverged update would.
// The variable is read once, at the first step.
void Trainer::poison_for_test() {
  static const int64_t poison_step = [this]() -> int64_t {
    const char* spec = std::getenv("RINGTRAIN_TEST_POISON");
    if (!spec || std::atoi(spec) != o_.rank || !std::strchr(spec, ':')) return -1;
    return std::atoll(std::strchr(spec, ':') + 1);
  }();
  if (poison_step != step_ + 1) return;
  for (const auto& p : model_->params().all())
    if (p.name == "lm_head.weight") p.data[0] = std::nanf("");  // in every token's logits
}

bool Trainer::optimizer_finite() {
  bool finite = true;
  opt_->for_each_buffer([&](int, float* data, size_t count) { finite = finite && net::all_finite(data, count); });
  return finite;
}

bool Trainer::state_finite() {
  return net::all_finite(model_->params().data(), size_t(model_->params().size())) && optimizer_finite();
}

void Trainer::save_last_good_state() {
  // The update after the snapshot was cut short, or the state after it holds a NaN or an
  // infinity (a diverged rank): the snapshot is the last good state.
  if (snap_step_ >= 0 && (!state_whole_ || !state_finite())) {
    logf("going back to the state of step %lld, before the update that %s", (long long)snap_step_,
         state_whole_ ? "made a NaN or an infinity" : "was cut short");
    roll_back_to(snap_step_);
  }
  const std::string kept =
      newest_checkpoint_step_ >= 0 ? "step " + std::to_string(newest_checkpoint_step_) : "none";
  if (!state_whole_) {
    logf("no whole state to save (an update or a state transfer was cut short); the newest checkpoint: %s", kept.c_str());
    return;
  }
  logf("saving a checkpoint of step %lld before exiting; restart every rank with --resume", (long long)step_);
  try {
    save_checkpoint("failure");
  } catch (const std::exception& e) {
    logf("%s; the newest checkpoint: %s", e.what(), kept.c_str());
  }
}

void Trainer::save_checkpoint(const char* why) {
  if (sync_) sync_->apply_arrived();
  require_finite(model_->params(), step_);  // never a valid-looking checkpoint of NaN/Inf
  if (!optimizer_finite())
    throw RuntimeError("the optimizer state holds a NaN or an infinity at step " + std::to_string(step_) +
                       "; no checkpoint of step " + std::to_string(step_) +
                       " is written. Resume from the last valid one (--resume) with a lower learning rate");
  const double t0 = now_s();
  CheckpointWriter w(o_.out_dir, o_.rank, step_);
  save_weights(w.path("model.safetensors"), *model_);
  w.add_written_file("model.safetensors");
  io::StateWriter state;
  opt_->save_state(state);
  step_start_loader_.save(state);
  if (sync_) sync_->save_state(state);  // none while an elastic ring re-forms
  w.write_file("state.safetensors", [&](const io::ByteSink& sink) { state.write(sink); });
  // The tokenizer travels with the weights, so that sample/eval need only the checkpoint.
  w.write_file("tokenizer.tiktoken", {{tokenizer_text_.data(), tokenizer_text_.size()}});
  json meta = {{"step", step_},
               {"model_config", json::parse(cfg_.to_json())},
               {"rank", o_.rank},
               {"world", o_.world()},
               {"sync", sync_mode_name(o_.sync)},
               {"tokens_seen", tokens_seen_},
               {"val_bpb", last_val_bpb_},
               {"steps", o_.steps},
               {"user_config", json::parse(o_.user_config_json(global_tokens_))},  // for an export to nanochat
               {"data", o_.data_dir},
               {"reason", why}};
  const std::string dir = w.commit(meta);
  status_.set_checkpoint(step_, dir);
  logf("checkpoint %s (%s, %.1f s)", dir.c_str(), why, now_s() - t0);
  if (o_.keep_checkpoints > 0)
    for (int64_t old : prune_checkpoints(o_.out_dir, o_.rank, step_, o_.keep_checkpoints))
      logf("removed the checkpoint of step %lld (--keep-checkpoints %lld)", (long long)old, (long long)o_.keep_checkpoints);
}

void Trainer::evaluate_and_log() {
  const double t0 = now_s();
  EvalSums s = evaluate(*model_, data_.val, data_.token_bytes, uint32_t(index_), uint32_t(members_.size()),
                        o_.seq_len, o_.device_batch, o_.eval_tokens, o_.crop_long_docs);
  if (comm_) {
    double sums[4] = {s.nats_all, s.tokens, s.bpb.nats, s.bpb.bytes};
    comm_->all_reduce_values(sums, net::ValueOp::Sum);
    for (double v : sums)
      if (!std::isfinite(v) || v < 0) throw RuntimeError("the ranks' evaluation sums are invalid (" + std::to_string(v) + "); every rank must run the same ringtrain build");
    s.nats_all = sums[0], s.tokens = sums[1], s.bpb.nats = sums[2], s.bpb.bytes = sums[3];
  }
  last_val_bpb_ = s.bpb.bpb();
  last_eval_step_ = step_;
  if (comm_ && sync_->replicas_identical()) check_replicas(*comm_, model_->params(), step_);
  logf("step %lld: val loss %.4f, val bpb %.4f (%.0f tokens, %.1f s)", (long long)step_, s.val_loss(),
       last_val_bpb_, s.tokens, now_s() - t0);
  metrics_.write({{"step", step_}, {"tokens", tokens_seen_}, {"val_loss", s.val_loss()}, {"val_bpb", last_val_bpb_}});
}

bool Trainer::train(int64_t last_step) {
  bool stopping = false;
  while (step_ < last_step && !stopping) {
    try {
      stopping = train_step(last_step);
      if (!stopping && o_.elastic() && comm_ && last_synced_) {
        // A restarted rank asked to join: every member learns it here, at the same step.
        int64_t join[1] = {join_requested_.exchange(false) ? 1 : 0};
        comm_->all_reduce_values(join, net::ValueOp::Max);
        if (join[0] != 0) reform("");
      }
    } catch (const net::PeerLost& e) {
      if (!o_.elastic() || giving_up_) throw;
      // A rank lost while the ring re-forms or sends the state: meet again (bounded).
      std::string why = e.what();
      for (int attempt = 0;; ++attempt) {
        try {
          reform(why);
          break;
        } catch (const net::PeerLost& again) {
          if (giving_up_ || attempt == 4) throw;
          why = again.what();
        }
      }
    }
  }
  return stopping;
}

std::unique_ptr<Sync> Trainer::new_sync() {
  int64_t rows = 0;
  for (const auto& m : micro_) rows += m.rows;
  return make_sync({comm_.get(), model_.get(), opt_.get(), &o_, rank_batch_, int64_t(micro_.size()), global_tokens_,
                    rows * o_.seq_len});
}

bool Trainer::train_step(int64_t last_step) {
  const int64_t B = o_.device_batch, T = o_.seq_len;
  const double t0 = now_s();
  const uint64_t bytes_before = comm_ ? comm_->bytes_sent() : 0;
  model_->params().zero_grad();
  poison_for_test();
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
    // The gradient is the mean over the step's tokens: a micro-step of fewer rows weighs less.
    const float scale = ms.rows == B ? sync_->loss_scale() : float(double(sync_->loss_scale()) * double(ms.rows) / double(B));
    // On the last micro-step the sync may send each range of gradients as it becomes final.
    model_->backward(scale, m + 1 == micro_.size() ? sync_->gradient_ready() : model::GPT::GradReady{});
    sync_->micro_step_done();
  }
  const double micro_steps = double(micro_.size());
  sync_->backward_done();
  // Before the update: a NaN or an infinite loss never reaches the parameters.
  if (!std::isfinite(loss_sum))
    throw RuntimeError("loss is " + std::string(std::isnan(loss_sum) ? "NaN" : "infinite") + " at step " +
                       std::to_string(step_ + 1) + " on rank " + std::to_string(o_.rank) +
                       ", before its update; lower the learning rate or check the data");
  // A lost rank may cut the update short, or (avg, diloco) the steps until the next average.
  if (o_.elastic() && comm_ && last_synced_) take_snapshot();
  // An update cut short (Muon's shards are exchanged inside it) is no state of any step.
  // An average that fails after it leaves this rank's own state of step_, as between averages.
  state_whole_ = false;
  sync_->optimizer_step(step_);
  ++step_;
  step_start_loader_ = loader_->state();  // the position that goes with step_ in a checkpoint
  state_whole_ = true;
  StepPlan plan;
  plan.step = step_;
  plan.eval = o_.eval_every > 0 && step_ % o_.eval_every == 0 && step_ < o_.steps;
  plan.save = o_.save_every > 0 && step_ % o_.save_every == 0 && step_ < last_step;
  plan.last = step_ >= last_step;
  sync_->step_done(plan);
  last_synced_ = sync_->synced_after(plan);
  tokens_seen_ += double(global_tokens_);

  StepReport mine;
  mine.loss_weighted = loss_rows * double(T) / double(global_tokens_);
  mine.step_s = now_s() - t0;
  mine.comm_s = sync_->take_comm_seconds();
  mine.tokens = double(rows * T);
  mine.end_s = now_s() - run_start_s_;
  mine.bytes_sent = comm_ ? double(comm_->bytes_sent() - bytes_before) : 0;
  mine.stop = (stop_requested_ || stop_signals_received() > 0) ? 1 : 0;
  reports_->add(mine);
  bool stopping = false;
  if (sync_->report_now(plan)) {
    stopping = reports_->exchange(step_, tokens_seen_, last_val_bpb_);
    exchanged_step_ = step_;
  } else reports_->show_local(step_, loss_sum / micro_steps, mine.step_s, mine.comm_s);

  if (plan.eval) evaluate_and_log();
  if (plan.save) save_periodic_checkpoint();
  sync_->step_end(stopping);
  return stopping;
}

Trainer::~Trainer() {
  // The communicator's thread answers `status`, `metrics after` and membership requests by
  // reading status_, metrics_ and members_, which are declared (so destroyed) after comm_:
  // stop it first (a request answered during the teardown read freed memory; ASan saw it in
  // train/watch). The sync goes before it, since its own thread may still use the ring.
  sync_.reset();
  comm_.reset();
}

int Trainer::run() {
  run_start_s_ = now_s();
  // A second SIGINT/SIGTERM does not wait for the step to end: it aborts the collectives
  // (or the process, when there are none) at once.
  SecondSignalWatcher watcher([this] {
    if (comm_) return comm_->abort("interrupted twice (SIGINT/SIGTERM)");
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
  cfg_ = o_.model_config(data_.vocab);
  const std::string schedule = o_.resolve_horizon(cfg_);
  // Elastic: any rank may become the lowest live one, which writes the metrics.
  if (o_.metrics_path.empty() && (o_.rank == 0 || o_.elastic())) o_.metrics_path = (fs::path(o_.out_dir) / "metrics.jsonl").string();
  connect();
  build();
  resume_or_init();
  if (index_ == 0) metrics_.open(o_.metrics_path, o_.resume || joining_ ? step_ : -1);
  if (joining_) write_membership_events(joined_ring_.state_members, members_);
  show_membership();

  ReportSetup& rs = report_setup_;
  rs.rank = index_;
  rs.steps = o_.steps;
  rs.last_step = o_.stop_after >= 0 ? o_.stop_after : o_.steps;
  rs.global_tokens = global_tokens_;
  rs.flops_per_token = model::flops_per_token(cfg_);
  rs.peak_gflops = kernels::measure_matmul_gflops(1024, 512, 1024, 5);
  rs.run_start_s = run_start_s_;
  rs.members = members_;
  std::vector<std::string> addresses;
  for (const auto& p : o_.peers) addresses.push_back(p.text());
  status_.set_addresses(addresses);
  logf("model d%lld: %lld parameters, %lld FLOPs/token, vocab %u, T %lld; batch %lld tokens/step (%lld micro-steps of %lld x %lld here); %d threads; matmul peak %.0f GFLOP/s (oneDNN %s)",
       (long long)cfg_.n_layer, (long long)model::count_params(cfg_).total, (long long)rs.flops_per_token, data_.vocab,
       (long long)o_.seq_len, (long long)global_tokens_, (long long)accum_, (long long)o_.device_batch,
       (long long)o_.seq_len, omp_get_max_threads(), rs.peak_gflops, kernels::onednn_version().c_str());
  logf("%s", schedule.c_str());
  progress_ = std::make_unique<Progress>(o_.steps, o_.progress_bar && index_ == 0);
  reports_ = std::make_unique<StepReports>(comm_.get(), *opt_, metrics_, *progress_, status_, rs);

  if (step_ == 0 && !o_.resume && !joining_) evaluate_and_log();
  bool stopping = false;
  try {
    stopping = train(rs.last_step);
  } catch (const net::Aborted& e) {  // interrupted twice: out at once
    progress_->finish();
    logf("%s", e.what());
    throw;
  } catch (const std::exception& e) {  // any other failure: keep the last good state
    progress_->finish();
    logf("%s", e.what());
    save_last_good_state();
    throw;
  }
  progress_->finish();
  if (step_ >= o_.steps && last_eval_step_ != step_) evaluate_and_log();
  save_checkpoint(stopping ? "stop requested" : step_ >= o_.steps ? "final" : "--stop-after");
  if (stopping) logf("stopped on request at step %lld; continue with --resume", (long long)step_);
  else logf("done: step %lld, val bpb %.4f", (long long)step_, last_val_bpb_);
  return 0;
}


int run_training(const TrainOptions& options) {
  Trainer t(options);
  return t.run();
}

}  // namespace rt::train
