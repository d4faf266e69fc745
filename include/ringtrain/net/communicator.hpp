// A job's communicator: one rank of a ring of processes on several hosts, talking over
// ZeroMQ on exactly one TCP port per rank (the one listed for it in --peers).
//
// Construction binds the port, connects to every other rank's listed port and runs the
// handshake (job id, world size, rank uniqueness, config text). Then the collectives below
// can be called from one thread at a time (any thread). A background thread keeps
// heartbeats and service requests going between collectives.
//
// Failure model: a lost peer (dead process, silent host, reset connection) makes every
// pending and later collective throw PeerLost, whose one-line message names the rank and
// its address, within `peer_timeout_s`. abort() (callable from any thread, e.g. a signal
// watcher) makes a blocked collective throw Aborted promptly. After either, the
// communicator is broken: every later collective throws the same error.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/net/job_key.hpp"
#include "ringtrain/net/peers.hpp"

namespace rt::net {

enum class ReduceOp { Sum, Avg };
// Reductions of the small typed collectives.
enum class ValueOp { Sum, Min, Max };
// What travels on the wire. Bf16 halves the bytes; accumulation stays float32 and every
// rank ends with bit-identical results. Int8 (all_reduce only) sends 1.0625 bytes a value:
// blocks of 64 values with one scale each; every rank still ends with the same bits, and
// the rounding error each rank made comes back to it (all_reduce's residual). Int4 does the
// same with 7 levels each side of zero instead of 127, in 0.5625 bytes a value.
// The values are the header's wire field: keep them.
enum class Wire : uint8_t { F32 = 0, Bf16 = 1, Int8 = 2, Int4 = 3 };
// Values per int8 or int4 block (one scale each).
constexpr size_t kInt8BlockValues = 64;
// The block-scaled codes (all_reduce only, with error feedback), and their levels each
// side of zero: a value travels as q * scale with q in -L..L.
constexpr bool block_coded(Wire w) { return w == Wire::Int8 || w == Wire::Int4; }
constexpr int block_code_levels(Wire w) { return w == Wire::Int4 ? 7 : 127; }

const char* wire_name(Wire w);
// "f32", "bf16", "int8" or "int4"; throws rt::UsageError otherwise.
Wire parse_wire(const std::string& text);

// A peer died, went silent, left the job, broke the protocol, or its connection failed an
// integrity check; the message names its rank and address.
struct PeerLost : RuntimeError {
  using RuntimeError::RuntimeError;
};
// abort() was called (e.g. on SIGINT/SIGTERM).
struct Aborted : RuntimeError {
  using RuntimeError::RuntimeError;
};

// Handles a service request (e.g. from `ringtrain status HOST:PORT`): request text in,
// reply text out. Runs on the communicator's threads, so it must be fast and thread-safe.
using ServiceHandler = std::function<std::string(const std::string& request)>;

// Defaults of every command that makes a communicator (train, bench allreduce).
// 256 KiB chunks: small enough that the pipeline fills and drains quickly (a 1 Gbit/s link
// sends 256 KiB in 2 ms), large enough for loopback (measured with bench allreduce).
inline constexpr size_t kDefaultChunkBytes = 256 << 10;
// Silence after which a peer counts as lost. At most 30 s: libzmq's reconnect and
// heartbeat settings are tuned for that range.
inline constexpr double kDefaultPeerTimeoutS = 30;
// Default of --stall-timeout (train, bench allreduce): a collective that makes no progress
// at all for this long fails, even while the peer's heartbeats still arrive.
inline constexpr double kDefaultStallTimeoutS = 300;

constexpr int kMaxStreams = 16;

struct CommOptions {
  int rank = 0;
  std::vector<PeerAddress> peers;  // every rank's address, in rank order
  std::string job_id = "ringtrain";
  // key=value lines that must be identical on every rank (checked at the handshake; the
  // error names the first differing key). Leave out settings that may differ per rank.
  std::string config_text;
  double connect_timeout_s = 120;  // how long to wait for every rank to arrive
  double peer_timeout_s = kDefaultPeerTimeoutS;
  // No progress at all in one collective for this long is an error (a live rank that
  // never calls the collective). 0 disables it.
  double stall_timeout_s = kDefaultStallTimeoutS;
  // Pipeline unit of every collective, in float32 bytes: no data message is larger.
  size_t chunk_bytes = kDefaultChunkBytes;
  // The ranks in ring order (every rank once), e.g. those of one site next to each other so
  // that the ring crosses a slow link between sites twice; empty: 0, 1, ..., world-1. The
  // same on every rank (it is part of what the handshake compares when the caller puts it
  // in config_text).
  std::vector<int> ring_order;
  // TCP connections that carry the data from each rank to each other one, 1 to kMaxStreams,
  // all to the one listed port. On a long, lossy path one TCP stream stays far below the
  // link's rate (each loss halves its window, and it regrows one segment per round trip);
  // several share the losses. Data messages take them in turn, so they arrive in order.
  // The same on every rank.
  int streams = 1;
  ServiceHandler service_handler;  // optional, may also be set later
  // The job key (job_key.hpp). With it only its holders can connect, and every byte between
  // ranks is encrypted and authenticated. Without it the ranks talk in plaintext, which is
  // allowed only when every peer is on loopback, or with `insecure` (logs a warning).
  std::optional<JobKey> key;
  bool insecure = false;
  // A lobby: a one-rank communicator (peers = this rank's own address, rank 0) that holds
  // the port and answers service requests while an elastic job re-forms its ring, and
  // ignores handshakes instead of refusing them (their senders resend until a ring
  // answers).
  bool listen_only = false;
  // Where the communicator reports refused connections, ignored handshakes and the
  // --insecure warning (one line each, no newline). Default: stderr.
  std::function<void(const std::string& line)> log;
};

// The contiguous part of an n-element buffer that `rank` owns after reduce_scatter.
struct ShardRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
ShardRange shard_range(size_t n, int world, int rank);

// What the collectives run over (net/link.hpp): the ZeroMQ transport, or an in-process ring.
class Link;

class Communicator {
 public:
  // Binds, connects and handshakes; throws UsageError on bad options or a mismatch
  // between ranks, RuntimeError when ranks never arrive or the port is taken.
  explicit Communicator(CommOptions options);
  // Over a link made elsewhere, e.g. one rank of an in-process ring (tests).
  explicit Communicator(std::unique_ptr<Link> link);
  // Tells peers this rank leaves (so they do not report it lost), flushes for a bounded
  // time, closes with zero linger. Never hangs.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world() const;
  const std::vector<PeerAddress>& peers() const;

