// Values from other ranks are checked before use: out-of-range token ids in the embedding-
// row exchange, and out-of-range numbers, stop the job naming the rank that sent them
// (PeerLost, which the trainer answers with a checkpoint), and are never used.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <thread>
#include <vector>

#include "../common/spawn.hpp"
#include "ringtrain/net/communicator.hpp"
#include "../../src/train/sync/embedding_rows.hpp"
#include "peer_values.hpp"

namespace {

// Runs body(rank, comm) on two ranks in threads of their own (with the job key); returns
// what each threw ("" if nothing).
std::vector<std::string> on_two_ranks(int slot, const std::function<void(int, rt::net::Communicator&)>& body) {
  std::vector<std::string> errors(2);
  const auto key = rt::net::load_job_key(nettest::key_file());  // made once, before the threads
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        rt::net::CommOptions o = nettest::loopback_options(2, r, nettest::port_base(slot));
        o.key = key;
        rt::net::Communicator comm(o);
        body(r, comm);
      } catch (const rt::net::PeerLost& e) {
        errors[size_t(r)] = std::string("PeerLost: ") + e.what();
      } catch (const std::exception& e) {
        errors[size_t(r)] = std::string("other: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(peer_values)

BOOST_AUTO_TEST_CASE(out_of_range_token_ids_stop_the_job_and_touch_nothing) {
  constexpr int64_t kRows = 50, kWidth = 3;
  std::vector<std::vector<float>> grads(2, std::vector<float>(size_t(kRows * kWidth), 1.0f));
  const auto errors = on_two_ranks(0, [&](int r, rt::net::Communicator& comm) {
    rt::train::EmbeddingRowSync sync(comm, rt::net::Wire::F32, {{grads[size_t(r)].data(), kWidth}}, kRows);
    sync.sync(r == 0 ? std::vector<int32_t>{1, 7} : std::vector<int32_t>{3, 70000});
  });
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST_INFO("rank " << r << ": " << errors[size_t(r)]);
    BOOST_TEST(errors[size_t(r)].find("PeerLost: rank 1 (127.0.0.1:") == 0);
    BOOST_TEST(errors[size_t(r)].find("sent token id 70000 for the embedding-row exchange, outside the vocabulary of 50") !=
               std::string::npos);
    for (float g : grads[size_t(r)]) BOOST_TEST(g == 1.0f);  // no row was summed or written
  }
}

BOOST_AUTO_TEST_CASE(out_of_range_numbers_name_the_sender) {
  const auto errors = on_two_ranks(1, [&](int r, rt::net::Communicator& comm) {
    const auto all = comm.all_gather_record<int64_t>(r == 0 ? 4 : -4);
    for (int q = 0; q < 2; ++q)
      if (all[size_t(q)] < 1) rt::train::bad_peer_value(comm, q, "--device-batch " + std::to_string(all[size_t(q)]));
  });
  for (int r = 0; r < 2; ++r) {
    BOOST_TEST_INFO("rank " << r << ": " << errors[size_t(r)]);
    BOOST_TEST(errors[size_t(r)].find("PeerLost: rank 1 (127.0.0.1:") == 0);
    BOOST_TEST(errors[size_t(r)].find("sent --device-batch -4; it runs a modified or broken ringtrain") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
