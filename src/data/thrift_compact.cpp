// Thrift's compact protocol (see thrift_compact.hpp): zigzag varints, field headers that hold
// the delta to the previous field id, lists whose size sits in the header's high nibble.
#include "thrift_compact.hpp"

#include "ringtrain/errors.hpp"

namespace rt::data::thrift {

void CompactReader::fail(const std::string& why) const {
  throw UsageError(what_ + ": " + why + "; the file is damaged or not parquet");
}

uint8_t CompactReader::byte() {
  if (p_ >= end_) fail("its metadata ends in the middle of a value");
  return *p_++;
}

uint64_t CompactReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const uint8_t b = byte();
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  fail("a varint is longer than 10 bytes");
}

static int64_t unzigzag(uint64_t v) { return int64_t(v >> 1) ^ -int64_t(v & 1); }

bool CompactReader::next_field(int16_t& id, uint8_t& type) {
  const uint8_t h = byte();
  type = h & 0x0f;
  if (type == kStop) return false;
  const uint8_t delta = h >> 4;
  if (delta) {
    id = int16_t(last_id_ + delta);
  } else {
    const int64_t v = unzigzag(varint());
    if (v < INT16_MIN || v > INT16_MAX) fail("a field id is out of range");
    id = int16_t(v);
  }
  if (type > kStruct) fail("a field has the unknown type " + std::to_string(type));
  last_id_ = id;
  return true;
}

void CompactReader::begin_struct() {
  if (depth_ >= kMaxDepth) fail("structures are nested deeper than 32");
  id_stack_[depth_++] = last_id_;
  last_id_ = 0;
}

void CompactReader::end_struct() { last_id_ = id_stack_[--depth_]; }

int64_t CompactReader::read_int(uint8_t type) {
  switch (type) {
    case kByte: return int8_t(byte());
    case kI16:
    case kI32:
    case kI64: return unzigzag(varint());
    default: fail("an integer field has type " + std::to_string(type));
  }
}

bool CompactReader::read_bool(uint8_t type) {
  if (type == kTrue) return true;
  if (type == kFalse) return false;
  fail("a boolean field has type " + std::to_string(type));
}

std::string CompactReader::read_binary(size_t max_bytes) {
  const uint64_t n = varint();
  if (n > max_bytes || n > uint64_t(end_ - p_)) fail("a string is longer than the metadata or " + std::to_string(max_bytes) + " bytes");
  std::string s(reinterpret_cast<const char*>(p_), size_t(n));
  p_ += n;
  return s;
}

void CompactReader::read_list_header(uint8_t& elem_type, uint32_t& count) {
  const uint8_t h = byte();
  elem_type = h & 0x0f;
  uint64_t n = h >> 4;
  if (n == 15) n = varint();
  // Every element takes at least one byte: a count beyond the bytes left is a lie.
  if (n > uint64_t(end_ - p_)) fail("a list claims " + std::to_string(n) + " elements, more than the bytes left");
  count = uint32_t(n);
}

// In a list or a map a boolean is a byte of its own, not part of a field header.
uint32_t CompactReader::read_struct_list(const char* what_list) {
  uint8_t et;
  uint32_t n;
  read_list_header(et, n);
  if (et != kStruct) fail(std::string(what_list) + " is not a list of structs");
  return n;
}

void CompactReader::skip_element(uint8_t type) {
  if (type == kTrue || type == kFalse) byte();
  else skip(type);
}

void CompactReader::skip(uint8_t type) {
  switch (type) {
    case kTrue:
    case kFalse: return;  // the value is in the field header
    case kByte: byte(); return;
    case kI16:
    case kI32:
    case kI64: varint(); return;
    case kDouble:
      if (end_ - p_ < 8) fail("a double is cut off");
      p_ += 8;
      return;
    case kBinary: read_binary(size_t(end_ - p_)); return;
    case kList:
    case kSet: {
      uint8_t et;
      uint32_t n;
      read_list_header(et, n);
      if (depth_ >= kMaxDepth) fail("lists are nested deeper than 32");
      ++depth_;
      for (uint32_t i = 0; i < n; ++i) skip_element(et);
      --depth_;
      return;
    }
    case kMap: {
      const uint64_t n = varint();
      if (n == 0) return;
      if (n > uint64_t(end_ - p_)) fail("a map claims more entries than the bytes left");
      const uint8_t kv = byte();
      if (depth_ >= kMaxDepth) fail("maps are nested deeper than 32");
      ++depth_;
      for (uint64_t i = 0; i < n; ++i) skip_element(kv >> 4), skip_element(kv & 0x0f);
      --depth_;
      return;
    }
    case kStruct: {
      begin_struct();
      int16_t id;
      uint8_t t;
      while (next_field(id, t)) skip(t);
      end_struct();
      return;
    }
    default: fail("a value has the unknown type " + std::to_string(type));
  }
}

}  // namespace rt::data::thrift
