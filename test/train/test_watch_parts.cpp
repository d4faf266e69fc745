// The parts of `ringtrain watch`, in-process: the bounded history, the HTTP request parser,
// the checks of the job's replies, the exposition format (test_watch.cpp runs the real thing).
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/spawn.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/net/http_server.hpp"
#include "ringtrain/train/metric_history.hpp"
#include "ringtrain/watch/job_reply.hpp"
#include "ringtrain/watch/prometheus.hpp"

using nlohmann::json;

namespace {

json step_record(int64_t step, double loss = 1.0) { return {{"step", step}, {"loss", loss}, {"tok_per_s", 10.0}}; }

std::vector<int64_t> held_steps(const rt::train::MetricHistory& h) {
  std::vector<int64_t> out;
  const json page = json::parse(h.after(0, size_t(1) << 30));
  for (const auto& e : page["records"])
    if (!e["r"].contains("event") && !e["r"].contains("val_bpb")) out.push_back(e["r"]["step"].get<int64_t>());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(watch_parts)

// Past its bound the history keeps every other step (the stride doubles), always the
// newest step, and no more than the bound.
BOOST_AUTO_TEST_CASE(history_is_thinned_not_cut) {
  rt::train::MetricHistory h(8, 4, 4);
  for (int64_t s = 1; s <= 100; ++s) h.add(step_record(s));
  const auto steps = held_steps(h);
  BOOST_TEST(steps.size() <= 9u);
  BOOST_TEST(steps.back() == 100);
  BOOST_TEST(h.stride() == 16);
  for (size_t i = 0; i + 1 < steps.size(); ++i) BOOST_TEST(steps[i] % 16 == 0, steps[i]);
  // the shape of the run: its start is still there
  BOOST_TEST(steps.front() == 16);
  for (int e = 0; e < 10; ++e) h.add({{"step", 100}, {"event", "rank_lost"}, {"rank", e}, {"world", 1}});
  BOOST_TEST(h.events_total() == 10u);
  BOOST_TEST(h.size() <= 9u + 4u);
}

// A step done again (a re-formed ring going on from an earlier step) drops the undone
// records, as the metrics file does; numbers never repeat.
BOOST_AUTO_TEST_CASE(undone_steps_are_dropped) {
  rt::train::MetricHistory h;
  for (int64_t s = 1; s <= 10; ++s) h.add(step_record(s));
  h.add({{"step", 10}, {"tokens", 5.0}, {"val_bpb", 2.0}});
  const uint64_t before = h.last_seq();
  h.add(step_record(7, 0.5));
  BOOST_TEST((held_steps(h) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  BOOST_TEST(h.last_seq() > before);
  BOOST_TEST(json::parse(h.after(before, 1 << 20))["records"].size() == 1u);
  h.add({{"no step", 1}});  // ignored
  h.add({{"step", "7"}});    // ignored
  BOOST_TEST(h.size() == 7u);
}

// Pages stay under their byte bound and together hold every record once.
BOOST_AUTO_TEST_CASE(pages_fit_their_bound) {
  rt::train::MetricHistory h(100000);
  for (int64_t s = 1; s <= 3000; ++s) h.add(step_record(s, 1.0 / double(s)));
  uint64_t after = 0;
  size_t seen = 0, pages = 0;
  while (true) {
    const json p = json::parse(h.after(after, rt::train::kHistoryReplyBytes));
    BOOST_TEST(p.dump().size() <= rt::train::kHistoryReplyBytes + 200);
    for (const auto& e : p["records"]) {
      BOOST_TEST(e["seq"].get<uint64_t>() > after);
      after = e["seq"].get<uint64_t>();
      ++seen;
    }
    ++pages;
    if (!p["more"].get<bool>()) break;
  }
  BOOST_TEST(seen == 3000u);
  BOOST_TEST(pages > 1u);
}

BOOST_AUTO_TEST_CASE(http_heads_are_parsed_or_refused) {
  int status = 0;
  auto req = rt::net::parse_http_head("GET /api/history?after=12&x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-A:  b \r\n", status);
  BOOST_REQUIRE(req.has_value());
  BOOST_TEST(req->path == "/api/history");
  BOOST_TEST(rt::net::query_value(req->query, "after") == "12");
  BOOST_TEST(req->headers["x-a"] == "b");
  const std::pair<std::string, int> refused[] = {
      {"DELETE / HTTP/1.1\r\nHost: a", 405},
      {"GET / HTTP/2.0\r\nHost: a", 505},
      {"GET / HTTP/1.1", 400},                                  // 1.1 without Host
      {"GET  / HTTP/1.1\r\nHost: a", 400},                      // two spaces
      {"GET relative HTTP/1.1\r\nHost: a", 400},
      {"GET /\x01 HTTP/1.1\r\nHost: a", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nHost: b", 400},            // two hosts
      {"POST /api/stop HTTP/1.1\r\nHost: a", 411},
      {"POST /api/stop HTTP/1.1\r\nHost: a\r\nContent-Length: 99999", 413},
      {"POST /api/stop HTTP/1.1\r\nHost: a\r\nContent-Length: -1", 400},
      {"POST /api/stop HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked", 501},
      {"GET / HTTP/1.1\r\nHost: a\r\n folded", 400},
      {"GET / HTTP/1.1\r\nHost: a\r\nBad\x7fValue: x", 400},
      {"GET /" + std::string(2000, 'a') + " HTTP/1.1\r\nHost: a", 414},
      {"GET / HTTP/1.1\r\nHost: a\r\n" + std::string(9000, 'x'), 431},
  };
  for (const auto& [head, want] : refused) {
    BOOST_TEST(!rt::net::parse_http_head(head, status).has_value(), head.substr(0, 40));
    BOOST_TEST(status == want, head.substr(0, 40));
  }
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 70; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
  BOOST_TEST(!rt::net::parse_http_head(many, status).has_value());
  BOOST_TEST(status == 431);
  // Every prefix of a valid head, and every byte flipped, is parsed or refused without harm.
  const std::string good = "POST /api/stop HTTP/1.1\r\nHost: 127.0.0.1:1\r\nContent-Length: 0\r\nX-Ringtrain-Stop: yes";
  for (size_t n = 0; n <= good.size(); ++n) (void)rt::net::parse_http_head(good.substr(0, n), status);
  for (size_t i = 0; i < good.size(); ++i)
    for (int b : {0, 0x0a, 0x20, 0x3a, 0x7f, 0xff}) {
      std::string m = good;
      m[i] = char(b);
      (void)rt::net::parse_http_head(m, status);
    }
}

// The job's replies are untrusted: out-of-range numbers, markup or control bytes in
// strings, oversized lists and reordered records are refused with words, and unknown
// fields never pass.
BOOST_AUTO_TEST_CASE(job_replies_are_checked) {
  const json good = {{"step", 5}, {"steps", 10}, {"loss", 3.5}, {"val_bpb", nullptr}, {"epoch", 1},
                     {"members", {{{"rank", 0}, {"state", "live"}}, {{"rank", 1}, {"state", "lost"}}}},
                     {"addresses", {"127.0.0.1:1", "127.0.0.1:2"}}, {"ranks", {{{"step_s", 1.0}, {"comm_s", 0.5}, {"rank", 0}}}},
                     {"evil", "<script>alert(1)</script>"}};
  const json s = rt::watch::checked_status(good.dump());
  BOOST_TEST(s["step"] == 5);
  BOOST_TEST(!s.contains("evil"));
  BOOST_TEST(s["members"][1]["state"] == "lost");
  auto refused = [](json bad, const std::string& words) {
    try {
      rt::watch::checked_status(bad.dump());
      BOOST_ERROR("accepted " << bad.dump().substr(0, 80));
    } catch (const rt::RuntimeError& e) {
      BOOST_TEST(nettest::contains(e.what(), words), e.what());
    }
  };
  json b = good;
  b["step"] = -1;
  refused(b, "'step'");
  b = good;
  b["epoch"] = int64_t(1) << 50;
  refused(b, "'epoch'");
  b = good;
  b["loss"] = "3.5";
  refused(b, "'loss'");
  b = good;
  b["members"][0]["state"] = "<b>live</b>";
  refused(b, "member state");
  b = good;
  b["addresses"][0] = "10.0.0.1:1\n<script>";
  refused(b, "control");
  b = good;
  b["addresses"][0] = std::string(600, 'a');
  refused(b, "longer than");
  b = good;
  b["members"] = json::array();
  for (int i = 0; i < 5000; ++i) b["members"].push_back({{"rank", 0}, {"state", "live"}});
  refused(b, "more than");
  BOOST_CHECK_THROW(rt::watch::checked_status("not json"), rt::RuntimeError);
  BOOST_CHECK_THROW(rt::watch::checked_status("[1,2]"), rt::RuntimeError);

  const json h = {{"id", "ab"}, {"last_seq", 3}, {"more", false}, {"events_total", 0},
                  {"records", {{{"seq", 2}, {"r", step_record(1)}}, {{"seq", 3}, {"r", {{"step", 1}, {"event", "x"}}}}}}};
  const json ch = rt::watch::checked_history(h.dump(), 0);
  BOOST_TEST(ch["records"].size() == 1u);  // the unknown event kind is dropped
  BOOST_TEST(ch["after"] == 3);
  BOOST_CHECK_THROW(rt::watch::checked_history(h.dump(), 2), rt::RuntimeError);  // numbers not after ours
  json hb = h;
  hb["records"][1]["seq"] = 1;
  BOOST_CHECK_THROW(rt::watch::checked_history(hb.dump(), 0), rt::RuntimeError);  // out of order
}

// /metrics: every sample line is `name{labels} value`, every family has HELP and TYPE
// once, and nothing of a job that does not answer is shown but ringtrain_up 0.
BOOST_AUTO_TEST_CASE(prometheus_exposition) {
  const json s = rt::watch::checked_status(json({{"step", 5}, {"steps", 10}, {"loss", 3.5}, {"tok_per_s", 100.0},
                                                 {"val_bpb", 1.25},
                                                 {"ranks", {{{"step_s", 1.0}, {"comm_s", 0.5}, {"rank", 0}},
                                                            {{"step_s", 2.0}, {"comm_s", 0.25}, {"rank", 2}}}}})
                                                .dump());
  const std::string text = rt::watch::prometheus_text(s, true, 3);
  BOOST_TEST(nettest::contains(text, "\nringtrain_step 5\n"), text);
  BOOST_TEST(nettest::contains(text, "\nringtrain_val_bpb 1.25\n"), text);
  BOOST_TEST(nettest::contains(text, "\nringtrain_rank_step_seconds{rank=\"2\"} 2\n"), text);
  BOOST_TEST(nettest::contains(text, "\nringtrain_ranks_live 2\n"), text);
  BOOST_TEST(nettest::contains(text, "\nringtrain_membership_changes_total 3\n"), text);
  const std::regex sample(R"(^[a-z_]+(\{[a-z]+="[a-z0-9]+"\})? -?[0-9.e+-]+$)");
  std::set<std::string> types;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) BOOST_TEST(types.insert(line.substr(7, line.find(' ', 7) - 7)).second, line);
    if (line.rfind("#", 0) != 0) BOOST_TEST(std::regex_match(line, sample), line);
  }
  BOOST_TEST(rt::watch::prometheus_text(s, false, 3) ==
             "# HELP ringtrain_up 1 while the job answers the watcher, 0 while it does not.\n# TYPE ringtrain_up gauge\nringtrain_up 0\n");
}

BOOST_AUTO_TEST_SUITE_END()
