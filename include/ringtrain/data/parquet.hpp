// Reading one text column of a parquet file: what nanochat's data shards are
// (base_data/shard_NNNNN.parquet, column "text", one document per row). The subset nanochat
// and the common writers (pyarrow, arrow-rs, parquet-wasm) produce for such a column:
// a top-level BYTE_ARRAY column, REQUIRED or OPTIONAL (nulls are skipped), any number of row
// groups, data pages v1 and v2, PLAIN, dictionary (PLAIN_DICTIONARY, RLE_DICTIONARY) and delta
// (DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY) encodings, and UNCOMPRESSED, SNAPPY, GZIP or ZSTD
// pages. Anything else is refused with a
// line that names it.
//
// The file is read one column chunk at a time, so memory is bounded by the largest chunk
// (one row group's text), not by the file. Every size, count and offset from the file is
// checked before use; a damaged file is an rt::UsageError naming it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace rt::data {

struct ParquetTextStats {
  uint64_t rows = 0, nulls = 0, row_groups = 0, pages = 0;
};

// Calls on_value for each non-null value of `column`, in file order.
ParquetTextStats read_parquet_text(const std::string& path, const std::string& column,
                                   const std::function<void(std::string_view)>& on_value);

// The same over a whole file in memory (the fuzz target's entry; `what` names it in errors).
ParquetTextStats parse_parquet_text(std::string_view file, const std::string& what, const std::string& column,
                                    const std::function<void(std::string_view)>& on_value);

}  // namespace rt::data
