// One text column of a parquet file (see parquet.hpp). The layout, from parquet-format:
//   "PAR1" | column chunks: pages, each a PageHeader (thrift) and its bytes | FileMetaData
//   (thrift) | u32 length of the FileMetaData | "PAR1"
// A column chunk holds an optional dictionary page, then data pages; a data page holds the
// definition levels (which rows are null) and the non-null values, PLAIN (u32 length and
// bytes) or as indices into the dictionary (RLE / bit-packed hybrid).
#include "ringtrain/data/parquet.hpp"

#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "ringtrain/errors.hpp"
#include "thrift_compact.hpp"

namespace rt::data {
namespace {

using thrift::CompactReader;

constexpr uint64_t kMaxFooterBytes = 64ull << 20;  // a footer of millions of row groups: refuse
constexpr uint64_t kMaxPageBytes = 1ull << 30;      // one page of text, uncompressed
constexpr uint64_t kMaxChunkBytes = 4ull << 30;     // one row group's column, compressed

enum Codec { kUncompressed = 0, kSnappy = 1, kGzip = 2, kZstd = 6 };
enum PageType { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };
enum Encoding { kPlain = 0, kPlainDictionary = 2, kRle = 3, kDeltaLengthByteArray = 6, kDeltaByteArray = 7, kRleDictionary = 8 };
constexpr int kByteArray = 6;                // parquet Type
constexpr int kRequired = 0, kOptional = 1;  // FieldRepetitionType

const char* codec_name(int64_t c) {
  switch (c) {
    case 3: return "LZO";
    case 4: return "BROTLI";
    case 5: return "LZ4";
    case 7: return "LZ4_RAW";
    default: return "an unknown codec";
  }
}

// Where our column's pages are in one row group.
struct Chunk {
  uint64_t start = 0, bytes = 0;
  int64_t codec = 0, num_values = 0;
};

struct Footer {
  bool optional = false;
  std::vector<Chunk> chunks;
};

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

// The footer: the schema (to find the column and whether it can be null) and, per row group,
// the place of that column's chunk.
Footer parse_footer(const uint8_t* data, size_t size, const std::string& what, const std::string& column) {
  CompactReader r(data, size, what);
  struct Leaf { std::string name; int64_t type = -1, repetition = kRequired; int64_t children = 0; };
  std::vector<Leaf> schema;
  Footer f;
  int64_t leaf_index = -1;  // our column among the leaves, in schema order
  std::vector<std::vector<Chunk>> groups;
  std::vector<int64_t> group_rows;
  int16_t id;
  uint8_t type;
  while (r.next_field(id, type)) {
    if (id == 2 && type == thrift::kList) {  // schema: list<SchemaElement>
      const uint32_t n = r.read_struct_list("the schema");
      for (uint32_t i = 0; i < n; ++i) {
        Leaf e;
        r.begin_struct();
        int16_t fid;
        uint8_t ft;
        while (r.next_field(fid, ft)) {
          if (fid == 1 && ft == thrift::kI32) e.type = r.read_int(ft);
          else if (fid == 3 && ft == thrift::kI32) e.repetition = r.read_int(ft);
          else if (fid == 4 && ft == thrift::kBinary) e.name = r.read_binary(4096);
          else if (fid == 5 && ft == thrift::kI32) e.children = r.read_int(ft);
          else r.skip(ft);
        }
        r.end_struct();
        if (e.children < 0 || e.children > int64_t(n)) r.fail("a schema element claims " + std::to_string(e.children) + " children");
        schema.push_back(std::move(e));
      }
    } else if (id == 4 && type == thrift::kList) {  // row_groups: list<RowGroup>
      const uint32_t n = r.read_struct_list("the row groups");
      for (uint32_t g = 0; g < n; ++g) {
        std::vector<Chunk> cols;
        int64_t rows = -1;
        r.begin_struct();
        int16_t gid;
        uint8_t gt;
        while (r.next_field(gid, gt)) {
          if (gid == 1 && gt == thrift::kList) {  // columns: list<ColumnChunk>
            const uint32_t cn = r.read_struct_list("a row group's columns");
            for (uint32_t c = 0; c < cn; ++c) {
              Chunk ch;
              int64_t data_offset = -1, dict_offset = -1;
              bool external = false;
              r.begin_struct();
              int16_t cid;
              uint8_t ct;
              while (r.next_field(cid, ct)) {
                if (cid == 1 && ct == thrift::kBinary) external = !r.read_binary(4096).empty();
                else if (cid == 3 && ct == thrift::kStruct) {  // meta_data: ColumnMetaData
                  r.begin_struct();
                  int16_t mid;
                  uint8_t mt;
                  while (r.next_field(mid, mt)) {
                    if (mid == 4 && mt == thrift::kI32) ch.codec = r.read_int(mt);
                    else if (mid == 5 && mt == thrift::kI64) ch.num_values = r.read_int(mt);
                    else if (mid == 7 && mt == thrift::kI64) ch.bytes = uint64_t(r.read_int(mt));
                    else if (mid == 9 && mt == thrift::kI64) data_offset = r.read_int(mt);
                    else if (mid == 11 && mt == thrift::kI64) dict_offset = r.read_int(mt);
                    else r.skip(mt);
                  }
                  r.end_struct();
                } else {
                  r.skip(ct);
                }
              }
              r.end_struct();
              if (external) r.fail("a column chunk lives in another file (file_path); give a self-contained parquet file");
              if (data_offset < 0 || ch.num_values < 0 || int64_t(ch.bytes) < 0) r.fail("a column chunk has a negative offset, size or count");
              // The chunk starts at its dictionary page when it has one before the data.
              ch.start = uint64_t(dict_offset > 0 && dict_offset < data_offset ? dict_offset : data_offset);
              cols.push_back(ch);
            }
          } else if (gid == 3 && gt == thrift::kI64) {
            rows = r.read_int(gt);
          } else {
            r.skip(gt);
          }
        }
        r.end_struct();
        if (rows < 0) r.fail("a row group has no row count");
        groups.push_back(std::move(cols));
        group_rows.push_back(rows);
      }
    } else {
      r.skip(type);
    }
  }
  if (schema.empty()) r.fail("it has no schema");
  // Walk the flattened schema (depth first): find `column` as a direct child of the root and
  // count the leaves before it, which is its index among each row group's column chunks.
  std::vector<int64_t> left = {schema[0].children};
  int64_t leaves = 0;
  std::string names;
  for (size_t i = 1; i < schema.size(); ++i) {
    while (!left.empty() && left.back() == 0) left.pop_back();
    if (left.empty()) r.fail("the schema has more elements than its groups hold");
    --left.back();
    const bool top = left.size() == 1;
    const Leaf& e = schema[i];
    if (top) names += (names.empty() ? "" : ", ") + e.name;
    if (e.children > 0) {
      if (top && e.name == column) throw UsageError(what + ": column '" + column + "' is a group (nested), not text; give a file whose '" + column + "' is a string column");
      left.push_back(e.children);
      continue;
    }
    if (top && e.name == column) {
      if (e.type != kByteArray) throw UsageError(what + ": column '" + column + "' is not a string column (parquet type " + std::to_string(e.type) + ")");
      if (e.repetition != kRequired && e.repetition != kOptional)
        throw UsageError(what + ": column '" + column + "' is repeated (a list); ringtrain reads one text per row");
      f.optional = e.repetition == kOptional;
      leaf_index = leaves;
    }
    ++leaves;
  }
  if (leaf_index < 0)
    throw UsageError(what + " has no column '" + column + "' (its columns: " + names.substr(0, 200) + "); nanochat's shards have 'text'");
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].size() != size_t(leaves)) r.fail("a row group has " + std::to_string(groups[g].size()) + " columns, the schema " + std::to_string(leaves));
    Chunk ch = groups[g][size_t(leaf_index)];
    if (ch.num_values != group_rows[g]) r.fail("a row group's text column has " + std::to_string(ch.num_values) + " values for " + std::to_string(group_rows[g]) + " rows");
    f.chunks.push_back(ch);
  }
  return f;
}

