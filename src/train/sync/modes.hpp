// The Sync implementations, one per file (see sync.hpp); make_sync picks one.
#pragma once
#include <memory>

#include "sync/sync.hpp"

namespace rt::train {

std::unique_ptr<Sync> make_single_process_sync(const SyncContext& ctx);   // single_process.cpp
std::unique_ptr<Sync> make_gradient_sync(const SyncContext& ctx);         // gradient.cpp
std::unique_ptr<Sync> make_average_sync(const SyncContext& ctx);          // average.cpp
std::unique_ptr<Sync> make_overlapped_average_sync(const SyncContext& ctx);  // overlapped_average.cpp

}  // namespace rt::train
