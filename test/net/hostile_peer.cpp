// A modified rank for the hostile-input tests: it holds the job key and completes the
// handshake like rank 1 of a two-rank job, then sends what no real rank sends, while the
// victim (net_rank_driver --scenario single, rank 0) runs one all-reduce of --floats values.
//
//   hostile_peer --peers LIST --key FILE --attack NAME [--floats N] [--job ID] [--config TEXT]
//
// Attacks: wrong-item (chunk 1 where chunk 0 is due), huge-count (a header claiming an
// all-reduce of 2^31 floats, 8 GiB), future-seq (a collective the victim has not started),
// garbage (malformed frames: short, long, bad magic, extra parts, header only, then the
// correct chunks), stale-flood (thousands of chunks of an earlier collective, then the
// correct ones), oversize (a 4 MiB frame, more than any legal message), int8-nan-scale and
// int8-byte-128 (an int8 chunk of the right size whose block scale is NaN, or holding the
// byte -128, which no encoder makes; the victim runs --scenario single_int8).
// It speaks the wire format directly with ZeroMQ (nothing of the transport), so that it can
// send anything. Exit 0 once the victim left or 30 s passed; 2 on bad usage.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "hello_wire.hpp"
#include "block_codes.hpp"
#include "ring_values.hpp"
#include "ringtrain/net/communicator.hpp"
#include "wire_format.hpp"

using namespace rt::net;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string peers, key, attack, job = "test-job", config = "depth=4\n";
  size_t floats = 1000;
};

