// Embedding lookups: gather rows of a table, and the scatter-add of their gradients.
#pragma once
#include <cstdint>
#include <vector>

namespace rt::kernels {

// out[i, :] = table[ids[i], :]   (n rows of dim)
void embedding_gather(const float* table, const int32_t* ids, int64_t n, int64_t dim, float* out);

// Positions grouped by token, so that the scatter-add can run one token per thread
// without races, and the sorted unique ids (the rows touched) come for free.
struct TokenGroups {
  std::vector<int32_t> unique_ids;  // sorted
  std::vector<int64_t> start;       // group g: positions order[start[g] .. start[g+1])
  std::vector<int64_t> order;       // positions sorted by id (stable)
  void build(const int32_t* ids, int64_t n);
};

// grad_table[ids[i], :] += scale * dout[i, :]   (row stride of dout: ld, >= dim)
void embedding_scatter_add(float* grad_table, const TokenGroups& groups, const float* dout,
                           int64_t dim, int64_t ld, float scale = 1.0f);

}  // namespace rt::kernels
