// `ringtrain watch HOST:PORT --key FILE [--http ADDR:PORT]`: a live web page of a running
// job and /metrics for Prometheus. The watcher is one more client of the job's port (the
// job key lets it in, as status and stop); the page is served by this process, on
// loopback unless asked otherwise, so no rank opens a port and nobody without the key
// learns anything about the job.
#include <csignal>
#include <cstdio>
#include <thread>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/net/http_server.hpp"
#include "ringtrain/net/peers.hpp"
#include "ringtrain/train/log.hpp"
#include "ringtrain/watch/job_watcher.hpp"
#include "ringtrain/watch/page_assets.hpp"

using nlohmann::json;

namespace rt::cli {
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

net::HttpResponse route(watch::JobWatcher& watcher, const net::HttpRequest& req) {
  const std::string json_type = "application/json";
  if (req.path == "/api/stop") {
    if (req.method != "POST") return {405, "text/plain; charset=utf-8", "use POST\n"};
    // Only the page sends this header; a browser will not let another site's page send it.
    if (req.headers.count("x-ringtrain-stop") == 0) return {403, "text/plain; charset=utf-8", "missing X-Ringtrain-Stop\n"};
    try {
      return {200, "text/plain; charset=utf-8", watcher.stop_job()};
    } catch (const std::exception& e) {
      return {502, "text/plain; charset=utf-8", e.what()};
    }
  }
  if (req.method == "POST") return {405, "text/plain; charset=utf-8", "only /api/stop takes POST\n"};
  if (req.path == "/api/state") return {200, json_type, watcher.state().dump()};
  if (req.path == "/api/history") {
    const std::string after = net::query_value(req.query, "after");
    const auto seq = after.empty() ? std::optional<uint64_t>(0) : train::MetricHistory::parse_seq(after);
    if (!seq) return {400, "text/plain; charset=utf-8", "after must be a record number\n"};
    return {200, json_type, watcher.history_after(*seq, 256 << 10)};
  }
  if (req.path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", watcher.prometheus()};
  if (const auto* a = watch::find_page_asset(req.path == "/index.html" ? "/" : req.path))
    return {200, a->content_type, std::string(a->data, a->size)};
  return {404, "text/plain; charset=utf-8", "not found: this server serves /, /api/state, /api/history and /metrics\n"};
}

}  // namespace

int cmd_watch(int argc, char** argv) {
  cxxopts::Options spec(argv[0],
                        "Serve a live web page of a running job (loss, val bpb, tok/s, MFU, each rank's times, membership, "
                        "a stop button) and /metrics in Prometheus' text format. It asks the job over its port with the "
                        "job key, as status and stop do; it keeps retrying while the job does not answer.");
  spec.add_options()("address", "HOST:PORT of any rank (from --peers)", cxxopts::value<std::string>())(
      "key", kKeyHelp, cxxopts::value<std::string>())(
      "http", "where to serve the page: loopback by default; another address shows the job to anyone who reaches it",
      cxxopts::value<std::string>()->default_value("127.0.0.1:8080"))(
      "interval", "seconds between polls of the job", cxxopts::value<double>()->default_value("1"))(
      "timeout", "seconds to wait for each answer of the job", cxxopts::value<double>()->default_value("5"));
  spec.parse_positional({"address"});
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain watch 10.0.0.1:29500 --key job.key --http 127.0.0.1:8080")) return 0;
  watch::WatchOptions o;
  o.address = need<std::string>(r, "address", argv[0]);
  (void)net::parse_peer(o.address);  // a bad address is a usage error now, not a retry loop
  o.key = key_flag(r);
  o.interval_s = r["interval"].as<double>();
  o.timeout_s = r["timeout"].as<double>();
  if (!(o.interval_s >= 0.2 && o.interval_s <= 600)) throw UsageError("--interval must be from 0.2 to 600 seconds");
  if (!(o.timeout_s >= 0.5 && o.timeout_s <= 600)) throw UsageError("--timeout must be from 0.5 to 600 seconds");
  const auto http = net::parse_peer(r["http"].as<std::string>());

  watch::JobWatcher watcher(o);
  net::HttpServer server(http.host, http.port, [&](const net::HttpRequest& req) { return route(watcher, req); });
  const std::string url = "http://" + (http.host.find(':') != std::string::npos ? "[" + http.host + "]" : http.host) +
                          ":" + std::to_string(server.port()) + "/";
  if (!server.loopback())
    train::logf("watch: warning: the page at %s has no login: anyone who reaches it sees the job and can stop it; "
                "prefer the default (loopback) and an ssh tunnel (ssh -L 8080:127.0.0.1:8080 HOST)", url.c_str());
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::printf("watching the job at %s: page %s, Prometheus metrics %smetrics (Ctrl-C to quit)\n", o.address.c_str(),
              url.c_str(), url.c_str());
  std::fflush(stdout);
  std::thread poller([&] { watcher.run(g_stop); });
  server.serve(g_stop);
  g_stop = true;
  poller.join();
  return 0;
}

}  // namespace rt::cli
