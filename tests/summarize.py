"""Prints the one closing line CI reads, 'N passed, N failed', from meson's
test log, pytest's JUnit XML and any further LABEL=FILE results: JUnit XML
when FILE ends in .xml (another pass of the mounted tests), else meson's
test log form (JSON lines: the fuzz run, the release build); exits non-zero
when anything failed or nothing ran (a missing file counts as a failure)."""
import json
import sys
import xml.etree.ElementTree as ET


def meson_counts(path):
    passed = failed = 0
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("result") in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                else:
                    failed += 1
    except FileNotFoundError:
        failed += 1
    return passed, failed


def pytest_counts(path):
    try:
        root = ET.parse(path).getroot()
    except (FileNotFoundError, ET.ParseError):
        return 0, 1
    passed = failed = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            # a skipped test proves nothing: count it against us
            failed += 1
        else:
            passed += 1
    return passed, failed


def main():
    p1, f1 = meson_counts(sys.argv[1])
    p2, f2 = pytest_counts(sys.argv[2])
    parts = [f"unit: {p1} passed, {f1} failed", f"mounted: {p2} passed, {f2} failed"]
    passed, failed = p1 + p2, f1 + f2
    # further results, LABEL=FILE: JUnit XML, or meson's test log form
    for arg in sys.argv[3:]:
        label, path = arg.split("=", 1)
        p, f = pytest_counts(path) if path.endswith(".xml") else meson_counts(path)
        parts.append(f"{label}: {p} passed, {f} failed")
        passed, failed = passed + p, failed + f
    print("; ".join(parts))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


main()
