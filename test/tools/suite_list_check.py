#!/usr/bin/python3
"""Fails when a Boost.Test suite in test/ is not run by meson: every top-level
BOOST_AUTO_TEST_SUITE(name) of a test folder's .cpp files must be one of the names its
meson.build passes as --run_test= (the `foreach suite : [...]` lists and single tests), and
every name meson passes must be a suite (Boost would otherwise run nothing).

    /usr/bin/python3 test/tools/suite_list_check.py SOURCE_ROOT

A folder whose meson.build names no --run_test runs its binary whole and is not checked."""
import os
import re
import sys


def suites_in(path):
    """Top-level suite names of one file (nested suites run with their parent)."""
    names, depth = [], 0
    for m in re.finditer(r"BOOST_AUTO_TEST_SUITE(_END)?\s*\(\s*(\w*)", open(path, encoding="utf-8").read()):
        if m.group(1):
            depth -= 1
        else:
            if depth == 0:
                names.append(m.group(2))
            depth += 1
    return names


def run_names(meson_text):
    names = set(re.findall(r"--run_test=(\w+)", meson_text))
    for block in re.findall(r"foreach\s+suite\s*:\s*\[(.*?)\]", meson_text, re.S):
        names |= set(re.findall(r"'(\w+)'", block))
    return names


def main(root):
    problems, checked = [], 0
    test_root = os.path.join(root, "test")
    for folder in sorted(os.listdir(test_root)):
        d = os.path.join(test_root, folder)
        meson = os.path.join(d, "meson.build")
        if not os.path.isfile(meson):
            continue
        text = open(meson, encoding="utf-8").read()
        run = run_names(text)
        if not run:
            continue
        found = {}
        for name in sorted(os.listdir(d)):
            if name.endswith(".cpp"):
                for s in suites_in(os.path.join(d, name)):
                    found.setdefault(s, f"test/{folder}/{name}")
        for s, where in sorted(found.items()):
            if s not in run:
                problems.append(f"{where} has the suite '{s}' that test/{folder}/meson.build never runs; add it to the suite list")
        for s in sorted(run - set(found)):
            problems.append(f"test/{folder}/meson.build runs --run_test={s}, which no .cpp in test/{folder} defines")
        checked += len(found)
    for p in problems:
        print("suite_list_check: FAIL: " + p)
    if problems:
        sys.exit(1)
    print(f"suite_list_check: OK: {checked} suites, each run by meson")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
