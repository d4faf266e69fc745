// Reading the raw text of a corpus. Inputs are files or directories:
//   - a directory is searched recursively for *.txt, *.rst, *.md, *.rst.txt, *.jsonl and *.parquet;
//   - a .jsonl file holds one JSON object per line whose "text" string is one document;
//   - a .parquet file (nanochat's shards) holds one document per row of its "text" column;
//   - any other file is one document (its bytes as they are, valid UTF-8 or not).
// Files are read in sorted path order, so the document order is deterministic.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rt::data {

struct Corpus {
  std::vector<std::string> docs;     // non-empty documents, in order
  std::vector<std::string> sources;  // the files read, in order
  uint64_t bytes = 0;
};

// A parquet file, read as nanochat's shards are (by name: *.parquet).
bool is_parquet_file(const std::string& path);

// Expands the inputs to a sorted file list. Throws UsageError for a path that does not
// exist or a directory with no text files in it.
std::vector<std::string> list_input_files(const std::vector<std::string>& inputs);

// Reads the documents of the files; on_progress(files_done, bytes) is called now and then.
// Throws UsageError for malformed JSONL (file and line named).
Corpus read_corpus(const std::vector<std::string>& files,
                   const std::function<void(size_t, uint64_t)>& on_progress = {});

// The same documents, one at a time, without keeping them: on_doc(file index, text) for each
// non-empty one (what data prepare streams). Returns the bytes read.
uint64_t stream_corpus(const std::vector<std::string>& files, const std::function<void(size_t, std::string&&)>& on_doc,
                       const std::function<void(size_t, uint64_t)>& on_progress = {});

// The "text" string of one JSON object line. Throws std::invalid_argument with the reason.
std::string jsonl_text_field(const std::string& line);

}  // namespace rt::data
