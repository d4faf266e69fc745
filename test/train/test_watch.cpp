// `ringtrain watch` (issue: a live page and Prometheus metrics), the real thing: a 2-rank
// keyed job, the watcher, Debian's chromium reading the page's DOM, and Debian's prometheus
// scraping /metrics. Its parts in-process are in test_watch_parts.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/skip.hpp"
#include "../common/train_fixture.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/net/http_server.hpp"
#include "ringtrain/train/metric_history.hpp"
#include "ringtrain/watch/job_reply.hpp"
#include "ringtrain/watch/prometheus.hpp"
#include "train_ranks.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace traintest;

namespace {

constexpr double kWait = 120;

// One HTTP exchange over a fresh connection: sends `raw`, returns everything until the
// server closes (bounded by a 20 s receive deadline).
std::string http_raw(int port, const std::string& raw) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  (void)!::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

std::string http_get(int port, const std::string& path, const std::string& host = "") {
  return http_raw(port, "GET " + path + " HTTP/1.1\r\nHost: " + (host.empty() ? "127.0.0.1:" + std::to_string(port) : host) +
                            "\r\n\r\n");
}

int http_status(const std::string& response) {
  return response.size() > 12 && response.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(response.substr(9, 3)) : -1;
}

std::string http_body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

json watcher_state(int port) {
  const auto r = http_get(port, "/api/state");
  if (http_status(r) != 200) return json();
  return json::parse(http_body(r), nullptr, false);
}

// Rank r's state as the watcher has it from the job ("" while it has none).
std::string member_state(int port, int rank) {
  const json st = watcher_state(port);
  if (st.is_null() || !st["status"].contains("members")) return "";
  for (const auto& m : st["status"]["members"])
    if (m["rank"] == rank) return m["state"];
  return "";
}

bool have(const char* program) { return nettest::run_shell(std::string("command -v ") + program + " >/dev/null") == 0; }

const char* chromium_program() { return have("chromium") ? "chromium" : have("chromium-browser") ? "chromium-browser" : nullptr; }

// The page's DOM after its script ran for a while, as Debian's chromium renders it.
std::string page_dom(int port, const std::string& screenshot = "") {
  const std::string flags = std::string(chromium_program()) +
                            " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run"
                            " --user-data-dir=" + nettest::scratch_dir() + "/chromium --virtual-time-budget=6000 ";
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  if (!screenshot.empty())
    nettest::run_shell("timeout 90 " + flags + "--window-size=1400,1200 --screenshot=" + screenshot + " " + url + " 2>/dev/null");
  std::string dom;
  nettest::run_shell("timeout 90 " + flags + "--dump-dom " + url + " 2>/dev/null", &dom);
  return dom;
}

// The value of data-value, or the text, of the element with this id in a DOM dump.
std::string dom_value(const std::string& dom, const std::string& id, bool text = false) {
  std::smatch m;
  const std::regex attr("id=\"" + id + "\"[^>]*data-value=\"([^\"]*)\"");
  const std::regex inner("id=\"" + id + "\"[^>]*>([^<]*)<");
  if (std::regex_search(dom, m, text ? inner : attr)) return m[1];
  return "";
}

nettest::Proc start_watcher(int job_port, int http_port, const std::string& key, const std::string& tag) {
  auto p = nettest::spawn({nettest::ringtrain_path(), "watch", "127.0.0.1:" + std::to_string(job_port), "--key", key,
                           "--http", "127.0.0.1:" + std::to_string(http_port), "--interval", "0.5"},
                          tag);
  BOOST_REQUIRE(nettest::wait_for_output({p}, "watching the job", 30));
  return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(watch)

// A running 2-rank job seen through the watcher: its page in chromium shows rank 0's step
// and loss, Prometheus scrapes its step, the HTTP server refuses what it does not serve,
// `status --watch` refreshes, a killed rank shows as lost (the watcher, which asked it,
// moves to the other), a rejoined one live, a restarted watcher reads the whole history
// again from the job, and the stop button's request stops the job.
BOOST_AUTO_TEST_CASE(page_and_prometheus_follow_a_running_job) {
  if (!testskip::require(chromium_program() != nullptr, "Debian's chromium is not installed (tools/setup.sh installs it)")) return;
  const int port = nettest::port_base(0), http = port + 2, prom_port = port + 3;
  const std::string run = run_dir("watch"), metrics = run + "/metrics.jsonl";
  auto ranks = start_ranks("watch", {2, 2}, port, {"--steps", "100000", "--eval-every", "5", "--eval-tokens", "2048"});
  // The watcher asks rank 1, which the test kills below: it must move to rank 0 by itself.
  auto watcher = start_watcher(port + 1, http, nettest::key_file(), "watcher");
  BOOST_REQUIRE_MESSAGE(wait_for_steps(metrics, 6, kWait), ranks[0].err());
  BOOST_REQUIRE(nettest::wait_until([&] { return watcher_state(http).value("reachable", false); }, 30));

  // What the page's server refuses.
  BOOST_TEST(http_status(http_get(http, "/nothing-here")) == 404);
  BOOST_TEST(http_status(http_raw(http, "DELETE / HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(http) + "\r\n\r\n")) == 405);
  BOOST_TEST(http_status(http_get(http, "/", "evil.example:80")) == 421);  // DNS rebinding
  BOOST_TEST(http_status(http_raw(http, "GET / HTTP/1.1\r\nHost: x\r\nX: " + std::string(10000, 'a') + "\r\n\r\n")) == 431);
  BOOST_TEST(http_status(http_raw(http, "POST /api/stop HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(http) +
                                            "\r\nContent-Length: 0\r\n\r\n")) == 403);
  BOOST_TEST(http_status(http_get(http, "/api/history?after=x")) == 400);
  BOOST_TEST(http_status(http_raw(http, "\x16\x03\x01 garbage\r\n\r\n")) == 400);
  BOOST_TEST(nettest::contains(http_get(http, "/uPlot.iife.min.js"), "uPlot"));
  BOOST_TEST(nettest::contains(http_get(http, "/LICENSE-uPlot.txt"), "MIT"));

  // The page, in a real browser.
  const std::string shot = nettest::scratch_dir() + "/watch.png";
  std::string dom = page_dom(http, shot);
  BOOST_TEST_MESSAGE("screenshot of the page: " << shot);
  BOOST_TEST((fs::exists(shot) && fs::file_size(shot) > 10000));
  if (const char* keep = std::getenv("RINGTRAIN_SCREENSHOT")) fs::copy_file(shot, keep, fs::copy_options::overwrite_existing);
  const std::string step_text = dom_value(dom, "step"), loss_text = dom_value(dom, "last-loss");
  BOOST_REQUIRE_MESSAGE(!step_text.empty() && !loss_text.empty(), dom.substr(0, 3000));
  const int64_t shown_step = std::stoll(step_text);
  bool found = false;
  for (const auto& r : metric_records(metrics))
    if (r.contains("loss") && r["step"] == shown_step) {
      found = true;
      BOOST_TEST(std::stod(loss_text) == r["loss"].get<double>(), "page " << loss_text << " vs " << r.dump());
    }
  BOOST_TEST(found, "step " << shown_step << " is not in rank 0's metrics");
  BOOST_TEST(dom_value(dom, "rank-state-1", true) == "live");
  BOOST_TEST(nettest::contains(dom, "127.0.0.1:" + std::to_string(port + 1)));
  BOOST_TEST(dom_value(dom, "connection", true).rfind("live", 0) == 0, dom_value(dom, "connection", true));

  // A real Prometheus scrapes /metrics; its query API returns the job's step.
  if (testskip::require(have("prometheus"), "Debian's prometheus is not installed (tools/setup.sh installs it)")) {
    const std::string dir = nettest::scratch_dir() + "/prometheus";
    fs::create_directories(dir);
    std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ringtrain\n"
                                           << "    static_configs:\n      - targets: ['127.0.0.1:" << http << "']\n";
    auto prom = nettest::spawn({"prometheus", "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                                "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
                               "prometheus");
    double value = -1;
    nettest::wait_until([&] {
      const auto body = json::parse(http_body(http_get(prom_port, "/api/v1/query?query=ringtrain_step")), nullptr, false);
      if (body.is_discarded() || !body.contains("data") || body["data"]["result"].empty()) return false;
      value = std::stod(body["data"]["result"][0]["value"][1].get<std::string>());
      return true;
    }, 60);
    const auto steps_now = losses(metrics).size();
    BOOST_TEST(value >= 6, "prometheus returned ringtrain_step " << value << "; its log: " << prom.err().substr(0, 2000));
    BOOST_TEST(value <= double(steps_now));
    const auto up = http_body(http_get(prom_port, "/api/v1/query?query=ringtrain_rank_step_seconds"));
    BOOST_TEST(nettest::contains(up, "\"rank\":\"1\""), up);
    ::kill(prom.pid, SIGTERM);
    nettest::wait_one(prom, 20);
  }

  // Strangers holding connections cost the page a bounded number of descriptors.
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(http));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) idle.push_back(fd);
  }
  size_t watcher_fds = 0;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(watcher.pid) + "/fd")) (void)e, ++watcher_fds;
  BOOST_TEST(watcher_fds < 80u, watcher_fds << " descriptors open in the watcher");
  for (int fd : idle) ::close(fd);

  // The terminal view refreshes in place (here into a file: one block per refresh).
  std::string term;
  nettest::run_shell("timeout -s INT 4 " + nettest::ringtrain_path() + " status 127.0.0.1:" + std::to_string(port) +
                         " --key " + nettest::key_file() + " --watch --interval 1",
                     &term);
  BOOST_TEST(nettest::contains(term, "  rank 1: live, step "), term);
  BOOST_TEST(count_lines(term) >= 6, term);  // at least two refreshes

  // A killed rank shows as lost, and the watcher, which was asking it, moves to rank 0.
  ::kill(ranks[1].pid, SIGKILL);
  nettest::wait_one(ranks[1], 10);
  BOOST_REQUIRE(nettest::wait_until([&] { return member_state(http, 1) == "lost"; }, kWait));
  dom = page_dom(http);
  BOOST_TEST(dom_value(dom, "rank-state-1", true) == "lost", dom.substr(0, 3000));
  BOOST_TEST(nettest::contains(dom, "rank 1 lost"), "the membership event is listed");
  BOOST_TEST(watcher_state(http)["address"] == "127.0.0.1:" + std::to_string(port));

  // Rank 1, started again with its command, joins: the page shows it live again.
  ranks[1] = start_rank("watch", {2, 2}, port, {"--steps", "100000", "--eval-every", "5", "--eval-tokens", "2048"}, 1, "watch-r1b");
  BOOST_REQUIRE_MESSAGE(nettest::wait_until([&] { return member_state(http, 1) == "live"; }, kWait), ranks[1].err());
  dom = page_dom(http);
  BOOST_TEST(dom_value(dom, "rank-state-1", true) == "live");
  BOOST_TEST(nettest::contains(dom, "rank 1 joined"), "the join is listed");

  // A restarted watcher reads the whole history from the job.
  ::kill(watcher.pid, SIGTERM);
  nettest::wait_one(watcher, 20);
  BOOST_TEST(watcher.exit_code == 0, watcher.err());
  watcher = start_watcher(port, http, nettest::key_file(), "watcher-2");
  size_t held = 0;
  const size_t in_file = losses(metrics).size();
  nettest::wait_until([&] {
    held = 0;
    for (uint64_t after = 0;;) {  // page by page, as the page reads it
      const auto h = json::parse(http_body(http_get(http, "/api/history?after=" + std::to_string(after))), nullptr, false);
      if (h.is_discarded() || h["records"].empty()) return false;
      for (const auto& e : h["records"]) held += e["r"].contains("loss"), after = e["seq"].get<uint64_t>();
      if (!h["more"].get<bool>()) break;
    }
    return held >= in_file;
  }, 30);
  BOOST_TEST(held >= in_file, "the new watcher holds " << held << " step records, the file " << in_file);

  // The stop button's request.
  const auto stop = http_raw(http, "POST /api/stop HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(http) +
                                       "\r\nContent-Length: 0\r\nX-Ringtrain-Stop: yes\r\n\r\n");
  BOOST_TEST(http_status(stop) == 200, stop);
  nettest::wait_all(ranks, kWait);
  for (auto& r : ranks) BOOST_TEST(r.exit_code == 0, r.err());
  // The job has ended: the watcher says so in words and keeps running.
  BOOST_REQUIRE(nettest::wait_until([&] { return !watcher_state(http).value("reachable", true); }, 30));
  const std::string msg = watcher_state(http)["message"];
  BOOST_TEST(nettest::contains(msg, "the job stopped answering"), msg);
  BOOST_TEST(nettest::alive(watcher.pid));
  ::kill(watcher.pid, SIGTERM);
  nettest::wait_one(watcher, 20);
}

// A wrong key and a job that is not there are said in words on the page, and the watcher
// keeps retrying; a bad address is refused at once.
BOOST_AUTO_TEST_CASE(wrong_key_and_no_job_are_said_in_words) {
  const int port = nettest::port_base(1), http = port + 2;
  auto ranks = start_ranks("watch-key", {2, 2}, port, {"--steps", "100000", "--eval-every", "0"});
  BOOST_REQUIRE(wait_for_steps(run_dir("watch-key") + "/metrics.jsonl", 1, kWait));
  const std::string other = nettest::scratch_dir() + "/other.key";
  BOOST_REQUIRE(nettest::run_shell(nettest::ringtrain_path() + " keygen --out " + other + " >/dev/null") == 0);
  auto watcher = start_watcher(port, http, other, "watcher-key");
  std::string msg;
  nettest::wait_until([&] {
    msg = watcher_state(http).value("message", std::string());
    return nettest::contains(msg, "refused this key");
  }, 30);
  BOOST_TEST(nettest::contains(msg, "refused this key"), msg);
  if (chromium_program()) {
    const std::string dom = page_dom(http);
    BOOST_TEST(nettest::contains(dom_value(dom, "connection", true), "refused this key"), dom.substr(0, 2000));
  }
  BOOST_TEST(nettest::alive(watcher.pid));
  ::kill(watcher.pid, SIGTERM);
  nettest::wait_one(watcher, 20);
  for (auto& r : ranks) ::kill(r.pid, SIGTERM);
  nettest::wait_all(ranks, kWait);

  // Nothing listens there any more.
  watcher = start_watcher(port, http, nettest::key_file(), "watcher-none");
  nettest::wait_until([&] {
    msg = watcher_state(http).value("message", std::string());
    return nettest::contains(msg, "cannot reach the job");
  }, 30);
  BOOST_TEST(nettest::contains(msg, "cannot reach the job: no answer from 127.0.0.1:" + std::to_string(port)), msg);
  std::string term;
  nettest::run_shell("timeout -s INT 3 " + nettest::ringtrain_path() + " status 127.0.0.1:" + std::to_string(port) +
                         " --watch --interval 1 --timeout 1", &term);
  BOOST_TEST(nettest::contains(term, "no current answer: no answer from 127.0.0.1:"), term);
  ::kill(watcher.pid, SIGTERM);
  nettest::wait_one(watcher, 20);

  std::string out;
  BOOST_TEST(nettest::run_shell(nettest::ringtrain_path() + " watch nohost --key " + other, &out) == 2, out);
  BOOST_TEST(count_lines(out) == 1, out);
  BOOST_TEST(nettest::run_shell(nettest::ringtrain_path() + " watch 127.0.0.1:1 stray", &out) == 2, out);
}

// The throughput chart's axis labels stay whole at 5- and 6-digit rates (they were clipped by
// uPlot's fixed gutter: "0,000" for 40,000). Debian's chromium draws the page's own charts.js,
// served by a real watcher, with chosen rates; the check is on the layout uPlot made: every
// tick label of the tok/s axis starts inside the chart, every MFU label ends inside it.
BOOST_AUTO_TEST_CASE(throughput_axis_labels_whole_at_5_and_6_digit_rates) {
  if (!testskip::require(chromium_program() != nullptr, "Debian's chromium is not installed (tools/setup.sh installs it)")) return;
  const int port = nettest::port_base(0), http = port + 2;  // nothing listens at `port`: the watcher only serves
  auto watcher = start_watcher(port, http, nettest::key_file(), "watcher-axes");
  const std::string origin = "http://127.0.0.1:" + std::to_string(http);
  const std::string page = nettest::scratch_dir() + "/axes.html";
  std::ofstream(page) << "<!doctype html><html><head><meta charset=\"utf-8\">"
                      << "<link rel=\"stylesheet\" href=\"" << origin << "/uPlot.min.css\">"
                      << "<link rel=\"stylesheet\" href=\"" << origin << "/style.css\"></head><body>"
                      << "<section class=\"charts\">"
                      << "<figure><figcaption>tok/s near 40,000</figcaption><div id=\"c5\"></div></figure>"
                      << "<figure><figcaption>tok/s near 400,000</figcaption><div id=\"c6\"></div></figure></section>"
                      << "<div id=\"fit\" data-value=\"not run\"></div>"
                      << "<script src=\"" << origin << "/uPlot.iife.min.js\"></script>"
                      << "<script src=\"" << origin << "/charts.js\"></script>" << R"JS(<script>
const found = [];
const pxr = uPlot.pxRatio || window.devicePixelRatio || 1;
const probe = document.createElement("canvas").getContext("2d");
// uPlot lays out and draws after setData returns (a microtask): check once it has.
function check(id, rate, u) {
  const left = u.bbox.left / pxr, right = (u.bbox.left + u.bbox.width) / pxr;
  for (const [ai, side] of [[1, "left"], [2, "right"]]) {
    const axis = u.axes[ai], labels = axis._values || [];
    if (labels.length === 0) found.push(id + ": the " + side + " axis has no labels");
    probe.font = axis.font[0];
    for (const text of labels) {
      if (text == null) continue;
      const w = probe.measureText(String(text)).width / pxr;
      const from = side === "left" ? left - axis.ticks.size - axis.gap - w : right + axis.ticks.size + axis.gap;
      if (from < 0 || from + w > u.width) found.push(id + ": " + side + " label '" + text + "' spans " + from.toFixed(1) + ".." + (from + w).toFixed(1) + " of 0.." + u.width);
    }
  }
  const digits = String(rate).length;  // the case is about labels of this many digits
  if (!(u.axes[1]._values || []).some(t => String(t).replace(/[^0-9]/g, "").length === digits))
    found.push(id + ": no tok/s label of " + digits + " digits");
}
const charts = [];
for (const [id, rate] of [["c5", 40000], ["c6", 400000]]) {
  const u = makeChart(id, [{ label: "tok/s", stroke: COLORS[2], width: 2 }, { label: "MFU %", stroke: COLORS[3], width: 1, scale: "pct" }],
                      { x: "step", logX: false, logY: false }, { pct: { distr: 1 } });
  const xs = [], ys = [], mfu = [];
  for (let i = 0; i < 60; ++i) { xs.push(i); ys.push(rate * (0.93 + 0.14 * ((i * 37) % 11) / 10)); mfu.push(41 + (i % 7)); }
  u.setData([xs, ys, mfu]);
  charts.push([id, rate, u]);
}
setTimeout(() => {
  for (const [id, rate, u] of charts) check(id, rate, u);
  document.getElementById("fit").dataset.value = found.length ? found.join("; ") : "whole";
}, 200);
</script></body></html>)JS";
  const std::string shot = nettest::scratch_dir() + "/axes.png";
  const std::string flags = std::string(chromium_program()) +
                            " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --allow-file-access-from-files"
                            " --user-data-dir=" + nettest::scratch_dir() + "/chromium-axes --virtual-time-budget=3000 ";
  nettest::run_shell("timeout 90 " + flags + "--window-size=700,640 --screenshot=" + shot + " file://" + page + " 2>/dev/null");
  std::string dom;
  nettest::run_shell("timeout 90 " + flags + "--dump-dom file://" + page + " 2>/dev/null", &dom);
  BOOST_TEST_MESSAGE("screenshot of the two charts: " << shot);
  if (const char* keep = std::getenv("RINGTRAIN_AXES_SCREENSHOT")) fs::copy_file(shot, keep, fs::copy_options::overwrite_existing);
  BOOST_TEST((fs::exists(shot) && fs::file_size(shot) > 5000));
  BOOST_TEST(dom_value(dom, "fit") == "whole", dom_value(dom, "fit") << "\n" << dom.substr(0, 1500));
  ::kill(watcher.pid, SIGTERM);
  nettest::wait_one(watcher, 20);
}

BOOST_AUTO_TEST_SUITE_END()
