// A static parallel-for over [0, n) on plain threads: the data code uses it for regex
// splitting and encoding, where each thread keeps its own hash maps.
#pragma once
#include <algorithm>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace rt::data {

// Calls body(thread_index, begin, end) on `threads` threads with contiguous slices of
// [0, n). The first exception thrown by any thread is rethrown here.
template <class Body>
void parallel_slices(size_t n, int threads, Body body) {
  size_t t = std::max<size_t>(1, std::min<size_t>(threads > 0 ? threads : 1, std::max<size_t>(n, 1)));
  if (t == 1) {
    body(0, size_t(0), n);
    return;
  }
  std::exception_ptr error;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (size_t i = 0; i < t; ++i) {
    pool.emplace_back([&, i] {
      try {
        body(i, n * i / t, n * (i + 1) / t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace rt::data
