// Who holds a TCP port: for the "port already in use" error.
#pragma once
#include <string>

namespace rt::net {

// "pid 1234 (ringtrain bench allreduce ...)" for the process listening on `port` in this
// network namespace, or "" when /proc does not tell (another user's process, container).
std::string describe_port_holder(int port);

}  // namespace rt::net
