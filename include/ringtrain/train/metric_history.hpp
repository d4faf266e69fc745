// The run's metric records kept in memory, bounded, for `ringtrain watch`: every rank keeps
// the records it writes (step records, evaluations, membership events) so that a watcher
// started late, or one that moves to another rank, sees the whole run so far. The watcher
// keeps its copy in the same store.
//
// Bounded by thinning, not by forgetting: when more than `max_steps` step records are held,
// every other one is dropped (the stride doubles) and from then on only steps on the stride
// are kept, plus always the newest step, so a curve of a week-long run keeps its shape and
// its end. Evaluations and events are few; past their own bounds the oldest go.
//
// Every record gets a sequence number when it is added (never reused, also after thinning):
// a reader asks for the records after the last number it holds. A step record that goes
// back (a re-formed ring going on from an earlier step, a resumed run) first drops every
// record of the undone steps, as the --metrics file does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rt::train {

// What one `metrics after N` reply holds at most: under the 64 KiB of a service reply.
inline constexpr size_t kHistoryReplyBytes = 48 << 10;

class MetricHistory {
 public:
  explicit MetricHistory(size_t max_steps = 4096, size_t max_evals = 1024, size_t max_events = 1024);

  // A metrics record: an event (has "event"), an evaluation (has "val_bpb") or a step record.
  // Records without an integer "step" are ignored.
  void add(const nlohmann::json& record);
  void clear();
  // The records numbered after `after_seq`, oldest first, as long as their JSON fits in
  // max_bytes (at least one is returned if any is there), as JSON text: {"records": [{"seq":
  // N, "r": {...}}], "more": bool, "stride": S, "last_seq": N, "id": ID, "events_total": E}.
  // Text, not a json value: each record is kept serialised, and the reply is those bytes.
  // `extra_members` (e.g. "\"generation\":3") is added to the object as it is.
  std::string after(uint64_t after_seq, size_t max_bytes, const std::string& extra_members = "") const;
  // A record number as a client writes it (digits only, at most 19); nullopt otherwise.
  static std::optional<uint64_t> parse_seq(std::string_view text);
  uint64_t last_seq() const;
  size_t size() const;
  int64_t stride() const;
  // Membership events ever added (also those dropped past the bound).
  uint64_t events_total() const;
  // A random id of this store, made at construction: a reader that sees another id (the
  // process restarted, or the reader moved to another rank) reads everything again.
  const std::string& id() const { return id_; }

 private:
  enum class Kind { Step, Eval, Event };
  struct Entry {
    uint64_t seq;
    int64_t step;
    Kind kind;
    std::string json;  // the record, serialised once
  };
  void drop_after_step(int64_t step);
  void thin_steps();

  mutable std::mutex mu_;
  size_t max_steps_, max_evals_, max_events_;
  std::deque<Entry> entries_;
  size_t steps_ = 0, evals_ = 0, events_ = 0;
  int64_t stride_ = 1;
  int64_t last_step_record_ = -1;
  uint64_t next_seq_ = 1;
  uint64_t events_total_ = 0;
  std::string id_;
};

}  // namespace rt::train