// An unsigned LEB128 varint (the hybrid's run headers, the delta encodings' numbers) of at most
// (max_shift / 7 + 1) bytes; false when it is cut off or longer.
bool read_uleb128(const uint8_t*& p, const uint8_t* end, int max_shift, uint64_t& v) {
  v = 0;
  for (int shift = 0;; shift += 7) {
    if (p >= end || shift > max_shift) return false;
    v |= uint64_t(*p & 0x7f) << shift;
    if (!(*p++ & 0x80)) return true;
  }
}

// `width` bits of a bit-packed run, least significant first, from bit `bit` on (advanced).
uint64_t take_bits(const uint8_t* p, uint64_t& bit, int width) {
  uint64_t x = 0;
  for (int b = 0; b < width; ++b, ++bit) x |= uint64_t((p[bit >> 3] >> (bit & 7)) & 1) << b;
  return x;
}

// The RLE / bit-packed hybrid (definition levels, dictionary indices): `count` values of
// `bit_width` bits.
void decode_hybrid(const uint8_t* p, size_t n, int bit_width, size_t count, std::vector<uint32_t>& out, const std::string& what) {
  auto bad = [&](const std::string& why) { throw UsageError(what + ": " + why + "; the file is damaged"); };
  if (bit_width < 0 || bit_width > 32) bad("a bit width of " + std::to_string(bit_width));
  out.clear();
  out.reserve(count);
  const uint8_t* end = p + n;
  const uint64_t max_value = bit_width == 32 ? 0xffffffffull : (1ull << bit_width) - 1;
  while (out.size() < count) {
    uint64_t h = 0;
    if (!read_uleb128(p, end, 35, h)) bad("levels or indices end early");
    if (h & 1) {  // bit-packed: (h >> 1) groups of 8 values, least significant bit first
      const uint64_t groups = h >> 1;
      if (groups == 0 || groups * uint64_t(bit_width) > uint64_t(end - p)) bad("a bit-packed run is empty or longer than its page");
      const uint64_t values = groups * 8;
      uint64_t bit = 0;
      for (uint64_t v = 0; v < values; ++v) {
        const uint64_t x = take_bits(p, bit, bit_width);
        if (out.size() < count) out.push_back(uint32_t(x));
      }
      p += groups * uint64_t(bit_width);
    } else {  // a run: (h >> 1) copies of one value of ceil(bit_width / 8) bytes
      const uint64_t run = h >> 1;
      const int bytes = (bit_width + 7) / 8;
      if (run == 0 || bytes > end - p) bad("a run is empty or cut off");
      uint64_t x = 0;
      for (int b = 0; b < bytes; ++b) x |= uint64_t(p[b]) << (8 * b);
      p += bytes;
      if (x > max_value) bad("a run's value does not fit its bit width");
      const uint64_t take = std::min<uint64_t>(run, count - out.size());
      out.insert(out.end(), size_t(take), uint32_t(x));
    }
  }
}

