"""Prints "N passed, N failed" from meson's testlog.json files (one JSON object per test),
summed over every file given (the plain build's and the sanitizer build's)."""
import json
import sys

passed = failed = skipped = 0
for path in sys.argv[1:]:
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
    except OSError as e:
        print(f"test summary: cannot read {path}: {e}", file=sys.stderr)
        failed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed or passed == 0 else 0)
