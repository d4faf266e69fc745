// BOS-aligned best-fit packing over a rank's share of a shard (see loader.hpp).
#include "ringtrain/data/loader.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ringtrain/errors.hpp"

namespace rt::data {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr const char* kComponent = "loader";

}  // namespace

void LoaderState::save(io::StateWriter& out) const {
  auto& j = out.scalars(kComponent);
  j["rank"] = rank, j["world"] = world, j["seq_len"] = seq_len, j["seed"] = seed, j["num_docs"] = num_docs;
  j["epoch"] = epoch, j["cursor"] = cursor, j["rows"] = rows;
  j["long_docs"] = split_long_docs ? "pieces" : "crop";
  std::vector<int64_t> flat;
  flat.reserve(2 * buffer.size());
  for (auto [doc, piece_index] : buffer) flat.push_back(int64_t(doc)), flat.push_back(int64_t(piece_index));
  out.int64s(std::string(kComponent) + ".buffer", std::move(flat));
}

LoaderState LoaderState::load(const io::StateReader& in) {
  LoaderState s;
  auto u32 = [&](const char* key) {
    const uint64_t v = in.count(kComponent, key);
    if (v > UINT32_MAX) throw UsageError(in.what() + ": loader." + key + " is out of range; the checkpoint is corrupt");
    return uint32_t(v);
  };
  s.rank = u32("rank"), s.world = u32("world"), s.seq_len = u32("seq_len");
  s.seed = in.count(kComponent, "seed"), s.num_docs = in.count(kComponent, "num_docs");
  // Checkpoints from before --long-docs existed were all written with pieces.
  if (in.has_scalar(kComponent, "long_docs")) {
    const std::string mode = in.text(kComponent, "long_docs");
    if (mode != "pieces" && mode != "crop")
      throw UsageError(in.what() + ": loader.long_docs is '" + mode + "', not pieces or crop; the checkpoint is corrupt");
    s.split_long_docs = mode == "pieces";
  }
  s.epoch = in.count(kComponent, "epoch"), s.cursor = in.count(kComponent, "cursor"), s.rows = in.count(kComponent, "rows");
  const auto flat = in.int64s(std::string(kComponent) + ".buffer");
  if (flat.size() % 2 != 0) throw UsageError(in.what() + ": loader.buffer has an odd length; the checkpoint is corrupt");
  for (size_t i = 0; i < flat.size(); i += 2) {
    if (flat[i] < 0 || flat[i + 1] < 0 || flat[i + 1] > int64_t(UINT32_MAX))
      throw UsageError(in.what() + ": loader.buffer holds a negative or huge index; the checkpoint is corrupt");
    s.buffer.emplace_back(uint64_t(flat[i]), uint32_t(flat[i + 1]));
  }
  return s;
}

std::string LoaderState::to_bytes() const {
  io::StateWriter w;
  save(w);
  return w.bytes();
}

LoaderState LoaderState::from_bytes(const std::string& bytes) {
  return load(io::StateReader::parse(bytes, "the loader state"));
}

PackingLoader::PackingLoader(std::shared_ptr<const Shard> shard, const LoaderOptions& opt)
    : shard_(std::move(shard)), opt_(opt) {
  if (opt_.world == 0 || opt_.rank >= opt_.world)
    throw UsageError("rank " + std::to_string(opt_.rank) + " is not below the world size " + std::to_string(opt_.world));
  if (opt_.seq_len < 1) throw UsageError("sequence length must be >= 1");
  if (opt_.buffer_docs < 1) throw UsageError("the packing buffer needs at least one document");
  for (uint64_t d = opt_.rank; d < shard_->num_docs(); d += opt_.world) docs_.push_back(d);
  piece_begin_.assign(1, 0);
  for (uint64_t d : docs_) piece_begin_.push_back(piece_begin_.back() + piece_count(d));
  if (docs_.empty())
    throw UsageError("the shard has " + std::to_string(shard_->num_docs()) + " documents, none for rank " +
                     std::to_string(opt_.rank) + " of " + std::to_string(opt_.world) + "; use more data or fewer ranks");
  start_epoch(0);
}

