"""The check-and-report helpers the Python tests share: each check prints "ok" or "FAIL" and
its description; finish() exits non-zero when any failed."""
import sys

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def finish():
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
