// The one failure state of a link (link.hpp): the first failure recorded is the link's for
// good, later ones are ignored, and every later use throws it with its kind (a lost peer, an
// abort, anything else). Any thread may record; the collective's thread throws.
#pragma once
#include <atomic>
#include <mutex>
#include <string>

namespace rt::net {

class FailureState {
 public:
  enum class Kind { None, PeerLost, Aborted, Other };

  // False when a failure was already recorded (this one is dropped).
  bool record(Kind kind, const std::string& message);
  bool failed() const { return failed_.load(); }
  // Throws the recorded failure: PeerLost, Aborted or RuntimeError.
  [[noreturn]] void throw_it() const;
  void throw_if_failed() const {
    if (failed()) throw_it();
  }
  std::string message() const;

 private:
  mutable std::mutex mu_;
  std::atomic<bool> failed_{false};
  Kind kind_ = Kind::None;
  std::string message_;
};

}  // namespace rt::net
