"""Prints "N passed, N failed, N skipped" from meson's testlog.json files (one JSON object
per test), summed over every file given (the plain build's and the sanitizer build's).

    test_summary.py EXIT_CODE TESTLOG [TESTLOG...]

EXIT_CODE is the exit code of the build and `meson test` runs that wrote the logs: when it
is not 0 but the logs show no failed test (the build failed, meson stopped early, a log
is missing), the run still counts one failure, so the line can never look green for a run
that failed. Exits 1 if anything failed or nothing passed.
"""
import json
import sys

passed = failed = skipped = 0
run_exit = int(sys.argv[1])
for path in sys.argv[2:]:
    try:
        with open(path) as f:
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
        print(f"test summary: cannot read {path}: {e}", file=sys.stderr)
        failed += 1
if run_exit != 0 and failed == 0:
    print(f"test summary: the build or meson exited {run_exit} although no test in the logs failed; "
          "counting the run as failed", file=sys.stderr)
    failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
