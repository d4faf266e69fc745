#include "refusal_log.hpp"

namespace rt::net {
namespace {

std::string host_of(const std::string& address) {
  if (!address.empty() && address[0] == '[') return address.substr(0, address.find(']') + 1);
  const auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

void RefusalLog::refused(const std::string& address, const std::string& why) {
  const auto now = std::chrono::steady_clock::now();
  std::string line;
  {
    std::lock_guard lk(mu_);
    if (by_host_.size() > 4096) by_host_.clear();  // bounded, even against many source addresses
    const std::string host = host_of(address);
    auto it = by_host_.find(host + " " + why);
    if (it == by_host_.end()) {
      by_host_[host + " " + why] = Seen{now, 0};
      line = "refused a " + what_ + " from " + address + ": " + why + "; the job goes on";
    } else if (now - it->second.last_line < std::chrono::seconds(10)) {
      ++it->second.unreported;
    } else {
      line = "refused " + std::to_string(it->second.unreported + 1) + " " + what_ + "(s) from " + host +
             " in the last " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - it->second.last_line).count()) +
             " s, the latest from " + address + ": " + why + "; the job goes on";
      it->second = Seen{now, 0};
    }
  }
  if (!line.empty()) log_(line);
}

}  // namespace rt::net
