// The prepared data a training run reads (written by `ringtrain data prepare`), checked
// whole before training starts.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/data/shard.hpp"

namespace rt::train {

struct DataSet {
  std::shared_ptr<const data::Shard> train, val;
  std::vector<int32_t> token_bytes;
  uint32_t vocab = 0;
  bool crop_long_docs = false;  // meta.json "long_docs" (data prepare --long-docs); pieces if absent
};

// Throws rt::UsageError naming what is missing or inconsistent and how to fix it.
DataSet load_dataset(const std::string& dir);

}  // namespace rt::train
