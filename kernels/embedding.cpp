// Embedding gather and its race-free scatter-add (one token group per iteration).
#include "ringtrain/kernels/embedding.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace rt::kernels {

void embedding_gather(const float* table, const int32_t* ids, int64_t n, int64_t dim,
                      float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, table + int64_t(ids[i]) * dim, sizeof(float) * dim);
}

void TokenGroups::build(const int32_t* ids, int64_t n) {
  order.resize(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  unique_ids.clear();
  start.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || ids[order[i]] != ids[order[i - 1]]) {
      unique_ids.push_back(ids[order[i]]);
      start.push_back(i);
    }
  }
  start.push_back(n);
}

void embedding_scatter_add(float* grad_table, const TokenGroups& g, const float* dout,
                           int64_t dim, int64_t ld, float scale) {
  const int64_t groups = int64_t(g.unique_ids.size());
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t k = 0; k < groups; ++k) {
    float* row = grad_table + int64_t(g.unique_ids[k]) * dim;
    for (int64_t p = g.start[k]; p < g.start[k + 1]; ++p) {
      const float* src = dout + g.order[p] * ld;
#pragma omp simd
      for (int64_t i = 0; i < dim; ++i) row[i] += scale * src[i];
    }
  }
}

}  // namespace rt::kernels
