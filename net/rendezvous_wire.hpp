// The lines of the rendezvous protocol (rendezvous.hpp tells the protocol): how each request
// and answer is written and read. Every line comes from the network and is read as hostile:
// a count, rank, epoch or step outside the job's bounds refuses the whole line.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ringtrain/net/rendezvous.hpp"

namespace rt::net::wire {

// Epochs and steps above these cannot be real (the next ring's epoch must still be one).
constexpr int64_t kMaxEpoch = int64_t(1) << 40;
constexpr int64_t kMaxStep = int64_t(1) << 50;

// The words of a line; empty when it has more than any request has (16).
std::vector<std::string> words(const std::string& line);
// A decimal integer in [lo, hi], the whole word.
bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t& out);
// "-" or "a,b,c": distinct ascending ranks below world.
std::string list_text(const std::vector<int>& ranks);
std::optional<std::vector<int>> parse_list(const std::string& s, int world);

// "elastic go EPOCH MEMBERS STATE_EPOCH STATE_MEMBERS STATEFUL STEP LINEAGE": the coordinator's decision.
std::string encode_go(const Membership& m);
std::optional<Membership> decode_go(const std::vector<std::string>& w, int world);

// "elastic checkin RANK EPOCH STEP OLDEST MEMBERS LINEAGE": where a member stands. Decoded for the
// coordinator `me` of a job of `world` ranks and --steps max_step: the rank is another
// member's, the epoch can be followed by one more, the steps are within the job's, and a
// member of a ring (epoch >= 0) is among that ring's ranks.
std::string encode_checkin(int rank, const MemberState& s);
std::optional<std::pair<int, MemberState>> decode_checkin(const std::vector<std::string>& w, int world, int me,
                                                          int64_t max_step);

// "elastic status" or "elastic status RANK" (the asker's rank, below `world`): where the
// rank asked stands. The rank lets a rank that finished the job stop telling it so.
bool is_status_request(const std::vector<std::string>& w, int world, int* asker = nullptr);
std::string status_request(int asker);

// "elastic running EPOCH LINEAGE STEP" / "elastic lobby EPOCH LINEAGE" / "elastic starting" /
// "elastic done EPOCH LINEAGE STEP": the answer to "elastic status". Starting: a process that
// has not been handed a ring of this job since it started (it makes the job's first ring with
// the others, or joins a running one). Done: the job reached its last step, STEP, without
// the asker (a rank that finished tells the ranks it missed, for a while).
struct StatusAnswer {
  enum Kind { Other, Running, Lobby, Starting, Done } kind = Other;  // Other: none of these, or not understood
  int64_t epoch = -1;
  uint64_t lineage = 0;
  int64_t step = -1;  // Running and Done only
};
StatusAnswer parse_status(const std::string& answer);
std::string encode_done(int64_t epoch, uint64_t lineage, int64_t step);

// "elastic merge LINEAGE STEP": a ring of another lineage asks which of the two yields;
// answered "elastic yield" (the asker yields) or "elastic stay" (the one asked does).
std::string encode_merge(uint64_t lineage, int64_t step);
std::optional<std::pair<uint64_t, int64_t>> decode_merge(const std::vector<std::string>& w);

}  // namespace rt::net::wire
