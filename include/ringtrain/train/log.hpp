// Line-buffered logging to stderr, every line prefixed with the rank ("[rank 1] ..."),
// so the output of several ranks (or a worker's pane) is always readable and attributable.
// Each line goes out in one write(2), so lines of concurrent threads never interleave.
#pragma once
#include <string>

namespace rt::train {

// Seconds on the monotonic clock, for measuring durations.
double now_s();

void log_set_rank(int rank, int world);
// "[rank R/W] " once log_set_rank was called, else "" (main() uses it for the final error).
const std::string& log_prefix();
// printf-style; a trailing newline is added.
void logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A progress line: on a terminal, redrawn in place with a bar and ETA; otherwise printed
// as a plain line every `plain_every` calls (and always for the last step).
class Progress {
 public:
  Progress(int64_t total_steps, bool allow_bar);
  void update(int64_t step, const std::string& stats);  // step is 1-based (steps done)
  void finish();

 private:
  int64_t total_;
  bool bar_;
  double start_;
  int64_t start_step_ = -1;
  int64_t last_plain_ = 0;
  double last_plain_time_ = 0;
};

std::string format_duration(double seconds);

}  // namespace rt::train
