// Host names of --peers: see addresses.hpp.
#include "addresses.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include "ringtrain/errors.hpp"

namespace rt::net {

std::string numeric_host(const std::string& host) {
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) continue;
    char buf[NI_MAXHOST];
    int rc = getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
    if (rc == 0) return family == AF_INET6 ? "[" + std::string(buf) + "]" : std::string(buf);
  }
  throw UsageError("cannot resolve host '" + host + "' of --peers; use an IP address or a name every host resolves");
}

bool is_loopback(const std::string& numeric) {
  return numeric.rfind("127.", 0) == 0 || numeric == "[::1]" || numeric.rfind("[::ffff:127.", 0) == 0;
}

}  // namespace rt::net
