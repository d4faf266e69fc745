// What `ringtrain --version` prints: the project version and the git revision it was built
// from, e.g. "0.1.0 (git 9c1c31bc968c)", so a host's binary can be matched to its source.
#pragma once

namespace rt::cli {

const char* version();       // meson's project version, e.g. "0.1.0"
const char* git_revision();  // `git describe --always --dirty` at build time, or "unknown"

}  // namespace rt::cli
