// SIGINT/SIGTERM during training: the first asks for a clean stop (every rank checkpoints at
// the end of the step in which the ranks agree on it), a second one aborts at once.
#pragma once
#include <atomic>
#include <functional>
#include <thread>

namespace rt::train {

// Installs the handlers.
void install_stop_signals();
// Signals received so far.
int stop_signals_received();

// While it lives, a thread watches for the second signal and then calls on_abort (which
// must make the process give up promptly, e.g. abort the communicator, or exit).
class SecondSignalWatcher {
 public:
  explicit SecondSignalWatcher(std::function<void()> on_abort);
  ~SecondSignalWatcher();
  SecondSignalWatcher(const SecondSignalWatcher&) = delete;
  SecondSignalWatcher& operator=(const SecondSignalWatcher&) = delete;

 private:
  std::function<void()> on_abort_;
  std::atomic<bool> watching_{true};
  std::thread thread_;
};

}  // namespace rt::train
