// link-emulator: a slow, far cable between two network namespaces, in userspace, for kernels
// without sch_netem (tc netem). tools/netns/hosts.sh starts it when netem is missing.
//
//   link-emulator --ns-a NS --ns-b NS [--tap eth0] [--rate 100mbit] [--delay 20ms]
//                 [--loss 0.1%] [--limit 10000] [--seed 1] [--no-gso]
//                 [--coalesce 1ms] [--cpu-a N] [--cpu-b N]
//
// It attaches to the persistent tap device --tap (made beforehand with
// `ip -n NS tuntap add dev eth0 mode tap`) in each of the two namespaces and forwards
// Ethernet frames between them, each direction on its own thread, like netem with a rate:
//   - a frame is lost with probability --loss (a PRNG seeded with --seed, one per direction);
//   - it is dropped at the tail when --limit frames of this direction are already on the way;
//   - it leaves at max(now, previous departure) + its bytes * 8 / --rate (serialisation);
//   - it is written to the other tap --delay later (one way).
// "ready" on stdout once both taps are attached; SIGTERM/SIGINT stop it, with one line of
// counts on stderr. A thread sleeps in ppoll until a frame arrives or the next one is due:
// no busy loop, as the benchmarks beside it are CPU bound.
//
// What a real link costs the hosts, and no more. Two things keep the emulator's own CPU from
// standing in for a cost two real hosts do not have:
//   - Interrupt moderation (--coalesce, default 1ms): while frames are on the way, a thread
//     wakes once per interval, reads all that arrived and writes all that is due, as a NIC
//     raises one interrupt for a batch of frames; idle, it sleeps until a frame arrives.
//     Woken for each frame instead (ACKs included), the wake-ups cost about a third more CPU
//     in a VM (1.1 against 0.8 s per 130 MB crossing each way, measured beside CPU-bound
//     work). Frames leave and arrive up to one interval late (a millisecond on a 20 ms path);
//     a bulk transfer's rate is unchanged, departures being spaced from the previous one.
//     --coalesce 0 wakes for every arrival and at every frame's due time.
//   - Where it runs (--cpu-a, --cpu-b): writing a frame into a tap runs the receiving host's
//     network stack (TCP included) in that write, on the writer's core. A real host does that
//     work on its own CPU; so the thread that delivers into host a can be pinned to a's core
//     (the one its processes run on), and likewise for b. Unpinned, the work goes where the
//     scheduler puts it, often mostly on one core: one host then pays for both (one rank's
//     step beside an average was 2.4 s slower than the other's, d8 on 100 Mbit/s).
//
// The taps take TCP segmentation offload (IFF_VNET_HDR, TUNSETOFFLOAD), as a real NIC
// does: a TCP sender hands the tap one super frame of up to 64 KiB instead of 44 frames of
// 1514 bytes, and the receiver takes it in one piece, as GRO would. Frame by frame, the
// emulator's reads and writes (and the receiving stack's work inside each write) cost a
// core's worth of CPU at 100 Mbit/s in both directions, taken from the ranks it is meant to
// connect. A super frame of k segments is costed as the k frames it stands for (each with
// its own headers), and each of its segments is lost on its own, as a frame would be: the
// segments around a lost one go on as frames of their own, cut as the sender would have
// cut them. --no-gso carries single frames only (no offloads), at that CPU cost.
// Memory is bounded: --limit frames per direction, each at most 64 KiB plus headers.
#include <fcntl.h>
#include <net/if.h>  // before linux/if_tun.h, which then skips linux/if.h
#include <linux/if_tun.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

// A tap's MTU is at most 65535 and a super frame at most 64 KiB, plus the Ethernet (and
// VLAN) header and the offload header.
constexpr size_t kReadBuffer = 65536 + 256;
constexpr size_t kEthernet = 14;
constexpr int kReadBurst = 256;             // frames read per wake-up from one tap before serving the other

