// /metrics of `ringtrain watch`: the job's state in Prometheus' text exposition format
// (version 0.0.4), so that an existing Prometheus and its alerting rules can follow a run.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace rt::watch {

// `status`: the job's checked status (null before it first answered). ringtrain_up is 1 while
// the job answers; the job's figures are left out while it does not (no stale values).
std::string prometheus_text(const nlohmann::json& status, bool reachable, uint64_t membership_changes);

}  // namespace rt::watch
