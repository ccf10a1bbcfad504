#!/usr/bin/env python3
"""Instructions per call of named functions in callgrind dumps (bench/compare/instr.sh).

Callgrind counts instructions, which the load of a shared machine does not change, so two
builds can be compared on a busy machine where wall-clock ratios scatter 2-5x. For each
function named on the command line, over every dump given, this sums the calls into it and
the inclusive cost of those calls, and prints calls, instructions per call and per key
(--keys K: keys per request). A function inlined into its caller has no calls: name the
caller.

    callgrind_calls.py [--keys K] [--json] DUMP... -- FUNCTION...
"""
import json
import re
import sys


def parse(path, want):
    """{function: [calls, inclusive Ir]} for calls into functions whose name is in want."""
    names, out = {}, {w: [0, 0] for w in want}
    cfn, pending = None, None
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                kind, ident, name = m.groups()
                if name:
                    names[ident] = name
                if kind == "cfn":
                    cfn = names.get(ident, ident)
                continue
            if line.startswith("calls="):
                pending = int(line[6:].split()[0])
                continue
            if pending is not None and line[:1] and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if cfn in out:
                    out[cfn][0] += pending
                    out[cfn][1] += int(parts[1]) if len(parts) > 1 else 0
                pending = None
    return out


def main(argv):
    keys, as_json = 0, False
    if "--" not in argv:
        sys.exit("usage: callgrind_calls.py [--keys K] [--json] DUMP... -- FUNCTION...")
    cut = argv.index("--")
    opts, funcs = argv[:cut], argv[cut + 1:]
    dumps = []
    i = 0
    while i < len(opts):
        if opts[i] == "--keys":
            keys = int(opts[i + 1])
            i += 2
            continue
        if opts[i] == "--json":
            as_json = True
        else:
            dumps.append(opts[i])
        i += 1
    total = {w: [0, 0] for w in funcs}
    for d in dumps:
        for w, (c, ir) in parse(d, funcs).items():
            total[w][0] += c
            total[w][1] += ir
    rows = []
    for w in funcs:
        c, ir = total[w]
        per = ir / c if c else 0.0
        rows.append({"function": w, "calls": c, "ir_per_call": round(per),
                     "ir_per_key": round(per / keys, 1) if keys else None})
    if as_json:
        print(json.dumps(rows))
        return
    for r in rows:
        pk = f"{r['ir_per_key']:10.1f}" if keys else ""
        print(f"{r['function']:28s} calls {r['calls']:8d}  Ir/call {r['ir_per_call']:10d}  Ir/key {pk}")


if __name__ == "__main__":
    main(sys.argv[1:])
