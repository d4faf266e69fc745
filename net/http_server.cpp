#include "ringtrain/net/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "ringtrain/errors.hpp"

namespace rt::net {
namespace {

constexpr double kConnectionDeadlineS = 10;  // a client gets this long to send and read

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// Characters a request target may hold here: printable ASCII, no spaces.
bool target_char(char c) { return c > 0x20 && c < 0x7f; }

// Host header values that name this server when it listens on loopback.
bool names_loopback(std::string_view host, int port) {
  std::string h(host);
  const std::string suffix = ":" + std::to_string(port);
  if (h.size() > suffix.size() && h.compare(h.size() - suffix.size(), suffix.size(), suffix) == 0)
    h.resize(h.size() - suffix.size());
  h = lower(h);
  return h == "127.0.0.1" || h == "localhost" || h == "[::1]";
}

}  // namespace

const char* http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 421: return "Misdirected Request";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::optional<HttpRequest> parse_http_head(std::string_view head, int& status) {
  status = 400;
  if (head.size() > kMaxHttpHeadBytes) {
    status = 431;
    return std::nullopt;
  }
  auto next_line = [&head](std::string_view& line) {
    const size_t end = head.find("\r\n");
    line = head.substr(0, end);
    head = end == std::string_view::npos ? std::string_view{} : head.substr(end + 2);
  };
  std::string_view line;
  next_line(line);
  // METHOD SP target SP HTTP/1.x, nothing else
  const size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return std::nullopt;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) return std::nullopt;
  HttpRequest r;
  r.method = std::string(line.substr(0, sp1));
  for (char c : r.method)
    if (!token_char(c)) return std::nullopt;
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    status = version.rfind("HTTP/", 0) == 0 ? 505 : 400;
    return std::nullopt;
  }
  if (target.size() > 1024) {
    status = 414;
    return std::nullopt;
  }
  if (target.empty() || target[0] != '/') return std::nullopt;
  for (char c : target)
    if (!target_char(c)) return std::nullopt;
  const size_t q = target.find('?');
  r.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  while (!head.empty()) {
    next_line(line);
    if (line.empty()) continue;
    if (r.headers.size() >= kMaxHttpHeaders) {
      status = 431;
      return std::nullopt;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return std::nullopt;
    const std::string_view name = line.substr(0, colon);
    for (char c : name)
      if (!token_char(c)) return std::nullopt;  // also refuses obsolete line folding
    const std::string_view value = trim(line.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return std::nullopt;
    const std::string key = lower(name);
    // Two differing lengths or hosts are how requests get smuggled: refused.
    if (r.headers.count(key) && (key == "content-length" || key == "host")) return std::nullopt;
    r.headers[key] = std::string(value);
  }
  if (r.method != "GET" && r.method != "HEAD" && r.method != "POST") {
    status = 405;
    return std::nullopt;
  }
  if (r.headers.count("transfer-encoding")) {
    status = 501;
    return std::nullopt;
  }
  if (version == "HTTP/1.1" && !r.headers.count("host")) return std::nullopt;
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    const std::string& v = it->second;
    if (v.empty() || v.size() > 7 || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    if (std::stoul(v) > kMaxHttpBodyBytes) {
      status = 413;
      return std::nullopt;
    }
  } else if (r.method == "POST") {
    status = 411;
    return std::nullopt;
  }
  status = 200;
  return r;
}

std::string query_value(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? "" : std::string(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

struct HttpServer::Connection {
  int fd = -1;
  std::string in, out;
  size_t out_sent = 0;
  bool responding = false;
  std::chrono::steady_clock::time_point deadline;
};

HttpServer::HttpServer(const std::string& host, int port, Handler handler, size_t max_connections)
    : host_(host), port_(port), handler_(std::move(handler)), max_connections_(max_connections) {
  const std::string where = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res) != 0 || !res)
    throw UsageError("--http " + where + ": cannot resolve '" + host + "'; give an address of this host, e.g. 127.0.0.1:8080");
  listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (listen_fd_ >= 0) setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_fd_ < 0 || ::bind(listen_fd_, res->ai_addr, res->ai_addrlen) != 0 || ::listen(listen_fd_, 64) != 0) {
    const int err = errno;
    freeaddrinfo(res);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw RuntimeError("--http " + where + ": cannot listen there (" + std::strerror(err) + "); " +
                       (err == EADDRINUSE ? "another program holds that port: pick another with --http HOST:PORT"
                                          : "give an address of this host and a free port, e.g. --http 127.0.0.1:8080"));
  }
  if (res->ai_family == AF_INET) {
    loopback_ = (ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  } else {
    loopback_ = IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr);
  }
  freeaddrinfo(res);
  if (port_ == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
}

HttpServer::~HttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpServer::serve(const std::atomic<bool>& stop) {
  std::vector<Connection> conns;
  auto respond = [&](Connection& c, const HttpResponse& r, bool head_only) {
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + http_reason(r.status) + "\r\n";
    head += "Content-Type: " + r.content_type + "\r\n";
    head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    // The page and its data are never to be framed, sniffed or cached by the browser.
    head += "X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nCache-Control: no-store\r\n";
    head += "Content-Security-Policy: default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'\r\n";
    head += "Connection: close\r\n\r\n";
    c.out = head + (head_only ? std::string() : r.body);
    c.out_sent = 0;
    c.responding = true;
  };
  auto refuse = [&](Connection& c, int status, const std::string& why) {
    respond(c, {status, "text/plain; charset=utf-8", why + "\n"}, false);
  };
  auto handle = [&](Connection& c) {
    const size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() > kMaxHttpHeadBytes) refuse(c, 431, "request head too large");
      return;
    }
    int status = 400;
    auto req = parse_http_head(std::string_view(c.in).substr(0, end), status);
    if (!req) return refuse(c, status, std::string("refused: ") + http_reason(status));
    const size_t body_len = req->headers.count("content-length") ? std::stoul(req->headers["content-length"]) : 0;
    if (c.in.size() < end + 4 + body_len) return;  // the body is still coming
    req->body = c.in.substr(end + 4, body_len);
    if (loopback_ && !names_loopback(req->headers["host"], port_))
      return refuse(c, 421, "this server answers only to http://127.0.0.1:" + std::to_string(port_) + "/");
    HttpResponse resp;
    try {
      resp = handler_(*req);
    } catch (const std::exception& e) {
      resp = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what() + "\n"};
    }
    respond(c, resp, req->method == "HEAD");
  };
  while (!stop.load()) {
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : conns) fds.push_back({c.fd, short(c.responding ? POLLOUT : POLLIN), 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    const auto now = std::chrono::steady_clock::now();
    if (fds[0].revents & POLLIN) {
      while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (conns.size() >= max_connections_) {
          ::close(fd);  // full: the newest is dropped, those being served go on
          continue;
        }
        conns.push_back({fd, {}, {}, 0, false, now + std::chrono::milliseconds(int(kConnectionDeadlineS * 1000))});
      }
    }
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      const short rev = i + 1 < fds.size() && fds[i + 1].fd == c.fd ? fds[i + 1].revents : 0;
      bool close_it = now > c.deadline;
      if (!close_it && !c.responding && (rev & (POLLIN | POLLHUP | POLLERR))) {
        char buf[4096];
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n <= 0) {
          close_it = n == 0 || (errno != EAGAIN && errno != EINTR);
        } else if (c.in.size() + size_t(n) > kMaxHttpHeadBytes + 4 + kMaxHttpBodyBytes) {
          refuse(c, 431, "request too large");
        } else {
          c.in.append(buf, size_t(n));
          handle(c);
        }
      }
      if (!close_it && c.responding && (rev & (POLLOUT | POLLHUP | POLLERR))) {
        const ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
        if (n > 0) c.out_sent += size_t(n);
        close_it = (n < 0 && errno != EAGAIN && errno != EINTR) || c.out_sent == c.out.size();
      }
      if (close_it) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(conns, [](const Connection& c) { return c.fd < 0; });
  }
  for (auto& c : conns) ::close(c.fd);
}

}  // namespace rt::net
