#!/usr/bin/env python3
"""bench/e2e/latency_ratios.py: ratios from bench/e2e/latency.sh's latency.json that hold up on
a loaded machine, where the compute of one run may take twice another's.

    bench/e2e/latency_ratios.py OUT_DIR/latency.json

Per build, shape, towers and D > 0, each the median over rounds:
  - round ratio: samples/s at D over samples/s at D = 0 of the same build in the same round
    (the two runs are minutes apart at most);
  - wait ratio: (1 - wait share at D) / (1 - wait share at D = 0) -- the throughput ratio if
    the compute were the same in both runs (a step is its compute plus its wait on servers), so
    what the other processes on the machine do to the compute cancels;
  - wait ms/step at D = 0 and at D;
  - new/old at the same D (when two builds were run), per round.
Prints a markdown table."""
import json
import statistics
import sys

j = json.load(open(sys.argv[1]))
idx = {(r["build"], r["shape"], r["towers"], r["delay_us"], r["round"]): r for r in j["runs"]}
builds = sorted({r["build"] for r in j["runs"]}, key=lambda b: {"old": 0, "new": 1}.get(b, 2))
keys = sorted({(r["shape"], r["towers"]) for r in j["runs"]})
rounds = range(1, j["rounds"] + 1)
med = statistics.median
print("| build | shape | towers | D (us) | round ratio to D=0 (median; each round) | wait ratio "
      "| wait ms/step D=0 -> D | new/old at this D (median; each round) |")
print("|---|---|---|---|---|---|---|---|")
for b in builds:
    for sh, tw in keys:
        for d in j["delays_us"]:
            if d == 0:
                continue
            rr = [idx[(b, sh, tw, d, r)]["samples_per_s"] / idx[(b, sh, tw, 0, r)]["samples_per_s"]
                  for r in rounds]
            s0 = med(idx[(b, sh, tw, 0, r)]["wait_share"] for r in rounds)
            sd = med(idx[(b, sh, tw, d, r)]["wait_share"] for r in rounds)
            w0 = med(idx[(b, sh, tw, 0, r)]["wait_ms_per_step"] for r in rounds)
            wd = med(idx[(b, sh, tw, d, r)]["wait_ms_per_step"] for r in rounds)
            no = ""
            if b == "new" and "old" in builds:
                x = [idx[("new", sh, tw, d, r)]["samples_per_s"] /
                     idx[("old", sh, tw, d, r)]["samples_per_s"] for r in rounds]
                no = f"{med(x):.2f} ({', '.join(f'{v:.2f}' for v in x)})"
            print(f"| {b} | {sh} | {tw} | {d} | {med(rr):.2f} ({', '.join(f'{v:.2f}' for v in rr)}) "
                  f"| {(1 - sd) / (1 - s0):.2f} | {w0:.2f} -> {wd:.2f} | {no} |")
