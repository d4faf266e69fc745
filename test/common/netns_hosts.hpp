// Simulated hosts for multi-host tests: network namespaces on a bridge, made by
// tools/netns/hosts.sh (addresses 10.99.0.1, 10.99.0.2, ...). Needs root.
#pragma once
#include <string>

namespace nettest {

// Creates the hosts on construction (throws std::runtime_error with the script's output if
// that fails) and always deletes them on destruction.
// True (after a test message) when this process cannot create namespaces: not root. CI
// runs as root; elsewhere the namespace tests skip.
bool namespaces_unavailable();

class NetnsHosts {
 public:
  // tag: a few letters that keep concurrent tests apart; options: passed to `hosts.sh up`,
  // e.g. "--firewall 29500-29510". layout: "up" (one switch) or "sites" (two sites of
  // count/2 hosts, joined by one slow link; `hosts.sh sites` takes the options then).
  NetnsHosts(int count, const std::string& tag, const std::string& options = "", const std::string& layout = "up");
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  // The namespace of host i, for `ip netns exec`.
  std::string ns(int i) const;
  // The switch's namespace: the bridge's, or where the link emulator runs (--link-emulator).
  std::string switch_ns() const;
  // With layout "sites": the switch namespace of site 'a' or 'b' (its end of the slow link
  // is the tap wan0).
  std::string site_ns(char site) const;

 private:
  void down() const;
  std::string prefix_;
  int count_;
};

}  // namespace nettest
