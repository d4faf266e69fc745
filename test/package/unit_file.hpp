// Starting a systemd service the way systemd would, without systemd (CI has no systemd as
// PID 1): read a unit's [Service] settings, read its EnvironmentFile with systemd's syntax,
// and expand ExecStart into the argument list systemd would execute.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace pkgtest {

using Vars = std::map<std::string, std::string>;

// Key=Value settings of one section ("Service") of a unit file; a repeated key keeps the last.
Vars unit_section(const std::string& unit_path, const std::string& section);
// Replaces %i (instance), %S (state directory root) and %% in a unit setting.
std::string expand_specifiers(const std::string& value, const std::string& instance, const std::string& state_root);
// The variables of an EnvironmentFile: '#' and ';' comment lines, KEY=VALUE, values in
// double quotes (with backslash escapes) or single quotes, backslash-newline continuing a line.
Vars environment_file(const std::string& path);
// ExecStart's words after systemd's substitution: a word "$NAME" becomes the variable's
// value split at white space, "${NAME}" its value as (part of) one word.
std::vector<std::string> exec_argv(const std::string& exec_start, const Vars& env);

}  // namespace pkgtest
