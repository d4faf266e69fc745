// A small HTTP/1.1 server for `ringtrain watch`: the page, its data and /metrics, on an
// address the user chose (loopback by default). It serves a handful of fixed paths to a
// browser and a Prometheus scraper, so it is built to be refused by everything else:
// one request per connection, a bounded request head and body, a bounded number of
// connections, a deadline per connection, and no request is parsed past what it may hold.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace rt::net {

struct HttpRequest {
  std::string method;  // GET, HEAD or POST
  std::string path;    // the target without its query, e.g. "/api/history"
  std::string query;   // what followed '?', undecoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

inline constexpr size_t kMaxHttpHeadBytes = 8 << 10;
inline constexpr size_t kMaxHttpBodyBytes = 1 << 10;
inline constexpr size_t kMaxHttpHeaders = 64;

// Parses a request head (everything before the blank line, without it). Returns the
// request, or an HTTP status to refuse it with (400 malformed, 405 method, 414 target too
// long, 431 too many or too long headers, 501 transfer encodings, 505 version) in `status`.
std::optional<HttpRequest> parse_http_head(std::string_view head, int& status);

// The value of `name` in a query string ("after=12&x=y"), undecoded; empty if absent.
std::string query_value(std::string_view query, std::string_view name);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // Binds host:port (throws RuntimeError naming the address and the fix when it cannot).
  // Requests whose Host header names another server are refused with 421 when bound to a
  // loopback address (a page of another site must not reach this one by DNS rebinding).
  HttpServer(const std::string& host, int port, Handler handler, size_t max_connections = 32);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int port() const { return port_; }
  bool loopback() const { return loopback_; }
  // Serves until `stop` becomes true (checked every 100 ms).
  void serve(const std::atomic<bool>& stop);

 private:
  struct Connection;
  std::string host_;
  int port_;
  bool loopback_;
  Handler handler_;
  size_t max_connections_;
  int listen_fd_ = -1;
};

// The status line's reason phrase of an HTTP status code.
const char* http_reason(int status);

}  // namespace rt::net
