// A reader of Thrift's compact protocol, the encoding of parquet's footer and page headers
// (parquet.thrift), over bytes from a file: every length, count and nesting depth is checked
// against what is left, and a malformed input is an rt::UsageError naming `what`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rt::data::thrift {

enum Type : uint8_t {
  kStop = 0, kTrue = 1, kFalse = 2, kByte = 3, kI16 = 4, kI32 = 5, kI64 = 6, kDouble = 7,
  kBinary = 8, kList = 9, kSet = 10, kMap = 11, kStruct = 12
};

class CompactReader {
 public:
  CompactReader(const uint8_t* data, size_t size, std::string what) : p_(data), end_(data + size), what_(std::move(what)) {}

  // Fields of the struct being read, one at a time: false at its end (STOP). Call
  // begin_struct/end_struct around a nested struct's fields.
  bool next_field(int16_t& id, uint8_t& type);
  void begin_struct();
  void end_struct();

  int64_t read_int(uint8_t type);   // BYTE, I16, I32 or I64
  bool read_bool(uint8_t type);     // a field's TRUE/FALSE type
  std::string read_binary(size_t max_bytes);
  // A list's element type and count (the count checked against the bytes left).
  void read_list_header(uint8_t& elem_type, uint32_t& count);
  // A list that must hold structs (what parquet's lists of records are): its count.
  uint32_t read_struct_list(const char* what_list);
  void skip(uint8_t type);

  size_t consumed(const uint8_t* start) const { return size_t(p_ - start); }
  [[noreturn]] void fail(const std::string& why) const;

 private:
  uint64_t varint();
  uint8_t byte();
  void skip_element(uint8_t type);
  static constexpr int kMaxDepth = 32;
  const uint8_t* p_;
  const uint8_t* end_;
  std::string what_;
  int16_t last_id_ = 0;
  int16_t id_stack_[kMaxDepth] = {};
  int depth_ = 0;
};

}  // namespace rt::data::thrift
