// Log lines for refused connections, bounded: the first refusal from an address (for one
// reason) is logged at once, later ones are counted and summed up in at most one line per
// address and reason every 10 s. So 50 connections hammering a port cannot flood the log, and
// every address that knocked still shows up.
#pragma once
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

namespace rt::net {

class RefusalLog {
 public:
  // `what` names what is refused: "connection", "handshake".
  RefusalLog(std::function<void(const std::string&)> log, std::string what)
      : log_(std::move(log)), what_(std::move(what)) {}
  // `address` as "ip:port" or "ip" (or words when unknown); `why` says what was wrong.
  void refused(const std::string& address, const std::string& why);

 private:
  struct Seen {
    std::chrono::steady_clock::time_point last_line;
    long unreported = 0;
  };
  std::function<void(const std::string&)> log_;
  std::string what_;
  std::mutex mu_;
  std::unordered_map<std::string, Seen> by_host_;  // key: address without the port, and reason
};

}  // namespace rt::net