// The offload header before each frame on a tap opened with IFF_VNET_HDR (struct
// virtio_net_hdr of <linux/virtio_net.h>, which C++ cannot include: a member is named
// `class`), little-endian on x86.
struct VnetHeader {
  uint8_t flags, gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHeader) == 10);
constexpr uint8_t kGsoTcpV4 = 1, kGsoTcpV6 = 4, kGsoEcn = 0x80;

struct Options {
  std::string ns_a, ns_b, tap = "eth0";
  double rate_bps = 0;  // 0: no rate limit
  int64_t delay_ns = 0;
  double loss = 0;  // probability, 0..1
  size_t limit = 10000;
  uint64_t seed = 1;
  bool gso = true;
  int64_t coalesce_ns = 1000000;  // interrupt moderation: at most one wake-up per interval
  int cpu_a = -1, cpu_b = -1;    // where the threads delivering into a and b run (-1: anywhere)
};

[[noreturn]] void die(int code, const std::string& what) {
  std::fprintf(stderr, "link-emulator: %s\n", what.c_str());
  std::exit(code);
}

[[noreturn]] void usage_error(const std::string& what) {
  die(2, what + " (see link-emulator --help)");
}

// A non-negative decimal number at the start of s; the rest of s goes to unit.
std::optional<double> leading_number(std::string_view s, std::string_view* unit) {
  size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(std::string(s.substr(0, i)), &used);
    if (used != i) return std::nullopt;
    *unit = s.substr(i);
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// tc's rate units: bit, kbit, mbit, gbit (bits per second) and bps, kbps, mbps, gbps (bytes).
double parse_rate(std::string_view s) {
  std::string_view unit_as_given;
  const auto v = leading_number(s, &unit_as_given);
  std::string unit(unit_as_given);  // tc takes units in any case: 100Mbit
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct Unit { std::string_view name; double bits; };
  static constexpr Unit units[] = {{"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9},
                                   {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}};
  if (v)
    for (const auto& u : units)
      if (unit == u.name && *v * u.bits >= 1000) return *v * u.bits;
  usage_error("--rate '" + std::string(s) + "': give at least 1kbit with a tc unit, e.g. 100mbit, 1gbit, 500kbit");
}

// A duration up to `most_ns` with a unit (0 may go without one), for `what` of --flag.
int64_t parse_duration(std::string_view flag, std::string_view s, double most_ns, const char* what) {
  std::string_view unit;
  const auto v = leading_number(s, &unit);
  const double scale = unit == "s" ? 1e9 : unit == "ms" ? 1e6 : unit == "us" ? 1e3 : unit == "ns" ? 1 : -1;
  if (!v || (scale < 0 && !(unit.empty() && *v == 0)) || *v * std::max(scale, 0.0) > most_ns)
    usage_error(std::string(flag) + " '" + std::string(s) + "': give " + what + " with a unit, e.g. 20ms, 500us");
  return static_cast<int64_t>(*v * std::max(scale, 0.0));
}

double parse_loss(std::string_view s) {
  std::string_view unit;
  const auto v = leading_number(s, &unit);
  if (!v || unit != "%" || *v > 100) usage_error("--loss '" + std::string(s) + "': give a percentage 0-100 with '%', e.g. 0.1%");
  return *v / 100;
}

uint64_t parse_count(std::string_view flag, std::string_view s, uint64_t lo, uint64_t hi) {
  std::string_view rest;
  const auto v = leading_number(s, &rest);
  if (!v || !rest.empty() || *v != static_cast<double>(static_cast<uint64_t>(*v)) || *v < lo || *v > hi)
    usage_error(std::string(flag) + " '" + std::string(s) + "': give a whole number from " + std::to_string(lo) + " to " +
                std::to_string(hi));
  return static_cast<uint64_t>(*v);
}

const char* const kHelp =
    "usage: link-emulator --ns-a NS --ns-b NS [--tap eth0] [--rate 100mbit] [--delay 20ms] [--loss 0.1%]\n"
    "                     [--limit 10000] [--seed 1] [--no-gso] [--coalesce 1ms] [--cpu-a N] [--cpu-b N]\n"
    "Joins the tap --tap of network namespace --ns-a to the one of --ns-b like a cable of --rate\n"
    "(default: no limit), --delay one way, --loss per frame, each direction on its own, at most\n"
    "--limit frames on the way per direction (tail drop). Needs root and existing taps\n"
    "(ip -n NS tuntap add dev eth0 mode tap). Prints 'ready' once attached; stops on SIGTERM.\n"
    "TCP crosses in super frames (segmentation offload), each costed and lost as the frames it\n"
    "stands for, frame by frame; --no-gso carries single frames only (more CPU).\n"
    "--coalesce: each direction wakes at most once per interval (interrupt moderation; 0: for\n"
    "every frame). --cpu-a/--cpu-b: the core of host a/b, where the thread delivering into it\n"
    "runs (the receiving stack's work is done in that write, as a real host does it itself).\n";

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    if (flag == "--no-gso") {
      o.gso = false;
      continue;
    }
    if (i + 1 >= argc) usage_error("unknown option or missing value: " + std::string(flag));
    const std::string_view value = argv[++i];
    if (flag == "--ns-a") o.ns_a = value;
    else if (flag == "--ns-b") o.ns_b = value;
    else if (flag == "--tap") o.tap = value;
    else if (flag == "--rate") o.rate_bps = parse_rate(value);
    else if (flag == "--delay") o.delay_ns = parse_duration(flag, value, 60e9, "a one-way delay up to 60s");
    else if (flag == "--coalesce") o.coalesce_ns = parse_duration(flag, value, 10e6, "an interval up to 10ms (0: none)");
    else if (flag == "--cpu-a") o.cpu_a = int(parse_count(flag, value, 0, CPU_SETSIZE - 1));
    else if (flag == "--cpu-b") o.cpu_b = int(parse_count(flag, value, 0, CPU_SETSIZE - 1));
    else if (flag == "--loss") o.loss = parse_loss(value);
    else if (flag == "--limit") o.limit = parse_count(flag, value, 1, 1000000);
    else if (flag == "--seed") o.seed = parse_count(flag, value, 0, uint64_t{1} << 53);
    else usage_error("unknown option " + std::string(flag));
  }
  if (o.ns_a.empty() || o.ns_b.empty()) usage_error("--ns-a and --ns-b are required");
  if (o.ns_a == o.ns_b) usage_error("--ns-a and --ns-b must be two different namespaces");
  if (o.tap.empty() || o.tap.size() >= IFNAMSIZ || o.tap.find('/') != std::string::npos)
    usage_error("--tap '" + o.tap + "': give an interface name of 1 to " + std::to_string(IFNAMSIZ - 1) + " characters");
  for (const auto* ns : {&o.ns_a, &o.ns_b})
    if (ns->find('/') != std::string::npos || *ns == "." || *ns == "..") usage_error("namespace '" + *ns + "': give a name from `ip netns list`");
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_SET(0, &allowed);
  for (const auto& [flag, cpu] : {std::pair{"--cpu-a", o.cpu_a}, std::pair{"--cpu-b", o.cpu_b}})
    if (cpu >= 0 && !CPU_ISSET(cpu, &allowed))
      usage_error(std::string(flag) + " " + std::to_string(cpu) + ": not a CPU this process may run on (see `taskset -pc $$` or nproc)");
  return o;
}

