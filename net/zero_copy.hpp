// Zero-copy sends: a message that points into the caller's buffer instead of a copy of it.
//
// libzmq reads such a message on one of its I/O threads, some time after zmq_msg_send
// returned, and says it is done through a free callback. Until then the region must not
// change. ZeroCopySends counts the messages in flight per region (a chunk of the buffer),
// lets the collective wait for one region before overwriting it, and for all of them before
// returning the buffer to the caller.
//
// The counters live in a shared state that every message keeps alive, so a callback that
// runs late (after an error, on socket close) never touches freed memory. On the error path
// the destructor waits a bounded time for the releases, then makes the transport drop its
// queued data (which releases the rest) and waits again: the caller's buffer is not read
// after the collective has thrown.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include <zmq.hpp>

namespace rt::net {

class Link;

class ZeroCopySends {
 public:
  ZeroCopySends(Link& t, size_t regions);
  ~ZeroCopySends();
  ZeroCopySends(const ZeroCopySends&) = delete;
  ZeroCopySends& operator=(const ZeroCopySends&) = delete;

  // A message over [data, data + bytes), counted against `region` until libzmq releases it.
  zmq::message_t borrow(const void* data, size_t bytes, size_t region);
  // Returns once no message of `region` is in flight. Keeps the transport ticking (failure
  // detection) while it waits; throws like Link::tick.
  void wait_region(size_t region);
  // Returns once nothing is in flight; call before the collective returns.
  void wait_all();

  struct State;

 private:
  // Waits (the caller holds no lock) until done() holds, with done() checked under the lock.
  void wait_until(const std::function<bool()>& done);

  Link& t_;
  std::shared_ptr<State> state_;
};

}  // namespace rt::net
