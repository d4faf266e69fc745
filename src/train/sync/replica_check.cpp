#include "sync/replica_check.hpp"

#include <cmath>
#include <cstdlib>

#include "ringtrain/errors.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace rt::train {

void check_replicas(net::Communicator& comm, model::ParamSet& params, int64_t step, int64_t at, int64_t size) {
  // For the test of this check only (test/train/test_distributed.cpp, drifted_replicas_stop_the_job):
  // RINGTRAIN_TEST_PERTURB_RANK=R makes rank R move one parameter by one ulp before each
  // check after step 0, as a replica that rounds differently would.
  if (const char* r = std::getenv("RINGTRAIN_TEST_PERTURB_RANK"); r && step > 0 && std::atoi(r) == comm.rank())
    params.data()[0] = std::nextafter(params.data()[0], INFINITY);
  if (size < 0) at = 0, size = params.size();
  if (at < 0 || at + size > params.size()) throw RuntimeError("replica check outside the parameters (internal error)");
  if (const int r = first_rank_differing(comm, params.data() + at, size_t(size)); r >= 0)
    throw RuntimeError("replicas have drifted at step " + std::to_string(step) + ": rank " + std::to_string(r) +
                       "'s parameters differ from rank 0's; run the same ringtrain commit on every host (ringtrain --version), then --resume");
}

int first_rank_differing(net::Communicator& comm, const float* data, size_t n) {
  const auto all = comm.all_gather_record(crc32_of(data, n * sizeof(float)));
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) return int(r);
  return -1;
}

}  // namespace rt::train