// Opens the existing tap `tap` of the named namespace (/var/run/netns/NS) and returns its
// fd, non-blocking. The fd stays bound to that device after this thread returns to its own
// namespace.
int attach_tap(const std::string& ns, const std::string& tap, bool gso) {
  const int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) die(1, "cannot open /proc/thread-self/ns/net: " + std::string(std::strerror(errno)));
  const std::string path = "/var/run/netns/" + ns;
  const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0)
    die(errno == ENOENT ? 2 : 1, "network namespace '" + ns + "' not found (" + path + ": " + std::strerror(errno) +
                                     "); create it with `ip netns add " + ns + "` or tools/netns/hosts.sh");
  if (setns(target, CLONE_NEWNET) != 0)
    die(1, "cannot enter namespace '" + ns + "': " + std::strerror(errno) + (errno == EPERM ? " (run as root)" : ""));
  // TUNSETIFF would make a new, non-persistent tap if the name were free: only attach to one that exists.
  if (if_nametoindex(tap.c_str()) == 0)
    die(2, "no interface '" + tap + "' in namespace '" + ns + "'; create it with `ip -n " + ns + " tuntap add dev " + tap +
               " mode tap`");
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die(1, "cannot open /dev/net/tun: " + std::string(std::strerror(errno)) + " (needs root and the tun module)");
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (gso ? IFF_VNET_HDR : 0);  // the offload header before each frame
  std::memcpy(ifr.ifr_name, tap.c_str(), tap.size());
  if (ioctl(fd, TUNSETIFF, &ifr) != 0)
    die(1, "cannot attach to '" + tap + "' in namespace '" + ns + "': " + std::strerror(errno) +
               (errno == EBUSY ? " (another process holds it, or it is not a tap)" : "") +
               (errno == EINVAL ? " (it is not a tap: make it with `ip tuntap add ... mode tap`)" : ""));
  // Unchecksummed frames and TCP super frames, IPv4 and IPv6: the tap then offers the
  // host's stack checksum and segmentation offload.
  if (gso && ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) != 0)
    die(1, "cannot turn on offloads of '" + tap + "' in namespace '" + ns + "': " + std::strerror(errno) + " (try --no-gso)");
  if (setns(self, CLONE_NEWNET) != 0) die(1, "cannot return to the own namespace: " + std::string(std::strerror(errno)));
  close(self);
  close(target);
  return fd;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Frame {
  int64_t due_ns;
  std::vector<unsigned char> bytes;  // as read, the offload header included
  uint64_t count;                    // wire frames it stands for
};

