// The handshake text each rank sends to every other rank, and the checks made on it.
//
// With a job key the connection is already authenticated and encrypted, so the hello
// carries the job id and the shared config whole: a mismatch then names the first key
// that differs and both values. Without a key anyone may be listening, so the hello
// carries only a fingerprint of job id and config (the "fingerprint form"): ranks still
// notice a mismatch, but nothing of the job's settings goes over the wire.
#pragma once
#include <optional>
#include <string>

namespace rt::net {

struct Hello {
  std::string job_id;  // empty in the fingerprint form
  int world = 0;
  int rank = -1;
  std::string config_text;  // empty in the fingerprint form
  std::string fingerprint;  // fingerprint form only: hex FNV-1a of job id and config
  bool fingerprint_only() const { return !fingerprint.empty(); }
};

// The same hello with job id and config replaced by their fingerprint.
Hello fingerprint_form(const Hello& full);

std::string encode_hello(const Hello& h);
// nullopt when the text is not a hello of this protocol version.
std::optional<Hello> decode_hello(const std::string& text);

// "" when `theirs` matches `mine`; otherwise the one-line reason, phrased for this rank,
// e.g. "config mismatch with rank 1 (10.0.0.2:29500): --depth is 8 here and 4 there; ...".
// In the fingerprint form it cannot say which setting differs, and says so.
std::string compare_hello(const Hello& mine, const Hello& theirs, const std::string& their_address);

// What a rank answers to a hello it refuses (HelloOk with a payload): a generic reason
// that reveals nothing of the job, then, on authenticated connections only, the refusing
// rank's own hello so that the refused rank can name the mismatch from its side.
std::string encode_refusal(const std::string& reason, const std::string& own_hello_or_empty);
void decode_refusal(const std::string& payload, std::string& reason, std::string& their_hello);

}  // namespace rt::net
