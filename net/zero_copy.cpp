// Zero-copy sends: see zero_copy.hpp.
#include "zero_copy.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "link.hpp"

namespace rt::net {

struct ZeroCopySends::State {
  std::mutex mu;
  std::condition_variable released;
  std::vector<size_t> in_flight;  // per region
  size_t total = 0;
};

namespace {

// What a message carries to its free callback: the counters it must decrement.
struct Ticket {
  std::shared_ptr<ZeroCopySends::State> state;
  size_t region;
};

// Runs on a libzmq thread (or ours) once libzmq no longer reads the message's bytes.
void release(void*, void* hint) {
  auto* ticket = static_cast<Ticket*>(hint);
  {
    auto& s = *ticket->state;
    std::lock_guard lk(s.mu);
    --s.in_flight[ticket->region];
    --s.total;
  }
  ticket->state->released.notify_all();
  delete ticket;
}

// Waits until `done` holds or `limit` passes; false on timeout.
template <typename Pred>
bool wait_for(ZeroCopySends::State& s, std::chrono::milliseconds limit, Pred done) {
  std::unique_lock lk(s.mu);
  return s.released.wait_for(lk, limit, done);
}

}  // namespace

ZeroCopySends::ZeroCopySends(Link& t, size_t regions) : t_(t), state_(std::make_shared<State>()) {
  state_->in_flight.assign(regions, 0);
}

ZeroCopySends::~ZeroCopySends() {
  auto idle = [&] { return state_->total == 0; };
  if (wait_for(*state_, std::chrono::milliseconds(0), idle)) return;
  // An error left messages queued: a live peer still takes them, so give it a moment; a
  // silent one never will, so then drop everything queued (that releases the messages).
  if (wait_for(*state_, std::chrono::seconds(2), idle)) return;
  t_.drop_outgoing_data();
  if (wait_for(*state_, std::chrono::seconds(10), idle)) return;
  // Returning now would let libzmq read a buffer the caller may free: stop instead.
  std::fprintf(stderr, "ringtrain: the network library kept a sent buffer after its socket was closed; stopping\n");
  std::abort();
}

zmq::message_t ZeroCopySends::borrow(const void* data, size_t bytes, size_t region) {
  if (bytes == 0) return zmq::message_t();
  {
    std::lock_guard lk(state_->mu);
    ++state_->in_flight[region];
    ++state_->total;
  }
  auto* ticket = new Ticket{state_, region};
  // libzmq never writes through the pointer; its API just is not const-correct.
  return zmq::message_t(const_cast<void*>(data), bytes, &release, ticket);
}

void ZeroCopySends::wait_region(size_t region) {
  wait_until([&] { return state_->in_flight[region] == 0; });
}

void ZeroCopySends::wait_all() {
  wait_until([&] { return state_->total == 0; });
}

void ZeroCopySends::wait_until(const std::function<bool()>& done) {
  const auto start = Clock::now();
  const auto stall = std::chrono::duration<double>(t_.options().stall_timeout_s);
  while (!wait_for(*state_, std::chrono::milliseconds(5), done)) {
    t_.tick();
    if (t_.options().stall_timeout_s > 0 && Clock::now() - start > stall)
      t_.fail("sent data was not taken by the network for " +
                  std::to_string(static_cast<int>(t_.options().stall_timeout_s)) +
                  " s; the receiving rank is alive but does not read",
              true);
  }
}

}  // namespace rt::net
