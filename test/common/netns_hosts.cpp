#include "netns_hosts.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <boost/test/unit_test.hpp>

#include "spawn.hpp"

namespace nettest {
namespace {

std::string hosts_script() {
  const char* root = std::getenv("RINGTRAIN_SOURCE_ROOT");
  return "bash " + std::string(root ? root : ".") + "/tools/netns/hosts.sh";
}

}  // namespace

bool namespaces_unavailable() {
  if (geteuid() == 0) return false;
  BOOST_TEST_MESSAGE("skipped: network namespaces need root (CI runs as root)");
  return true;
}

NetnsHosts::NetnsHosts(int count, const std::string& tag, const std::string& options, const std::string& layout)
    : prefix_("rt" + tag + std::to_string(getpid() % 100000) + "x"), count_(count) {
  if (layout != "up" && layout != "sites") throw std::logic_error("NetnsHosts: layout is up or sites");
  down();  // a namespace left by a killed earlier run of this pid would make `up` fail
  std::string out;
  if (run_shell(hosts_script() + " " + layout + " " + prefix_ + " " + std::to_string(count_) + " " + options, &out) != 0) {
    down();
    throw std::runtime_error("creating network namespaces failed: " + out);
  }
}

NetnsHosts::~NetnsHosts() { down(); }

void NetnsHosts::down() const {
  run_shell(hosts_script() + " down " + prefix_ + " " + std::to_string(count_));
}

std::string NetnsHosts::ns(int i) const { return prefix_ + "h" + std::to_string(i); }

std::string NetnsHosts::switch_ns() const { return prefix_ + "sw"; }

std::string NetnsHosts::site_ns(char site) const { return prefix_ + "s" + site; }

}  // namespace nettest
