// The watch page's files, built into the binary (src/watch/page/, embedded at build time).
#pragma once
#include <cstddef>
#include <string_view>

namespace rt::watch {

struct PageAsset {
  const char* path;          // the URL path, e.g. "/app.js"
  const char* content_type;
  const char* data;
  size_t size;
};

// The file served at `path`, or null.
const PageAsset* find_page_asset(std::string_view path);

}  // namespace rt::watch