void send_parts(zmq::socket_t& s, const std::vector<std::string>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    zmq::message_t m(parts[i].data(), parts[i].size());
    s.send(m, i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

std::string bytes_of(const Header& h) { return std::string(reinterpret_cast<const char*>(&h), sizeof h); }

std::string floats_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class Hostile {
 public:
  explicit Hostile(const Args& a) : a_(a), router_(ctx_, zmq::socket_type::router), dealer_(ctx_, zmq::socket_type::dealer) {
    peers_ = parse_peers(a.peers);
    const JobKey key = load_job_key(a.key);
    for (auto* s : {&router_, &dealer_}) s->set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::curve_server, true);
    router_.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(key.secret_key.data(), 32));
    router_.set(zmq::sockopt::sndhwm, 100000);
    dealer_.set(zmq::sockopt::curve_serverkey, zmq::const_buffer(key.public_key.data(), 32));
    dealer_.set(zmq::sockopt::curve_publickey, zmq::const_buffer(key.public_key.data(), 32));
    dealer_.set(zmq::sockopt::curve_secretkey, zmq::const_buffer(key.secret_key.data(), 32));
    dealer_.set(zmq::sockopt::routing_id, std::string("hostile-rank1"));
    router_.bind("tcp://" + peers_[1].text());
    dealer_.connect(peers_[0].endpoint());
    job_ = fnv1a(a.job);
  }

  // Joins as rank 1: our hello to the victim, its hello answered. False after 30 s.
  bool join() {
    Header h = control(MsgKind::Hello);
    send_parts(dealer_, {bytes_of(h), encode_hello(Hello{a_.job, 2, 1, a_.config, ""})});
    bool acked = false;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while ((!acked || victim_.empty()) && Clock::now() < deadline) {
      zmq_pollitem_t items[2] = {{router_.handle(), 0, ZMQ_POLLIN, 0}, {dealer_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq_poll(items, 2, 100);
      std::vector<zmq::message_t> parts;
      if (recv_all(router_, parts) && parts.size() == 3 && kind_of(parts[1]) == MsgKind::Hello) {
        victim_ = parts[0].to_string();
        send_parts(router_, {victim_, bytes_of(control(MsgKind::HelloOk)), ""});
      }
      if (recv_all(dealer_, parts) && parts.size() == 2 && kind_of(parts[0]) == MsgKind::HelloOk) {
        if (parts[1].size() != 0) {
          std::fprintf(stderr, "hostile: refused: %s\n", parts[1].to_string().c_str());
          return false;
        }
        acked = true;
      }
    }
    return acked && !victim_.empty();
  }

  void attack() {
    const ShardRange seg0 = shard_range(a_.floats, 2, 0), seg1 = shard_range(a_.floats, 2, 1);
    std::vector<float> mine0, sums1;  // our segment 0 (reduce-scatter), segment 1 summed (all-gather)
    for (size_t i = seg0.begin; i < seg0.end; ++i) mine0.push_back(value(1, i, 1));
    for (size_t i = seg1.begin; i < seg1.end; ++i) sums1.push_back(expected_sum(2, i, 1));
    const std::string& attack = a_.attack;
    if (attack == "wrong-item") {
      data(1, 1, a_.floats, floats_of(sums1));
    } else if (attack == "huge-count") {
      data(1, 0, uint64_t(1) << 31, floats_of(mine0));  // 2^31 floats: 8 GiB
    } else if (attack == "future-seq") {
      data(7, 0, a_.floats, floats_of(mine0));
    } else if (attack == "int8-nan-scale" || attack == "int8-byte-128") {
      // With int8 the ring's segments start on the 64-value block grid (ring_allreduce.cpp).
      const size_t end0 = seg1.begin / kInt8BlockValues * kInt8BlockValues;
      std::vector<float> int8_mine0;
      for (size_t i = 0; i < end0; ++i) int8_mine0.push_back(value(1, i, 1));
      std::string chunk(coded_bytes(Wire::Int8, int8_mine0.size()), '\0');
      encode_blocks(Wire::Int8, int8_mine0.data(), int8_mine0.size(), chunk.data(), nullptr, nullptr);
      if (attack == "int8-nan-scale") {
        const float nan = std::nanf("");
        std::memcpy(chunk.data() + sizeof(float), &nan, sizeof nan);  // the second block's scale
      } else {
        chunk.back() = char(-128);
      }
      Header h = data_header(1, 0, a_.floats);
      h.wire = static_cast<uint8_t>(Wire::Int8);
      send_parts(router_, {victim_, bytes_of(h), chunk});
    } else if (attack == "f32-nan") {  // our part of the victim's segment holds a NaN
      mine0[3] = std::nanf("");
      data(1, 0, a_.floats, floats_of(mine0));
    } else if (attack == "f32-inf-gather") {  // an honest part, then an infinite "sum"
      data(1, 0, a_.floats, floats_of(mine0));
      sums1[5] = -std::numeric_limits<float>::infinity();
      data(1, 1, a_.floats, floats_of(sums1));
    } else if (attack == "oversize") {
      data(1, 0, a_.floats, std::string(4 << 20, 'x'));
    } else if (attack == "garbage" || attack == "stale-flood") {
      if (attack == "garbage") {
        Header bad_magic = data_header(1, 0, a_.floats);
        bad_magic.magic = 0xdeadbeef;
        send_parts(router_, {victim_, std::string(10, '\x01'), floats_of(mine0)});            // short header
        send_parts(router_, {victim_, std::string(100, '\x02'), floats_of(mine0)});           // long header
        send_parts(router_, {victim_, bytes_of(bad_magic), floats_of(mine0)});                // wrong magic
        send_parts(router_, {victim_, bytes_of(data_header(1, 0, a_.floats)), "a", "b"});   // extra parts
        send_parts(router_, {victim_, bytes_of(data_header(1, 0, a_.floats))});             // header only
        send_parts(router_, {victim_});                                                     // nothing at all
      } else {
        for (int k = 0; k < 5000; ++k) data(0, uint64_t(k), a_.floats, floats_of(mine0));  // an earlier collective
      }
      data(1, 0, a_.floats, floats_of(mine0));  // then what rank 1 really sends
      data(1, 1, a_.floats, floats_of(sums1));
    } else {
      std::fprintf(stderr, "hostile: unknown attack %s\n", attack.c_str());
      std::exit(2);
    }
  }

  // Heartbeats until the victim says goodbye or fails, or 30 s pass.
  void linger() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    auto next_beat = Clock::now();
    while (Clock::now() < deadline) {
      if (Clock::now() >= next_beat) {
        send_parts(dealer_, {bytes_of(control(MsgKind::Heartbeat)), ""});
        next_beat = Clock::now() + std::chrono::milliseconds(200);
      }
      zmq_pollitem_t items[2] = {{router_.handle(), 0, ZMQ_POLLIN, 0}, {dealer_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq_poll(items, 2, 50);
      std::vector<zmq::message_t> parts;
      while (recv_all(dealer_, parts)) {
      }
      while (recv_all(router_, parts))
        if (parts.size() >= 2 && (kind_of(parts[1]) == MsgKind::Goodbye || kind_of(parts[1]) == MsgKind::Failing)) return;
    }
  }

 private:
  Header control(MsgKind kind) const {
    Header h;
    h.kind = kind;
    h.sender = 1;
    h.job = job_;
    return h;
  }
  Header data_header(uint64_t seq, uint64_t item, uint64_t count) const {
    Header h = control(MsgKind::Data);
    h.collective = static_cast<uint8_t>(CollectiveKind::AllReduce);
    h.seq = seq;
    h.item = item;
    h.count = count;
    return h;
  }
  void data(uint64_t seq, uint64_t item, uint64_t count, const std::string& payload) {
    send_parts(router_, {victim_, bytes_of(data_header(seq, item, count)), payload});
  }
  static MsgKind kind_of(const zmq::message_t& m) {
    Header h;
    return decode_header(m.data(), m.size(), h) ? h.kind : MsgKind(0);
  }
  static bool recv_all(zmq::socket_t& s, std::vector<zmq::message_t>& parts) {
    parts.clear();
    do {
      parts.emplace_back();
      if (!s.recv(parts.back(), zmq::recv_flags::dontwait)) {
        parts.pop_back();
        return !parts.empty();
      }
    } while (parts.back().more());
    return true;
  }

  Args a_;
  zmq::context_t ctx_{2};
  zmq::socket_t router_, dealer_;
  std::vector<PeerAddress> peers_;
  std::string victim_;
  uint64_t job_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--peers") a.peers = v;
    else if (k == "--key") a.key = v;
    else if (k == "--attack") a.attack = v;
    else if (k == "--floats") a.floats = std::stoul(v);
    else if (k == "--job") a.job = v;
    else if (k == "--config") a.config = v;
    else return std::fprintf(stderr, "hostile: unknown option %s\n", k.c_str()), 2;
  }
  try {
    Hostile h(a);
    if (!h.join()) return std::fprintf(stderr, "hostile: the victim never completed the handshake\n"), 1;
    std::printf("hostile: joined, attacking with %s\n", a.attack.c_str());
    std::fflush(stdout);
    h.attack();
    h.linger();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hostile: %s\n", e.what());
    return 1;
  }
}
