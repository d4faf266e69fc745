// Runs the embedded nanochat_helper.py with python3: the PyTorch and pickle side of import
// and export (interop/nanochat.hpp).
#pragma once
#include <string>
#include <vector>

namespace rt::interop {

// python3 (RINGTRAIN_PYTHON if set; else python3 on PATH, then /usr/bin/python3 where the first
// has no PyTorch, saying which one was used) on the helper with `args`; the script is written into
// `scratch` and removed after. The helper's stdout is the user's; its one-line complaint
// on stderr becomes the rt::UsageError. `what` says what needs python3 ("reading a .pt file").
void run_helper(const std::vector<std::string>& args, const std::string& scratch, const std::string& what = "reading a .pt file");

}  // namespace rt::interop
