// What the run reads from and writes to its checkpoints: --resume, the periodic, final and
// last-good saves (a failure keeps the newest state that is whole and finite), and the
// check that no NaN or infinity reaches a file.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/io/state_file.hpp"
#include "ringtrain/net/finite_values.hpp"
#include "ringtrain/train/checkpoint.hpp"
#include "ringtrain/train/model_io.hpp"
#include "resume_step.hpp"
#include "sync/replica_check.hpp"
#include "test_hooks.hpp"
#include "trainer_class.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace rt::train {

bool Trainer::job_already_done() const {
  if (!o_.resume) return false;
  const int64_t done = finished_step(o_.out_dir, o_.rank, o_.steps);
  if (done < 0) return false;
  logf("the job is already done: %s holds the checkpoint of step %lld of --steps %lld; nothing to train (to train on, "
       "--resume with a larger --steps)",
       rank_dir(o_.out_dir, o_.rank).c_str(), (long long)done, (long long)o_.steps);
  return true;
}

void Trainer::resume_from_checkpoint() {
  const std::string dir = agree_resume_checkpoint(comm(), o_.out_dir, o_.rank);
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
  run_.step = meta.at("step").get<int64_t>();
  run_.tokens_seen = meta.value("tokens_seen", 0.0);
  run_.val_bpb = meta.value("val_bpb", -1.0);
  run_.last_eval_step = run_.step;
  uint64_t lineage = 0;  // checkpoints older than lineages have none
  if (meta.contains("lineage")) {
    const auto parsed = meta["lineage"].is_string() ? net::parse_lineage(meta["lineage"].get<std::string>()) : std::nullopt;
    if (!parsed) throw UsageError("--resume: " + dir + "/meta.json has an invalid lineage; restore that checkpoint from a copy or remove it");
    lineage = *parsed;
  }
  agree_lineage(lineage);
  // Checkpoints of different runs under one step number must not train on as one job:
  // under grad every replica is the same bits, so compare them now.
  if (comm() && o_.sync == SyncMode::Grad) check_replicas(*comm(), model_->params(), run_.step);
  if (weights_only)
    logf("resumed from the imported weights %s: a fresh optimizer and loader, the schedules from step %lld", dir.c_str(),
         (long long)run_.step);
  else logf("resumed from %s (step %lld)", dir.c_str(), (long long)run_.step);
  newest_checkpoint_step_ = run_.step;
}

// The two sides of a partition (two ranks, each going on alone) may both have saved a step:
// checkpoints of two lineages are never resumed as one job. Checkpoints older than lineages
// have none (0): the job keeps the lineage it started.
void Trainer::agree_lineage(uint64_t lineage) {
  if (comm()) {
    int64_t seen[2] = {int64_t(lineage), -int64_t(lineage)};  // min and -max (63 bits: no overflow)
    comm()->all_reduce_values(seen, net::ValueOp::Min);
    if (seen[0] != -seen[1])
      throw UsageError("--resume: the ranks' checkpoints of step " + std::to_string(run_.step) +
                       " are of two lineages (this rank's: " + net::lineage_text(lineage) +
                       "): the ranks trained apart, each side on its own, during a network partition. Keep one side's "
                       "work: on the ranks of the other side, move away the checkpoints saved since the partition "
                       "(meta.json names their lineage), then --resume");
  }
  if (lineage != 0) ring_->continue_lineage(lineage);
  logf("lineage %s", net::lineage_text(ring_->lineage()).c_str());
}

void Trainer::save_periodic_checkpoint() {
  try {
    save_checkpoint("periodic");
    newest_checkpoint_step_ = run_.step;
  } catch (const WriteError& e) {
    const std::string kept = newest_checkpoint_step_ >= 0 ? "step " + std::to_string(newest_checkpoint_step_) : "none yet";
    logf("checkpoint of step %lld not saved: %s; training goes on, the next save (step %lld) tries again "
         "(the newest checkpoint on disk: %s)",
         (long long)run_.step, e.what(), (long long)(run_.step + o_.save_every), kept.c_str());
  }
}

namespace {
// The step S of a test hook RINGTRAIN_TEST_...=R:S when R is this rank, else -1.
int64_t test_hook_step(const char* variable, int rank) {
  const char* step = test_hook_value(variable, rank);
  return step ? std::atoll(step) : -1;
}
}  // namespace

