#include "stop_signals.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>

namespace rt::train {
namespace {
std::atomic<int> g_signals{0};
extern "C" void on_signal(int) { g_signals.fetch_add(1); }
}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal must not make library calls fail with EINTR
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signals_received() { return g_signals.load(); }

SecondSignalWatcher::SecondSignalWatcher(std::function<void()> on_abort) : on_abort_(std::move(on_abort)) {
  thread_ = std::thread([this] {
    while (watching_) {
      if (g_signals.load() >= 2) {
        on_abort_();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

SecondSignalWatcher::~SecondSignalWatcher() {
  watching_ = false;
  thread_.join();
}

}  // namespace rt::train
