// The messages of the troubleshooting table (docs/troubleshooting.md), built from their
// parts. A test checks each message twice: with the table's example values it must be in
// docs/troubleshooting.md, and with the test's own values it must be in the output of the
// command the test ran. So the table and what ringtrain prints cannot drift apart.
#pragma once
#include <cstdint>
#include <string>

namespace traintest::readme {

// True if docs/troubleshooting.md contains `text` (an example row, filled with the table's values).
bool has(const std::string& text);

inline std::string port_in_use(const std::string& port, const std::string& addr, int rank, const std::string& holder) {
  return "port " + port + " (" + addr + ", rank " + std::to_string(rank) + ") is already in use by " + holder +
         "; stop that process or give this rank another port in --peers";
}

// The start of every "never joined" message, up to its advice.
inline std::string never_joined_within(int rank, const std::string& addr, const std::string& seconds) {
  return "rank " + std::to_string(rank) + " (" + addr + ") never joined within " + seconds + " s; ";
}

inline std::string never_joined(int rank, const std::string& addr, const std::string& seconds) {
  return never_joined_within(rank, addr, seconds) +
         "start every rank with the same --peers and --key, and check that the listed addresses are right and that "
         "firewalls let TCP through to the listed ports";
}

// Ends a "never joined" message when the process at the rank's address answered but failed
// the security handshake; followed by the handshake's failure and ")".
inline std::string failed_handshake_with_key() {
  return "; the process at that address failed the security handshake, so it does not hold this job's key (";
}

// Between the first peer beyond loopback and the fix, the risk (elided in the table).
inline std::string keyless_beyond_loopback(const std::string& addr) {
  return "--peers lists " + addr + ", which is not on loopback, and no --key was given: ";
}
inline std::string keyless_beyond_loopback_fix() {
  return "; make a key with 'ringtrain keygen --out job.key', copy it to every host and pass --key job.key on every rank "
         "(or --insecure to run unprotected)";
}

inline std::string key_file_too_open(const std::string& path, const std::string& mode) {
  return "key file " + path + " can be read or written by group or others (mode " + mode + "); run 'chmod 600 " + path + "'";
}

// What `ringtrain status`/`stop` say when the job has a key and they were given none.
inline std::string refused_without_key(const std::string& addr) {
  return addr + " refused the connection: the job runs with a key; pass the key file its ranks were started with (--key FILE)";
}
// The same with another key; the reason follows.
inline std::string refused_this_key(const std::string& addr) { return addr + " refused this key"; }

// Followed by what failed the check and the fix.
inline std::string integrity_cut(int rank, const std::string& addr) {
  return "the connection from rank " + std::to_string(rank) + " (" + addr + ") was cut: a message failed its integrity check";
}

// Followed by the fix (elided in the table).
inline std::string old_state_layout(const std::string& dir) {
  return "--resume: checkpoint " + dir + " keeps its state in the old state.bin layout, which this version does not read; ";
}
inline std::string old_state_layout_fix() {
  return "resume it with the ringtrain that wrote it, or start a new run (eval, sample and export still read it)";
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