// A frame as read from the tap (offload header first, when there is one): the wire frames
// it stands for, one unless the header says it is a TCP super frame, then one per gso_size
// bytes of TCP payload, each with its own Ethernet, IP and TCP headers.
struct Parsed {
  uint64_t count = 1;       // wire frames
  uint64_t wire_bytes = 0;  // their bytes
  // A TCP super frame (count > 1 only): where its IP header, TCP header and payload begin
  // (from the frame's start, offload header included), and the payload bytes per segment.
  bool ipv4 = false;
  size_t ip = 0, tcp = 0, payload = 0, segment = 0;
};

Parsed parse(const unsigned char* frame, size_t size, bool has_vnet_header) {
  Parsed f;
  f.wire_bytes = size;
  if (!has_vnet_header) return f;
  VnetHeader h;
  std::memcpy(&h, frame, sizeof h);
  f.wire_bytes = size - sizeof h;
  const int type = h.gso_type & ~kGsoEcn;
  if ((type != kGsoTcpV4 && type != kGsoTcpV6) || h.gso_size == 0) return f;
  // Ethernet (an 802.1Q tag adds 4), then IPv4 (IHL words) or IPv6 (40, TCP next: other
  // extension headers are not split, and the frame counts as one), then TCP (data offset).
  size_t ip = sizeof h + kEthernet;
  if (size >= ip + 4 && frame[ip - 2] == 0x81 && frame[ip - 1] == 0x00) ip += 4;
  if (size < ip + 40) return f;
  const bool v4 = type == kGsoTcpV4;
  if (v4 ? (frame[ip] >> 4) != 4 || frame[ip + 9] != 6 : (frame[ip] >> 4) != 6 || frame[ip + 6] != 6) return f;
  const size_t tcp = ip + (v4 ? size_t(frame[ip] & 0x0f) * 4 : 40);
  if (tcp < ip + (v4 ? 20 : 40) || size < tcp + 20) return f;  // an IHL below 5 is no IPv4 header
  const size_t payload = tcp + size_t(frame[tcp + 12] >> 4) * 4;
  if (payload < tcp + 20 || payload >= size) return f;  // nor a data offset below 5 a TCP one
  f.count = (size - payload + h.gso_size - 1) / h.gso_size;
  f.wire_bytes = size - sizeof h + (f.count - 1) * (payload - sizeof h);
  f.ipv4 = v4, f.ip = ip, f.tcp = tcp, f.payload = payload, f.segment = h.gso_size;
  return f;
}

