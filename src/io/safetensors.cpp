// safetensors reader and writer (f32, f64, i32, i64).
#include "ringtrain/io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"

namespace rt::io {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: return 2;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F64:
    case DType::I64: return 8;
  }
  return 8;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::BF16: return "BF16";
  }
  return "?";
}

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  // A zero anywhere makes the product zero before the other sizes can overflow it.
  if (std::find(shape.begin(), shape.end(), int64_t(0)) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The most dimensions a tensor may claim (PyTorch allows 64), and the largest size of one:
// an empty tensor may be [N, 0] with N past the file's size, but not past this.
constexpr size_t kMaxDims = 64;
constexpr uint64_t kMaxDim = uint64_t(1) << 48;

// A JSON array of at most max_len non-negative integers, each at most `limit`: a float, a
// negative or a huge number is refused here, before it becomes a size (converting such a
// number to an integer type is undefined behaviour, and sizes from it overflow).
std::vector<uint64_t> sizes_of(const nlohmann::json& v, size_t max_len, uint64_t limit, const std::string& what,
                               const std::function<UsageError(const std::string&)>& corrupt) {
  if (!v.is_array() || v.size() > max_len) throw corrupt(what + " is not a list of at most " + std::to_string(max_len) + " sizes");
  std::vector<uint64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > limit) {
      const std::string shown = e.dump();  // JSON text: one line; cut, for a huge nested value
      throw corrupt(what + " holds " + (shown.size() > 40 ? shown.substr(0, 40) + "..." : shown) +
                    ", not a size within bounds");
    }
    out.push_back(e.get<uint64_t>());
  }
  return out;
}

bool parse_dtype(const std::string& s, DType& t) {
  if (s == "F32") t = DType::F32;
  else if (s == "F64") t = DType::F64;
  else if (s == "I32") t = DType::I32;
  else if (s == "I64") t = DType::I64;
  else if (s == "BF16") t = DType::BF16;
  else return false;
  return true;
}

}  // namespace

void write_safetensors(const std::function<void(const void* data, size_t size)>& sink,
                       const std::vector<TensorRef>& tensors, const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps the tensors in the order given.
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = uint64_t(numel_of(t.shape)) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // align the data to 8 bytes
  const uint64_t hlen = h.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = (hlen >> (8 * i)) & 0xff;
  sink(le, 8);
  sink(h.data(), h.size());
  for (const auto& t : tensors) sink(t.data, size_t(numel_of(t.shape)) * dtype_size(t.dtype));
}

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, [&](const ByteSink& sink) { write_safetensors(sink, tensors, metadata); });
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "(";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + ")";
}

int64_t Tensor::numel() const { return numel_of(shape); }

namespace {
template <typename T>
const T* typed(const Tensor& t, DType want) {
  if (t.dtype != want)
    throw UsageError("tensor " + t.name + " is " + dtype_name(t.dtype) + ", expected " +
                     dtype_name(want) + "; write it with that dtype");
  return reinterpret_cast<const T*>(t.bytes.data());
}
}  // namespace

const float* Tensor::f32() const { return typed<float>(*this, DType::F32); }

void Tensor::to_f32(float* out) const {
  const int64_t n = numel();
  if (dtype == DType::F32) {
    std::memcpy(out, bytes.data(), size_t(n) * sizeof(float));
  } else if (dtype == DType::BF16) {
    // bf16 is the top half of an f32: widening is exact.
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      const uint32_t w = uint32_t(h) << 16;
      std::memcpy(out + i, &w, 4);
    }
  } else {
    throw UsageError("tensor " + name + " is " + dtype_name(dtype) + ", expected F32 or BF16; write it with one of them");
  }
}
const double* Tensor::f64() const { return typed<double>(*this, DType::F64); }
const int32_t* Tensor::i32() const { return typed<int32_t>(*this, DType::I32); }
const int64_t* Tensor::i64() const { return typed<int64_t>(*this, DType::I64); }

SafetensorsFile SafetensorsFile::load(const std::string& path) { return parse(read_file(path), path); }

SafetensorsFile SafetensorsFile::parse(const std::string& raw, const std::string& path) {
  auto corrupt = [&](const std::string& why) {
    return UsageError(path + " is not a valid safetensors file (" + why + "); rewrite it");
  };
  if (raw.size() < 8) throw corrupt("shorter than 8 bytes");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(static_cast<unsigned char>(raw[i])) << (8 * i);
  if (hlen > raw.size() - 8) throw corrupt("header length past the end");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(raw.begin() + 8, raw.begin() + 8 + int64_t(hlen));
  } catch (const std::exception&) {
    throw corrupt("header is not JSON");
  }
  if (!header.is_object()) throw corrupt("header is not an object");
  const size_t data_start = 8 + hlen;
  const size_t data_size = raw.size() - data_start;
  SafetensorsFile f;
  f.path_ = path;
  std::vector<std::pair<uint64_t, std::string>> by_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) throw corrupt("__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m)
        f.metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      continue;
    }
    const auto& e = it.value();
    Tensor t;
    t.name = it.key();
    try {
      if (!parse_dtype(e.at("dtype").get<std::string>(), t.dtype))
        throw corrupt("tensor " + t.name + " has unsupported dtype " + e.at("dtype").get<std::string>());
      // The running product stops past the data's size, and a zero makes it zero: it never
      // overflows, and neither does numel() of a shape that passed.
      const auto dims = sizes_of(e.at("shape"), kMaxDims, kMaxDim, "the shape of tensor " + t.name, corrupt);
      uint64_t numel = 1;
      for (uint64_t d : dims) numel = (d == 0 || numel == 0) ? 0 : (numel > data_size / d ? data_size + 1 : numel * d);
      if (numel > data_size) throw corrupt("tensor " + t.name + " has a shape larger than the file");
      t.shape.assign(dims.begin(), dims.end());
      const auto off = sizes_of(e.at("data_offsets"), 2, data_size, "the data_offsets of tensor " + t.name, corrupt);
      if (off.size() != 2 || off[0] > off[1])
        throw corrupt("tensor " + t.name + " has bad data_offsets");
      if (off[1] - off[0] != numel * dtype_size(t.dtype))
        throw corrupt("tensor " + t.name + " size does not match its shape");
      t.bytes.assign(raw.begin() + int64_t(data_start + off[0]), raw.begin() + int64_t(data_start + off[1]));
      by_offset.push_back({off[0], t.name});
    } catch (const nlohmann::json::exception&) {
      throw corrupt("tensor " + t.name + " entry is malformed");
    }
    f.tensors_[t.name] = std::move(t);
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (auto& [o, n] : by_offset) f.order_.push_back(n);
  return f;
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw UsageError(path_ + " has no tensor named " + name + "; check that it was written by a matching model");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const { return order_; }

}  // namespace rt::io
