"""Prints "N passed, N failed, N skipped" from meson's testlog.json (one JSON object per test).

    test_summary.py TESTLOG [EXIT_CODE]

EXIT_CODE is the exit code of the build and `meson test` run that wrote the log: when it
is not 0 but the log shows no failed test (the build failed, meson stopped early, the log
is missing), the run still counts one failure, so the line can never look green for a run
that failed. Exits 1 if anything failed or nothing passed.
"""
import json
import sys

passed = failed = skipped = 0
try:
    with open(sys.argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line)["result"]
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
except (OSError, ValueError, KeyError) as e:
    print(f"test summary: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
    failed += 1
run_exit = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if run_exit != 0 and failed == 0:
    print(f"test summary: the build or meson exited {run_exit} although no test in the log failed; "
          "counting the run as failed", file=sys.stderr)
    failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
