"""Prints "N passed, N failed" from meson's testlog.json (one JSON object per test)."""
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
except OSError as e:
    print(f"test summary: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
    failed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed or passed == 0 else 0)
