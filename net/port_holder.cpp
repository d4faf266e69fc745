// Finds the listener of a port through /proc/net/tcp{,6} (socket inode) and the
// /proc/<pid>/fd links that point at that inode.
#include "port_holder.hpp"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace rt::net {
namespace {

std::vector<std::string> listening_inodes(int port) {
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // column titles
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      auto colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) inodes.push_back(inode);
    }
  }
  return inodes;
}

std::string command_line(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : raw)
    if (c == '\0') c = ' ';
  while (!raw.empty() && raw.back() == ' ') raw.pop_back();
  if (raw.size() > 120) raw = raw.substr(0, 117) + "...";
  return raw;
}

}  // namespace

std::string describe_port_holder(int port) {
  auto inodes = listening_inodes(port);
  if (inodes.empty()) return "";
  DIR* proc = opendir("/proc");
  if (!proc) return "";
  std::string found;
  while (dirent* e = readdir(proc)) {
    std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string fd_dir = "/proc/" + pid + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (!fds) continue;
    while (dirent* f = readdir(fds)) {
      char target[128];
      std::string link = fd_dir + "/" + f->d_name;
      ssize_t len = readlink(link.c_str(), target, sizeof target - 1);
      if (len <= 0) continue;
      target[len] = '\0';
      for (const auto& inode : inodes)
        if (std::string(target) == "socket:[" + inode + "]") found = "pid " + pid + " (" + command_line(pid) + ")";
      if (!found.empty()) break;
    }
    closedir(fds);
    if (!found.empty()) break;
  }
  closedir(proc);
  return found;
}

}  // namespace rt::net
