#include "ringtrain/train/evaluate.hpp"

#include <algorithm>

namespace rt::train {

EvalSums evaluate(model::GPT& model, const std::shared_ptr<const data::Shard>& val,
                  const std::vector<int32_t>& token_bytes, uint32_t rank, uint32_t world,
                  int64_t T, int64_t batch, int64_t max_tokens, bool crop_long_docs) {
  // Every rank packs the same val rows and takes every world-th one: the union over ranks is
  // exactly what one process evaluates, however few val documents there are.
  const size_t max_rows = size_t(std::max<int64_t>(1, max_tokens / T));
  const auto all_rows = data::val_rows(val, 0, 1, uint32_t(T), max_rows, !crop_long_docs);
  std::vector<std::vector<int32_t>> rows;
  for (size_t i = rank; i < all_rows.size(); i += world) rows.push_back(all_rows[i]);
  EvalSums sums;
  std::vector<int32_t> idx(size_t(batch * T)), tgt(size_t(batch * T));
  std::vector<float> losses(size_t(batch * T));
  for (size_t r0 = 0; r0 < rows.size(); r0 += size_t(batch)) {
    const int64_t b = std::min<int64_t>(batch, int64_t(rows.size() - r0));
    for (int64_t i = 0; i < b; ++i) {
      const auto& row = rows[r0 + size_t(i)];  // T+1 tokens
      std::copy(row.begin(), row.begin() + T, idx.begin() + i * T);
      std::copy(row.begin() + 1, row.begin() + T + 1, tgt.begin() + i * T);
    }
    model.forward(idx.data(), tgt.data(), b, T, losses.data(), /*need_backward=*/false);
    for (int64_t i = 0; i < b * T; ++i) sums.nats_all += losses[size_t(i)];
    sums.tokens += double(b * T);
    sums.bpb.add(losses.data(), tgt.data(), size_t(b * T), token_bytes);
  }
  return sums;
}

}  // namespace rt::train
