// The safetensors format (what the PyTorch side reads and writes):
//   u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}, then the raw little-endian data.
// Supported dtypes: F32, F64, I32, I64.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace rt::io {

enum class DType { F32, F64, I32, I64, BF16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

// A tensor to write; the data is not copied and must outlive the write call.
struct TensorRef {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes atomically (temporary file + fsync + rename). Tensors are stored in the given order.
void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The same bytes, handed to `sink` piece by piece (e.g. into memory).
void write_safetensors(const std::function<void(const void* data, size_t size)>& sink,
                       const std::vector<TensorRef>& tensors, const std::map<std::string, std::string>& metadata = {});

// "(4, 512)": a shape as error messages show it.
std::string shape_text(const std::vector<int64_t>& shape);

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
  int64_t numel() const;
  // Typed access; throws rt::UsageError if the dtype differs.
  const float* f32() const;
  const double* f64() const;
  const int32_t* i32() const;
  const int64_t* i64() const;
  // F32 or BF16 (widened exactly) into out[0..numel); throws rt::UsageError for other dtypes.
  void to_f32(float* out) const;
};

class SafetensorsFile {
 public:
  // Reads and checks the whole file; throws rt::UsageError if it is corrupt.
  static SafetensorsFile load(const std::string& path);
  // The same for bytes in memory; `what` names them in errors.
  static SafetensorsFile parse(const std::string& raw, const std::string& what);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const Tensor& get(const std::string& name) const;  // throws rt::UsageError if missing
  std::vector<std::string> names() const;            // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace rt::io
