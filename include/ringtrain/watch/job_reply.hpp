// What `ringtrain watch` accepts from a job: the replies to "status" and "metrics after N",
// checked as untrusted input. A reply passes through a schema: known keys of the right type
// and range are copied, everything else is dropped; a value out of range fails the whole
// reply with a message naming it. Strings are bounded and printable ASCII only, so what
// reaches the page or /metrics is data, never markup.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace rt::watch {

inline constexpr size_t kMaxListedRanks = 4096;   // ranks, members, addresses in one reply
inline constexpr size_t kMaxReplyRecords = 8192;  // records in one history reply
inline constexpr size_t kMaxReplyText = 512;      // an address, a checkpoint directory

// The job's "status" reply, checked. Throws RuntimeError naming the bad field.
nlohmann::json checked_status(const std::string& reply);
// The same for a reply already parsed (an object).
nlohmann::json checked_status_object(const nlohmann::json& reply);

// One history reply, checked: {"id", "last_seq", "more", "events_total", "records":
// [{"seq", "r"}]} with seq increasing and above `after_seq`, each record checked by
// checked_record (a record of an unknown kind is dropped). Throws RuntimeError.
nlohmann::json checked_history(const std::string& reply, uint64_t after_seq);

// A step record, an evaluation or a membership event with only its known fields, or
// nullopt if it is none of them.
std::optional<nlohmann::json> checked_record(const nlohmann::json& r);

}  // namespace rt::watch
