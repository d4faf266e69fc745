// A communication thread: runs posted collectives one at a time, in order, while the
// caller goes on computing (e.g. backward with earlier layers). wait() blocks until every
// posted task is done and rethrows the first error. After an error the remaining tasks are
// skipped: the communicator is broken by then anyway.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace rt::train {

class CommQueue {
 public:
  CommQueue();
  ~CommQueue();  // waits for the running task; drops the rest
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  void post(std::function<void()> task);
  void wait();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int pending_ = 0;
  bool quit_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace rt::train