void PackingLoader::start_epoch(uint64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  order_.resize(piece_begin_.back());
  for (uint64_t i = 0; i < order_.size(); ++i) order_[i] = i;
  if (!opt_.shuffle) return;
  uint64_t state = opt_.seed * 0x100000001B3ull ^ (epoch << 20) ^ opt_.rank;
  splitmix64(state);
  for (size_t i = order_.size(); i > 1; --i) {  // Fisher-Yates
    size_t j = splitmix64(state) % i;
    std::swap(order_[i - 1], order_[j]);
  }
}

uint32_t PackingLoader::piece_count(uint64_t doc) const {
  uint64_t len = shard_->doc_length(doc), row = uint64_t(opt_.seq_len) + 1;
  if (!opt_.split_long_docs || len <= row) return 1;
  return uint32_t(1 + (len - row + opt_.seq_len - 1) / opt_.seq_len);
}

uint32_t PackingLoader::piece_length(const Piece& p) const {
  uint64_t len = shard_->doc_length(p.doc), row = uint64_t(opt_.seq_len) + 1;
  if (!opt_.split_long_docs || len <= row) return uint32_t(len);
  if (p.index == 0) return uint32_t(row);
  uint64_t rest = len - row - uint64_t(p.index - 1) * opt_.seq_len;
  return uint32_t(1 + std::min<uint64_t>(rest, opt_.seq_len));
}

void PackingLoader::copy_piece(const Piece& p, uint32_t n, int32_t* dst) const {
  const uint16_t* src = shard_->doc_tokens(p.doc);
  if (p.index == 0) {
    for (uint32_t i = 0; i < n; ++i) dst[i] = src[i];
    return;
  }
  // A continuation piece: <|bos|>, then the tokens after the previous pieces.
  dst[0] = src[0];
  const uint16_t* from = src + (uint64_t(opt_.seq_len) + 1) + uint64_t(p.index - 1) * opt_.seq_len;
  for (uint32_t i = 1; i < n; ++i) dst[i] = from[i - 1];
}

PackingLoader::Piece PackingLoader::piece_at(uint64_t p) const {
  const size_t i = size_t(std::upper_bound(piece_begin_.begin(), piece_begin_.end(), p) - piece_begin_.begin()) - 1;
  return {docs_[i], uint32_t(p - piece_begin_[i])};
}

bool PackingLoader::refill() {
  while (buffer_.size() < opt_.buffer_docs) {
    if (cursor_ == order_.size()) {
      if (single_pass_) return !buffer_.empty();
      start_epoch(epoch_ + 1);
    }
    buffer_.push_back(piece_at(order_[cursor_++]));
  }
  return true;
}

bool PackingLoader::next_row(std::vector<int32_t>& row) {
  const uint32_t cap = opt_.seq_len + 1;
  row.resize(cap);
  uint32_t pos = 0;
  while (pos < cap) {
    if (!refill()) return false;  // single pass: the last partial row is dropped
    const uint32_t room = cap - pos;
    // Longest piece that fits whole; ties go to the one buffered first.
    size_t best = SIZE_MAX, shortest = 0;
    uint32_t best_len = 0, shortest_len = UINT32_MAX;
    for (size_t i = 0; i < buffer_.size(); ++i) {
      uint32_t len = piece_length(buffer_[i]);
      if (len <= room && (best == SIZE_MAX || len > best_len)) best = i, best_len = len;
      if (len < shortest_len) shortest = i, shortest_len = len;
    }
    if (best != SIZE_MAX) {
      copy_piece(buffer_[best], best_len, row.data() + pos);
      pos += best_len;
      buffer_.erase(buffer_.begin() + best);
    } else {  // nothing fits: crop the shortest to fill the row exactly
      copy_piece(buffer_[shortest], room, row.data() + pos);
      cropped_ += shortest_len - room;
      pos += room;
      buffer_.erase(buffer_.begin() + shortest);
    }
  }
  ++rows_;
  return true;
}

