// Splits text into the chunks that BPE works inside ("pre-tokenization"), with the
// split regex of the spec (numbers in groups of 1-2 digits), compiled once with PCRE2's JIT.
//
// Byte-level text may hold invalid UTF-8. PCRE2 must only ever see valid UTF-8, so the text
// is cut into maximal valid runs; the regex splits each run, and every invalid byte becomes a
// chunk of its own. Any bytes the regex leaves between two matches also become a chunk, so
// the chunks always concatenate back to the input exactly.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace rt::data {

// The split pattern of the spec, exactly.
extern const char* const kSplitPattern;

class Pretokenizer {
 public:
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // Calls on_chunk for each chunk of text, in order. Safe to call from several threads at
  // once on one Pretokenizer (each thread gets its own match data and JIT stack).
  void split(std::string_view text, const std::function<void(std::string_view)>& on_chunk) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Length of the valid UTF-8 sequence starting at s[0] (1-4), or 0 if s[0] does not start
// one (overlong forms, surrogates and code points above U+10FFFF are invalid, as in PCRE2).
int utf8_sequence_length(const unsigned char* s, size_t avail);

}  // namespace rt::data