// For the tests of a diverged rank only: RINGTRAIN_TEST_POISON=R:S makes rank R set one
// parameter (of lm_head, so every loss sees it) to NaN before the forward pass of step S, as
// a diverged update would.
// The variable is read once, at the first step.
void Trainer::poison_for_test() {
  static const int64_t poison_step = test_hook_step("RINGTRAIN_TEST_POISON", o_.rank);
  if (poison_step != run_.step + 1) return;
  for (const auto& p : model_->params().all())
    if (p.name == "lm_head.weight") p.data[0] = std::nanf("");  // in every token's logits
}

// For the test of the re-form watchdog only: RINGTRAIN_TEST_BREAK_RING=R:S makes rank R break
// every ring at every step after step S, as a rank that keeps failing the protocol would.
void Trainer::break_ring_for_test() {
  static const int64_t from_step = test_hook_step("RINGTRAIN_TEST_BREAK_RING", o_.rank);
  if (from_step >= 0 && run_.step >= from_step && comm())
    throw net::PeerLost("rank " + std::to_string(o_.rank) + " (" + o_.peers[size_t(o_.rank)].text() +
                        ") breaks every ring it is in (RINGTRAIN_TEST_BREAK_RING)");
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
  if (snapshot_.step() >= 0 && (!state_whole_ || !state_finite())) {
    logf("going back to the state of step %lld, before the update that %s", (long long)snapshot_.step(),
         state_whole_ ? "made a NaN or an infinity" : "was cut short");
    roll_back_to(snapshot_.step());
  }
  const std::string kept =
      newest_checkpoint_step_ >= 0 ? "step " + std::to_string(newest_checkpoint_step_) : "none";
  if (!state_whole_) {
    logf("no whole state to save (an update or a state transfer was cut short); the newest checkpoint: %s", kept.c_str());
    return;
  }
  logf("saving a checkpoint of step %lld before exiting; restart every rank with --resume", (long long)run_.step);
  try {
    save_checkpoint("failure");
  } catch (const std::exception& e) {
    logf("%s; the newest checkpoint: %s", e.what(), kept.c_str());
  }
}

void Trainer::save_checkpoint(const char* why) {
  if (sync_) sync_->apply_arrived();
  require_finite(model_->params(), run_.step);  // never a valid-looking checkpoint of NaN/Inf
  if (!optimizer_finite())
    throw RuntimeError("the optimizer state holds a NaN or an infinity at step " + std::to_string(run_.step) +
                       "; no checkpoint of step " + std::to_string(run_.step) +
                       " is written. Resume from the last valid one (--resume) with a lower learning rate");
  const double t0 = now_s();
  CheckpointWriter w(o_.out_dir, o_.rank, run_.step);
  save_weights(w.path("model.safetensors"), *model_);
  w.add_written_file("model.safetensors");
  io::StateWriter state;
  opt_->save_state(state);
  run_.loader.save(state);
  if (sync_) sync_->save_state(state);  // none while an elastic ring re-forms
  w.write_file("state.safetensors", [&](const io::ByteSink& sink) { state.write(sink); });
  // The tokenizer travels with the weights, so that sample/eval need only the checkpoint.
  w.write_file("tokenizer.tiktoken", {{tokenizer_text_.data(), tokenizer_text_.size()}});
  json meta = {{"step", run_.step},
               {"model_config", json::parse(cfg_.to_json())},
               {"rank", o_.rank},
               {"world", o_.world()},
               {"sync", sync_mode_name(o_.sync)},
               {"tokens_seen", run_.tokens_seen},
               {"val_bpb", run_.val_bpb},
               {"steps", o_.steps},
               {"user_config", json::parse(o_.user_config_json(global_tokens_))},  // for an export to nanochat
               {"data", o_.data_dir},
               {"lineage", net::lineage_text(ring_->lineage())},
               {"reason", why}};
  const std::string dir = w.commit(meta);
  status_.set_checkpoint(run_.step, dir);
  logf("checkpoint %s (%s, %.1f s)", dir.c_str(), why, now_s() - t0);
  if (o_.keep_checkpoints > 0)
    for (int64_t old : prune_checkpoints(o_.out_dir, o_.rank, run_.step, o_.keep_checkpoints))
      logf("removed the checkpoint of step %lld (--keep-checkpoints %lld)", (long long)old, (long long)o_.keep_checkpoints);
}

}  // namespace rt::train