// A page's bytes after its codec; `expected` is the header's uncompressed size.
std::string decompress(int64_t codec, const uint8_t* in, size_t n, uint64_t expected, const std::string& what) {
  if (expected > kMaxPageBytes) throw UsageError(what + ": a page of " + std::to_string(expected) + " bytes uncompressed, over 1 GiB; the file is damaged");
  std::string out;
  auto size_differs = [&] { throw UsageError(what + ": a page does not decompress to its stated size; the file is damaged"); };
  switch (codec) {
    case kUncompressed:
      if (n != expected) size_differs();
      return std::string(reinterpret_cast<const char*>(in), n);
    case kSnappy: {
      size_t len = 0;
      if (snappy_uncompressed_length(reinterpret_cast<const char*>(in), n, &len) != SNAPPY_OK || len != expected) size_differs();
      out.resize(len);
      if (snappy_uncompress(reinterpret_cast<const char*>(in), n, out.data(), &len) != SNAPPY_OK || len != expected) size_differs();
      return out;
    }
    case kZstd: {
      // No allocation on a header's word alone: the frame states its size (both writers
      // tested here do), or the size must be one zstd could reach from these bytes.
      const unsigned long long stated = ZSTD_getFrameContentSize(in, n);
      if (stated == ZSTD_CONTENTSIZE_ERROR || (stated != ZSTD_CONTENTSIZE_UNKNOWN && stated != expected) ||
          (stated == ZSTD_CONTENTSIZE_UNKNOWN && expected > uint64_t(n) * 32768 + 4096))
        size_differs();
      out.resize(size_t(expected));
      const size_t got = ZSTD_decompress(out.data(), out.size(), in, n);
      if (ZSTD_isError(got) || got != expected) size_differs();
      return out;
    }
    case kGzip: {
      if (expected > uint64_t(n) * 1032 + 1024) size_differs();  // deflate expands at most 1032:1
      out.resize(size_t(expected));
      z_stream z{};
      if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw RuntimeError("zlib failed to start");
      z.next_in = const_cast<uint8_t*>(in), z.avail_in = uInt(n);
      z.next_out = reinterpret_cast<uint8_t*>(out.data()), z.avail_out = uInt(out.size());
      const int rc = inflate(&z, Z_FINISH);
      const uint64_t got = z.total_out;
      inflateEnd(&z);
      if (rc != Z_STREAM_END || got != expected) size_differs();
      return out;
    }
    default:
      throw UsageError(what + ": its pages are compressed with " + std::string(codec_name(codec)) +
                       ", which ringtrain does not read; write the shards with snappy, zstd, gzip or none");
  }
}

