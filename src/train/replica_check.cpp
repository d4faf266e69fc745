#include "ringtrain/train/replica_check.hpp"

#include "ringtrain/errors.hpp"
#include "ringtrain/train/checkpoint.hpp"

namespace rt::train {

void check_replicas(net::Communicator& comm, const model::ParamSet& params, int64_t step) {
  const uint32_t crc = crc32_of(params.data(), size_t(params.size()) * sizeof(float));
  const auto all = comm.all_gather_record(crc);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw RuntimeError("replicas have drifted at step " + std::to_string(step) + ": rank " + std::to_string(r) +
                         "'s parameters differ from rank 0's; build every host with the same compiler and -Dnative=false, then --resume");
}

}  // namespace rt::train