uint16_t load16(const unsigned char* p) { return uint16_t(p[0] << 8 | p[1]); }
void store16(unsigned char* p, uint32_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }

// Segments [first, last) of super frame f (frame: its bytes), as a frame of their own, as
// the sender's segmentation would have cut them: the payload slice, the TCP sequence number
// moved on, IP length (and IPv4 identification and header checksum) redone, FIN and PSH only
// on the super frame's last segment, CWR only on its first. The TCP checksum is left to the
// offload (the frame stays "needs checksum"), as in the super frame.
std::vector<unsigned char> segments(const unsigned char* frame, size_t size, const Parsed& f, uint64_t first,
                                    uint64_t last) {
  const size_t from = f.payload + first * f.segment, to = std::min(size, f.payload + last * f.segment);
  std::vector<unsigned char> out(frame, frame + f.payload);
  out.insert(out.end(), frame + from, frame + to);
  const size_t tcp_len = out.size() - f.tcp;
  VnetHeader h;
  std::memcpy(&h, out.data(), sizeof h);
  if (last - first == 1) h.gso_type = 0, h.gso_size = 0;  // a single frame
  std::memcpy(out.data(), &h, sizeof h);
  unsigned char* ip = out.data() + f.ip;
  if (f.ipv4) {
    store16(ip + 2, uint32_t(out.size() - f.ip));
    store16(ip + 4, load16(ip + 4) + uint32_t(first));
    store16(ip + 10, 0);
    uint32_t sum = 0;
    for (size_t i = 0; i < f.tcp - f.ip; i += 2) sum += load16(ip + i);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    store16(ip + 10, ~sum & 0xffff);
  } else {
    store16(ip + 4, uint32_t(tcp_len));
  }
  unsigned char* tcp = out.data() + f.tcp;
  const uint32_t seq = uint32_t(tcp[4]) << 24 | uint32_t(tcp[5]) << 16 | uint32_t(tcp[6]) << 8 | tcp[7];
  const uint32_t moved = seq + uint32_t(first * f.segment);
  tcp[4] = uint8_t(moved >> 24), tcp[5] = uint8_t(moved >> 16), tcp[6] = uint8_t(moved >> 8), tcp[7] = uint8_t(moved);
  constexpr unsigned char kFin = 0x01, kPsh = 0x08, kCwr = 0x80;
  if (first > 0) tcp[13] &= uint8_t(~kCwr);
  if (last < f.count) tcp[13] &= uint8_t(~(kFin | kPsh));
  return out;
}

// One direction of the cable: frames read from `in` wait here until they are due at `out`.
struct Direction {
  const char* name;
  int in = -1, out = -1;
  std::deque<Frame> on_the_way;  // due times never decrease: departures are serial, delay constant
  uint64_t queued_ = 0;          // wire frames on the way (--limit)
  int64_t last_departure_ns = 0;
  std::mt19937_64 rng;
  // Counted in wire frames (a super frame counts as the frames it stands for).
  uint64_t frames = 0, lost = 0, tail_dropped = 0, write_failed = 0, bad = 0, largest = 0, super_frames = 0;

