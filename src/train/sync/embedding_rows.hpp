// The embedding tables (wte, value_embeds) get gradient only on the rows of the tokens in
// the batch. Instead of all-reducing the whole V-row tables, the ranks exchange the ids
// they touched and all-reduce just the union of those rows.
#pragma once
#include <cstdint>
#include <vector>

#include "ringtrain/net/communicator.hpp"

namespace rt::train {

// A table of vocab x width floats (row-major) of which only some rows carry gradient.
struct GradTable {
  float* grad;
  int64_t width;
};

class EmbeddingRowSync {
 public:
  EmbeddingRowSync(net::Communicator& comm, net::Wire wire, std::vector<GradTable> tables, int64_t vocab);
  // All-reduces (sum), in every table, the union over ranks of the rows in `my_ids`. Ids
  // from other ranks are checked against the vocabulary before they index a row.
  void sync(const std::vector<int32_t>& my_ids);

 private:
  net::Communicator& comm_;
  net::Wire wire_;
  std::vector<GradTable> tables_;
  int64_t vocab_;
  std::vector<float> rows_;
};

}  // namespace rt::train
