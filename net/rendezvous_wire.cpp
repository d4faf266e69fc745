// The lines of the rendezvous protocol: see rendezvous_wire.hpp.
#include "rendezvous_wire.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>
#include <sstream>

namespace rt::net {

uint64_t new_lineage() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = ((uint64_t(rd()) << 32) ^ uint64_t(rd())) >> 1;  // 63 bits: an int64_t on the wire
  return v;
}

std::string lineage_text(uint64_t lineage) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)lineage);
  return s;
}

std::optional<uint64_t> parse_lineage(const std::string& text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | uint64_t(d);
  }
  if (v >> 63) return std::nullopt;  // new_lineage() makes 63 bits
  return v;
}

}  // namespace rt::net

namespace rt::net::wire {
namespace {
constexpr size_t kMaxWords = 16;
}  // namespace

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) {
    if (out.size() == kMaxWords) return {};
    out.push_back(w);
  }
  return out;
}

bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t& out) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

std::string list_text(const std::vector<int>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (int r : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return s;
}

std::optional<std::vector<int>> parse_list(const std::string& s, int world) {
  std::vector<int> out;
  if (s == "-") return out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    int64_t r;
    if (!parse_int(s.substr(at, comma - at), 0, world - 1, r)) return std::nullopt;
    if (!out.empty() && r <= out.back()) return std::nullopt;
    out.push_back(int(r));
    at = comma + 1;
  }
  return out;
}

std::string encode_go(const Membership& m) {
  return "elastic go " + std::to_string(m.epoch) + " " + list_text(m.members) + " " + std::to_string(m.state_epoch) +
         " " + list_text(m.state_members) + " " + list_text(m.stateful) + " " + std::to_string(m.target_step) + " " +
         lineage_text(m.lineage);
}

std::optional<Membership> decode_go(const std::vector<std::string>& w, int world) {
  if (w.size() != 9 || w[0] != "elastic" || w[1] != "go") return std::nullopt;
  Membership m;
  const auto lineage = parse_lineage(w[8]);
  if (!parse_int(w[2], 1, kMaxEpoch, m.epoch) || !parse_int(w[4], -1, kMaxEpoch, m.state_epoch) ||
      !parse_int(w[7], 0, kMaxStep, m.target_step) || !lineage || *lineage == 0)
    return std::nullopt;
  m.lineage = *lineage;
  auto members = parse_list(w[3], world), state_members = parse_list(w[5], world), stateful = parse_list(w[6], world);
  if (!members || members->empty() || !state_members || !stateful) return std::nullopt;
  m.members = *members, m.state_members = *state_members, m.stateful = *stateful;
  for (int r : m.stateful)
    if (m.index_of(r) < 0) return std::nullopt;
  return m;
}

std::string encode_checkin(int rank, const MemberState& s) {
  return "elastic checkin " + std::to_string(rank) + " " + std::to_string(s.epoch) + " " + std::to_string(s.step) + " " +
         std::to_string(s.oldest_step) + " " + list_text(s.members) + " " + lineage_text(s.lineage);
}

std::optional<std::pair<int, MemberState>> decode_checkin(const std::vector<std::string>& w, int world, int me,
                                                          int64_t max_step) {
  if (w.size() != 8 || w[0] != "elastic" || w[1] != "checkin") return std::nullopt;
  int64_t rank, epoch, step, oldest;
  if (!parse_int(w[2], 0, world - 1, rank) || rank == me || !parse_int(w[3], -1, kMaxEpoch - 1, epoch) ||
      !parse_int(w[4], 0, std::min(max_step, kMaxStep), step) || !parse_int(w[5], 0, step, oldest))
    return std::nullopt;
  auto members = parse_list(w[6], world);
  const auto lineage = parse_lineage(w[7]);
  // A member with state names its ring's lineage; one without names none.
  if (!members || (epoch >= 0 && !std::binary_search(members->begin(), members->end(), int(rank))) || !lineage ||
      (epoch >= 0) != (*lineage != 0))
    return std::nullopt;
  return std::make_pair(int(rank), MemberState{epoch, *lineage, std::move(*members), step, oldest});
}

bool is_status_request(const std::vector<std::string>& w, int world, int* asker) {
  int64_t rank = -1;
  if (w.size() < 2 || w.size() > 3 || w[0] != "elastic" || w[1] != "status") return false;
  if (w.size() == 3 && !parse_int(w[2], 0, world - 1, rank)) return false;
  if (asker) *asker = int(rank);
  return true;
}

std::string status_request(int asker) { return "elastic status " + std::to_string(asker); }

std::string encode_done(int64_t epoch, uint64_t lineage, int64_t step) {
  return "elastic done " + std::to_string(epoch) + " " + lineage_text(lineage) + " " + std::to_string(step);
}

StatusAnswer parse_status(const std::string& answer) {
  const auto w = words(answer);
  StatusAnswer a;
  if (w.size() == 2 && w[0] == "elastic" && w[1] == "starting") {
    a.kind = StatusAnswer::Starting;
    return a;
  }
  int64_t epoch, step = -1;
  std::optional<uint64_t> lineage;
  if (w.size() < 4 || w[0] != "elastic" || !parse_int(w[2], -1, kMaxEpoch, epoch) || !(lineage = parse_lineage(w[3])))
    return a;
  if (w[1] == "running" && w.size() == 5 && parse_int(w[4], 0, kMaxStep, step)) a.kind = StatusAnswer::Running;
  else if (w[1] == "done" && w.size() == 5 && parse_int(w[4], 0, kMaxStep, step)) a.kind = StatusAnswer::Done;
  else if (w[1] == "lobby" && w.size() == 4) a.kind = StatusAnswer::Lobby;
  else return a;
  a.epoch = epoch, a.lineage = *lineage, a.step = step;
  return a;
}

std::string encode_merge(uint64_t lineage, int64_t step) {
  return "elastic merge " + lineage_text(lineage) + " " + std::to_string(step);
}

std::optional<std::pair<uint64_t, int64_t>> decode_merge(const std::vector<std::string>& w) {
  int64_t step;
  if (w.size() != 4 || w[0] != "elastic" || w[1] != "merge" || !parse_int(w[3], 0, kMaxStep, step)) return std::nullopt;
  const auto lineage = parse_lineage(w[2]);
  if (!lineage || *lineage == 0) return std::nullopt;
  return std::make_pair(*lineage, step);
}

}  // namespace rt::net::wire
