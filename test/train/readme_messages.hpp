// The messages of the README's troubleshooting table, built from their parts. A test checks
// each message twice: with the README's example values it must be in README.md, and with
// the test's own values it must be in the output of the command the test ran. So the table
// and what ringtrain prints cannot drift apart.
#pragma once
#include <cstdint>
#include <string>

namespace traintest::readme {

// True if README.md contains `text` (an example row, filled with the README's values).
bool has(const std::string& text);

inline std::string port_in_use(const std::string& port, const std::string& addr, int rank, const std::string& holder) {
  return "port " + port + " (" + addr + ", rank " + std::to_string(rank) + ") is already in use by " + holder +
         "; stop that process or give this rank another port in --peers";
}

inline std::string never_joined(int rank, const std::string& addr, const std::string& seconds) {
  return "rank " + std::to_string(rank) + " (" + addr + ") never joined within " + seconds +
         " s; start every rank with the same --peers and --key, and check that the listed addresses are right and that "
         "firewalls let TCP through to the listed ports";
}

inline std::string config_mismatch(int rank, const std::string& addr, const std::string& flag, const std::string& here,
                                   const std::string& there) {
  return "config mismatch with rank " + std::to_string(rank) + " (" + addr + "): " + flag + " is " + here + " here and " +
         there + " there; start every rank with the same flags";
}

inline std::string lost_rank_closed(int rank, const std::string& addr) {
  return "lost rank " + std::to_string(rank) + " (" + addr + "): its connection closed (process died or was stopped, or it sent more than any message may hold)";
}

// Followed by the silence in seconds, e.g. "5.1 s".
inline std::string lost_rank_silent(int rank, const std::string& addr) {
  return "lost rank " + std::to_string(rank) + " (" + addr + "): nothing heard from it for ";
}

inline std::string saving_before_exit(const std::string& step) {
  return "saving a checkpoint of step " + step + " before exiting; restart every rank with --resume";
}

// Followed by both model configs and the fix.
inline std::string other_model(const std::string& dir) { return "--resume: checkpoint " + dir + " is of another model ("; }

inline std::string corrupt_file(const std::string& dir, const std::string& file) {
  return "checkpoint " + dir + " is corrupt: " + file + " fails its CRC-32 check; delete it or resume from an older one";
}

inline std::string too_little_memory(const std::string& batch, const std::string& seq_len, const std::string& need_gb,
                                     const std::string& avail_gb, const std::string& fits) {
  return "--device-batch " + batch + " at --seq-len " + seq_len + " needs about " + need_gb + " GB more memory, but " +
         avail_gb + " GB is available; the largest device batch that fits is " + fits +
         " (use --total-batch to keep the tokens per step)";
}

inline std::string data_not_a_directory(const std::string& dir) {
  return "--data " + dir + " is not a directory; create it with 'ringtrain data prepare --input TEXT... --out " + dir + "'";
}

}  // namespace traintest::readme
