#include "unit_file.hpp"

#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pkgtest {

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace((unsigned char)s[a])) ++a;
  while (b > a && std::isspace((unsigned char)s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

Vars unit_section(const std::string& unit_path, const std::string& section) {
  std::istringstream in(read_all(unit_path));
  Vars out;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      inside = line == "[" + section + "]";
      continue;
    }
    const size_t eq = line.find('=');
    if (inside && eq != std::string::npos) out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string expand_specifiers(const std::string& value, const std::string& instance, const std::string& state_root) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '%' || i + 1 == value.size()) {
      out += value[i];
      continue;
    }
    const char c = value[++i];
    if (c == 'i') out += instance;
    else if (c == 'S') out += state_root;
    else if (c == '%') out += '%';
    else throw std::runtime_error(std::string("unit specifier %") + c + " is not supported by this test");
  }
  return out;
}

Vars environment_file(const std::string& path) {
  const std::string text = read_all(path);
  Vars out;
  size_t i = 0;
  auto at_end = [&] { return i >= text.size(); };
  while (!at_end()) {
    // Start of a line: skip blanks, then comments and blank lines.
    while (!at_end() && (text[i] == ' ' || text[i] == '\t')) ++i;
    if (at_end()) break;
    if (text[i] == '\n' || text[i] == '#' || text[i] == ';') {
      while (!at_end() && text[i] != '\n') ++i;
      ++i;
      continue;
    }
    std::string key;
    while (!at_end() && text[i] != '=' && text[i] != '\n') key += text[i++];
    if (at_end() || text[i] == '\n') continue;  // no '=': ignored, as systemd does
    ++i;
    while (!at_end() && (text[i] == ' ' || text[i] == '\t')) ++i;
    std::string value;
    if (!at_end() && (text[i] == '"' || text[i] == '\'')) {
      const char quote = text[i++];
      while (!at_end() && text[i] != quote) {
        if (quote == '"' && text[i] == '\\' && i + 1 < text.size()) {
          ++i;
          if (text[i] != '\n') value += text[i];  // backslash-newline continues the value
          ++i;
          continue;
        }
        value += text[i++];
      }
      if (at_end()) throw std::runtime_error(path + ": unterminated quote in " + key);
      ++i;
      while (!at_end() && text[i] != '\n') ++i;
    } else {
      while (!at_end() && text[i] != '\n') {
        if (text[i] == '\\' && i + 1 < text.size()) {
          ++i;
          if (text[i] != '\n') value += text[i];
          ++i;
          continue;
        }
        value += text[i++];
      }
      value = trim(value);
    }
    out[trim(key)] = value;
  }
  return out;
}

std::vector<std::string> exec_argv(const std::string& exec_start, const Vars& env) {
  auto lookup = [&](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::vector<std::string> argv;
  for (const std::string& word : split_words(exec_start)) {
    if (word.size() > 1 && word[0] == '$' && word[1] != '{') {
      for (const auto& w : split_words(lookup(word.substr(1)))) argv.push_back(w);
      continue;
    }
    std::string out;
    for (size_t i = 0; i < word.size(); ++i) {
      const size_t close = word.find('}', i);
      if (word.compare(i, 2, "${") == 0 && close != std::string::npos) {
        out += lookup(word.substr(i + 2, close - i - 2));
        i = close;
      } else {
        out += word[i];
      }
    }
    argv.push_back(out);
  }
  return argv;
}

}  // namespace pkgtest
