// The handshake text each rank sends to every other rank, and the checks made on it.
#pragma once
#include <optional>
#include <string>

namespace rt::net {

struct Hello {
  std::string job_id;
  int world = 0;
  int rank = -1;
  std::string config_text;
};

std::string encode_hello(const Hello& h);
// nullopt when the text is not a hello of this protocol version.
std::optional<Hello> decode_hello(const std::string& text);

// "" when `theirs` matches `mine`; otherwise the one-line reason, phrased for this rank,
// e.g. "config mismatch with rank 1 (10.0.0.2:29500): --depth is 8 here and 4 there; ...".
std::string compare_hello(const Hello& mine, const Hello& theirs, const std::string& their_address);

}  // namespace rt::net
