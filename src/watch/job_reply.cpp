#include "ringtrain/watch/job_reply.hpp"

#include <cmath>

#include "ringtrain/errors.hpp"

using nlohmann::json;

namespace rt::watch {
namespace {

constexpr double kMaxCount = 1e15;  // steps, tokens, bytes, epochs: far above any real run

[[noreturn]] void bad(const std::string& what) {
  throw RuntimeError("the job sent a reply with " + what + "; the watcher and the job must run the same ringtrain release");
}

bool is_number(const json& v) { return v.is_number() && std::isfinite(v.get<double>()); }

// Copies key from `in` to `out` if present: a finite number within [lo, hi] (null allowed
// where the job reports "not measured yet", e.g. val bpb before the first evaluation).
void number(const json& in, json& out, const char* key, double lo, double hi, bool null_ok = false) {
  if (!in.contains(key)) return;
  const json& v = in[key];
  if (v.is_null() && null_ok) {
    out[key] = nullptr;
    return;
  }
  if (!is_number(v) || v.get<double>() < lo || v.get<double>() > hi) bad(std::string("a bad value of '") + key + "'");
  out[key] = v.get<double>();
}

void integer(const json& in, json& out, const char* key, int64_t lo, int64_t hi) {
  if (!in.contains(key)) return;
  const json& v = in[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) bad(std::string("a bad value of '") + key + "'");
  out[key] = v.get<int64_t>();
}

std::string text(const json& v, const char* what) {
  if (!v.is_string()) bad(std::string("a non-string ") + what);
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > kMaxReplyText) bad(std::string("a ") + what + " longer than " + std::to_string(kMaxReplyText) + " bytes");
  for (char c : s)
    if (c < 0x20 || c > 0x7e) bad(std::string("a ") + what + " holding a control or non-ASCII byte");
  return s;
}

const json& array(const json& in, const char* key, size_t max) {
  const json& v = in[key];
  if (!v.is_array()) bad(std::string("'") + key + "' that is not a list");
  if (v.size() > max) bad(std::string("'") + key + "' of more than " + std::to_string(max) + " entries");
  return v;
}

json rank_times(const json& in) {
  json out = json::array();
  for (const auto& e : array(in, "ranks", kMaxListedRanks)) {
    if (!e.is_object()) bad("a rank entry that is not an object");
    json c = json::object();
    number(e, c, "step_s", 0, 1e9);
    number(e, c, "comm_s", 0, 1e9);
    number(e, c, "bytes_sent", 0, kMaxCount);
    integer(e, c, "rank", 0, int64_t(kMaxListedRanks));
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

json checked_status(const std::string& reply) {
  const json in = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded() || !in.is_object()) {
    // Not JSON: the job's own words (e.g. an error of an older release), shown as such.
    bad("text that is not a status: '" + reply.substr(0, 120) + "'");
  }
  return checked_status_object(in);
}

json checked_status_object(const json& in) {
  if (!in.is_object()) bad("a status that is not an object");
  json out = json::object();
  integer(in, out, "step", 0, int64_t(kMaxCount));
  integer(in, out, "steps", 0, int64_t(kMaxCount));
  integer(in, out, "epoch", 0, int64_t(1) << 40);
  number(in, out, "loss", -1e6, 1e6, true);
  number(in, out, "val_bpb", 0, 1e6, true);
  number(in, out, "tok_per_s", 0, 1e12, true);
  number(in, out, "eta_s", 0, 1e12, true);
  number(in, out, "lr_mult", -1e6, 1e6, true);
  number(in, out, "mfu", 0, 1e6, true);
  number(in, out, "tokens", 0, kMaxCount);
  number(in, out, "step_s", 0, 1e9, true);
  number(in, out, "bytes_sent", 0, kMaxCount);
  number(in, out, "bytes_sent_total", 0, kMaxCount);
  number(in, out, "elapsed_s", 0, 1e12);
  if (in.contains("ranks")) out["ranks"] = rank_times(in);
  if (in.contains("members")) {
    json members = json::array();
    for (const auto& m : array(in, "members", kMaxListedRanks)) {
      if (!m.is_object() || !m.contains("state")) bad("a member entry without a state");
      const std::string state = text(m["state"], "member state");
      if (state != "live" && state != "lost" && state != "joining") bad("a member state '" + state + "'");
      json c = {{"state", state}};
      integer(m, c, "rank", 0, int64_t(kMaxListedRanks));
      members.push_back(std::move(c));
    }
    out["members"] = std::move(members);
  }
  if (in.contains("addresses")) {
    json addresses = json::array();
    for (const auto& a : array(in, "addresses", kMaxListedRanks)) addresses.push_back(text(a, "rank address"));
    out["addresses"] = std::move(addresses);
  }
  if (in.contains("last_checkpoint")) {
    const json& c = in["last_checkpoint"];
    if (!c.is_object()) bad("a 'last_checkpoint' that is not an object");
    json cp = json::object();
    integer(c, cp, "step", 0, int64_t(kMaxCount));
    if (c.contains("dir")) cp["dir"] = text(c["dir"], "checkpoint directory");
    out["last_checkpoint"] = std::move(cp);
  }
  return out;
}

std::optional<json> checked_record(const json& r) {
  if (!r.is_object() || !r.contains("step")) return std::nullopt;
  json out = json::object();
  integer(r, out, "step", 0, int64_t(kMaxCount));
  if (r.contains("event")) {
    const std::string event = text(r["event"], "event name");
    if (event != "rank_lost" && event != "rank_joined") return std::nullopt;
    out["event"] = event;
    integer(r, out, "rank", 0, int64_t(kMaxListedRanks));
    integer(r, out, "world", 0, int64_t(kMaxListedRanks));
    return out;
  }
  number(r, out, "tokens", 0, kMaxCount);
  if (r.contains("val_bpb")) {
    number(r, out, "val_bpb", 0, 1e6, true);
    number(r, out, "val_loss", -1e6, 1e6, true);
    return out;
  }
  if (!r.contains("loss")) return std::nullopt;
  number(r, out, "loss", -1e6, 1e6, true);
  number(r, out, "lr_mult", -1e6, 1e6, true);
  number(r, out, "tok_per_s", 0, 1e12, true);
  number(r, out, "step_s", 0, 1e9, true);
  number(r, out, "comm_s", 0, 1e9, true);
  number(r, out, "mfu", 0, 1e6, true);
  number(r, out, "elapsed_s", 0, 1e12);
  number(r, out, "synced_s", 0, 1e12);
  number(r, out, "bytes_sent", 0, kMaxCount);
  if (r.contains("ranks")) out["ranks"] = rank_times(r);
  return out;
}

json checked_history(const std::string& reply, uint64_t after_seq) {
  const json in = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded() || !in.is_object()) bad("text that is not a metrics history: '" + reply.substr(0, 120) + "'");
  json out = json::object();
  if (!in.contains("id")) bad("a history without an id");
  out["id"] = text(in["id"], "history id");
  integer(in, out, "last_seq", 0, int64_t(kMaxCount));
  integer(in, out, "events_total", 0, int64_t(kMaxCount));
  if (!in.contains("more") || !in["more"].is_boolean()) bad("a history without 'more'");
  out["more"] = in["more"].get<bool>();
  if (!in.contains("records")) bad("a history without records");
  json records = json::array();
  uint64_t last = after_seq;
  for (const auto& e : array(in, "records", kMaxReplyRecords)) {
    if (!e.is_object() || !e.contains("seq") || !e["seq"].is_number_unsigned() || !e.contains("r"))
      bad("a history entry without a record number");
    const uint64_t seq = e["seq"].get<uint64_t>();
    if (seq <= last || seq > uint64_t(kMaxCount)) bad("record numbers out of order");
    last = seq;
    if (auto r = checked_record(e["r"])) records.push_back({{"seq", seq}, {"r", std::move(*r)}});
  }
  out["records"] = std::move(records);
  out["after"] = last;
  return out;
}

}  // namespace rt::watch
