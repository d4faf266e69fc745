// Who can join, read or stop a job: the job key (keygen, --key), an impostor on a rank's
// listed port, clients with no key or another key (on loopback and from a third host),
// stray hellos, and a live rank that never takes part (--stall-timeout). Real processes.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include <zmq.hpp>

#include "../common/netns_hosts.hpp"
#include "../common/spawn.hpp"
#include "hello_wire.hpp"
#include "ringtrain/net/job_key.hpp"
#include "wire_format.hpp"

using namespace nettest;

namespace {

void set_curve_client(zmq::socket_t& s, const rt::net::JobKey& k) {
  s.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(k.public_key.data(), 32));
  s.set(zmq::sockopt::curve_publickey, zmq::const_buffer(k.public_key.data(), 32));
  s.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(k.secret_key.data(), 32));
}

void send_hello(zmq::socket_t& s, const std::string& text) {
  rt::net::Header h;
  h.kind = rt::net::MsgKind::Hello;
  h.sender = 1;
  s.send(zmq::const_buffer(&h, sizeof h), zmq::send_flags::sndmore);
  s.send(zmq::const_buffer(text.data(), text.size()), zmq::send_flags::none);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(security)

BOOST_AUTO_TEST_CASE(keygen_writes_a_private_key_and_bad_key_files_are_refused) {
  const std::string bin = ringtrain_path(), dir = scratch_dir() + "/cli-keys";
  std::filesystem::create_directories(dir);
  std::string out;
  BOOST_TEST(run_shell(bin + " keygen --out " + dir + "/a.key", &out) == 0, out);
  struct stat st{};
  BOOST_REQUIRE(stat((dir + "/a.key").c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0600u);
  BOOST_TEST(st.st_size == 32);
  BOOST_TEST(run_shell(bin + " keygen --out " + dir + "/a.key", &out) == 2, out);
  BOOST_TEST(contains(out, "already exists"));
  BOOST_TEST(run_shell(bin + " keygen --out " + dir + "/a.key --force", &out) == 0, out);
  // Every command that takes --key refuses a key others can read, in one line, exit 2.
  BOOST_REQUIRE(chmod((dir + "/a.key").c_str(), 0644) == 0);
  const std::string peers = " --rank 0 --peers " + loopback_peers(2, port_base(0));
  for (const std::string& cmd : std::vector<std::string>{"bench allreduce" + peers, "status 127.0.0.1:1", "stop 127.0.0.1:1",
                                                          "train --data /nonexistent" + peers}) {
    BOOST_TEST(run_shell(bin + " " + cmd + " --key " + dir + "/a.key", &out) == 2, cmd << ": " << out);
    BOOST_TEST(contains(out, "chmod 600"), cmd << ": " << out);
  }
  // Peers beyond loopback without a key: exit 2 at once, saying how to make one.
  BOOST_TEST(run_shell(bin + " bench allreduce --rank 0 --peers 10.99.77.1:29500,10.99.77.2:29500", &out) == 2, out);
  BOOST_TEST(contains(out, "ringtrain keygen --out job.key"), out);
}

// A process without the key holds rank 1's listed port before rank 1 starts: rank 1 says
// the port is taken, rank 0 never sends it anything (not even its hello) and says that the
// process there failed the security handshake.
BOOST_AUTO_TEST_CASE(impostor_on_a_listed_port_gets_nothing) {
  const int base = port_base(1);
  zmq::context_t ctx(1);
  zmq::socket_t impostor(ctx, zmq::socket_type::router);
  impostor.set(zmq::sockopt::linger, 0);
  impostor.bind("tcp://127.0.0.1:" + std::to_string(base + 1));
  auto procs = spawn_ranks(2, loopback_peers(2, base), "hello", {"--key", key_file(), "--connect-timeout", "4"}, "impostor");
  long received = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (std::chrono::steady_clock::now() < end) {
    zmq::message_t m;
    if (impostor.recv(m, zmq::recv_flags::dontwait)) ++received;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  wait_all(procs, 30);
  BOOST_TEST(received == 0);
  BOOST_TEST_INFO(procs[0].err() << " | " << procs[1].err());
  BOOST_TEST(procs[1].exit_code == 1);
  BOOST_TEST(contains(procs[1].err(), "is already in use by pid " + std::to_string(getpid())));
  BOOST_TEST(procs[0].exit_code == 1);
  BOOST_TEST(contains(procs[0].err(), "rank 1 (127.0.0.1:" + std::to_string(base + 1) + ") never joined"));
  BOOST_TEST(contains(procs[0].err(), "failed the security handshake"));
}

// A client with another key knocks on a running job, says hello and asks for its status:
// refused and logged with its address; the job goes on.
BOOST_AUTO_TEST_CASE(a_client_with_another_key_is_refused_and_the_job_goes_on) {
  const int base = port_base(2);
  auto job = spawn_ranks(2, loopback_peers(2, base), "soak", {"--key", key_file(), "--seconds", "10", "--big-floats", "100000"},
                         "otherkey");
  BOOST_REQUIRE(wait_for_output(job, "soaking", 30));
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  set_curve_client(s, rt::net::load_job_key(key_file("other.key")));
  s.connect("tcp://127.0.0.1:" + std::to_string(base));
  send_hello(s, rt::net::encode_hello({"test-job", 2, 1, "depth=4\n", ""}));
  zmq::message_t m;
  s.set(zmq::sockopt::rcvtimeo, 2000);
  BOOST_TEST(!s.recv(m));  // nothing ever comes back
  std::string out;
  BOOST_TEST(run_shell(ringtrain_path() + " status 127.0.0.1:" + std::to_string(base) + " --key " + key_file("other.key"), &out) == 1);
  BOOST_TEST(contains(out, "refused this key"), out);
  // A client that knows the job's public key (say it leaked) but not its secret: the
  // handshake completes up to the authenticator, which refuses it.
  char pub[41], sec[41];
  BOOST_REQUIRE(zmq_curve_keypair(pub, sec) == 0);
  zmq::socket_t z(ctx, zmq::socket_type::dealer);
  z.set(zmq::sockopt::linger, 0);
  z.set(zmq::sockopt::rcvtimeo, 2000);
  const rt::net::JobKey job_key = rt::net::load_job_key(key_file());
  z.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(job_key.public_key.data(), 32));
  z.set(zmq::sockopt::curve_publickey, std::string(pub));
  z.set(zmq::sockopt::curve_secretkey, std::string(sec));
  z.connect("tcp://127.0.0.1:" + std::to_string(base + 1));
  send_hello(z, rt::net::encode_hello({"test-job", 2, 0, "depth=4\n", ""}));
  BOOST_TEST(!z.recv(m));
  wait_all(job, 60);
  for (auto& p : job) {
    BOOST_TEST_INFO(p.err());
    BOOST_TEST(p.exit_code == 0);
    BOOST_TEST(contains(p.out(), "soak ok"));
  }
  BOOST_TEST(logs_refusal_from(job[0].err(), "127.0.0.1"), job[0].err());
  BOOST_TEST(contains(job[1].err(), "refused a connection from 127.0.0.1: it presented a key other than this job's"), job[1].err());
}

// Without a key (loopback), a stray hello and a garbage one arrive before rank 1 starts:
// both are refused with a reply that says nothing of the job, logged, and the job runs.
BOOST_AUTO_TEST_CASE(stray_hellos_never_end_the_job) {
  const int base = port_base(3);
  const std::string peers = loopback_peers(2, base);
  Proc rank0 = spawn({driver_path(), "--rank", "0", "--peers", peers, "--scenario", "hello", "--job", "secret-job",
                      "--config", "--data=/home/alice/private\n"},
                     "stray0");
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect("tcp://127.0.0.1:" + std::to_string(base));
  send_hello(s, "GET / HTTP/1.0\r\n\r\n");
  send_hello(s, rt::net::encode_hello(rt::net::fingerprint_form({"guess", 2, 1, "x=1\n", ""})));
  std::string replies;
  for (int k = 0; k < 2; ++k) {
    zmq::message_t head, body;
    BOOST_REQUIRE(s.recv(head));
    if (head.more()) (void)s.recv(body);
    replies += body.to_string() + "\n";
  }
  for (const char* leak : {"secret-job", "alice", "private", "--data"}) BOOST_TEST(!contains(replies, leak), replies);
  Proc rank1 = spawn({driver_path(), "--rank", "1", "--peers", peers, "--scenario", "hello", "--job", "secret-job",
                      "--config", "--data=/home/alice/private\n"},
                     "stray1");
  wait_one(rank0, 60);
  wait_one(rank1, 60);
  BOOST_TEST_INFO(rank0.err() << " | " << rank1.err());
  BOOST_TEST(rank0.exit_code == 0);
  BOOST_TEST(rank1.exit_code == 0);
  BOOST_TEST(contains(rank0.err(), "refused a handshake from 127.0.0.1: not a ringtrain handshake"));
  BOOST_TEST(contains(rank0.err(), "refused a handshake from 127.0.0.1: it claims rank 1: job id or config mismatch"));
}

// Rank 1 is alive (its heartbeats arrive) but never calls the all-reduce: rank 0 stops
// after --stall-timeout, naming it.
BOOST_AUTO_TEST_CASE(stall_timeout_fails_a_collective_while_heartbeats_arrive) {
  const int base = port_base(0);
  auto procs = spawn_ranks(2, loopback_peers(2, base), "stall", {"--stall-timeout", "3", "--peer-timeout", "2", "--seconds", "10"},
                           "stall");
  wait_one(procs[0], 30);
  kill(procs[1].pid, SIGKILL);
  wait_one(procs[1], 10);
  BOOST_TEST_INFO(procs[0].err());
  BOOST_TEST(procs[0].exit_code == 1);
  BOOST_TEST(contains(procs[0].err(), "made no progress for 3 s waiting for rank 1 (127.0.0.1:" + std::to_string(base + 1) + ")"));
  BOOST_TEST(procs[0].seconds < 15);
}

// The user's setup: two hosts behind a firewall that opens only the job's ports, and a
// third host on the same network. From the third host, status and stop without the key (or
// with another key) are refused within 10 s; the ranks log the refusals and go on; with the
// key, stop works.
BOOST_AUTO_TEST_CASE(status_and_stop_without_the_key_from_a_third_host) {
  if (namespaces_unavailable()) return;
  NetnsHosts hosts(3, "s", "--firewall 29500-29510");
  const std::string peers = "10.99.0.1:29500,10.99.0.2:29501";
  std::vector<Proc> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(spawn({"ip", "netns", "exec", hosts.ns(r), driver_path(), "--rank", std::to_string(r), "--peers", peers,
                           "--scenario", "serve", "--key", key_file()},
                          "third" + std::to_string(r)));
  BOOST_REQUIRE(wait_for_output(ranks, "serving", 60));
  const std::string from_third = "ip netns exec " + hosts.ns(2) + " " + ringtrain_path() + " ";
  const std::string attempts[] = {"status 10.99.0.1:29500", "stop 10.99.0.1:29500", "stop 10.99.0.2:29501",
                                  "status 10.99.0.2:29501 --key " + key_file("other.key")};
  for (const auto& cmd : attempts) {
    std::string out;
    const auto t0 = std::chrono::steady_clock::now();
    BOOST_TEST(run_shell(from_third + cmd, &out) == 1, cmd << ": " << out);
    BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0, cmd);
    BOOST_TEST(contains(out, "refused"), cmd << ": " << out);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (auto& p : ranks) BOOST_TEST(alive(p.pid));
  for (auto& p : ranks) BOOST_TEST(logs_refusal_from(p.err(), "10.99.0.3"), p.err());
  for (const char* addr : {"10.99.0.1:29500", "10.99.0.2:29501"}) {
    std::string out;
    BOOST_TEST(run_shell(from_third + "stop " + addr + " --key " + key_file(), &out) == 0, out);
  }
  wait_all(ranks, 60);
  for (auto& p : ranks) BOOST_TEST(p.exit_code == 0, p.err());
}

BOOST_AUTO_TEST_SUITE_END()
