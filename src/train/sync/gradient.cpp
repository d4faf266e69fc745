// --sync grad: the ranks average their gradients every step, like DDP, so every rank
// applies the same update and the replicas stay bit for bit identical.
//
// While backward runs, each range of gradients goes out as soon as it is final:
//   - the dense AdamW tensors (lm_head, scalars) are all-reduced;
//   - each block's Muon matrices are reduce-scattered to the ranks that own them
//     (muon_shards.hpp): the sum of a matrix's gradient reaches only its owner;
//   - the embedding tables wait for the end of backward, then only the rows some rank
//     touched are all-reduced (embedding_rows.hpp).
// Then every rank runs AdamW on all AdamW tensors (cheap), Muon on the matrices it owns, and
// the updated matrices are all-gathered block by block, as float32: rounding parameters
// would make the replicas differ.
#include <algorithm>
#include <cstring>

#include "comm_queue.hpp"
#include "embedding_rows.hpp"
#include "modes.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/model/layout.hpp"
#include "ringtrain/train/log.hpp"
#include "sync/muon_shards.hpp"

namespace rt::train {
namespace {

class GradientSync final : public Sync {
 public:
  explicit GradientSync(const SyncContext& ctx);

  // On the last micro-step each range of gradients goes out as soon as it is final.
  void backward(int64_t rows, bool last) override;
  void after_backward() override;
  void update(int64_t it) override;

 private:
  enum class Route { AllReduce, OwnerOnly, Rows };
  void on_ready(int64_t offset, int64_t count);
  void post_all_reduce(int64_t offset, int64_t count);
  void post_reduce_scatter(size_t group);
  // Copies the group's matrices (gradients or parameters) to or from staging_, in owner
  // order; only the parts of the ranks in [first, last).
  enum class Copy { ToStaging, FromStaging };
  void copy_parts(const MuonShards::Group& g, Copy dir, bool grads, int first, int last);