// u32-length-prefixed byte strings, `count` of them.
void plain_values(const uint8_t* p, size_t n, size_t count, std::vector<std::string_view>& out, const std::string& what) {
  out.clear();
  const uint8_t* end = p + n;
  for (size_t i = 0; i < count; ++i) {
    if (end - p < 4) throw UsageError(what + ": a page holds fewer values than its header says; the file is damaged");
    const uint32_t len = le32(p);
    p += 4;
    if (len > uint64_t(end - p)) throw UsageError(what + ": a value is longer than its page; the file is damaged");
    out.emplace_back(reinterpret_cast<const char*>(p), len);
    p += len;
  }
}

// DELTA_BINARY_PACKED integers (the lengths of the delta byte-array encodings): a header
// (block size, miniblocks per block, count, first value), then blocks of a minimum delta, one
// bit width per miniblock and the bit-packed deltas. Returns the bytes it took.
size_t delta_binary_packed(const uint8_t* p, size_t n, std::vector<int64_t>& out, const std::string& what) {
  auto bad = [&](const std::string& why) -> void { throw UsageError(what + ": " + why + "; the file is damaged"); };
  const uint8_t* const start = p;
  const uint8_t* const end = p + n;
  auto varint = [&]() {
    uint64_t v = 0;
    if (!read_uleb128(p, end, 63, v)) bad("delta-encoded lengths end early");
    return v;
  };
  auto zigzag = [&]() { const uint64_t v = varint(); return int64_t(v >> 1) ^ -int64_t(v & 1); };
  const uint64_t block = varint(), miniblocks = varint(), count = varint();
  if (block == 0 || block % 128 != 0 || block > (1u << 20) || miniblocks == 0 || block % miniblocks != 0 || (block / miniblocks) % 32 != 0)
    bad("delta-encoded lengths have a bad block layout");
  if (count > n * 64 + 1) bad("delta-encoded lengths claim more values than their bytes can hold");
  out.clear();
  out.reserve(size_t(count));
  uint64_t value = uint64_t(zigzag());
  if (count > 0) out.push_back(int64_t(value));
  const uint64_t per_mini = block / miniblocks;
  while (out.size() < count) {
    const uint64_t min_delta = uint64_t(zigzag());
    if (uint64_t(end - p) < miniblocks) bad("a block's bit widths are cut off");
    const uint8_t* widths = p;
    p += miniblocks;
    for (uint64_t m = 0; m < miniblocks && out.size() < count; ++m) {
      const int w = widths[m];
      if (w > 64) bad("a miniblock's bit width is over 64");
      const uint64_t bytes = per_mini * uint64_t(w) / 8;
      if (bytes > uint64_t(end - p)) bad("a miniblock is cut off");
      uint64_t bit = 0;
      for (uint64_t i = 0; i < per_mini && out.size() < count; ++i) {
        value += min_delta + take_bits(p, bit, w);  // wraps as the format's int64 arithmetic does
        out.push_back(int64_t(value));
      }
      p += bytes;  // a miniblock is padded to its full size, even the last one
    }
  }
  return size_t(p - start);
}

