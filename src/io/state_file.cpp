// The state file of a checkpoint (see state_file.hpp).
#include "ringtrain/io/state_file.hpp"

#include <cstring>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"

namespace rt::io {
namespace {
constexpr const char* kScalarsKey = "scalars";
constexpr const char* kFormatKey = "format";
constexpr const char* kFormat = "ringtrain-state-1";
}  // namespace

void StateWriter::floats(const std::string& name, const float* data, std::vector<int64_t> shape) {
  tensors_.push_back({name, DType::F32, std::move(shape), data});
}

void StateWriter::floats(const std::string& name, const std::vector<float>& v) {
  floats(name, v.data(), {int64_t(v.size())});
}

void StateWriter::floats(const std::string& name, std::vector<float>&& v) {
  owned_floats_.push_back(std::move(v));
  floats(name, owned_floats_.back());
}

void StateWriter::int64s(const std::string& name, std::vector<int64_t> values) {
  owned_.push_back(std::move(values));
  tensors_.push_back({name, DType::I64, {int64_t(owned_.back().size())}, owned_.back().data()});
}

std::map<std::string, std::string> StateWriter::metadata() const {
  return {{kFormatKey, kFormat}, {kScalarsKey, scalars_.dump()}};
}

std::string StateWriter::bytes() const {
  std::string out;
  write_safetensors([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }, tensors_, metadata());
  return out;
}

void StateWriter::write(const std::string& path) const { write_safetensors(path, tensors_, metadata()); }

void StateWriter::write(const std::function<void(const void* data, size_t size)>& sink) const {
  write_safetensors(sink, tensors_, metadata());
}

StateReader StateReader::parse(const std::string& bytes, const std::string& what) {
  StateReader r;
  r.what_ = what;
  r.file_ = SafetensorsFile::parse(bytes, what);
  const auto& meta = r.file_.metadata();
  const auto format = meta.find(kFormatKey);
  if (format == meta.end() || format->second != kFormat)
    throw UsageError(what + " is not a ringtrain state file (no '" + std::string(kFormat) +
                     "' in its metadata); use a checkpoint written by this version");
  const auto scalars = meta.find(kScalarsKey);
  r.scalars_ = nlohmann::json::parse(scalars == meta.end() ? std::string("{}") : scalars->second, nullptr, false);
  if (!r.scalars_.is_object()) throw UsageError(what + " is corrupt: its scalars are not a JSON object");
  return r;
}

StateReader StateReader::load(const std::string& path) { return parse(read_file(path), path); }

void StateReader::floats(const std::string& name, float* out, size_t count) const {
  if (!file_.has(name))
    throw UsageError(what_ + " has no " + name + "; it was saved by a run of another model or mode");
  const Tensor& t = file_.get(name);
  if (t.dtype != DType::F32 || size_t(t.numel()) != count)
    throw UsageError(what_ + ": " + name + " holds " + std::to_string(t.numel()) + " " + dtype_name(t.dtype) +
                     " values, this run needs " + std::to_string(count) +
                     " F32; resume with the model config the checkpoint was saved with");
  if (count) std::memcpy(out, t.bytes.data(), count * sizeof(float));
}

void StateReader::floats(const std::string& name, std::vector<float>& out) const {
  floats(name, out.data(), out.size());
}

std::vector<int64_t> StateReader::int64s(const std::string& name) const {
  if (!file_.has(name)) throw UsageError(what_ + " has no " + name + "; the checkpoint is incomplete");
  const Tensor& t = file_.get(name);
  const int64_t* p = t.i64();
  return std::vector<int64_t>(p, p + t.numel());
}

const nlohmann::json& StateReader::scalar(const std::string& component, const std::string& key) const {
  const auto c = scalars_.find(component);
  if (c == scalars_.end() || !c->is_object() || !c->contains(key) || !(*c)[key].is_number())
    throw UsageError(what_ + " lacks the number " + component + "." + key + "; the checkpoint is incomplete");
  return (*c)[key];
}

int64_t StateReader::integer(const std::string& component, const std::string& key) const {
  const auto& v = scalar(component, key);
  if (!v.is_number_integer()) throw UsageError(what_ + ": " + component + "." + key + " is not an integer");
  return v.get<int64_t>();
}

uint64_t StateReader::count(const std::string& component, const std::string& key) const {
  const auto& v = scalar(component, key);
  if (!v.is_number_unsigned()) throw UsageError(what_ + ": " + component + "." + key + " is not a count");
  return v.get<uint64_t>();
}

double StateReader::number(const std::string& component, const std::string& key) const {
  return scalar(component, key).get<double>();
}

bool StateReader::has_scalar(const std::string& component, const std::string& key) const {
  const auto c = scalars_.find(component);
  return c != scalars_.end() && c->is_object() && c->contains(key);
}

std::string StateReader::text(const std::string& component, const std::string& key) const {
  if (!has_scalar(component, key) || !scalars_[component][key].is_string())
    throw UsageError(what_ + " lacks the text " + component + "." + key + "; the checkpoint is incomplete");
  return scalars_[component][key].get<std::string>();
}

}  // namespace rt::io
