// Gradient averaging across ranks for --sync grad, overlapped with backward.
//
// backward() reports each range of the gradient arena as soon as it is final (lm_head,
// then the blocks from the last to the first). enqueue() hands the range to a
// communication thread that all-reduces it while backward goes on with earlier layers;
// wait() blocks until every queued range is done and returns how long it blocked: the
// communication time that compute did not hide.
//
// The embedding tables (wte, value_embeds) get gradient only on the rows of the tokens in
// the batch. sync_rows() exchanges the ids every rank touched and all-reduces just the
// union of those rows, instead of the whole V-row tables.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ringtrain/net/communicator.hpp"

namespace rt::train {

class GradSync {
 public:
  GradSync(net::Communicator& comm, net::Wire wire);
  ~GradSync();

  void enqueue(float* data, int64_t count);
  double wait();  // seconds blocked; rethrows a communication error

  // A table of `rows` x `width` floats (row-major) of which only some rows carry gradient.
  struct Table {
    float* grad;
    int64_t width;
    int64_t rows;  // every id must be below it (ids come from other ranks: checked)
  };
  // All-reduces (sum), in every table, the union over ranks of the rows in `my_ids`. An id
  // outside the tables from another rank stops the job (PeerLost naming that rank).
  void sync_rows(const std::vector<Table>& tables, const std::vector<int32_t>& my_ids);

  uint64_t elements_synced() const { return elements_; }

 private:
  void loop();

  net::Communicator& comm_;
  net::Wire wire_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<float*, int64_t>> queue_;
  int pending_ = 0;
  bool quit_ = false;
  std::exception_ptr error_;
  uint64_t elements_ = 0;
  std::vector<float> rows_buf_;
  std::thread thread_;
};

}  // namespace rt::train
