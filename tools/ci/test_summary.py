"""Prints "N passed, N failed, N skipped" from meson's testlog.json files (one JSON object
per test), summed over every file given (the plain build's and the sanitizer build's).

    test_summary.py EXIT_CODE TESTLOG [TESTLOG...]

EXIT_CODE is the exit code of the build and `meson test` runs that wrote the logs: when it
is not 0 but the logs show no failed test (the build failed, meson stopped early, a log
is missing), the run still counts one failure, so the line can never look green for a run
that failed. Exits 1 if anything failed or nothing passed.

Each failed test is named again just above the line, with the end of what it printed: CI
keeps only the tail of a run's output, and the failure must be readable there.
"""
import json
import sys

TAIL_LINES = 25
passed = failed = skipped = 0
failures = []  # (log path, test name, result, last lines of its output)
run_exit = int(sys.argv[1])
for path in sys.argv[2:]:
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                test = json.loads(line)
                result = test["result"]
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
                    out = (test.get("stdout") or "") + (test.get("stderr") or "")
                    failures.append((path, test.get("name", "?"), result,
                                     out.splitlines()[-TAIL_LINES:]))
    except (OSError, ValueError, KeyError) as e:
        print(f"test summary: cannot read {path}: {e}", file=sys.stderr)
        failed += 1
if run_exit != 0 and failed == 0:
    print(f"test summary: the build or meson exited {run_exit} although no test in the logs failed; "
          "counting the run as failed", file=sys.stderr)
    failed += 1
for path, name, result, tail in failures:
    print(f"--- FAILED {name} ({result}, {path}); the last {len(tail)} lines it printed:")
    for text in tail:
        print(f"    {text}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
