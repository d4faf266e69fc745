#include "auto_batch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "ringtrain/errors.hpp"
#include "ringtrain/train/log.hpp"
#include "peer_values.hpp"
#include "test_hooks.hpp"

namespace rt::train {

std::vector<int64_t> split_rows(int64_t rows, const std::vector<double>& rates) {
  const size_t n = rates.size();
  if (n < 1 || rows < int64_t(n)) throw RuntimeError("split_rows: fewer rows than ranks (internal error)");
  const double total = std::accumulate(rates.begin(), rates.end(), 0.0);
  // Each rank's share rounded down (at least one row), then rows moved one at a time to the
  // rank furthest below its share, or from the one furthest above it, until they add up.
  std::vector<int64_t> out(n);
  std::vector<double> below(n);  // share - rows given
  int64_t given = 0;
  for (size_t r = 0; r < n; ++r) {
    const double share = double(rows) * rates[r] / total;
    out[r] = std::max<int64_t>(1, int64_t(std::floor(share)));
    below[r] = share - double(out[r]);
    given += out[r];
  }
  auto pick = [&](bool most_below) {  // ties go to the lower rank
    size_t best = n;
    for (size_t r = 0; r < n; ++r) {
      if (!most_below && out[r] <= 1) continue;
      if (best == n || (most_below ? below[r] > below[best] : below[r] < below[best])) best = r;
    }
    return best;
  };
  for (; given < rows; ++given) {
    const size_t r = pick(true);
    ++out[r], below[r] -= 1;
  }
  for (; given > rows; --given) {
    const size_t r = pick(false);
    --out[r], below[r] += 1;
  }
  return out;
}

double time_training_pass(model::GPT& model, int64_t B, int64_t T, int reps) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> idx(size_t(B * T)), tgt(size_t(B * T));
  for (size_t i = 0; i < idx.size(); ++i) {  // any tokens cost the same; these are cheap and valid
    idx[i] = int32_t((i * 2654435761u) % uint64_t(vocab));
    tgt[i] = int32_t((i * 40503u + 7) % uint64_t(vocab));
  }
  double best = 0;
  for (int k = 0; k <= reps; ++k) {
    const double t0 = now_s();
    model.forward(idx.data(), tgt.data(), B, T);
    model.backward(1.0f);
    const double t = now_s() - t0;
    if (k == 1 || (k > 1 && t < best)) best = t;  // k == 0 is the warm-up
  }
  model.params().zero_grad();
  return best;
}

std::vector<int64_t> auto_device_batches(net::Communicator* comm, model::GPT& model, int64_t rows, int64_t T) {
  const int world = comm ? comm->world() : 1;
  if (!comm) return {rows};
  const int64_t probe = std::max<int64_t>(1, rows / world);  // this rank's even share
  double rate = double(probe) / time_training_pass(model, probe, T, 2);
  // For the test of uneven ranks only: RINGTRAIN_TEST_RATE_SCALE=R:F makes rank R report F
  // times its measured rate, as a host F times as fast would.
  if (const char* f = test_hook_value("RINGTRAIN_TEST_RATE_SCALE", comm->rank())) rate *= std::atof(f);
  const std::vector<double> rates = comm->all_gather_record<double>(rate);
  for (int r = 0; r < world; ++r)
    if (!std::isfinite(rates[size_t(r)]) || rates[size_t(r)] <= 0 || rates[size_t(r)] > 1e12)
      bad_peer_value(*comm, r, "a step rate of " + std::to_string(rates[size_t(r)]) + " rows/s");
  std::vector<int64_t> batches = split_rows(rows, rates);
  std::string text;
  for (int r = 0; r < world; ++r)
    text += (r ? ", " : "") + std::to_string(batches[size_t(r)]) + " (" + std::to_string(int(rates[size_t(r)] * T)) + " tok/s)";
  logf("--device-batch auto: %lld rows per step split by measured speed: %s", (long long)rows, text.c_str());
  return batches;
}

}  // namespace rt::train