// DELTA_LENGTH_BYTE_ARRAY: the lengths (delta-encoded), then the bytes one after another.
size_t delta_length_values(const uint8_t* p, size_t n, size_t count, std::vector<std::string_view>& out, const std::string& what) {
  std::vector<int64_t> lengths;
  size_t used = delta_binary_packed(p, n, lengths, what);
  if (lengths.size() != count) throw UsageError(what + ": a page's value count and its length count differ; the file is damaged");
  out.clear();
  for (int64_t len : lengths) {
    if (len < 0 || uint64_t(len) > n - used) throw UsageError(what + ": a value is longer than its page; the file is damaged");
    out.emplace_back(reinterpret_cast<const char*>(p + used), size_t(len));
    used += size_t(len);
  }
  return used;
}

struct ChunkReader {
  const std::string& what;
  bool optional;
  ParquetTextStats& stats;
  const std::function<void(std::string_view)>& on_value;
  std::string dict_bytes;                 // the dictionary page, decompressed
  std::vector<std::string_view> dict;     // views into dict_bytes
  std::vector<uint32_t> levels, indices;  // scratch
  std::vector<std::string_view> values;
  std::vector<std::string> built;         // DELTA_BYTE_ARRAY's values, made of prefix and suffix

  // One data page: `num_values` rows, `def` the definition levels, `body` the values.
  void data_page(int64_t num_values, int64_t encoding, const uint8_t* def, size_t def_n, const uint8_t* body, size_t body_n) {
    size_t present = size_t(num_values);
    if (optional) {
      decode_hybrid(def, def_n, 1, size_t(num_values), levels, what);
      present = 0;
      for (uint32_t l : levels) present += l;
    }
    if (encoding == kPlain) {
      plain_values(body, body_n, present, values, what);
    } else if (encoding == kPlainDictionary || encoding == kRleDictionary) {
      if (dict_bytes.empty() && dict.empty()) throw UsageError(what + ": a dictionary-encoded page comes without a dictionary; the file is damaged");
      if (present > 0) {
        if (body_n < 1) throw UsageError(what + ": a dictionary page body is empty; the file is damaged");
        decode_hybrid(body + 1, body_n - 1, body[0], present, indices, what);
      } else {
        indices.clear();
      }
      values.clear();
      for (uint32_t i : indices) {
        if (i >= dict.size()) throw UsageError(what + ": a dictionary index is past the dictionary's end; the file is damaged");
        values.push_back(dict[i]);
      }
    } else if (encoding == kDeltaLengthByteArray) {
      delta_length_values(body, body_n, present, values, what);
    } else if (encoding == kDeltaByteArray) {  // each value: a prefix of the one before, then a suffix
      std::vector<int64_t> prefixes;
      const size_t used = delta_binary_packed(body, body_n, prefixes, what);
      std::vector<std::string_view> suffixes;
      delta_length_values(body + used, body_n - used, present, suffixes, what);
      if (prefixes.size() != present) throw UsageError(what + ": a page's prefix count and value count differ; the file is damaged");
      built.clear();
      built.reserve(present);  // no reallocation: values point into these strings
      values.clear();
      for (size_t i = 0; i < present; ++i) {
        const size_t before = built.empty() ? 0 : built.back().size();
        if (prefixes[i] < 0 || uint64_t(prefixes[i]) > before) throw UsageError(what + ": a value's prefix is longer than the value before it; the file is damaged");
        std::string v = built.empty() ? std::string() : built.back().substr(0, size_t(prefixes[i]));
        v.append(suffixes[i]);
        built.push_back(std::move(v));
      }
      for (const auto& v : built) values.emplace_back(v);
    } else {
      throw UsageError(what + ": its text is stored with encoding " + std::to_string(encoding) +
                       " (not PLAIN, a dictionary or a delta encoding), which ringtrain does not read; write it with pyarrow's defaults");
    }
    size_t v = 0;
    for (size_t row = 0; row < size_t(num_values); ++row) {
      if (optional && levels[row] == 0) {
        ++stats.nulls;
        continue;
      }
      on_value(values[v++]);
    }
    stats.rows += uint64_t(num_values);
  }

