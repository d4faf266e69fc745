// The header that starts every message between ranks (and service clients). It lets a
// receiver check that a message belongs to this job, this collective and this chunk, so
// that a stray or late message is never taken for current data.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

namespace rt::net {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

enum class MsgKind : uint8_t {
  Hello = 1,      // dealer -> router: handshake text (job, world, rank, config)
  HelloOk = 2,    // router -> dealer: handshake accepted (payload empty) or refused (reason)
  Heartbeat = 3,  // dealer -> router
  Data = 4,       // router -> dealer: one chunk of a collective
  Request = 5,    // service client -> router: request text
  Reply = 6,      // router -> service client: reply text
  Goodbye = 7,    // dealer -> router: this rank leaves the job cleanly
  Failing = 8,    // dealer -> router: this rank is failing, payload says why
};

// Which collective a Data message belongs to; both sides must agree.
enum class CollectiveKind : uint8_t {
  AllReduce = 1,
  ReduceScatter = 2,
  AllGather = 3,
  Broadcast = 4,
  GatherBytes = 5,
  BroadcastBytes = 6,
};

const char* collective_name(CollectiveKind k);

constexpr uint32_t kMagic = 0x314e5452;  // "RTN1"
constexpr uint16_t kNoRank = 0xffff;     // sender field of service clients

// Largest legal frames. Every socket refuses larger ones (ZMQ_MAXMSGSIZE, checked by
// ZeroMQ on the frame's length field before anything is allocated), so a peer cannot make
// a rank allocate more than these, times the bounded queue lengths.
constexpr size_t kMaxControlBytes = 64 << 10;       // hello, refusal, service request/reply
// What CURVE adds to a frame on the wire (command name, nonce, MAC, flags), with margin.
constexpr size_t kFrameOverheadBytes = 256;

struct Header {
  uint32_t magic = kMagic;
  MsgKind kind = MsgKind::Heartbeat;
  uint8_t collective = 0;  // CollectiveKind of Data messages
  uint8_t wire = 0;        // Wire of the data: 0 f32, 1 bf16, 2 int8
  uint8_t reserved = 0;
  uint16_t sender = kNoRank;
  uint16_t root = 0;       // broadcast root
  uint64_t job = 0;        // hash of the job id
  uint64_t seq = 0;        // collective sequence number, the same on every rank
  uint64_t item = 0;       // index of this chunk in the collective's stream
  uint64_t count = 0;      // elements in the whole collective (n)
};
static_assert(sizeof(Header) == 48, "header layout is part of the wire format");

inline bool decode_header(const void* data, size_t size, Header& h) {
  if (size != sizeof(Header)) return false;
  std::memcpy(&h, data, sizeof(Header));
  return h.magic == kMagic;
}

// FNV-1a 64: the job id and config text hash (stable across hosts and builds).
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace rt::net
