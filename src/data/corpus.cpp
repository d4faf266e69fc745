// Input files to documents, including a small JSON reader for JSONL "text" fields.
#include "ringtrain/data/corpus.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ringtrain/data/parquet.hpp"
#include "ringtrain/errors.hpp"

namespace fs = std::filesystem;

namespace rt::data {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_text_name(const std::string& name) {
  for (const char* ext : {".txt", ".rst", ".md", ".jsonl", ".parquet"})
    if (ends_with(name, ext)) return true;  // ".rst.txt" ends with ".txt"
  return false;
}

// Minimal JSON reader: enough to find a top-level "text" string in one object.
struct JsonCursor {
  const std::string& s;
  size_t i = 0;
  [[noreturn]] void fail(const std::string& why) {
    throw std::invalid_argument(why + " at column " + std::to_string(i + 1));
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  void expect(char c) {
    ws();
    if (i >= s.size() || s[i] != c) fail(std::string("expected '") + c + "'");
    ++i;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 63));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 63)), out += char(0x80 | (cp & 63));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 63));
      out += char(0x80 | ((cp >> 6) & 63)), out += char(0x80 | (cp & 63));
    }
  }
  uint32_t hex4() {
    if (i + 4 > s.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      char c = s[i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) fail("unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            size_t save = i;
            i += 2;
            uint32_t lo = hex4();
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else i = save;
          }
          put_utf8(out, cp);  // a lone surrogate becomes its (invalid) 3-byte form
          break;
        }
        default: fail("bad escape");
      }
    }
  }
  void skip_value(int depth = 0) {
    if (depth > 256) fail("nesting too deep");
    ws();
    if (i >= s.size()) fail("missing value");
    char c = s[i];
    if (c == '"') {
      string();
    } else if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++i;
      ws();
      if (i < s.size() && s[i] == close) {
        ++i;
        return;
      }
      while (true) {
        if (close == '}') {
          string();
          expect(':');
        }
        skip_value(depth + 1);
        ws();
        if (i < s.size() && s[i] == ',') {
          ++i;
          continue;
        }
        expect(close);
        return;
      }
    } else {  // number, true, false, null
      size_t start = i;
      while (i < s.size() && (std::isalnum(uint8_t(s[i])) || s[i] == '-' || s[i] == '+' || s[i] == '.')) ++i;
      if (i == start) fail("unexpected character");
    }
  }
};

}  // namespace

std::string jsonl_text_field(const std::string& line) {
  JsonCursor j{line};
  j.expect('{');
  j.ws();
  bool found = false;
  std::string text;
  if (j.i < line.size() && line[j.i] == '}') {
    ++j.i;
  } else {
    while (true) {
      std::string key = j.string();
      j.expect(':');
      j.ws();
      if (key == "text") {
        if (j.i >= line.size() || line[j.i] != '"') j.fail("\"text\" is not a string");
        text = j.string();
        found = true;
      } else {
        j.skip_value();
      }
      j.ws();
      if (j.i < line.size() && line[j.i] == ',') {
        ++j.i;
        continue;
      }
      j.expect('}');
      break;
    }
  }
  j.ws();
  if (j.i != line.size()) j.fail("trailing characters");
  if (!found) throw std::invalid_argument("no \"text\" field");
  return text;
}

std::vector<std::string> list_input_files(const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw UsageError("no --input given; pass text files, directories or .jsonl files");
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    auto st = fs::status(in, ec);
    if (ec || !fs::exists(st))
      throw UsageError("input " + in + " does not exist; pass existing files or directories to --input");
    if (fs::is_directory(st)) {
      size_t before = files.size();
      for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_regular_file() && is_text_name(it->path().filename().string()))
          files.push_back(it->path().string());
      }
      if (ec) throw UsageError("cannot list directory " + in + " (" + ec.message() + "); check its permissions");
      if (files.size() == before)
        throw UsageError("directory " + in + " holds no .txt/.rst/.md/.jsonl/.parquet files; point --input at text");
    } else {
      files.push_back(in);
    }
  }
  std::sort(files.begin() + 0, files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

bool is_parquet_file(const std::string& path) { return ends_with(path, ".parquet"); }

uint64_t stream_corpus(const std::vector<std::string>& files, const std::function<void(size_t, std::string&&)>& on_doc,
                       const std::function<void(size_t, uint64_t)>& on_progress) {
  uint64_t bytes = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const auto& path = files[k];
    std::ifstream f(path, std::ios::binary);
    if (!f) throw UsageError("cannot read " + path + "; check its permissions");
    if (is_parquet_file(path)) {
      // nanochat's shards: one document per row of the "text" column (nulls skipped).
      read_parquet_text(path, "text", [&](std::string_view text) {
        bytes += text.size();
        if (!text.empty()) on_doc(k, std::string(text));
      });
    } else if (ends_with(path, ".jsonl")) {
      std::string line;
      size_t lineno = 0;
      while (std::getline(f, line)) {
        ++lineno;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        std::string text;
        try {
          text = jsonl_text_field(line);
        } catch (const std::invalid_argument& e) {
          throw UsageError(path + ":" + std::to_string(lineno) + ": " + e.what() +
                           "; each line must be a JSON object with a \"text\" string");
        }
        bytes += text.size();
        if (!text.empty()) on_doc(k, std::move(text));
      }
    } else {
      std::ostringstream ss;
      ss << f.rdbuf();
      std::string text = ss.str();
      bytes += text.size();
      if (!text.empty()) on_doc(k, std::move(text));
    }
    if (on_progress && (k % 256 == 255 || k + 1 == files.size())) on_progress(k + 1, bytes);
  }
  return bytes;
}

Corpus read_corpus(const std::vector<std::string>& files,
                   const std::function<void(size_t, uint64_t)>& on_progress) {
  Corpus c;
  c.sources = files;
  c.bytes = stream_corpus(files, [&](size_t, std::string&& text) { c.docs.push_back(std::move(text)); }, on_progress);
  return c;
}

}  // namespace rt::data
