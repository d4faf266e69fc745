#include "ringtrain/train/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace rt::train {
namespace {
std::string g_prefix = "";
// On a terminal a progress bar may occupy the current line: clear it before a log line.
const bool g_tty = ::isatty(2);

void write_all(const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n <= 0) return;
    p += n;
    left -= size_t(n);
  }
}
}  // namespace

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void log_set_rank(int rank, int world) {
  g_prefix = "[rank " + std::to_string(rank) + "/" + std::to_string(world) + "] ";
}

const std::string& log_prefix() { return g_prefix; }

void logf(const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  write_all(std::string(g_tty ? "\r\033[K" : "") + g_prefix + buf + "\n");
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  char buf[32];
  long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(int64_t total_steps, bool allow_bar)
    : total_(total_steps), bar_(allow_bar && ::isatty(2)), start_(now_s()) {}

void Progress::update(int64_t step, const std::string& stats) {
  const double t = now_s();
  if (start_step_ < 0) {
    start_step_ = step - 1;
    start_ = t;
  }
  const double done = double(step - start_step_);
  const double eta = done > 0 ? (t - start_) / done * double(total_ - step) : -1;
  char head[96];
  std::snprintf(head, sizeof head, "step %lld/%lld", (long long)step, (long long)total_);
  const std::string tail = stats + " | eta " + format_duration(eta);
  if (bar_) {
    const int width = 24;
    const int fill = std::clamp(int(double(width) * double(step) / double(total_ > 0 ? total_ : 1)), 0, width);
    std::string bar(1, '[');  // appended, not "[" + ...: GCC 12 warns falsely (-Wrestrict) on that
    bar.append(size_t(fill), '#').append(size_t(width - fill), '.').append("] ");
    write_all("\r\033[K" + g_prefix + bar + head + " " + tail + (step >= total_ ? "\n" : ""));
    return;
  }
  // Plain lines: at most about one every 5 seconds, and the last step always.
  if (step >= total_ || t - last_plain_time_ >= 5.0 || last_plain_ == 0) {
    last_plain_ = step;
    last_plain_time_ = t;
    write_all(g_prefix + head + " " + tail + "\n");
  }
}

void Progress::finish() {
  if (bar_) write_all("\n");
}

}  // namespace rt::train
