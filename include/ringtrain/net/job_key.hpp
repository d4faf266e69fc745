// The job key: a 32-byte secret shared by every rank of a job (and by whoever may run
// `status` and `stop` on it). Every rank derives the same Curve25519 keypair from it; the
// ranks' sockets are CurveZMQ servers and clients with that one keypair, and a connection
// completes only when the peer proves it holds the secret key. So only holders of the file
// can join, read or stop the job, and every byte between ranks is encrypted and
// authenticated.
//
// The file holds the 32 raw bytes, nothing else, readable by its owner only.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace rt::net {

inline constexpr size_t kJobKeyBytes = 32;

struct JobKey {
  std::array<uint8_t, 32> public_key{};  // Curve25519, derived from the secret
  std::array<uint8_t, 32> secret_key{};
};

// The keypair of a 32-byte job secret (libsodium's crypto_box_seed_keypair).
JobKey derive_job_key(const std::array<uint8_t, kJobKeyBytes>& secret);

// Reads and checks a key file. Throws rt::UsageError with one line naming the file and the
// fix when it is missing, not a regular file, readable or writable by group or others, or
// not exactly 32 bytes.
JobKey load_job_key(const std::string& path);

// Writes 32 fresh random bytes to `path` with mode 0600, atomically (a temporary file in the
// same directory, then linked or renamed into place). Refuses an existing file unless
// `overwrite`. Throws rt::UsageError (exists, bad directory) or rt::RuntimeError (I/O).
void write_new_job_key(const std::string& path, bool overwrite);

}  // namespace rt::net
