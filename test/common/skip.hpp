// Skipping a test case whose precondition is missing (not root, a tool not installed), so
// that it is reported as skipped and never counted as passed. A case starts with
//     if (!testskip::require(geteuid() == 0, "network namespaces need root")) return;
// and main() (common/main.cpp, shared by every test executable) exits 77 after the run if
// a case skipped and nothing failed; meson shows exit 77 as SKIP. A failure wins over a skip.
#pragma once
#include <string>

namespace testskip {

// Returns ok. When !ok: logs "skipped: <why>" and records that this run skipped a case.
bool require(bool ok, const std::string& why);
// Whether any case of this run called require() with a missing precondition.
bool skipped();

}  // namespace testskip
