// Parsing of --peers: "host:port" entries in rank order, IPv6 literals in brackets.
#include "ringtrain/net/peers.hpp"

#include <cctype>

#include "ringtrain/errors.hpp"

namespace rt::net {

std::string PeerAddress::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string PeerAddress::endpoint() const { return "tcp://" + text(); }

PeerAddress parse_peer(const std::string& entry) {
  const std::string hint = "; write HOST:PORT, e.g. 10.0.0.1:29500 or [::1]:29500";
  PeerAddress p;
  std::string port_text;
  if (!entry.empty() && entry[0] == '[') {
    auto close = entry.find(']');
    if (close == std::string::npos || close + 1 >= entry.size() || entry[close + 1] != ':')
      throw UsageError("bad peer address '" + entry + "'" + hint);
    p.host = entry.substr(1, close - 1);
    port_text = entry.substr(close + 2);
  } else {
    auto colon = entry.rfind(':');
    if (colon == std::string::npos || entry.find(':') != colon)
      throw UsageError("bad peer address '" + entry + "'" + hint);
    p.host = entry.substr(0, colon);
    port_text = entry.substr(colon + 1);
  }
  if (p.host.empty()) throw UsageError("peer address '" + entry + "' has no host" + hint);
  for (char c : p.host)
    if (std::isspace(static_cast<unsigned char>(c)))
      throw UsageError("peer address '" + entry + "' contains a space" + hint);
  bool digits = !port_text.empty() && port_text.size() <= 5;
  for (char c : port_text) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (!digits || std::stoi(port_text) < 1 || std::stoi(port_text) > 65535)
    throw UsageError("peer address '" + entry + "' needs a port between 1 and 65535" + hint);
  p.port = std::stoi(port_text);
  return p;
}

std::vector<PeerAddress> parse_peers(const std::string& list) {
  std::vector<PeerAddress> peers;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string entry = list.substr(start, comma - start);
    if (entry.empty())
      throw UsageError("--peers '" + list + "' has an empty entry; list HOST:PORT of every rank, comma-separated");
    peers.push_back(parse_peer(entry));
    start = comma + 1;
  }
  for (size_t i = 0; i < peers.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (peers[i].host == peers[j].host && peers[i].port == peers[j].port)
        throw UsageError("--peers lists " + peers[i].text() + " for both rank " + std::to_string(j) +
                         " and rank " + std::to_string(i) + "; give every rank its own port");
  return peers;
}

}  // namespace rt::net
