// A minimal f32-only safetensors reader/writer for exchanging tensors with the PyTorch
// reference in these tests (u64 little-endian header length, JSON header, raw data).
// Test-only; the project's file formats live in src/io.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace optim_test {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using TensorMap = std::map<std::string, Tensor>;

inline void write_safetensors(const std::string& path, const TensorMap& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), std::streamsize(h.size()));
  for (const auto& [name, t] : tensors)
    f.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size() * 4));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline TensorMap read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<char> blob((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (blob.size() < 8) throw std::runtime_error(path + " is too short");
  uint64_t n;
  std::memcpy(&n, blob.data(), 8);
  if (8 + n > blob.size()) throw std::runtime_error(path + " has a truncated header");
  const auto header = nlohmann::json::parse(std::string(blob.data() + 8, n));
  const char* data = blob.data() + 8 + n;
  const uint64_t data_len = blob.size() - 8 - n;
  TensorMap out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    if (info.at("dtype") != "F32") throw std::runtime_error(name + " is not F32 in " + path);
    Tensor t;
    t.shape = info.at("shape").get<std::vector<int64_t>>();
    const uint64_t a = info.at("data_offsets")[0], b = info.at("data_offsets")[1];
    if (b > data_len || a > b || (b - a) % 4) throw std::runtime_error(name + " has bad offsets");
    t.data.resize((b - a) / 4);
    std::memcpy(t.data.data(), data + a, b - a);
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace optim_test
