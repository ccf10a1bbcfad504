#!/usr/bin/python3
"""test_schema_separator: a one-value categorical column whose every value holds a likely
multi-hot separator ('|', ';', ',') gets one WARN line from the reader naming the file, the
column, the separator and a value (issue 36: a multi-hot column without its "separator"
trained silently on whole strings), judged on the first 1000 data lines (or all of a shorter
file), through ps-convert (the reader ps-worker uses): for '|'
in a tsv, for ',' inside csv quotes; no warning once the schema gives the separator, for
strings that only sometimes hold one, for a file of fewer than 20 values, nor for Criteo's
built-in layout."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker"))
import harness as h  # noqa: E402  (BIN and the ok/FAIL tally of the integration tests)

results = h.Results()


def convert(d, name, columns, lines, fmt="tsv"):
    """ps-convert of lines under a schema of columns; returns (rc, the WARN lines about a separator)."""
    schema, data, out = (os.path.join(d, name + ext) for ext in (".json", "." + fmt, ".bin"))
    with open(schema, "w") as f:
        json.dump({"format": fmt, "columns": columns}, f)
    with open(data, "w") as f:
        f.write("".join(ln + "\n" for ln in lines))
    r = subprocess.run([os.path.join(h.BIN, "ps-convert"), "--schema", schema, "--in", data, "--out", out],
                       capture_output=True, text=True, timeout=60)
    warn = [ln for ln in r.stderr.split("\n") if "WARN" in ln and "separator" in ln]
    return r.returncode, warn, data, out


def main():
    lab = {"name": "click", "type": "label"}
    site = {"name": "site", "type": "categorical"}
    tags = {"name": "tags", "type": "categorical"}
    rows = [f"{i % 2}\tsite_{i % 7}\t{'|'.join(f't{(i + k) % 9}' for k in range(2 + i % 3))}" for i in range(200)]
    with tempfile.TemporaryDirectory() as d:
        rc, warn, data, _ = convert(d, "nosep", [lab, site, tags], rows)
        results.check("ps-convert ran", rc == 0)
        results.check("tags without its separator: one WARN naming the file, the column, '|' and a value",
                      len(warn) == 1 and data in warn[0] and "column 'tags' (3)" in warn[0] and
                      "'|'" in warn[0] and "t0|t1" in warn[0] and '"separator": "|"' in warn[0], warn)
        big = [f"{i % 2}\tsite_{i % 7}\tx{i}|y" for i in range(1500)]
        rc, warn, _, _ = convert(d, "big", [lab, site, tags], big)
        results.check("a longer file: judged on its first 1000 lines, once",
                      rc == 0 and len(warn) == 1 and "all 1000 values of the first 1000 lines" in warn[0], warn)
        rc, warn2, _, _ = convert(d, "sep", [lab, site, dict(tags, separator="|")], rows)
        results.check("with \"separator\": \"|\": no warning", rc == 0 and warn2 == [], warn2)
        some = [f"0\tsite_{i}\t{'a|b' if i % 2 else 'plain'}" for i in range(200)]
        rc, warn, _, _ = convert(d, "some", [lab, site, tags], some)
        results.check("values that only sometimes hold '|': no warning", rc == 0 and warn == [], warn)
        rc, warn, _, _ = convert(d, "few", [lab, site, tags], rows[:10])
        results.check("fewer than 20 values: no warning", rc == 0 and warn == [], warn)
        csv_rows = [f'{i % 2},site_{i % 7},"u{i % 5},v{i % 3}"' for i in range(100)]
        rc, warn, _, _ = convert(d, "csv", [lab, site, tags], csv_rows, fmt="csv")
        results.check("csv: ',' inside quotes in every value: one WARN naming ','",
                      rc == 0 and len(warn) == 1 and "column 'tags' (3)" in warn[0] and "','" in warn[0], warn)
        crit = os.path.join(d, "criteo.tsv")
        with open(crit, "w") as f:
            for i in range(100):
                f.write("\t".join(["1"] + ["1"] * 13 + ["%08x" % (i * 26 + j) for j in range(26)]) + "\n")
        r = subprocess.run([os.path.join(h.BIN, "ps-convert"), "--in", crit, "--out", crit + ".bin"],
                           capture_output=True, text=True, timeout=60)
        results.check("Criteo's built-in layout: no warning", r.returncode == 0 and "WARN" not in r.stderr,
                      r.stderr[-500:])
    results.finish()


if __name__ == "__main__":
    main()
