#include "ringtrain/train/grad_sync.hpp"

#include "ringtrain/train/peer_values.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace rt::train {

GradSync::GradSync(net::Communicator& comm, net::Wire wire)
    : comm_(comm), wire_(wire), thread_([this] { loop(); }) {}

GradSync::~GradSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradSync::enqueue(float* data, int64_t count) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(data, count);
    ++pending_;
  }
  cv_.notify_all();
}

void GradSync::loop() {
  for (;;) {
    std::pair<float*, int64_t> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = queue_.front();
      queue_.pop_front();
    }
    try {
      // After the first failure the communicator is broken; skip the rest quickly.
      if (!error_) comm_.all_reduce(job.first, size_t(job.second), net::ReduceOp::Sum, wire_);
      elements_ += uint64_t(job.second);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    cv_.notify_all();
  }
}

double GradSync::wait() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  if (error_) std::rethrow_exception(error_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void GradSync::sync_rows(const std::vector<Table>& tables, const std::vector<int32_t>& my_ids) {
  wait();
  int64_t rows = tables.empty() ? 0 : tables[0].rows;
  for (const auto& t : tables) rows = std::min(rows, t.rows);
  if (rows <= 0 && !tables.empty()) throw RuntimeError("sync_rows: a table has no row count (internal error)");
  // Union of the ids of every rank, sorted, so every rank packs the same rows in the same order.
  const auto all = comm_.all_gather_bytes(
      std::string_view(reinterpret_cast<const char*>(my_ids.data()), my_ids.size() * sizeof(int32_t)));
  std::vector<int32_t> ids;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string& part = all[r];
    // Distinct ids of one rank: whole int32s, at most one per row, each a row of the tables.
    if (part.size() % sizeof(int32_t) != 0 || part.size() / sizeof(int32_t) > size_t(rows))
      bad_peer_value(comm_, int(r), std::to_string(part.size()) + " bytes of embedding-row ids for tables of " +
                                        std::to_string(rows) + " rows");
    const size_t n = part.size() / sizeof(int32_t);
    const size_t old = ids.size();
    ids.resize(old + n);
    std::memcpy(ids.data() + old, part.data(), n * sizeof(int32_t));
    for (size_t k = old; k < ids.size(); ++k)
      if (ids[k] < 0 || ids[k] >= rows)
        bad_peer_value(comm_, int(r), "token id " + std::to_string(ids[k]) + " for the embedding-row exchange, outside the vocabulary of " +
                                          std::to_string(rows));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

  int64_t total = 0;
  for (const auto& t : tables) total += t.width * int64_t(ids.size());
  rows_buf_.resize(size_t(total));
  float* at = rows_buf_.data();
  for (const auto& t : tables)
    for (int32_t id : ids) {
      std::memcpy(at, t.grad + int64_t(id) * t.width, size_t(t.width) * sizeof(float));
      at += t.width;
    }
  comm_.all_reduce(rows_buf_.data(), size_t(total), net::ReduceOp::Sum, wire_);
  elements_ += uint64_t(total);
  at = rows_buf_.data();
  for (const auto& t : tables)
    for (int32_t id : ids) {
      std::memcpy(t.grad + int64_t(id) * t.width, at, size_t(t.width) * sizeof(float));
      at += t.width;
    }
}

}  // namespace rt::train
