// The training data loader: BOS-aligned best-fit packing (spec, "Tokenizer and data").
//
// Every row has T+1 slots. From a buffer of documents the packer repeatedly puts the
// longest document that fits whole; when none fits, it crops the shortest one to fill the
// row exactly (the rest of that document is dropped). No padding, and every row starts
// with <|bos|> because every document does. inputs = row[:-1], targets = row[1:].
//
// Documents longer than T+1 tokens could otherwise only ever be used by cropping, which
// would drop most of their tokens: a quarter of the kernel documentation files are longer
// than 2049 tokens, and at T = 2048 plain cropping dropped 36% of the tokens read, against
// 1% with splitting (measured). So, by default, such a document is cut into pieces:
// <|bos|> followed by the next T tokens of the document, and a last piece with the rest.
// Each piece then packs like a document. Set split_long_docs = false for the spec's plain
// behaviour.
//
// Each epoch shuffles the pieces (not the documents) with a seeded PRNG (seed, epoch,
// rank): the pieces of one long document land all over the epoch instead of filling
// consecutive rows (one long, repetitive document once filled several steps in a row and
// bent the loss curve). The stream is deterministic given the seed, and LoaderState holds
// everything needed to resume it row for row.
//
// How `ringtrain train` uses it: every rank runs the same loader (rank 0 of world 1), so all
// ranks pack one and the same stream; each micro-step takes the next sum(B_r) rows of it and
// rank r keeps its own B_r rows (trainer.cpp, next_rows). Ranks therefore train on disjoint
// rows whatever their --device-batch, and N ranks of B rows see exactly the rows one rank of
// N*B would. The rank/world options instead give each of `world` loaders the documents
// d with d % world == rank (disjoint documents, independent of B and T).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringtrain/data/shard.hpp"
#include "ringtrain/io/state_file.hpp"

namespace rt::data {

struct LoaderOptions {
  uint32_t rank = 0, world = 1;
  uint64_t seed = 1;
  uint32_t seq_len = 2048;       // T
  uint32_t buffer_docs = 1000;   // documents kept in the packing buffer
  bool shuffle = true;           // false: file order (the val iterator)
  bool split_long_docs = true;   // see above
};

// Position of a loader: enough to continue with exactly the same rows.
struct LoaderState {
  uint32_t rank = 0, world = 1, seq_len = 0;
  uint64_t seed = 0, num_docs = 0;  // checked on resume: same data and partition
  bool split_long_docs = true;      // checked on resume: pieces index documents differently
  uint64_t epoch = 0;               // epochs started so far minus one
  uint64_t cursor = 0;              // next position in this epoch's order of pieces
  uint64_t rows = 0;                // rows produced so far
  // Buffered pieces, in buffer order: (document index, piece index).
  std::vector<std::pair<uint64_t, uint32_t>> buffer;

  // Into the run's state file, as the component "loader": the numbers as scalars, the
  // buffer as the int64 tensor loader.buffer (document, piece, document, piece, ...).
  void save(io::StateWriter& out) const;
  // Throws UsageError if the state has no loader or a malformed one.
  static LoaderState load(const io::StateReader& in);
  // The same, alone in the bytes of a state file.
  std::string to_bytes() const;
  static LoaderState from_bytes(const std::string& bytes);
};

class PackingLoader {
 public:
  // The loader shares the shard (read-only) with other loaders.
  PackingLoader(std::shared_ptr<const Shard> shard, const LoaderOptions& opt);

  // Fills B rows: inputs and targets are int32 [B, T], row-major. Returns the number of
  // rows filled: always B, except in single-pass mode (val) at the end of the data.
  size_t next_batch(size_t B, int32_t* inputs, int32_t* targets);
  // One packed row of T+1 tokens; false when a single-pass loader has run out.
  bool next_row(std::vector<int32_t>& row);

  LoaderState state() const;
  // Continues from a saved state; throws UsageError if it was saved with another seed,
  // rank, world size, T or shard.
  void restore(const LoaderState& s);

  uint64_t epoch() const { return epoch_; }
  uint64_t rows() const { return rows_; }
  // Tokens dropped by cropping so far (for reporting the packing efficiency).
  uint64_t cropped_tokens() const { return cropped_; }

  // Single pass over the rank's documents, in file order, no new epoch (for val).
  void set_single_pass(bool on) { single_pass_ = on; }

 private:
  struct Piece {
    uint64_t doc;
    uint32_t index;
  };
  uint32_t piece_count(uint64_t doc) const;
  Piece piece_at(uint64_t p) const;  // p: index into all pieces of docs_, in file order
  uint32_t piece_length(const Piece& p) const;
  void copy_piece(const Piece& p, uint32_t n, int32_t* dst) const;
  void start_epoch(uint64_t epoch);
  bool refill();  // false when single-pass and out of documents

  std::shared_ptr<const Shard> shard_;
  LoaderOptions opt_;
  std::vector<uint64_t> docs_;         // this rank's document indices
  std::vector<uint64_t> piece_begin_;  // index of the first piece of docs_[i] (and the total)
  std::vector<uint64_t> order_;        // this epoch's order of the pieces
  uint64_t epoch_ = 0, cursor_ = 0, rows_ = 0, cropped_ = 0;
  std::vector<Piece> buffer_;
  bool single_pass_ = false;
};

// A fixed sequence of val rows: the rank's val documents in file order, packed, at most
// max_rows rows. Every call with the same arguments yields the same rows.
// --long-docs: "pieces" -> false, "crop" -> true (the value of "crop long documents");
// anything else is an rt::UsageError.
bool parse_long_docs(const std::string& text);

std::vector<std::vector<int32_t>> val_rows(std::shared_ptr<const Shard> val, uint32_t rank, uint32_t world,
                                           uint32_t seq_len, size_t max_rows, bool split_long_docs = true);

// Sums for bits per byte (spec): bpb = sum(loss_t * [bytes(tgt_t) > 0]) / (ln 2 * sum(bytes(tgt_t))).
// Ranks add their sums (e.g. with an all-reduce) before calling bpb().
struct BpbSums {
  double nats = 0;   // sum of losses over targets with bytes > 0
  double bytes = 0;  // sum of their byte lengths
  uint64_t tokens = 0;
  // losses[i] is the loss of predicting targets[i]; token_bytes[id] its byte length.
  void add(const float* losses, const int32_t* targets, size_t n, const std::vector<int32_t>& token_bytes);
  double bpb() const;
};

}  // namespace rt::data