  // Lost with probability o.loss: 53 random bits against its share of 2^53.
  bool lose(const Options& o) { return o.loss > 0 && static_cast<double>(rng() >> 11) < o.loss * 9007199254740992.0; }

  void arrive(const unsigned char* data, size_t size, int64_t now, const Options& o) {
    const size_t header = o.gso ? sizeof(VnetHeader) : 0;
    if (size < header + kEthernet || size >= kReadBuffer) {  // a runt, or more than any tap allows
      ++frames;
      ++bad;
      return;
    }
    const Parsed f = parse(data, size, o.gso);
    frames += f.count;
    super_frames += f.count > 1;
    largest = std::max<uint64_t>(largest, size - header);
    if (f.count == 1) {
      if (lose(o)) ++lost;
      else send(std::vector<unsigned char>(data, data + size), 1, f.wire_bytes, now, o);
      return;
    }
    // Each segment of a super frame is lost on its own; the runs of segments left go on
    // as frames of their own (the whole super frame when none is lost, nearly always).
    uint64_t run = 0;  // first segment of the current run
    for (uint64_t i = 0; i <= f.count; ++i) {
      const bool gap = i < f.count && lose(o);
      if (i < f.count && !gap) continue;
      if (i > run) {
        const uint64_t n = i - run;
        const uint64_t headers = f.payload - header;
        const uint64_t bytes = std::min<uint64_t>(size - f.payload, i * f.segment) - run * f.segment + n * headers;
        send(run == 0 && i == f.count ? std::vector<unsigned char>(data, data + size) : segments(data, size, f, run, i),
             n, bytes, now, o);
      }
      lost += gap;
      run = i + 1;
    }
  }

  // Queues a frame standing for `count` wire frames of `bytes` bytes (tail drop at --limit).
  void send(std::vector<unsigned char> frame, uint64_t count, uint64_t bytes, int64_t now, const Options& o) {
    if (queued_ + count > o.limit) {
      tail_dropped += count;
      return;
    }
    int64_t departure = std::max(now, last_departure_ns);
    if (o.rate_bps > 0) departure += static_cast<int64_t>(static_cast<double>(bytes) * 8e9 / o.rate_bps);
    last_departure_ns = departure;
    on_the_way.push_back({departure + o.delay_ns, std::move(frame), count});
    queued_ += count;
  }

  void deliver_due(int64_t now) {
    while (!on_the_way.empty() && on_the_way.front().due_ns <= now) {
      const auto& f = on_the_way.front().bytes;
      const ssize_t n = write(out, f.data(), f.size());
      if (n != static_cast<ssize_t>(f.size())) write_failed += on_the_way.front().count;  // e.g. the other side is down: gone
      queued_ -= on_the_way.front().count;
      on_the_way.pop_front();
    }
  }

  // Reads what the tap has (up to a burst); false if the tap failed for good.
  bool read_burst(std::vector<unsigned char>& buf, const Options& o) {
    for (int i = 0; i < kReadBurst; ++i) {
      const ssize_t n = read(in, buf.data(), buf.size());
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (n == 0) return false;
      arrive(buf.data(), static_cast<size_t>(n), now_ns(), o);
    }
    return true;
  }

  void report() const {
    std::fprintf(stderr, "; %s: %llu frames, %llu lost, %llu tail-dropped, %llu unwritable, %llu bad, largest %llu bytes, %llu super frames",
                 name, static_cast<unsigned long long>(frames), static_cast<unsigned long long>(lost),
                 static_cast<unsigned long long>(tail_dropped), static_cast<unsigned long long>(write_failed),
                 static_cast<unsigned long long>(bad), static_cast<unsigned long long>(largest),
                 static_cast<unsigned long long>(super_frames));
  }
};

// Pins the calling thread to `cpu` (if >= 0) and names it, so that `ps -L` and /proc tell
// the two directions apart.
void place_thread(int cpu, const char* name) {
  pthread_setname_np(pthread_self(), name);
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
    die(1, std::string("cannot pin the thread ") + name + " to CPU " + std::to_string(cpu));
}