  net::Communicator& comm_;
  model::ParamSet& params_;
  optim::MuonAdamW& opt_;
  net::Wire wire_;
  int rank_, world_;
  std::vector<Route> route_;          // per ParamSet index
  std::vector<int> group_of_param_;   // per ParamSet index: its Muon group, or -1
  std::vector<int> waiting_;          // per Muon group: matrices whose gradient is not final yet
  MuonShards shards_;
  std::vector<float> staging_;        // one group in owner order (tasks run one at a time)
  EmbeddingRowSync rows_;
  std::vector<int32_t> touched_;      // embedding rows with a gradient, over the step's micro-steps
  CommQueue queue_;                   // last: its thread stops before the rest goes
};

std::vector<GradTable> embedding_tables(model::ParamSet& params) {
  std::vector<GradTable> tables;
  for (auto& p : params.all())
    if (model::is_embedding_table(model::param_group(p.name))) tables.push_back({p.grad, p.shape[1]});
  return tables;
}

GradientSync::GradientSync(const SyncContext& ctx)
    : Sync(ctx, ctx.full_micro_step_scale(ctx.global_tokens)),
      comm_(*ctx.comm), params_(ctx.model->params()), opt_(*ctx.opt), wire_(ctx.options->wire),
      rank_(ctx.comm->rank()), world_(ctx.comm->world()),
      shards_(assign_muon_shards(ctx.opt->muon_matrices(), ctx.model->params(), ctx.comm->world())),
      rows_(*ctx.comm, ctx.options->wire, embedding_tables(ctx.model->params()), ctx.model->config().vocab_size) {
  const auto& all = params_.all();
  route_.assign(all.size(), Route::AllReduce);
  group_of_param_.assign(all.size(), -1);
  for (size_t i = 0; i < all.size(); ++i)
    if (model::is_embedding_table(model::param_group(all[i].name))) route_[i] = Route::Rows;
  const auto& mats = opt_.muon_matrices();
  size_t largest = 0;
  for (size_t g = 0; g < shards_.groups.size(); ++g) {
    for (int m : shards_.groups[g].matrices) {
      route_[size_t(mats[size_t(m)].param)] = Route::OwnerOnly;
      group_of_param_[size_t(mats[size_t(m)].param)] = int(g);
    }
    largest = std::max(largest, shards_.groups[g].elements());
  }
  staging_.reserve(largest);
  waiting_.assign(shards_.groups.size(), 0);
  traits_.replicas_identical = true;
  traits_.extra_bytes = double(staging_.capacity()) * sizeof(float);
}

void GradientSync::on_ready(int64_t offset, int64_t count) {
  const auto& all = params_.all();
  // The parameters in [offset, offset + count): backward reports whole tensors.
  auto it = std::lower_bound(all.begin(), all.end(), offset, [](const model::Param& p, int64_t o) { return p.offset < o; });
  const int64_t end = offset + count;
  int64_t run_begin = -1, run_end = -1;  // consecutive tensors that are all-reduced together
  for (; it != all.end() && it->offset < end; ++it) {
    if (it->offset + it->numel > end)
      throw RuntimeError("backward reported a range that splits " + it->name + " (internal error)");
    const size_t i = size_t(it - all.begin());
    if (route_[i] == Route::AllReduce) {
      if (run_begin < 0) run_begin = it->offset;
      run_end = it->offset + it->numel;
      continue;
    }
    if (run_begin >= 0) post_all_reduce(run_begin, run_end - run_begin), run_begin = -1;
    if (route_[i] == Route::OwnerOnly) {
      const size_t g = size_t(group_of_param_[i]);
      if (waiting_[g] == 0) waiting_[g] = int(shards_.groups[g].matrices.size());
      if (--waiting_[g] == 0) post_reduce_scatter(g);
    }
  }
  if (run_begin >= 0) post_all_reduce(run_begin, run_end - run_begin);
}

void GradientSync::post_all_reduce(int64_t offset, int64_t count) {
  float* data = params_.grad() + offset;
  queue_.post([this, data, count] { comm_.all_reduce(data, size_t(count), net::ReduceOp::Sum, wire_); });
}

void GradientSync::post_reduce_scatter(size_t group) {
  queue_.post([this, group] {
    const auto& g = shards_.groups[group];
    staging_.resize(g.elements());
    copy_parts(g, Copy::ToStaging, true, 0, world_);
    comm_.reduce_scatter(staging_.data(), g.bounds, net::ReduceOp::Sum, wire_);
    copy_parts(g, Copy::FromStaging, true, rank_, rank_ + 1);
  });
}

void GradientSync::copy_parts(const MuonShards::Group& g, Copy dir, bool grads, int first, int last) {
  const auto& mats = opt_.muon_matrices();
  auto& all = params_.all();
  size_t at = 0;
  for (int m : g.matrices) {
    model::Param& p = all[size_t(mats[size_t(m)].param)];
    float* tensor = grads ? p.grad : p.data;
    if (at >= g.bounds[size_t(first)] && at < g.bounds[size_t(last)]) {
      if (dir == Copy::ToStaging) std::memcpy(staging_.data() + at, tensor, size_t(p.numel) * sizeof(float));
      else std::memcpy(tensor, staging_.data() + at, size_t(p.numel) * sizeof(float));
    }
    at += size_t(p.numel);
  }
}

void GradientSync::backward(int64_t rows, bool last) {
  model_.backward(loss_scale(rows), last ? model::GPT::GradReady([this](int64_t offset, int64_t count) {
    on_ready(offset, count);
  }) : model::GPT::GradReady{});
  // The model lists only this micro-step's rows; with gradient accumulation every
  // micro-step's rows hold gradient and must be synced (else the replicas drift).
  const auto& touched = model_.touched_tokens();
  touched_.insert(touched_.end(), touched.begin(), touched.end());
}

void GradientSync::after_backward() {
  const double t0 = now_s();
  queue_.wait();
  std::sort(touched_.begin(), touched_.end());
  touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  rows_.sync(touched_);
  touched_.clear();
  comm_s_ += now_s() - t0;
}

void GradientSync::update(int64_t it) {
  opt_.step_adamw(it);
  opt_.step_muon(it, shards_.owned[size_t(rank_)]);
  const double t0 = now_s();
  for (const auto& g : shards_.groups) {
    staging_.resize(g.elements());
    copy_parts(g, Copy::ToStaging, false, rank_, rank_ + 1);
    comm_.all_gather(staging_.data(), g.bounds, net::Wire::F32);
    copy_parts(g, Copy::FromStaging, false, 0, rank_);
    copy_parts(g, Copy::FromStaging, false, rank_ + 1, world_);
  }
  comm_s_ += now_s() - t0;
}

}  // namespace

std::unique_ptr<Sync> make_gradient_sync(const SyncContext& ctx) { return std::make_unique<GradientSync>(ctx); }

}  // namespace rt::train
