// Host names of --peers as the sockets use them: numeric, one rule on every host.
#pragma once
#include <string>

namespace rt::net {

// The numeric address of `host`, bracketed if IPv6. Binding and connecting both use it
// (ZeroMQ binds only literals), with one rule on every host so that all ranks agree: a
// name means its IPv4 address when it has one, else its IPv6 address. Throws UsageError
// naming the host when it does not resolve.
std::string numeric_host(const std::string& host);
// A numeric host (as numeric_host returns it) on the loopback network.
bool is_loopback(const std::string& numeric);

}  // namespace rt::net