  // In place on n floats of every rank. Ring: reduce-scatter, then all-gather, pipelined in
  // chunks. n == 0 is a no-op that still keeps the ranks in step.
  // With Wire::Int8 (or Int4) the result is the sum (or average) of the ranks' data minus the
  // rounding errors, and `residual` (n floats, or null to drop them) receives this rank's
  // share of those errors: add it to the next call's data (error feedback) and, summed over
  // calls, nothing is lost. Its blocks lie on a fixed grid, data[64k, 64k + 64) (kInt8BlockValues):
  // values laid out so that each group starts on a multiple of 64 get scales of their own.
  // The other collectives take f32 or bf16 only.
  void all_reduce(float* data, size_t n, ReduceOp op = ReduceOp::Sum, Wire wire = Wire::F32,
                  float* residual = nullptr);
  // After it, data[shard_range(n, world, rank)] holds the reduced values; the rest of data
  // is scratch.
  void reduce_scatter(float* data, size_t n, ReduceOp op = ReduceOp::Sum, Wire wire = Wire::F32);
  // Each rank provides data[shard_range(n, world, rank)]; after it, all of data is filled.
  // With bf16 each rank's own shard is rounded too, so every rank holds the same values.
  void all_gather(float* data, size_t n, Wire wire = Wire::F32);
  // The same two with segments of the caller's choosing: bounds has world() + 1 entries,
  // bounds[0] = 0, bounds[world()] = n, ascending, the same on every rank; rank r's segment
  // is [bounds[r], bounds[r+1]). The segments need not be even (e.g. whole matrices), but
  // uneven ones cost more: each rank sends every segment but its own.
  void reduce_scatter(float* data, std::span<const size_t> bounds, ReduceOp op = ReduceOp::Sum, Wire wire = Wire::F32);
  void all_gather(float* data, std::span<const size_t> bounds, Wire wire = Wire::F32);
  // Copies root's n floats to every rank (pipelined along the ring).
  void broadcast(float* data, size_t n, int root, Wire wire = Wire::F32);
  void barrier();
  // All-gather of arbitrary bytes: result[r] is rank r's `mine`. Each rank's size travels
  // first and must be at most max_bytes; every part is then checked against its size.
  std::vector<std::string> all_gather_bytes(std::string_view mine, size_t max_bytes = kMaxGatherBytes);
  static constexpr size_t kMaxGatherBytes = 64 << 20;

