#!/usr/bin/python3
"""Writes the ringtrain(1) man page from the binary's own help texts, so the page and
`--help` cannot disagree. Run at build time by meson:

  python3 tools/dist/manpage.py build/ringtrain build/tools/dist/ringtrain.1
"""
import os
import re
import subprocess
import sys


def run(binary, *args):
    res = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        sys.exit(f"manpage: '{binary} {' '.join(args)}' exited {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def roff_text(text):
    """Text as roff, line by line: backslashes escaped, no line read as a request."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e").replace("-", "\\-")
        out.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(out)


def commands(top_help):
    """(name, summary) of each subcommand listed by `ringtrain --help`, e.g. ("bench model", ...)."""
    found = [(m[1], m[2]) for m in re.finditer(r"^  ([a-z]+(?: [a-z]+)?) {2,}(\S.*)$", top_help, re.M)]
    if not found:
        sys.exit("manpage: `ringtrain --help` lists no commands; the page would be empty")
    return found


def command_help(binary, name):
    text = run(binary, *name.split(), "--help")
    # A command with subcommands (data) answers with a usage line naming the full one.
    m = re.match(r"usage: ringtrain ((?:[a-z]+ )+)", text)
    if "Usage:" not in text and m and m[1].split() != name.split():
        text = run(binary, *m[1].split(), "--help")
    return text


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: manpage.py RINGTRAIN_BINARY OUT.1")
    binary, out_path = sys.argv[1], sys.argv[2]
    version = run(binary, "--version").split()[1]
    top = run(binary, "--help")
    page = [
        f'.TH RINGTRAIN 1 "" "ringtrain {version}" "User Commands"',
        ".SH NAME",
        "ringtrain \\- " + roff_text(top.split("\n", 1)[0].split(": ", 1)[-1]),
        ".SH SYNOPSIS",
        ".B ringtrain",
        ".I command",
        "[\\fIoptions\\fR]",
        ".br",
        ".B ringtrain \\-\\-help | \\-\\-version",
        ".SH DESCRIPTION",
        ".nf",
        roff_text(top),
        ".fi",
        ".SH COMMANDS",
    ]
    for name, summary in commands(top):
        page += [f".SS ringtrain {name}", roff_text(summary), ".PP", ".nf",
                 roff_text(command_help(binary, name)), ".fi"]
    page += [
        ".SH EXIT STATUS",
        "0: done, or stopped on request; 1: runtime failure (a peer lost, an I/O error); "
        "2: bad usage or bad input. The message says which, in one line, with the fix.",
        ".SH FILES",
        ".TP",
        ".I /etc/ringtrain/<job>.conf",
        "RINGTRAIN_ARGS of the job that \\fBsystemctl start ringtrain@<job>\\fR runs "
        "(see /etc/ringtrain/example.conf).",
        ".TP",
        ".I /var/lib/ringtrain/<job>",
        "the job's working directory: its data, checkpoints and metrics.",
        ".SH SEE ALSO",
        ".BR systemctl (1),",
        ".BR journalctl (1)",
        "",
    ]
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(page))
    os.replace(tmp, out_path)


if __name__ == "__main__":
    main()