size_t PackingLoader::next_batch(size_t B, int32_t* inputs, int32_t* targets) {
  const size_t T = opt_.seq_len;
  std::vector<int32_t> row;
  for (size_t b = 0; b < B; ++b) {
    if (!next_row(row)) return b;
    std::memcpy(inputs + b * T, row.data(), T * sizeof(int32_t));
    std::memcpy(targets + b * T, row.data() + 1, T * sizeof(int32_t));
  }
  return B;
}

LoaderState PackingLoader::state() const {
  LoaderState s;
  s.rank = opt_.rank, s.world = opt_.world, s.seq_len = opt_.seq_len;
  s.seed = opt_.seed, s.num_docs = shard_->num_docs(), s.split_long_docs = opt_.split_long_docs;
  s.epoch = epoch_, s.cursor = cursor_, s.rows = rows_;
  for (const auto& p : buffer_) s.buffer.emplace_back(p.doc, p.index);
  return s;
}

void PackingLoader::restore(const LoaderState& s) {
  if (s.rank != opt_.rank || s.world != opt_.world || s.seq_len != opt_.seq_len || s.seed != opt_.seed ||
      s.num_docs != shard_->num_docs() || s.split_long_docs != opt_.split_long_docs)
    throw UsageError("the saved data loader state does not match this run (rank " + std::to_string(s.rank) + "/" +
                     std::to_string(s.world) + ", T " + std::to_string(s.seq_len) + ", seed " + std::to_string(s.seed) +
                     ", " + std::to_string(s.num_docs) + " docs, --long-docs " + (s.split_long_docs ? "pieces" : "crop") +
                     "); resume with the same data, seed, T, --long-docs and ranks");
  start_epoch(s.epoch);
  if (s.cursor > order_.size())
    throw UsageError("the saved data loader position is out of range; the checkpoint does not match the data");
  cursor_ = s.cursor, rows_ = s.rows;
  buffer_.clear();
  for (auto [doc, index] : s.buffer) {
    if (doc >= shard_->num_docs() || doc % opt_.world != opt_.rank || index >= piece_count(doc))
      throw UsageError("the saved data loader buffer names a document this rank does not own; the checkpoint does not match the data");
    buffer_.push_back({doc, index});
  }
}

bool parse_long_docs(const std::string& text) {
  if (text == "pieces") return false;
  if (text == "crop") return true;
  throw UsageError("--long-docs " + text + " is not a packing; use pieces (ours: long documents cut into rows) or crop (nanochat's)");
}

std::vector<std::vector<int32_t>> val_rows(std::shared_ptr<const Shard> val, uint32_t rank, uint32_t world,
                                           uint32_t seq_len, size_t max_rows, bool split_long_docs) {
  LoaderOptions opt;
  opt.rank = rank, opt.world = world, opt.seq_len = seq_len, opt.shuffle = false;
  opt.split_long_docs = split_long_docs;
  PackingLoader loader(std::move(val), opt);
  loader.set_single_pass(true);
  std::vector<std::vector<int32_t>> rows;
  std::vector<int32_t> row;
  while (rows.size() < max_rows && loader.next_row(row)) rows.push_back(row);
  return rows;
}

void BpbSums::add(const float* losses, const int32_t* targets, size_t n, const std::vector<int32_t>& token_bytes) {
  for (size_t i = 0; i < n; ++i) {
    int32_t t = targets[i];
    if (t < 0) continue;  // ignored position
    if (size_t(t) >= token_bytes.size())
      throw UsageError("target id " + std::to_string(t) + " is outside token_bytes (" +
                       std::to_string(token_bytes.size()) + " ids); the data and token_bytes.bin do not match");
    ++tokens;
    if (token_bytes[t] > 0) nats += losses[i], bytes += token_bytes[t];
  }
}

double BpbSums::bpb() const { return bytes > 0 ? nats / (std::log(2.0) * bytes) : 0.0; }

}  // namespace rt::data
