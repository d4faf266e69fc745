#include "dataset.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"

namespace fs = std::filesystem;

namespace rt::train {

namespace {

// meta.json's "long_docs" (data prepare --long-docs). Data prepared before it existed, or
// without a meta.json, was meant for pieces.
bool long_docs_of(const std::string& dir) {
  const auto path = fs::path(dir) / "meta.json";
  if (!fs::exists(path)) return false;
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(io::read_file(path.string()));
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--data " + dir + ": meta.json does not parse (" + std::string(e.what()) + "); prepare it again");
  }
  if (!meta.is_object() || !meta.contains("long_docs")) return false;
  const auto& v = meta["long_docs"];
  if (v == "crop") return true;
  if (v == "pieces") return false;
  throw UsageError("--data " + dir + ": meta.json's long_docs is " + v.dump() + ", not \"pieces\" or \"crop\"; prepare it again");
}

}  // namespace

DataSet load_dataset(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw UsageError("--data " + dir + " is not a directory; create it with 'ringtrain data prepare --input TEXT... --out " +
                     dir + "'");
  for (const char* f : {"train.bin", "val.bin", "token_bytes.bin"})
    if (!fs::exists(fs::path(dir) / f))
      throw UsageError("--data " + dir + " has no " + f + "; it is not (or not completely) prepared: run 'ringtrain data prepare --input TEXT... --out " +
                       dir + "'");
  DataSet d;
  d.train = std::make_shared<const data::Shard>(data::read_shard((fs::path(dir) / "train.bin").string()));
  d.val = std::make_shared<const data::Shard>(data::read_shard((fs::path(dir) / "val.bin").string()));
  d.token_bytes = data::read_token_bytes((fs::path(dir) / "token_bytes.bin").string());
  d.vocab = d.train->vocab_size;
  if (d.val->vocab_size != d.vocab || d.token_bytes.size() != d.vocab)
    throw UsageError("--data " + dir + ": train.bin, val.bin and token_bytes.bin disagree on the vocabulary; prepare it again");
  if (d.train->num_docs() == 0) throw UsageError("--data " + dir + ": train.bin has no documents");
  if (d.val->num_docs() == 0) throw UsageError("--data " + dir + ": val.bin has no documents; prepare with a larger --val-fraction");
  d.crop_long_docs = long_docs_of(dir);
  return d;
}

}  // namespace rt::train
