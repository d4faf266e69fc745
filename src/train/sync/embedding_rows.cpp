#include "embedding_rows.hpp"

#include <algorithm>
#include <cstring>

#include "peer_values.hpp"

namespace rt::train {

EmbeddingRowSync::EmbeddingRowSync(net::Communicator& comm, net::Wire wire, std::vector<GradTable> tables,
                                   int64_t vocab)
    : comm_(comm), wire_(wire), tables_(std::move(tables)), vocab_(vocab) {}

void EmbeddingRowSync::sync(const std::vector<int32_t>& my_ids) {
  if (tables_.empty()) return;
  // Union of the ids of every rank, sorted, so every rank packs the same rows in the same order.
  const auto all = comm_.all_gather_bytes(
      std::string_view(reinterpret_cast<const char*>(my_ids.data()), my_ids.size() * sizeof(int32_t)),
      size_t(vocab_) * sizeof(int32_t));
  std::vector<int32_t> ids;
  for (size_t r = 0; r < all.size(); ++r) {
    const auto& part = all[r];
    if (part.size() % sizeof(int32_t) != 0)
      bad_peer_value(comm_, int(r), std::to_string(part.size()) + " bytes of embedding-row ids, not a whole number of ids");
    const size_t n = part.size() / sizeof(int32_t), old = ids.size();
    ids.resize(old + n);
    if (n) std::memcpy(ids.data() + old, part.data(), n * sizeof(int32_t));
    for (size_t i = old; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= vocab_)
        bad_peer_value(comm_, int(r), "token id " + std::to_string(ids[i]) + " for the embedding-row exchange, outside the vocabulary of " +
                                          std::to_string(vocab_));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

  int64_t total = 0;
  for (const auto& t : tables_) total += t.width * int64_t(ids.size());
  rows_.resize(size_t(total));
  float* at = rows_.data();
  for (const auto& t : tables_)
    for (int32_t id : ids) {
      std::memcpy(at, t.grad + int64_t(id) * t.width, size_t(t.width) * sizeof(float));
      at += t.width;
    }
  comm_.all_reduce(rows_.data(), size_t(total), net::ReduceOp::Sum, wire_);
  at = rows_.data();
  for (const auto& t : tables_)
    for (int32_t id : ids) {
      std::memcpy(t.grad + int64_t(id) * t.width, at, size_t(t.width) * sizeof(float));
      at += t.width;
    }
}

}  // namespace rt::train
