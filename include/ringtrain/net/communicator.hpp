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
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/net/job_key.hpp"
#include "ringtrain/net/peers.hpp"

namespace rt::net {

enum class ReduceOp { Sum, Avg };
// What travels on the wire. Bf16 halves the bytes; accumulation stays float32 and every
// rank ends with bit-identical results.
enum class Wire { F32, Bf16 };

const char* wire_name(Wire w);
// "f32" or "bf16"; throws rt::UsageError otherwise.
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

// Default of --stall-timeout (train, bench allreduce): a collective that makes no progress
// at all for this long fails, even while the peer's heartbeats still arrive.
inline constexpr double kDefaultStallTimeoutS = 300;

struct CommOptions {
  int rank = 0;
  std::vector<PeerAddress> peers;  // every rank's address, in rank order
  std::string job_id = "ringtrain";
  // key=value lines that must be identical on every rank (checked at the handshake; the
  // error names the first differing key). Leave out settings that may differ per rank.
  std::string config_text;
  double connect_timeout_s = 120;  // how long to wait for every rank to arrive
  double peer_timeout_s = 15;      // silence after which a peer counts as lost (<= 30 s)
  // No progress at all in one collective for this long is an error (a live rank that
  // never calls the collective). 0 disables it.
  double stall_timeout_s = kDefaultStallTimeoutS;
  // Pipeline unit of the ring, in float32 bytes. Small enough that the pipeline fills and
  // drains quickly (a 1 Gbit/s link sends 256 KiB in 2 ms), large enough for loopback.
  size_t chunk_bytes = 256 << 10;
  ServiceHandler service_handler;  // optional, may also be set later
  // The job key (job_key.hpp). With it only its holders can connect, and every byte between
  // ranks is encrypted and authenticated. Without it the ranks talk in plaintext, which is
  // allowed only when every peer is on loopback, or with `insecure` (logs a warning).
  std::optional<JobKey> key;
  bool insecure = false;
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

class Transport;

class Communicator {
 public:
  // Binds, connects and handshakes; throws UsageError on bad options or a mismatch
  // between ranks, RuntimeError when ranks never arrive or the port is taken.
  explicit Communicator(CommOptions options);
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
  void all_reduce(float* data, size_t n, ReduceOp op = ReduceOp::Sum, Wire wire = Wire::F32);
  // After it, data[shard_range(n, world, rank)] holds the reduced values; the rest of data
  // is scratch.
  void reduce_scatter(float* data, size_t n, ReduceOp op = ReduceOp::Sum, Wire wire = Wire::F32);
  // Each rank provides data[shard_range(n, world, rank)]; after it, all of data is filled.
  // With bf16 each rank's own shard is rounded too, so every rank holds the same values.
  void all_gather(float* data, size_t n, Wire wire = Wire::F32);
  // Copies root's n floats to every rank (pipelined along the ring).
  void broadcast(float* data, size_t n, int root, Wire wire = Wire::F32);
  void barrier();
  // Small all-gather of arbitrary bytes (per-rank stats): result[r] is rank r's `mine`.
  std::vector<std::string> all_gather_bytes(std::string_view mine);

  void set_service_handler(ServiceHandler handler);
  // Makes blocked and later collectives throw Aborted(reason). Any thread, any time.
  void abort(const std::string& reason);
  // Empty while healthy; otherwise the one-line error that broke the communicator.
  std::string failure() const;

 private:
  std::unique_ptr<Transport> transport_;
};

// Client side of service requests: connects to a rank's listed port, sends `text`, returns
// the reply. With the job's key when the job has one. Throws rt::RuntimeError naming the
// address when the job refuses the key (or the lack of one), or nobody answers in time.
std::string request(const std::string& host_port, const std::string& text, double timeout_s = 5,
                    const std::optional<JobKey>& key = std::nullopt);

}  // namespace rt::net
