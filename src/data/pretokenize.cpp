// PCRE2 pre-tokenizer. The compiled pattern (with JIT code) is shared; match data and a JIT
// stack are per thread, because PCRE2 match data must not be shared between threads.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "ringtrain/data/pretokenize.hpp"

#include <pcre2.h>

#include <atomic>

#include "ringtrain/errors.hpp"

namespace rt::data {

const char* const kSplitPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";

int utf8_sequence_length(const unsigned char* s, size_t avail) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  int n;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;            // no overlong 3-byte forms
  else if (c == 0xED) n = 3, hi = 0x9F;            // no surrogates
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;            // no overlong 4-byte forms
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;            // nothing above U+10FFFF
  else return 0;
  if (avail < size_t(n)) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (int i = 2; i < n; ++i)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return n;
}

namespace {

// Per-thread PCRE2 scratch: match data plus a JIT stack large enough for long runs of
// letters or spaces (the default 32 KiB machine stack is not).
struct ThreadScratch {
  pcre2_match_data* md = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  uint64_t owner = 0;  // serial number of the Pretokenizer it was made for
  ~ThreadScratch() { reset(); }
  void reset() {
    if (md) pcre2_match_data_free(md);
    if (ctx) pcre2_match_context_free(ctx);
    if (stack) pcre2_jit_stack_free(stack);
    md = nullptr, ctx = nullptr, stack = nullptr, owner = 0;
  }
};

}  // namespace

// Serial numbers, not addresses, identify a compiled pattern in the per-thread scratch:
// an address can be reused by a later Pretokenizer.
std::atomic<uint64_t> g_next_serial{1};

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  uint64_t serial = g_next_serial++;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

Pretokenizer::Pretokenizer() : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kSplitPattern), PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw RuntimeError(std::string("cannot compile the split regex: ") + reinterpret_cast<char*>(msg));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Pretokenizer::~Pretokenizer() = default;

void Pretokenizer::split(std::string_view text,
                         const std::function<void(std::string_view)>& on_chunk) const {
  thread_local ThreadScratch scratch;
  if (scratch.owner != impl_->serial) {
    scratch.reset();
    scratch.md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
    scratch.ctx = pcre2_match_context_create(nullptr);
    if (impl_->jit) {
      scratch.stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(scratch.ctx, nullptr, scratch.stack);
    }
    scratch.owner = impl_->serial;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();

  // Splits one valid UTF-8 run [begin, end) with the regex.
  auto split_valid = [&](size_t begin, size_t end) {
    size_t pos = begin;
    while (pos < end) {
      int rc = pcre2_match(impl_->code, bytes + begin, end - begin, pos - begin,
                           PCRE2_NO_UTF_CHECK, scratch.md, scratch.ctx);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw RuntimeError(std::string("regex split failed: ") + reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.md);
      size_t ms = begin + ov[0], me = begin + ov[1];
      if (ms > pos) on_chunk(text.substr(pos, ms - pos));  // bytes no alternative matched
      if (me == ms) {  // an empty match cannot happen with this pattern; never loop on one
        size_t step = utf8_sequence_length(bytes + ms, end - ms);
        on_chunk(text.substr(ms, step));
        pos = ms + step;
        continue;
      }
      on_chunk(text.substr(ms, me - ms));
      pos = me;
    }
    if (pos < end) on_chunk(text.substr(pos, end - pos));
  };

  size_t run_start = 0, i = 0;
  while (i < n) {
    int len = utf8_sequence_length(bytes + i, n - i);
    if (len > 0) {
      i += len;
      continue;
    }
    if (i > run_start) split_valid(run_start, i);
    on_chunk(text.substr(i, 1));  // an invalid byte is a chunk of its own
    run_start = ++i;
  }
  if (n > run_start) split_valid(run_start, n);
}

}  // namespace rt::data
