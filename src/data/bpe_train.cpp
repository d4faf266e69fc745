// BPE training over unique chunks. Instead of recounting every pair after each merge, it
// keeps the count of every pair, an index pair -> words that (may) contain it, and a
// max-heap of (count, pair) with lazy deletion: an entry whose count is out of date is
// re-pushed with the current count when it reaches the top. A merge only touches the
// words listed for its pair, and updates the counts of the pairs around each occurrence.
#include "ringtrain/data/bpe_train.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "parallel.hpp"

namespace rt::data {

ChunkCounts count_chunks(const Pretokenizer& pre, const std::vector<std::string_view>& docs,
                         int threads, uint64_t max_bytes) {
  size_t ndocs = docs.size();
  if (max_bytes > 0) {
    uint64_t total = 0;
    ndocs = 0;
    while (ndocs < docs.size() && total < max_bytes) total += docs[ndocs++].size();
  }
  int t = std::max(1, threads);
  std::vector<std::unordered_map<std::string, uint64_t>> local(t);
  // Interleaved document order per thread balances long and short documents.
  parallel_slices(size_t(t), t, [&](size_t tid, size_t, size_t) {
    auto& counts = local[tid];
    for (size_t d = tid; d < ndocs; d += t)
      pre.split(docs[d], [&](std::string_view c) { ++counts[std::string(c)]; });
  });
  for (int i = 1; i < t; ++i) {
    for (auto& [chunk, c] : local[i]) local[0][chunk] += c;
    local[i].clear();
  }
  std::vector<std::pair<std::string, uint64_t>> sorted(local[0].begin(), local[0].end());
  std::sort(sorted.begin(), sorted.end());
  ChunkCounts out;
  out.chunks.reserve(sorted.size());
  out.counts.reserve(sorted.size());
  for (auto& [chunk, c] : sorted) {
    out.chunks.push_back(std::move(chunk));
    out.counts.push_back(c);
  }
  return out;
}

namespace {

inline uint64_t key_of(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

struct HeapEntry {
  int64_t count;
  uint64_t pair;
};
// Max-heap by count; among equal counts the smaller pair (lexicographic (left, right),
// which is the order of the packed 64-bit key) comes out first.
struct HeapOrder {
  bool operator()(const HeapEntry& x, const HeapEntry& y) const {
    if (x.count != y.count) return x.count < y.count;
    return x.pair > y.pair;
  }
};

}  // namespace

std::vector<TokenPair> train_bpe(const ChunkCounts& corpus, size_t num_merges,
                                 const std::function<void(size_t)>& on_progress) {
  const size_t nwords = corpus.chunks.size();
  std::vector<std::vector<uint32_t>> words(nwords);
  std::vector<int64_t> freq(nwords);
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (size_t w = 0; w < nwords; ++w) {
    const std::string& s = corpus.chunks[w];
    words[w].assign(reinterpret_cast<const unsigned char*>(s.data()),
                    reinterpret_cast<const unsigned char*>(s.data()) + s.size());
    freq[w] = int64_t(corpus.counts[w]);
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      uint64_t k = key_of(words[w][i], words[w][i + 1]);
      pair_count[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != w) list.push_back(uint32_t(w));
    }
  }
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, HeapOrder> heap;
  for (auto& [k, c] : pair_count) heap.push({c, k});

  std::vector<TokenPair> merges;
  merges.reserve(num_merges);
  std::vector<uint32_t> stamp(nwords, UINT32_MAX);  // last merge that rewrote each word
  std::vector<uint64_t> created;                    // pairs with the new token, this merge
  std::vector<uint32_t> rewritten;

  while (merges.size() < num_merges && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    auto it = pair_count.find(top.pair);
    int64_t current = it == pair_count.end() ? 0 : it->second;
    if (current != top.count) {  // stale entry
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current <= 0) break;
    const uint32_t a = uint32_t(top.pair >> 32), b = uint32_t(top.pair & 0xffffffffu);
    const uint32_t m = uint32_t(merges.size());
    const uint32_t n = 256 + m;
    merges.emplace_back(a, b);

    auto add = [&](uint32_t x, uint32_t y, int64_t delta, uint32_t w) {
      uint64_t k = key_of(x, y);
      pair_count[k] += delta;
      if (delta > 0 && (x == n || y == n)) {
        auto& list = where[k];
        if (list.empty() || list.back() != w) list.push_back(w);
        created.push_back(k);
      }
    };
    std::vector<uint32_t> candidates = std::move(where[top.pair]);
    where.erase(top.pair);
    created.clear();
    for (uint32_t w : candidates) {
      if (stamp[w] == m) continue;  // listed twice
      stamp[w] = m;
      auto& word = words[w];
      const int64_t f = freq[w];
      // Rewrite in place, left to right. Each occurrence removes (a,b), turns (prev,a)
      // into (prev,n) and (b,next) into (n,next); prev is the already rewritten symbol,
      // which makes back-to-back occurrences ("a b a b") come out right.
      size_t out = 0;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          add(a, b, -f, w);
          if (out > 0) {
            add(word[out - 1], a, -f, w);
            add(word[out - 1], n, f, w);
          }
          if (i + 2 < word.size()) {
            add(b, word[i + 2], -f, w);
            add(n, word[i + 2], f, w);
          }
          word[out++] = n;
          i += 2;
        } else {
          word[out++] = word[i++];
        }
      }
      word.resize(out);
    }
    pair_count.erase(top.pair);
    std::sort(created.begin(), created.end());
    created.erase(std::unique(created.begin(), created.end()), created.end());
    for (uint64_t k : created) {
      int64_t c = pair_count[k];
      if (c > 0) heap.push({c, k});
    }
    if (on_progress && merges.size() % 1000 == 0) on_progress(merges.size());
  }
  return merges;
}

}  // namespace rt::data