  // Small typed collectives, for a few values per rank (counts, steps, sums, reports).
  // Every rank must pass the same count or record size: a message of another size is a
  // protocol error, checked on arrival. What the values mean is the caller's to check.
  //
  // Element-wise reduction over the ranks, in rank order, so every rank gets the same bits.
  void all_reduce_values(std::span<double> values, ValueOp op);
  void all_reduce_values(std::span<int64_t> values, ValueOp op);
  // out (world() * record_bytes) receives every rank's record, rank r's at r * record_bytes.
  void all_gather_records(const void* mine, size_t record_bytes, void* out);
  // Copies root's record (exactly record_bytes) to every rank.
  void broadcast_record(void* record, size_t record_bytes, int root);
  // Typed forms of the two above, for trivially copyable records (e.g. a struct of numbers).
  template <class T>
  std::vector<T> all_gather_record(const T& mine) {
    static_assert(std::is_trivially_copyable_v<T>, "records travel as raw bytes");
    std::vector<T> out(static_cast<size_t>(world()));
    all_gather_records(&mine, sizeof(T), out.data());
    return out;
  }
  template <class T>
  std::vector<T> all_gather_records(std::span<const T> mine) {  // the same count on every rank
    static_assert(std::is_trivially_copyable_v<T>, "records travel as raw bytes");
    std::vector<T> out(mine.size() * static_cast<size_t>(world()));
    all_gather_records(mine.data(), mine.size_bytes(), out.data());
    return out;
  }
  template <class T>
  void broadcast_record(T& record, int root) {
    static_assert(std::is_trivially_copyable_v<T>, "records travel as raw bytes");
    broadcast_record(&record, sizeof(T), root);
  }

  // Payload bytes this rank has sent in collectives so far (headers excluded): what a
  // collective cost on the wire, e.g. 2(p-1)/p of the buffer for an all-reduce.
  uint64_t bytes_sent() const { return bytes_sent_.load(); }

  void set_service_handler(ServiceHandler handler);
  // Makes blocked and later collectives throw Aborted(reason). Any thread, any time.
  void abort(const std::string& reason);
  // Empty while healthy; otherwise the one-line error that broke the communicator.
  std::string failure() const;
  // Seconds since each member was last heard from, by ring index (0 for this rank): what a
  // rendezvous after a failure needs not wait for again.
  std::vector<double> silence_seconds();

 private:
  // Runs one collective while holding the sockets; body(seq) returns the bytes it sent.
  template <typename F>
  void collective(F&& body);
  // Breaks the communicator with a protocol error and throws it.
  [[noreturn]] void fail(const std::string& why);
  void check_root(int root) const;

  std::unique_ptr<Link> link_;
  std::atomic<uint64_t> bytes_sent_{0};
};

// Client side of service requests: connects to a rank's listed port, sends `text`, returns
// the reply. With the job's key when the job has one. Throws rt::RuntimeError naming the
// address when the job refuses the key (or the lack of one), or nobody answers in time.
std::string request(const std::string& host_port, const std::string& text, double timeout_s = 5,
                    const std::optional<JobKey>& key = std::nullopt);

}  // namespace rt::net