// One direction's thread. Idle (nothing on the way), it sleeps until a frame arrives. While
// frames are on the way it ticks: every --coalesce it reads all that arrived and writes all
// that is due, and sleeps in between (a frame due sooner than the next tick waits for it).
// With --coalesce 0 it wakes for each arrival and at each frame's due time. Returns false
// if its input tap went away, true when stop_fd is signalled.
bool carry(Direction& d, const Options& o, int stop_fd) {
  std::vector<unsigned char> buf(kReadBuffer);
  for (;;) {
    const int64_t woke = now_ns();
    d.deliver_due(woke);
    if (!d.read_burst(buf, o)) return false;
    d.deliver_due(now_ns());  // a frame read just now may already be due (no delay, no rate)
    int64_t until = -1;       // when to wake without input; -1: only for input
    if (!d.on_the_way.empty()) until = o.coalesce_ns > 0 ? woke + o.coalesce_ns : d.on_the_way.front().due_ns;
    const int64_t left = until < 0 ? -1 : std::max<int64_t>(0, until - now_ns());
    const timespec wait{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};  // used if left >= 0
    // Ticking, the input is read at the next tick: poll only the stop signal then.
    pollfd fds[2] = {{stop_fd, POLLIN, 0}, {d.in, POLLIN, 0}};
    const nfds_t watched = until >= 0 && o.coalesce_ns > 0 ? 1 : 2;
    if (ppoll(fds, watched, left >= 0 ? &wait : nullptr, nullptr) < 0 && errno != EINTR)
      die(1, std::string("ppoll failed: ") + std::strerror(errno));
    if (fds[0].revents) return true;
    if (watched == 2 && (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  // Stop signals are blocked in every thread and read from a signalfd by this one, which
  // then tells the two direction threads through stop_fd.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_signals, s);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const int signals = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  const int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (signals < 0 || stop_fd < 0) die(1, std::string("cannot make a signalfd or eventfd: ") + std::strerror(errno));

  Direction dirs[2];
  dirs[0].name = "a->b";
  dirs[1].name = "b->a";
  const int tap_a = attach_tap(o.ns_a, o.tap, o.gso), tap_b = attach_tap(o.ns_b, o.tap, o.gso);
  dirs[0].in = dirs[1].out = tap_a;
  dirs[1].in = dirs[0].out = tap_b;
  dirs[0].rng.seed(o.seed);
  dirs[1].rng.seed(o.seed ^ 0x9e3779b97f4a7c15ULL);

  // a->b writes into b: it runs on b's core, and b->a on a's.
  std::atomic<int> gone{-1};  // the direction whose input tap went away
  auto stop_all = [stop_fd] { const uint64_t one = 1; [[maybe_unused]] auto r = write(stop_fd, &one, sizeof one); };
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      place_thread(i == 0 ? o.cpu_b : o.cpu_a, i == 0 ? "to-b" : "to-a");
      if (!carry(dirs[i], o, stop_fd)) {
        gone = i;
        stop_all();
      }
    });
  std::printf("ready\n");
  std::fflush(stdout);

  pollfd fds[2] = {{signals, POLLIN, 0}, {stop_fd, POLLIN, 0}};
  while (poll(fds, 2, -1) < 0 && errno == EINTR) {
  }
  stop_all();
  for (auto& t : threads) t.join();
  int rc = 0;
  if (gone >= 0) {
    std::fprintf(stderr, "link-emulator: the tap in namespace '%s' went away (namespace deleted?); stopping\n",
                 gone == 0 ? o.ns_a.c_str() : o.ns_b.c_str());
    rc = 1;
  }
  std::fprintf(stderr, "link-emulator: stopped");
  for (const auto& d : dirs) d.report();
  std::fprintf(stderr, "\n");
  close(tap_a);
  close(tap_b);
  return rc;
}
