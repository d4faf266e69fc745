// BOS-aligned best-fit packing: row invariants, whole documents, determinism, disjoint
// ranks, exact resume from a saved state, val rows and bits per byte.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "data_fixtures.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/errors.hpp"

using namespace rt::data;
using namespace rt::data::testing;

namespace {

// Which document a token sequence starting with BOS came from: the token after BOS is
// (d * 31 + 1) % 256, so for d < 256 it identifies d modulo the pattern; we use the pair
// (first, second) tokens together with the length to match documents exactly.
struct Segment {
  size_t start, length;
};

// Splits a row at its BOS tokens.
std::vector<Segment> segments(const std::vector<int32_t>& row) {
  std::vector<Segment> out;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == kBos) out.push_back({i, 0});
    out.back().length++;
  }
  return out;
}

// Set of documents (by index) that contain the segment as a prefix of a piece.
bool segment_is_from_doc(const Shard& s, size_t d, const std::vector<int32_t>& row, Segment seg) {
  if (seg.length > s.doc_length(d)) return false;
  for (size_t j = 0; j < seg.length; ++j)
    if (row[seg.start + j] != s.doc_tokens(d)[j]) return false;
  return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(loader)

BOOST_AUTO_TEST_CASE(rows_start_with_bos_and_keep_documents_whole) {
  auto shard = std::make_shared<Shard>(make_shard(300, 2, 40));
  LoaderOptions opt;
  opt.seq_len = 64;
  opt.buffer_docs = 50;
  PackingLoader loader(shard, opt);
  std::vector<int32_t> row;
  size_t whole = 0, cropped_segments = 0;
  for (int r = 0; r < 200; ++r) {
    BOOST_REQUIRE(loader.next_row(row));
    BOOST_REQUIRE(row.size() == 65u);  // T+1, no padding
    BOOST_REQUIRE(row[0] == kBos);
    auto segs = segments(row);
    for (size_t k = 0; k < segs.size(); ++k) {
      // Each segment is the start of some document; all but the last are whole.
      bool found_whole = false, found_prefix = false;
      for (size_t d = 0; d < shard->num_docs(); ++d) {
        if (!segment_is_from_doc(*shard, d, row, segs[k])) continue;
        found_prefix = true;
        if (shard->doc_length(d) == segs[k].length) found_whole = true;
      }
      BOOST_REQUIRE(found_prefix);
      if (k + 1 < segs.size()) BOOST_REQUIRE(found_whole);
      found_whole ? ++whole : ++cropped_segments;
    }
  }
  // Best fit keeps nearly everything whole: at most one cropped document per row.
  BOOST_TEST(cropped_segments <= 200u);
  BOOST_TEST(whole > 3 * cropped_segments);
}

BOOST_AUTO_TEST_CASE(longest_fitting_document_goes_first) {
  // Docs of lengths 5, 3, 4 (in buffer order) into rows of 8: 5 then 3 fill row 1 exactly.
  Shard s;
  s.vocab_size = kVocab;
  s.doc_start = {0};
  for (int len : {5, 3, 4, 8}) {
    s.tokens.push_back(kBos);
    for (int j = 1; j < len; ++j) s.tokens.push_back(uint16_t(len * 10 + j));
    s.doc_start.push_back(s.tokens.size());
  }
  LoaderOptions opt;
  opt.seq_len = 7;
  opt.shuffle = false;
  opt.buffer_docs = 4;
  PackingLoader loader(std::make_shared<Shard>(s), opt);
  std::vector<int32_t> row;
  BOOST_REQUIRE(loader.next_row(row));
  // The longest that fits the empty row is the length-8 document.
  BOOST_TEST(row == std::vector<int32_t>({kBos, 81, 82, 83, 84, 85, 86, 87}), boost::test_tools::per_element());
  BOOST_REQUIRE(loader.next_row(row));
  BOOST_TEST(row == std::vector<int32_t>({kBos, 51, 52, 53, 54, kBos, 31, 32}), boost::test_tools::per_element());
  // Buffer now 4, 5, 3 (+ the next epoch refills): 5 then 3 again.
  BOOST_REQUIRE(loader.next_row(row));
  BOOST_TEST(row == std::vector<int32_t>({kBos, 51, 52, 53, 54, kBos, 31, 32}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(long_documents_are_split_into_bos_pieces) {
  auto shard = std::make_shared<Shard>(make_shard(6, 100, 150));
  LoaderOptions opt;
  opt.seq_len = 16;
  opt.shuffle = false;
  opt.buffer_docs = 4;
  PackingLoader loader(shard, opt);
  std::vector<int32_t> row;
  uint64_t tokens = 0;
  for (int r = 0; r < 30; ++r) {
    BOOST_REQUIRE(loader.next_row(row));
    BOOST_REQUIRE(row[0] == kBos);
    tokens += row.size();
  }
  BOOST_TEST(loader.cropped_tokens() < tokens / 4);
  // Without splitting, nearly all of every document is cropped away.
  opt.split_long_docs = false;
  PackingLoader plain(shard, opt);
  for (int r = 0; r < 30; ++r) BOOST_REQUIRE(plain.next_row(row));
  BOOST_TEST(plain.cropped_tokens() > tokens * 4);
}

// One long document among many short ones: its pieces are spread over the epoch, not
// packed into consecutive rows (which once made one repetitive document fill several steps).
BOOST_AUTO_TEST_CASE(pieces_of_a_long_document_spread_over_the_epoch) {
  constexpr int32_t kLongToken = 7;  // only the long document has it
  Shard s;
  s.vocab_size = kVocab;
  s.doc_start = {0};
  for (int d = 0; d < 200; ++d) {
    const int len = d == 100 ? 161 : 7;  // the long one: 10 pieces of a 17-token row
    s.tokens.push_back(kBos);
    for (int j = 1; j < len; ++j) s.tokens.push_back(uint16_t(d == 100 ? kLongToken : 10 + (d + j) % 200));
    s.doc_start.push_back(s.tokens.size());
  }
  LoaderOptions opt;
  opt.seq_len = 16;
  opt.buffer_docs = 4;
  opt.seed = 3;
  PackingLoader loader(std::make_shared<Shard>(s), opt);
  std::vector<int32_t> row;
  std::vector<int> rows_with_long;
  for (int r = 0; loader.epoch() == 0; ++r) {
    BOOST_REQUIRE(loader.next_row(row));
    if (std::count(row.begin(), row.end(), kLongToken) > 0) rows_with_long.push_back(r);
  }
  BOOST_REQUIRE(rows_with_long.size() >= 8u);
  int run = 1, longest_run = 1;
  for (size_t k = 1; k < rows_with_long.size(); ++k) {
    run = rows_with_long[k] == rows_with_long[k - 1] + 1 ? run + 1 : 1;
    longest_run = std::max(longest_run, run);
  }
  BOOST_TEST_MESSAGE("rows with the long document: " << rows_with_long.size() << ", longest run " << longest_run
                     << ", from row " << rows_with_long.front() << " to " << rows_with_long.back());
  BOOST_TEST(longest_run <= 3);
  BOOST_TEST(rows_with_long.back() - rows_with_long.front() > 40);
}

BOOST_AUTO_TEST_CASE(same_seed_same_rows_other_seed_other_rows) {
  auto shard = std::make_shared<Shard>(make_shard(200, 2, 50));
  LoaderOptions opt;
  opt.seq_len = 32;
  opt.buffer_docs = 20;
  PackingLoader a(shard, opt), b(shard, opt);
  opt.seed = 2;
  PackingLoader c(shard, opt);
  const size_t B = 4, T = 32;
  std::vector<int32_t> xa(B * T), ya(B * T), xb(B * T), yb(B * T), xc(B * T), yc(B * T);
  bool differs = false;
  for (int step = 0; step < 100; ++step) {  // several epochs
    BOOST_REQUIRE(a.next_batch(B, xa.data(), ya.data()) == B);
    BOOST_REQUIRE(b.next_batch(B, xb.data(), yb.data()) == B);
    c.next_batch(B, xc.data(), yc.data());
    BOOST_REQUIRE(xa == xb);
    BOOST_REQUIRE(ya == yb);
    differs |= xa != xc;
    for (size_t r = 0; r < B; ++r)
      for (size_t t = 0; t + 1 < T; ++t) BOOST_REQUIRE(ya[r * T + t] == xa[r * T + t + 1]);  // shifted by one
  }
  BOOST_TEST(a.epoch() > 1u);
  BOOST_TEST(differs);
}

BOOST_AUTO_TEST_CASE(ranks_read_disjoint_documents_whatever_their_batch) {
  // Distinct documents: document d is BOS then the single token d % 250 repeated.
  Shard s;
  s.vocab_size = kVocab;
  s.doc_start = {0};
  for (int d = 0; d < 240; ++d) {
    s.tokens.push_back(kBos);
    for (int j = 0; j < 3 + d % 11; ++j) s.tokens.push_back(uint16_t(d));
    s.doc_start.push_back(s.tokens.size());
  }
  auto shard = std::make_shared<Shard>(s);
  std::set<int32_t> seen[3];
  const size_t batch[3] = {1, 3, 2};  // ranks with different device batch sizes
  for (uint32_t rank = 0; rank < 3; ++rank) {
    LoaderOptions opt;
    opt.rank = rank, opt.world = 3, opt.seq_len = 24, opt.buffer_docs = 10;
    PackingLoader loader(shard, opt);
    std::vector<int32_t> x(batch[rank] * 24), y(batch[rank] * 24);
    for (int step = 0; step < 20; ++step) {
      loader.next_batch(batch[rank], x.data(), y.data());
      for (int32_t t : x)
        if (t != kBos) seen[rank].insert(t);
    }
    for (int32_t d : seen[rank]) BOOST_REQUIRE(uint32_t(d) % 3 == rank);
  }
  BOOST_TEST(seen[0].size() > 20u);
  BOOST_TEST(seen[1].size() > 20u);
}

BOOST_AUTO_TEST_CASE(resume_from_saved_state_gives_the_same_rows) {
  auto shard = std::make_shared<Shard>(make_shard(120, 2, 90));
  LoaderOptions opt;
  opt.rank = 1, opt.world = 2, opt.seq_len = 40, opt.buffer_docs = 15, opt.seed = 9;
  PackingLoader first(shard, opt);
  std::vector<int32_t> row, expected;
  for (int r = 0; r < 57; ++r) first.next_row(row);
  std::string saved = first.state().to_bytes();
  std::vector<std::vector<int32_t>> after;
  for (int r = 0; r < 80; ++r) {  // crosses into later epochs
    first.next_row(row);
    after.push_back(row);
  }
  PackingLoader resumed(shard, opt);
  resumed.restore(LoaderState::from_bytes(saved));
  BOOST_TEST(resumed.rows() == 57u);
  for (int r = 0; r < 80; ++r) {
    resumed.next_row(row);
    BOOST_REQUIRE(row == after[r]);
  }
  // A state from another seed or rank is refused, and corrupt bytes too.
  opt.seed = 10;
  PackingLoader other(shard, opt);
  BOOST_CHECK_THROW(other.restore(LoaderState::from_bytes(saved)), rt::UsageError);
  BOOST_CHECK_THROW(LoaderState::from_bytes(saved.substr(0, saved.size() - 1)), rt::UsageError);
  BOOST_CHECK_THROW(LoaderState::from_bytes("garbage!garbage!"), rt::UsageError);
}

// --long-docs crop: nanochat's packing, where a document longer than a row fills one row
// and the rest of it is dropped. Its position resumes row for row, and a state of the other
// packing is refused (its piece indices mean other tokens).
BOOST_AUTO_TEST_CASE(crop_packing_is_nanochats_and_resumes_only_as_crop) {
  auto shard = std::make_shared<Shard>(make_shard(60, 30, 70));
  LoaderOptions opt;
  opt.seq_len = 16, opt.buffer_docs = 6, opt.seed = 4, opt.split_long_docs = false;
  PackingLoader crop(shard, opt);
  std::vector<int32_t> row;
  for (int r = 0; r < 23; ++r) {
    BOOST_REQUIRE(crop.next_row(row));
    BOOST_REQUIRE(row.size() == 17u);
    BOOST_REQUIRE(row[0] == kBos);
    // Every document here is longer than a row, so a cropped row is one document's start:
    // one <|bos|> only.
    BOOST_REQUIRE(std::count(row.begin(), row.end(), kBos) == 1);
  }
  const std::string saved = crop.state().to_bytes();
  BOOST_TEST(!LoaderState::from_bytes(saved).split_long_docs);
  std::vector<std::vector<int32_t>> after;
  for (int r = 0; r < 40; ++r) crop.next_row(row), after.push_back(row);
  PackingLoader again(shard, opt);
  again.restore(LoaderState::from_bytes(saved));
  for (int r = 0; r < 40; ++r) {
    again.next_row(row);
    BOOST_REQUIRE(row == after[size_t(r)]);
  }
  opt.split_long_docs = true;
  PackingLoader pieces(shard, opt);
  BOOST_CHECK_EXCEPTION(pieces.restore(LoaderState::from_bytes(saved)), rt::UsageError, [](const rt::UsageError& e) {
    return std::string(e.what()).find("--long-docs crop") != std::string::npos;
  });
  // The val rows follow the same choice.
  const auto val_crop = val_rows(shard, 0, 1, 16, 1000, false), val_pieces = val_rows(shard, 0, 1, 16, 1000, true);
  BOOST_TEST(val_crop.size() == shard->num_docs());
  BOOST_TEST(val_pieces.size() > 2 * val_crop.size());
}

BOOST_AUTO_TEST_CASE(val_rows_are_fixed_and_split_by_rank) {
  auto shard = std::make_shared<Shard>(make_shard(40, 2, 30));
  auto a = val_rows(shard, 0, 1, 16, 1000);
  auto b = val_rows(shard, 0, 1, 16, 1000);
  BOOST_TEST_REQUIRE(a.size() > 5u);
  BOOST_TEST(a.size() < 1000u);  // one pass, it ends
  BOOST_TEST((a == b));
  for (auto& r : a) BOOST_TEST(r[0] == kBos);
  auto limited = val_rows(shard, 0, 1, 16, 3);
  BOOST_TEST(limited.size() == 3u);
  auto r0 = val_rows(shard, 0, 2, 16, 1000), r1 = val_rows(shard, 1, 2, 16, 1000);
  BOOST_TEST(!r0.empty());
  BOOST_TEST(!r1.empty());
  BOOST_TEST((r0 != r1));
}

BOOST_AUTO_TEST_CASE(bits_per_byte_follows_the_spec_formula) {
  std::vector<int32_t> token_bytes(kVocab, 2);
  token_bytes[kBos] = 0;
  token_bytes[7] = 5;
  std::vector<int32_t> targets = {7, 1, kBos, 3, -1};
  std::vector<float> losses = {1.0f, 2.0f, 100.0f, 0.5f, 50.0f};
  BpbSums sums;
  sums.add(losses.data(), targets.data(), targets.size(), token_bytes);
  // BOS (0 bytes) and the ignored target (-1) do not count.
  BOOST_TEST(sums.nats == 3.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(sums.bytes == 9.0);
  BOOST_TEST(sums.bpb() == 3.5 / (std::log(2.0) * 9.0), boost::test_tools::tolerance(1e-12));
  targets[0] = int32_t(kVocab);
  BOOST_CHECK_THROW(sums.add(losses.data(), targets.data(), 1, token_bytes), rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