  void read(const uint8_t* p, size_t n, const Chunk& ch) {
    dict_bytes.clear(), dict.clear();
    int64_t seen = 0;
    const uint8_t* end = p + n;
    while (seen < ch.num_values) {
      if (p >= end) throw UsageError(what + ": a column chunk ends before its " + std::to_string(ch.num_values) + " values; the file is damaged");
      CompactReader r(p, size_t(end - p), what);
      int64_t page_type = -1, uncompressed = -1, compressed = -1;
      int64_t dp_values = -1, dp_encoding = -1, dp_def_encoding = kRle;       // DataPageHeader
      int64_t dict_values = -1;                                               // DictionaryPageHeader
      int64_t v2_values = -1, v2_encoding = -1, v2_def = -1, v2_rep = -1;     // DataPageHeaderV2
      bool v2_compressed = true;
      int16_t id;
      uint8_t t;
      while (r.next_field(id, t)) {
        if (id == 1 && t == thrift::kI32) page_type = r.read_int(t);
        else if (id == 2 && t == thrift::kI32) uncompressed = r.read_int(t);
        else if (id == 3 && t == thrift::kI32) compressed = r.read_int(t);
        else if ((id == 5 || id == 7 || id == 8) && t == thrift::kStruct) {
          r.begin_struct();
          int16_t sid;
          uint8_t st;
          while (r.next_field(sid, st)) {
            if (id == 5 && sid == 1 && st == thrift::kI32) dp_values = r.read_int(st);
            else if (id == 5 && sid == 2 && st == thrift::kI32) dp_encoding = r.read_int(st);
            else if (id == 5 && sid == 3 && st == thrift::kI32) dp_def_encoding = r.read_int(st);
            else if (id == 7 && sid == 1 && st == thrift::kI32) dict_values = r.read_int(st);
            else if (id == 8 && sid == 1 && st == thrift::kI32) v2_values = r.read_int(st);
            else if (id == 8 && sid == 4 && st == thrift::kI32) v2_encoding = r.read_int(st);
            else if (id == 8 && sid == 5 && st == thrift::kI32) v2_def = r.read_int(st);
            else if (id == 8 && sid == 6 && st == thrift::kI32) v2_rep = r.read_int(st);
            else if (id == 8 && sid == 7 && (st == thrift::kTrue || st == thrift::kFalse)) v2_compressed = r.read_bool(st);
            else r.skip(st);
          }
          r.end_struct();
        } else {
          r.skip(t);
        }
      }
      p += r.consumed(p);
      if (compressed < 0 || uncompressed < 0 || compressed > end - p)
        throw UsageError(what + ": a page's size is negative or past its column chunk; the file is damaged");
      const uint8_t* page = p;
      p += compressed;
      ++stats.pages;
      if (page_type == kDictionaryPage) {
        if (dict_values < 0) throw UsageError(what + ": a dictionary page has no count; the file is damaged");
        dict_bytes = decompress(ch.codec, page, size_t(compressed), uint64_t(uncompressed), what);
        plain_values(reinterpret_cast<const uint8_t*>(dict_bytes.data()), dict_bytes.size(), size_t(dict_values), dict, what);
      } else if (page_type == kDataPage) {
        if (dp_values < 0 || dp_values > ch.num_values - seen) throw UsageError(what + ": a data page claims more values than its column chunk; the file is damaged");
        const std::string body = decompress(ch.codec, page, size_t(compressed), uint64_t(uncompressed), what);
        const auto* b = reinterpret_cast<const uint8_t*>(body.data());
        size_t def_n = 0;
        if (optional) {  // a u32 length, then the RLE hybrid levels
          if (dp_def_encoding != kRle) throw UsageError(what + ": its null markers are BIT_PACKED (deprecated), which ringtrain does not read");
          if (body.size() < 4 || le32(b) > body.size() - 4) throw UsageError(what + ": a page's null markers are cut off; the file is damaged");
          def_n = le32(b);
          b += 4;
        }
        data_page(dp_values, dp_encoding, b, def_n, b + def_n, body.size() - (optional ? 4 : 0) - def_n);
        seen += dp_values;
      } else if (page_type == kDataPageV2) {
        if (v2_values < 0 || v2_values > ch.num_values - seen) throw UsageError(what + ": a data page claims more values than its column chunk; the file is damaged");
        if (v2_def < 0 || (v2_rep != 0 && v2_rep != -1)) throw UsageError(what + ": a v2 page has repetition levels or negative sizes; the text column must be flat");
        const int64_t levels_n = v2_def + std::max<int64_t>(v2_rep, 0);
        if (levels_n > compressed || levels_n > uncompressed) throw UsageError(what + ": a v2 page's levels are longer than the page; the file is damaged");
        const uint8_t* def = page + std::max<int64_t>(v2_rep, 0);
        const std::string body = v2_compressed ? decompress(ch.codec, page + levels_n, size_t(compressed - levels_n), uint64_t(uncompressed - levels_n), what)
                                               : decompress(kUncompressed, page + levels_n, size_t(compressed - levels_n), uint64_t(uncompressed - levels_n), what);
        data_page(v2_values, v2_encoding, def, size_t(v2_def), reinterpret_cast<const uint8_t*>(body.data()), body.size());
        seen += v2_values;
      } else if (page_type != kIndexPage) {
        throw UsageError(what + ": a page of unknown type " + std::to_string(page_type) + "; the file is damaged");
      }
    }
  }
};

