// The failure state of a link: see failure_state.hpp.
#include "failure_state.hpp"

#include "ringtrain/net/communicator.hpp"

namespace rt::net {

bool FailureState::record(Kind kind, const std::string& message) {
  std::lock_guard lk(mu_);
  if (failed_) return false;
  kind_ = kind;
  message_ = message;
  failed_ = true;
  return true;
}

void FailureState::throw_it() const {
  Kind kind;
  std::string message;
  {
    std::lock_guard lk(mu_);
    kind = kind_;
    message = message_;
  }
  if (kind == Kind::PeerLost) throw PeerLost(message);
  if (kind == Kind::Aborted) throw Aborted(message);
  throw RuntimeError(message);
}

std::string FailureState::message() const {
  std::lock_guard lk(mu_);
  return message_;
}

}  // namespace rt::net
