#!/usr/bin/env python3
"""Counts and compares the outcomes of one driver test suite run directly
against PostgreSQL and through Ordo (scripts/compat-suites.sh).

A run's outcomes are a JUnit XML report (pytest --junitxml, the JUnit
console launcher's reports) or a TSV file of "name<TAB>pass|fail|skip<TAB>
message" lines (the node-postgres runner writes one).

  compat-suites-report.py count RUN          prints "PASS FAIL SKIP"
  compat-suites-report.py diff DIRECT ORDO   lists every test that passes
      directly and does not pass through Ordo (and the reverse), one per
      line with the first line of its failure message through Ordo

Only the standard library is used.
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def load(path):
    """Returns {test name: (outcome, message)} for one run."""
    out = {}
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.xml")))
    else:
        files = [path]
    for f in files:
        if f.endswith(".tsv"):
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) >= 2:
                        out[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
            continue
        try:
            root = ET.parse(f).getroot()
        except (ET.ParseError, FileNotFoundError):
            continue
        for tc in root.iter("testcase"):
            name = tc.get("classname", "") + "::" + tc.get("name", "")
            outcome, msg = "pass", ""
            for child in tc:
                if child.tag in ("failure", "error"):
                    outcome = "fail"
                    msg = child.get("message") or (child.text or "")
                    break
                if child.tag == "skipped":
                    outcome = "skip"
                    msg = child.get("message") or ""
            # A pytest test can have both a passing call and an error in
            # its teardown: the second testcase element of the same name
            # must not hide the first's failure.
            prev = out.get(name)
            if prev is not None and prev[0] == "fail":
                continue
            out[name] = (outcome, msg)
    return out


def first_line(msg):
    for line in (msg or "").splitlines():
        line = line.strip()
        if line:
            return line[:300]
    return ""


def main(argv):
    if len(argv) == 3 and argv[1] == "count":
        res = load(argv[2])
        counts = {"pass": 0, "fail": 0, "skip": 0}
        for outcome, _ in res.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print(counts["pass"], counts["fail"], counts["skip"])
        return 0
    if len(argv) == 4 and argv[1] == "diff":
        direct, ordo = load(argv[2]), load(argv[3])
        for name in sorted(direct):
            d = direct[name][0]
            o, msg = ordo.get(name, ("missing", ""))
            if d == "pass" and o != "pass":
                print(f"ORDO-{o.upper()}\t{name}\t{first_line(msg)}")
        for name in sorted(ordo):
            o = ordo[name][0]
            d, msg = direct.get(name, ("missing", ""))
            if o == "pass" and d != "pass":
                print(f"DIRECT-{d.upper()}\t{name}\t{first_line(msg)}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
