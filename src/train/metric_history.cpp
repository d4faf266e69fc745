#include "ringtrain/train/metric_history.hpp"

#include <algorithm>
#include <cstdio>
#include <random>

using nlohmann::json;

namespace rt::train {

MetricHistory::MetricHistory(size_t max_steps, size_t max_evals, size_t max_events)
    : max_steps_(std::max<size_t>(max_steps, 4)), max_evals_(std::max<size_t>(max_evals, 1)),
      max_events_(std::max<size_t>(max_events, 1)) {
  std::random_device rd;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08x%08x", rd(), rd());
  id_ = hex;
}

void MetricHistory::add(const json& record) {
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) return;
  const int64_t step = record["step"].get<int64_t>();
  const Kind kind = record.contains("event") ? Kind::Event : record.contains("val_bpb") ? Kind::Eval : Kind::Step;
  std::lock_guard lk(mu_);
  if (kind == Kind::Step) {
    // A step done again: the records from it on belong to a timeline that was undone.
    if (step <= last_step_record_) drop_after_step(step - 1);
    // Between stride points only the newest step is kept: it replaces the previous
    // off-stride one, so the curve always reaches the present.
    if (!entries_.empty()) {
      auto last_step_entry = std::find_if(entries_.rbegin(), entries_.rend(), [](const Entry& e) { return e.kind == Kind::Step; });
      if (last_step_entry != entries_.rend() && last_step_entry->step % stride_ != 0) {
        entries_.erase(std::next(last_step_entry).base());
        --steps_;
      }
    }
    last_step_record_ = step;
  }
  entries_.push_back({next_seq_++, step, kind, record.dump()});
  if (kind == Kind::Step) ++steps_;
  if (kind == Kind::Eval) ++evals_;
  if (kind == Kind::Event) ++events_, ++events_total_;
  if (steps_ > max_steps_) thin_steps();
  auto drop_oldest = [this](Kind k, size_t& count, size_t bound) {
    while (count > bound) {
      auto it = std::find_if(entries_.begin(), entries_.end(), [k](const Entry& e) { return e.kind == k; });
      entries_.erase(it);
      --count;
    }
  };
  drop_oldest(Kind::Eval, evals_, max_evals_);
  drop_oldest(Kind::Event, events_, max_events_);
}

void MetricHistory::drop_after_step(int64_t step) {
  std::erase_if(entries_, [&](const Entry& e) {
    if (e.step <= step) return false;
    (e.kind == Kind::Step ? steps_ : e.kind == Kind::Eval ? evals_ : events_) -= 1;
    return true;
  });
  last_step_record_ = -1;
  for (const auto& e : entries_)
    if (e.kind == Kind::Step) last_step_record_ = std::max(last_step_record_, e.step);
}

void MetricHistory::thin_steps() {
  while (steps_ > max_steps_) {
    stride_ *= 2;
    const uint64_t newest = entries_.back().seq;
    std::erase_if(entries_, [&](const Entry& e) {
      if (e.kind != Kind::Step || e.step % stride_ == 0 || e.seq == newest) return false;
      --steps_;
      return true;
    });
  }
}

void MetricHistory::clear() {
  std::lock_guard lk(mu_);
  entries_.clear();
  steps_ = evals_ = events_ = 0;
  stride_ = 1;
  last_step_record_ = -1;
}

std::optional<uint64_t> MetricHistory::parse_seq(std::string_view text) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::stoull(std::string(text));  // 19 digits fit in 64 bits
}

std::string MetricHistory::after(uint64_t after_seq, size_t max_bytes, const std::string& extra_members) const {
  std::lock_guard lk(mu_);
  auto it = std::upper_bound(entries_.begin(), entries_.end(), after_seq,
                             [](uint64_t s, const Entry& e) { return s < e.seq; });
  // Assembled as text: each record is already serialised, and its size is what is bounded.
  std::string records;
  size_t used = 64;
  for (; it != entries_.end(); ++it) {
    const size_t cost = it->json.size() + 40;
    if (!records.empty() && used + cost > max_bytes) break;
    if (!records.empty()) records += ',';
    records += "{\"seq\":" + std::to_string(it->seq) + ",\"r\":" + it->json + "}";
    used += cost;
  }
  const uint64_t last = entries_.empty() ? 0 : entries_.back().seq;
  return "{\"records\":[" + records + "],\"more\":" + (it != entries_.end() ? "true" : "false") +
         ",\"stride\":" + std::to_string(stride_) + ",\"last_seq\":" + std::to_string(last) + ",\"id\":\"" + id_ +
         "\",\"events_total\":" + std::to_string(events_total_) + (extra_members.empty() ? "" : "," + extra_members) +
         "}";
}

uint64_t MetricHistory::last_seq() const {
  std::lock_guard lk(mu_);
  return entries_.empty() ? 0 : entries_.back().seq;
}

size_t MetricHistory::size() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

int64_t MetricHistory::stride() const {
  std::lock_guard lk(mu_);
  return stride_;
}

uint64_t MetricHistory::events_total() const {
  std::lock_guard lk(mu_);
  return events_total_;
}

}  // namespace rt::train
