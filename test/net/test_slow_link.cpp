// The slow link between two namespace hosts made by the userspace link emulator
// (tools/netns/link_emulator.cpp, chosen by `hosts.sh up ... --link-emulator` and wherever
// the kernel lacks sch_netem), measured with real traffic from sockets opened inside the
// hosts: the round trip is the delay it was given, a bulk TCP transfer runs at its rate and
// no faster, and its loss drops that share of UDP datagrams. Needs root and /dev/net/tun;
// reported as skipped (exit 77) otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "../common/skip.hpp"
#include "../common/netns_hosts.hpp"
#include "../common/spawn.hpp"

using namespace nettest;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool can_emulate() {
  return testskip::require(geteuid() == 0, "network namespaces need root (CI runs as root)") &&
         testskip::require(access("/dev/net/tun", R_OK | W_OK) == 0, "no /dev/net/tun (the tun module): the link emulator needs taps");
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// A socket of namespace `ns`: this thread enters the namespace for the socket() call only
// (a socket keeps the namespace it was made in), with 10 s send/receive timeouts.
Fd socket_in(const std::string& ns, int type) {
  Fd self(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  Fd target(open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
  BOOST_REQUIRE(self.fd >= 0);
  BOOST_REQUIRE_MESSAGE(target.fd >= 0, "no namespace " << ns);
  BOOST_REQUIRE(setns(target.fd, CLONE_NEWNET) == 0);
  Fd s(socket(AF_INET, type | SOCK_CLOEXEC, 0));
  BOOST_REQUIRE(setns(self.fd, CLONE_NEWNET) == 0);
  BOOST_REQUIRE(s.fd >= 0);
  const timeval tv{10, 0};
  setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return s;
}

sockaddr_in host_addr(int host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ("10.99.0." + std::to_string(host + 1)).c_str(), &a.sin_addr);
  return a;
}

void bind_to(const Fd& s, int host, int port) {
  const int one = 1;
  setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in a = host_addr(host, port);
  BOOST_REQUIRE_MESSAGE(bind(s.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0, std::strerror(errno));
}

// A TCP listener on host 1, port 29500.
Fd listener_on_host1(const NetnsHosts& hosts) {
  Fd listener = socket_in(hosts.ns(1), SOCK_STREAM);
  bind_to(listener, 1, 29500);
  BOOST_REQUIRE(listen(listener.fd, 4) == 0);
  return listener;
}

// A TCP connection from host 0 to host 1: {client end, server end}.
std::pair<Fd, Fd> tcp_pair(const NetnsHosts& hosts, const Fd& listener) {
  Fd client = socket_in(hosts.ns(0), SOCK_STREAM);
  const int one = 1;
  setsockopt(client.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const sockaddr_in a = host_addr(1, 29500);
  BOOST_REQUIRE_MESSAGE(connect(client.fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0, std::strerror(errno));
  Fd server(accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
  BOOST_REQUIRE(server.fd >= 0);
  const timeval tv{10, 0};
  setsockopt(server.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(server.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(server.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {std::move(client), std::move(server)};
}

// Sends `count` numbered UDP datagrams from host 0 to host 1 in small paced bursts (so that
// neither the link's queue nor the receive buffer overflows) and returns how many distinct
// ones arrived. Each datagram carries its number; anything else received fails the test.
int udp_delivered(const NetnsHosts& hosts, int count) {
  Fd rx = socket_in(hosts.ns(1), SOCK_DGRAM), tx = socket_in(hosts.ns(0), SOCK_DGRAM);
  bind_to(rx, 1, 29501);
  // Room for all of them, should this thread wait for a core a while: no drop at the socket.
  const int rcvbuf = 16 << 20;
  BOOST_REQUIRE(setsockopt(rx.fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) == 0);
  const sockaddr_in to = host_addr(1, 29501);
  auto send_number = [&](uint32_t n) {
    char msg[200] = {};
    std::memcpy(msg, &n, sizeof n);
    BOOST_REQUIRE(sendto(tx.fd, msg, sizeof msg, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) == sizeof msg);
  };
  std::set<uint32_t> got;
  bool warm = false;
  auto drain = [&](int wait_ms) {
    pollfd p{rx.fd, POLLIN, 0};
    while (poll(&p, 1, wait_ms) > 0) {
      char msg[256];
      const ssize_t n = recv(rx.fd, msg, sizeof msg, 0);
      BOOST_REQUIRE(n == 200);
      uint32_t k = 0;
      std::memcpy(&k, msg, sizeof k);
      if (k == 0xffffffffu) {
        warm = true;
        continue;
      }
      BOOST_REQUIRE(k < static_cast<uint32_t>(count));
      BOOST_REQUIRE_MESSAGE(got.insert(k).second, "datagram " << k << " arrived twice");
    }
  };
  // Warm up: the neighbour (ARP) exchange crosses the lossy link too; resolve it first.
  const auto start = Clock::now();
  while (!warm && seconds_since(start) < 10) {
    send_number(0xffffffffu);
    drain(200);
  }
  BOOST_REQUIRE_MESSAGE(warm, "no datagram crossed the link in 10 s");
  drain(200);  // late warm-up datagrams
  for (int i = 0; i < count; ++i) {
    send_number(static_cast<uint32_t>(i));
    if (i % 20 == 19) drain(2);
  }
  drain(500);  // until quiet for 0.5 s: well past the delay
  return static_cast<int>(got.size());
}

// Whether process `pid` runs (a zombie does not: whoever adopted it may not have reaped it yet).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() && line[close_paren + 2] != 'Z' &&
         line[close_paren + 2] != 'X';
}

}  // namespace

BOOST_AUTO_TEST_SUITE(slow_link)

// 20 Mbit/s, 20 ms one way (netem "delay 10ms" per queue, two queues per path, as hosts.sh
// documents): a 40 ms round trip, bulk TCP at 70-100% of 20 Mbit/s, and no loss.
BOOST_AUTO_TEST_CASE(carries_tcp_at_the_rate_and_round_trip_it_is_given) {
  if (!can_emulate()) return;
  NetnsHosts hosts(2, "sl", "--rate 20mbit --netem 'delay 10ms' --link-emulator");
  const Fd listener = listener_on_host1(hosts);

  // Round trips of one byte each way.
  {
    auto [client, server] = tcp_pair(hosts, listener);
    std::vector<double> rtt_ms;
    for (int i = 0; i < 10; ++i) {
      char b = 'x';
      const auto t = Clock::now();
      BOOST_REQUIRE(send(client.fd, &b, 1, 0) == 1);
      BOOST_REQUIRE(recv(server.fd, &b, 1, 0) == 1);
      BOOST_REQUIRE(send(server.fd, &b, 1, 0) == 1);
      BOOST_REQUIRE(recv(client.fd, &b, 1, 0) == 1);
      rtt_ms.push_back(seconds_since(t) * 1000);
    }
    std::sort(rtt_ms.begin(), rtt_ms.end());
    BOOST_TEST_MESSAGE("round trips (ms): " << rtt_ms.front() << " .. " << rtt_ms.back() << ", median " << rtt_ms[5]);
    BOOST_TEST(rtt_ms.front() >= 39.5);  // 2 x 20 ms can never be beaten
    BOOST_TEST(rtt_ms[5] >= 38.0);
    BOOST_TEST(rtt_ms[5] <= 60.0);  // a loaded machine adds wake-up latency, not 20 ms
  }

  // Bulk transfer, host 0 to host 1, timed from the first send to the last byte received.
  {
    auto [client, server] = tcp_pair(hosts, listener);
    constexpr size_t total = 6 << 20;  // 2.5 s at 20 Mbit/s
    size_t received = 0;
    std::thread sink([&, fd = server.fd] {
      std::vector<char> buf(1 << 16);
      while (received < total) {
        const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
        if (n <= 0) return;
        received += static_cast<size_t>(n);
      }
    });
    const std::vector<char> chunk(1 << 16, 'y');
    const auto t = Clock::now();
    size_t sent = 0;
    while (sent < total) {
      const ssize_t n = send(client.fd, chunk.data(), std::min(chunk.size(), total - sent), 0);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    sink.join();
    const double secs = seconds_since(t), mbit = static_cast<double>(received) * 8 / secs / 1e6;
    BOOST_TEST_MESSAGE("bulk: " << received << " bytes in " << secs << " s = " << mbit << " Mbit/s");
    BOOST_REQUIRE(received == total);
    BOOST_TEST(mbit <= 20.0);  // payload only: at most 1448/1514 of the rate
    BOOST_TEST(mbit >= 14.0);  // 70% of it
  }

  BOOST_TEST(udp_delivered(hosts, 1000) == 1000);
}

// netem "loss 2.5%" per queue, two queues per path: 1 - 0.975^2 = 4.94% of the datagrams
// are lost. Then `hosts.sh down` stops the emulator and leaves no namespace behind.
BOOST_AUTO_TEST_CASE(loses_the_share_it_is_given_and_goes_with_down) {
  if (!can_emulate()) return;
  auto hosts = std::make_unique<NetnsHosts>(2, "sm", "--netem 'delay 1ms loss 2.5%' --link-emulator");
  std::string pids;
  BOOST_REQUIRE(run_shell("ip netns pids " + hosts->switch_ns(), &pids) == 0);
  std::istringstream pid_words(pids);
  std::vector<pid_t> emulator;
  for (pid_t p = 0; pid_words >> p;) emulator.push_back(p);
  BOOST_REQUIRE(emulator.size() == 1u);

  constexpr int count = 4000;
  const int delivered = udp_delivered(*hosts, count);
  const double lost = 1.0 - static_cast<double>(delivered) / count;
  BOOST_TEST_MESSAGE("lost " << count - delivered << " of " << count << " datagrams");
  BOOST_TEST(lost >= 0.03);  // expected 4.94%, standard deviation 0.34%
  BOOST_TEST(lost <= 0.07);

  const std::string sw = hosts->switch_ns(), h0 = hosts->ns(0);
  hosts.reset();  // hosts.sh down
  BOOST_TEST(!running(emulator[0]));
  std::string list;
  BOOST_REQUIRE(run_shell("ip netns list", &list) == 0);
  BOOST_TEST(list.find(sw) == std::string::npos);
  BOOST_TEST(list.find(h0) == std::string::npos);
}

// TCP crosses in super frames (segmentation offload) and loss still hits single frames:
// the segments around a lost one go on as frames of their own, re-cut by the emulator, so
// every byte must arrive intact and in order, the emulator must have seen super frames,
// and the share of frames it lost must be the one asked (1 - 0.99^2 = 1.99%).
BOOST_AUTO_TEST_CASE(tcp_crosses_in_super_frames_and_keeps_its_bytes_through_loss) {
  if (!can_emulate()) return;
  NetnsHosts hosts(2, "sg", "--rate 200mbit --netem 'delay 1ms loss 1%' --link-emulator");
  const Fd listener = listener_on_host1(hosts);
  auto [client, server] = tcp_pair(hosts, listener);
  constexpr size_t total = 12 << 20;
  auto byte_at = [](size_t i) { return static_cast<char>((i * 2654435761u) >> 13); };  // no period a lost segment could hide in
  size_t received = 0, wrong = 0;
  std::thread sink([&, fd = server.fd] {
    std::vector<char> buf(1 << 16);
    while (received < total) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) return;
      for (ssize_t k = 0; k < n; ++k) wrong += buf[size_t(k)] != byte_at(received + size_t(k));
      received += static_cast<size_t>(n);
    }
  });
  std::vector<char> chunk(1 << 16);
  for (size_t sent = 0; sent < total;) {
    for (size_t k = 0; k < chunk.size(); ++k) chunk[k] = byte_at(sent + k);
    const ssize_t n = send(client.fd, chunk.data(), std::min(chunk.size(), total - sent), 0);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  sink.join();
  BOOST_REQUIRE(received == total);
  BOOST_TEST(wrong == 0u);

  // The emulator's counts, written as it stops: "a->b: F frames, L lost, ..., S super frames".
  std::string pid;
  BOOST_REQUIRE(run_shell("ip netns pids " + hosts.switch_ns(), &pid) == 0);
  BOOST_REQUIRE(kill(static_cast<pid_t>(std::stol(pid)), SIGTERM) == 0);
  const std::string prefix = hosts.switch_ns().substr(0, hosts.switch_ns().size() - 2);
  const char* tmp = std::getenv("TMPDIR");
  const std::string log_path = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-link-emulator.log";
  std::string log;
  for (int i = 0; i < 50 && log.find("super frames; b->a") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(log_path);
    log.assign(std::istreambuf_iterator<char>(in), {});
  }
  BOOST_TEST_MESSAGE(log);
  unsigned long long frames = 0, lost = 0, supers = 0;
  const auto at = log.find("a->b: ");
  BOOST_REQUIRE(at != std::string::npos);
  BOOST_REQUIRE(std::sscanf(log.c_str() + at, "a->b: %llu frames, %llu lost, %*u tail-dropped, %*u unwritable, "
                            "%*u bad, largest %*u bytes, %llu super frames", &frames, &lost, &supers) == 3);
  BOOST_TEST(frames >= total / 1448);
  BOOST_TEST(supers > 0u, "no super frame crossed: segmentation offload is off");
  const double share = static_cast<double>(lost) / static_cast<double>(frames);
  BOOST_TEST(share >= 0.012);  // expected 1.99%, standard deviation about 0.14% over ~9000 frames
  BOOST_TEST(share <= 0.03);
}

// With --link-cpus A,B the thread that delivers into host 0 ("to-a") may run on core A only
// and the one that delivers into host 1 ("to-b") on core B only: each host's receiving
// stack runs on its own core, as on two machines. Given in reverse order (1,0), so that
// swapped directions or an ignored flag fail. Traffic still crosses.
BOOST_AUTO_TEST_CASE(delivers_into_each_host_from_that_hosts_core) {
  if (!can_emulate()) return;
  if (!testskip::require(std::thread::hardware_concurrency() >= 2, "needs two cores")) return;
  NetnsHosts hosts(2, "sp", "--netem 'delay 1ms' --link-emulator --link-cpus 1,0");
  std::string pid;
  BOOST_REQUIRE(run_shell("ip netns pids " + hosts.switch_ns(), &pid) == 0);
  std::map<std::string, std::string> cpus_of;  // thread name -> Cpus_allowed_list
  for (const auto& thread : std::filesystem::directory_iterator("/proc/" + std::to_string(std::stol(pid)) + "/task")) {
    std::ifstream comm(thread.path() / "comm"), status(thread.path() / "status");
    std::string name, line;
    std::getline(comm, name);
    while (std::getline(status, line))
      if (line.rfind("Cpus_allowed_list:", 0) == 0) cpus_of[name] = line.substr(line.find_first_not_of(" \t", 18));
  }
  BOOST_TEST(cpus_of["to-a"] == "1");
  BOOST_TEST(cpus_of["to-b"] == "0");
  BOOST_TEST(udp_delivered(hosts, 200) == 200);
}

BOOST_AUTO_TEST_SUITE_END()
