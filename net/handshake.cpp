// Handshake text: "ringtrain-hello 1\njob=...\nworld=...\nrank=...\n" then the config text.
// The config text is sent whole (it is small) so that a mismatch can name the first key
// that differs and both values, not just "hash differs".
#include "handshake.hpp"

#include <map>
#include <sstream>
#include <vector>

namespace rt::net {
namespace {

const char* kFirstLine = "ringtrain-hello 1";

// key=value lines in order; lines without '=' count as keys with an empty value.
std::vector<std::pair<std::string, std::string>> config_entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) out.emplace_back(line, "");
    else out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

std::string show(const std::string& v) { return v.empty() ? "(unset)" : v; }

}  // namespace

std::string encode_hello(const Hello& h) {
  std::ostringstream out;
  out << kFirstLine << "\njob=" << h.job_id << "\nworld=" << h.world << "\nrank=" << h.rank << "\n"
      << h.config_text;
  return out.str();
}

std::optional<Hello> decode_hello(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kFirstLine) return std::nullopt;
  Hello h;
  for (const char* key : {"job=", "world=", "rank="}) {
    if (!std::getline(in, line) || line.rfind(key, 0) != 0) return std::nullopt;
    std::string value = line.substr(std::string(key).size());
    try {
      if (key[0] == 'j') h.job_id = value;
      else if (key[0] == 'w') h.world = std::stoi(value);
      else h.rank = std::stoi(value);
    } catch (...) {
      return std::nullopt;
    }
  }
  std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  h.config_text = rest;
  return h;
}

std::string compare_hello(const Hello& mine, const Hello& theirs, const std::string& addr) {
  std::string who = "rank " + std::to_string(theirs.rank) + " (" + addr + ")";
  if (theirs.job_id != mine.job_id)
    return "job id mismatch with " + who + ": '" + mine.job_id + "' here and '" + theirs.job_id +
           "' there; start every rank with the same job id, and give different jobs different ports";
  if (theirs.world != mine.world)
    return "world size mismatch with " + who + ": " + std::to_string(mine.world) + " ranks here and " +
           std::to_string(theirs.world) + " there; start every rank with the same --peers list";
  if (theirs.config_text == mine.config_text) return "";
  auto a = config_entries(mine.config_text), b = config_entries(theirs.config_text);
  std::map<std::string, std::string> bm(b.begin(), b.end()), am(a.begin(), a.end());
  std::string key, here, there;
  for (const auto& [k, v] : a) {
    auto it = bm.find(k);
    std::string other = it == bm.end() ? "" : it->second;
    if (it == bm.end() || other != v) {
      key = k, here = v, there = other;
      break;
    }
  }
  if (key.empty())
    for (const auto& [k, v] : b)
      if (!am.count(k)) {
        key = k, here = "", there = v;
        break;
      }
  if (key.empty())
    return "config mismatch with " + who + " (same settings, different order or spacing); start every rank with the same flags";
  return "config mismatch with " + who + ": " + key + " is " + show(here) + " here and " + show(there) +
         " there; start every rank with the same flags";
}

}  // namespace rt::net
