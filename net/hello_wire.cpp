// Handshake text: "ringtrain-hello 2\njob=...\nworld=...\nrank=...\n" then the config text;
// in the fingerprint form "ringtrain-hello 2\nfingerprint=...\nworld=...\nrank=...\n".
// The config text is sent whole (it is small) so that a mismatch can name the first key
// that differs and both values, not just "hash differs".
#include "hello_wire.hpp"

#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "wire_format.hpp"

namespace rt::net {
namespace {

const char* kFirstLine = "ringtrain-hello 2";

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

Hello fingerprint_form(const Hello& full) {
  Hello h;
  h.world = full.world;
  h.rank = full.rank;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a(full.job_id + '\0' + full.config_text)));
  h.fingerprint = hex;
  return h;
}

std::string encode_hello(const Hello& h) {
  std::ostringstream out;
  out << kFirstLine << "\n";
  if (h.fingerprint_only()) out << "fingerprint=" << h.fingerprint;
  else out << "job=" << h.job_id;
  out << "\nworld=" << h.world << "\nrank=" << h.rank << "\n" << h.config_text;
  return out.str();
}

std::optional<Hello> decode_hello(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kFirstLine) return std::nullopt;
  Hello h;
  if (!std::getline(in, line)) return std::nullopt;
  if (line.rfind("job=", 0) == 0) h.job_id = line.substr(4);
  else if (line.rfind("fingerprint=", 0) == 0 && line.size() > 12) h.fingerprint = line.substr(12);
  else return std::nullopt;
  for (const char* key : {"world=", "rank="}) {
    if (!std::getline(in, line) || line.rfind(key, 0) != 0) return std::nullopt;
    try {
      size_t used = 0;
      const std::string value = line.substr(std::string(key).size());
      const int v = std::stoi(value, &used);
      if (used != value.size()) return std::nullopt;
      (key[0] == 'w' ? h.world : h.rank) = v;
    } catch (...) {
      return std::nullopt;
    }
  }
  std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (h.fingerprint_only() && !rest.empty()) return std::nullopt;
  h.config_text = rest;
  return h;
}

std::string compare_hello(const Hello& mine, const Hello& theirs, const std::string& addr) {
  std::string who = "rank " + std::to_string(theirs.rank) + " (" + addr + ")";
  if (mine.fingerprint_only() != theirs.fingerprint_only())
    return "security mismatch with " + who + ": one side runs with --key and the other without; give every rank the same --key";
  if (theirs.world != mine.world)
    return "world size mismatch with " + who + ": " + std::to_string(mine.world) + " ranks here and " +
           std::to_string(theirs.world) + " there; start every rank with the same --peers list";
  if (mine.fingerprint_only()) {
    if (mine.fingerprint == theirs.fingerprint) return "";
    return "job id or config mismatch with " + who +
           ": start every rank with the same flags and job id (without --key the ranks compare only a fingerprint "
           "of them; with --key the message names the flag that differs)";
  }
  if (theirs.job_id != mine.job_id)
    return "job id mismatch with " + who + ": '" + mine.job_id + "' here and '" + theirs.job_id +
           "' there; start every rank with the same job id, and give different jobs different ports";
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

std::string encode_refusal(const std::string& reason, const std::string& own_hello) {
  return reason + "\n" + own_hello;
}

void decode_refusal(const std::string& payload, std::string& reason, std::string& their_hello) {
  const auto nl = payload.find('\n');
  reason = payload.substr(0, nl);
  their_hello = nl == std::string::npos ? "" : payload.substr(nl + 1);
}

}  // namespace rt::net