ParquetTextStats read_all(uint64_t size, const std::string& what, const std::string& column,
                          const std::function<std::string(uint64_t offset, uint64_t bytes)>& read_range,
                          const std::function<void(std::string_view)>& on_value) {
  if (size < 12) throw UsageError(what + " is too short to be parquet (" + std::to_string(size) + " bytes)");
  const std::string head = read_range(0, 4), tail = read_range(size - 8, 8);
  if (head != "PAR1" || tail.compare(4, 4, "PAR1") != 0)
    throw UsageError(what + " is not a parquet file (no PAR1 at its start and end); give nanochat's shard_NNNNN.parquet files");
  const uint64_t footer_n = le32(reinterpret_cast<const uint8_t*>(tail.data()));
  if (footer_n > size - 12 || footer_n > kMaxFooterBytes) throw UsageError(what + ": its footer length is past the file; the file is damaged or cut off");
  const std::string footer_bytes = read_range(size - 8 - footer_n, footer_n);
  const Footer f = parse_footer(reinterpret_cast<const uint8_t*>(footer_bytes.data()), footer_bytes.size(), what, column);
  ParquetTextStats stats;
  ChunkReader reader{what, f.optional, stats, on_value, {}, {}, {}, {}, {}, {}};
  const uint64_t data_end = size - 8 - footer_n;
  for (const Chunk& ch : f.chunks) {
    if (ch.start < 4 || ch.bytes > kMaxChunkBytes || ch.start > data_end || ch.bytes > data_end - ch.start)
      throw UsageError(what + ": a column chunk lies outside the file's data; the file is damaged");
    const std::string bytes = read_range(ch.start, ch.bytes);
    reader.read(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), ch);
    ++stats.row_groups;
  }
  return stats;
}

}  // namespace

ParquetTextStats parse_parquet_text(std::string_view file, const std::string& what, const std::string& column,
                                    const std::function<void(std::string_view)>& on_value) {
  return read_all(file.size(), what, column, [&](uint64_t off, uint64_t n) { return std::string(file.substr(size_t(off), size_t(n))); },
                  on_value);
}

ParquetTextStats read_parquet_text(const std::string& path, const std::string& column,
                                   const std::function<void(std::string_view)>& on_value) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open " + path + "; check the path and its permissions");
  in.seekg(0, std::ios::end);
  const auto size = uint64_t(in.tellg());
  return read_all(size, path, column, [&](uint64_t off, uint64_t n) {
    std::string s(size_t(n), '\0');
    in.seekg(std::streamoff(off));
    if (!in.read(s.data(), std::streamsize(n))) throw UsageError(path + ": cannot read " + std::to_string(n) + " bytes at " + std::to_string(off) + "; the file is cut off");
    return s;
  }, on_value);
}

}  // namespace rt::data
