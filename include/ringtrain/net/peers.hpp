// Addresses of the ranks of a job: `--peers host:port,host:port,...` in rank order.
// Hosts may be IPv4 literals, bracketed IPv6 literals ("[::1]:29500") or host names.
#pragma once
#include <string>
#include <vector>

namespace rt::net {

struct PeerAddress {
  std::string host;  // as written, without IPv6 brackets
  int port = 0;
  // "host:port", with brackets around IPv6 literals: the form users wrote.
  std::string text() const;
  // "tcp://host:port" for ZeroMQ.
  std::string endpoint() const;
};

// Parses a comma-separated list. Throws rt::UsageError naming the bad entry and the fix.
std::vector<PeerAddress> parse_peers(const std::string& list);
// Parses one "host:port". Throws rt::UsageError.
PeerAddress parse_peer(const std::string& entry);

}  // namespace rt::net
