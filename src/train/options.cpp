// What a run's options say beyond their values: the model config, the settings the ranks
// compare at the handshake, and base_train's names for them. The flags are parsed in
// src/cli/train_flags.cpp.
#include "ringtrain/train/options.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

#include "ringtrain/errors.hpp"

namespace rt::train {

const char* sync_mode_name(SyncMode m) {
  switch (m) {
    case SyncMode::Grad: return "grad";
    case SyncMode::Avg: return "avg";
    case SyncMode::Diloco: return "diloco";
  }
  return "?";
}

model::ModelConfig TrainOptions::model_config(int64_t vocab_size) const {
  model::ModelConfig c = model::ModelConfig::from_depth(depth, seq_len, vocab_size, aspect_ratio, head_dim);
  if (n_kv_head > 0) c.n_kv_head = n_kv_head;
  c.window_pattern = window_pattern;
  c.validate();
  return c;
}

std::string TrainOptions::shared_config_text() const {
  std::ostringstream s;
  s << "--depth=" << depth << "\n--aspect-ratio=" << aspect_ratio << "\n--seq-len=" << seq_len << "\n--head-dim=" << head_dim
    << "\n--n-kv-head=" << n_kv_head << "\n--window-pattern=" << window_pattern
    << "\n--device-batch-auto=" << device_batch_auto << "\n--total-batch=" << total_batch << "\n--steps=" << steps << "\n--seed=" << seed
    << "\n--long-docs=" << (crop_long_docs ? "crop" : "pieces")
    << "\n--target-param-data-ratio=" << target_param_data_ratio << "\n--matrix-lr=" << hyper.matrix_lr
    << "\n--embedding-lr=" << hyper.embedding_lr << "\n--unembedding-lr=" << hyper.unembedding_lr
    << "\n--scalar-lr=" << hyper.scalar_lr << "\n--weight-decay=" << hyper.weight_decay
    << "\n--warmup-steps=" << hyper.warmup_steps << "\n--warmdown-ratio=" << hyper.warmdown_ratio
    << "\n--final-lr-frac=" << hyper.final_lr_frac
    << "\n--eval-every=" << eval_every << "\n--eval-tokens=" << eval_tokens
    << "\n--save-every=" << save_every << "\n--stop-after=" << stop_after
    << "\n--sync=" << sync_mode_name(sync) << "\n--sync-every=" << sync_every << "\n--sync-overlap=" << sync_overlap
    << "\n--overlap-steps=" << overlap_steps << "\n--sync-fragments=" << sync_fragments
    << "\n--outer-lr=" << outer_lr << "\n--outer-momentum=" << outer_momentum
    << "\n--wire=" << net::wire_name(wire) << "\n--resume=" << resume
    // Settings that decide when the job stops or how it moves bytes: ranks that differ here
    // would disagree about a lost rank or a chunk. --connect-timeout, --threads, --device-batch
    // and --keep-checkpoints are each host's own (its boot time, cores, memory and disk).
    << "\n--min-ranks=" << min_ranks << "\n--max-reforms=" << max_reforms << "\n--peer-timeout=" << peer_timeout_s
    << "\n--stall-timeout=" << stall_timeout_s << "\n--chunk-bytes=" << chunk_bytes << "\n--streams=" << streams
    << "\n--peers=";
  for (size_t i = 0; i < peers.size(); ++i) s << (i ? "," : "") << peers[i].text();
  s << "\n--sites=";
  for (size_t i = 0; i < sites.size(); ++i) s << (i ? "," : "") << sites[i];
  s << "\n";
  return s.str();
}

std::string TrainOptions::user_config_json(int64_t tokens_per_step) const {
  const nlohmann::json j = {
      {"depth", depth}, {"aspect_ratio", aspect_ratio}, {"head_dim", head_dim}, {"max_seq_len", seq_len},
      {"window_pattern", window_pattern}, {"num_iterations", steps}, {"target_param_data_ratio", target_param_data_ratio},
      {"device_batch_size", device_batch}, {"total_batch_size", tokens_per_step}, {"embedding_lr", hyper.embedding_lr},
      {"unembedding_lr", hyper.unembedding_lr}, {"matrix_lr", hyper.matrix_lr}, {"scalar_lr", hyper.scalar_lr},
      {"weight_decay", hyper.weight_decay}, {"warmup_steps", hyper.warmup_steps}, {"warmdown_ratio", hyper.warmdown_ratio},
      {"final_lr_frac", hyper.final_lr_frac}, {"eval_every", eval_every}, {"eval_tokens", eval_tokens},
      // ringtrain's own, which base_train does not have
      {"ringtrain_sync", sync_mode_name(sync)}, {"ringtrain_ranks", world()}, {"ringtrain_seed", seed},
      {"ringtrain_long_docs", crop_long_docs ? "crop" : "pieces"}};
  return j.dump();
}

}  // namespace rt::train
