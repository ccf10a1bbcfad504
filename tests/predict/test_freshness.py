"""bench/serve/freshness.py's figures are honest (issue 34 item 4):

1. Its delay computation on synthetic records with known answers: each step's update -> served
   delay is from the time its last line was written to the first reply of a step >= it whose
   scores changed; per checkpoint, last step -> served, vote, write and publish; a run whose
   server never moves past its first step serves no checkpoint (every one "missed"); a step
   change whose scores did not change is counted and not taken as served; a checkpoint whose
   input position is not step * batch is counted.
2. A short real run (a 12 s stream at 1000 lines/s, a checkpoint every 2 s, ps-serve --follow
   on the checkpoints) with --check: ps-serve's served step advances through at least 2
   checkpoints after it started, every step change brings new scores for the probe lines and
   no score changes within a step, no request fails, and the median update -> served delay is
   within 6 s. It fails when ps-serve stops following (checked by disabling follow_look)."""
import os
import subprocess
import sys

SRC = os.environ.get("EMBER_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("EMBER_BIN", "build/bin")
sys.path.insert(0, os.path.join(SRC, "bench", "serve"))
import freshness as fr  # noqa: E402

fails = []


def ok(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails.append(what)


def near(a, b):
    return len(a) == len(b) and all(abs(x - y) < 1e-9 for x, y in zip(a, b))


# 1. synthetic records: batch 10, line 10*s written at time s
feed = [(10, 1.0), (20, 2.0), (30, 3.0), (40, 4.0)]
ckpts = [{"step": 2, "lines": 20, "t_done": 2.5, "dur": 0.1},
         {"step": 4, "lines": 40, "t_done": 4.5, "dur": 0.2}]
A, B, C = (0.1, 0.2), (0.3, 0.4), (0.5, 0.6)
replies = [(1.0, 0, A), (2.6, 0, A), (2.8, 2, B), (3.0, 2, B), (4.9, 2, B), (5.0, 4, C)]
d = fr.delays(feed, ckpts, replies, 10)
ok(near(d["update_s"], [1.8, 0.8, 2.0, 1.0]), f"update -> served per step {d['update_s']}")
ok(near(d["last_step_s"], [0.8, 1.0]), f"last step -> served {d['last_step_s']}")
ok(near(d["publish_s"], [0.3, 0.5]), f"ckpt done -> served {d['publish_s']}")
ok(near(d["vote_s"], [0.4, 0.3]) and near(d["write_s"], [0.1, 0.2]),
   f"vote {d['vote_s']}, write {d['write_s']}")
ok(d["served_ckpts"] == 2 and d["missed_ckpts"] == 0 and d["unchanged_transitions"] == 0 and
   d["same_step_changes"] == 0 and d["bad_positions"] == 0, "both checkpoints served, no flags")
s = fr.summary([1.0, 3.0, 2.0])
ok(s["median_s"] == 2.0 and s["p99_s"] == 3.0 and s["n"] == 3, f"summary {s}")

# a path that never follows: its replies stay at the first step
stuck = [(t, 0, A) for t in (1.0, 2.0, 3.0, 4.0, 5.0)]
d = fr.delays(feed, ckpts, stuck, 10)
ok(d["served_ckpts"] == 0 and d["missed_ckpts"] == 2 and not d["update_s"],
   "a path stuck at its first step serves no checkpoint")

# a step label that moves without new scores is not a served model
label_only = [(1.0, 0, A), (2.8, 2, A), (5.0, 4, C)]
d = fr.delays(feed, ckpts, label_only, 10)
ok(d["unchanged_transitions"] == 1 and near(d["update_s"], [4.0, 3.0, 2.0, 1.0]),
   f"a step change with the old scores counted ({d['unchanged_transitions']}) and not served: "
   f"{d['update_s']}")
mixed = [(1.0, 0, A), (2.8, 2, B), (3.0, 2, C), (5.0, 4, C)]
ok(fr.delays(feed, ckpts, mixed, 10)["same_step_changes"] == 1,
   "scores that change within one step are counted")
bad = [dict(ckpts[0], lines=19), ckpts[1]]
ok(fr.delays(feed, bad, replies, 10)["bad_positions"] == 1, "a checkpoint at lines != step*batch")

# 2. a short real run
if not all(os.path.exists(f"{BIN}/{b}") for b in ("ps-serve", "ps-worker", "ps-server")):
    print("SKIPPED: no ps-serve, ps-worker or ps-server in", BIN)
    sys.exit(77 if not fails else 1)
p = subprocess.run([sys.executable, os.path.join(SRC, "bench", "serve", "freshness.py"), "--bin",
                    BIN, "--secs", "12", "--rate", "1000", "--paths", "local", "--check", "6"],
                   capture_output=True, text=True, timeout=150)
print(p.stdout[-2500:], p.stderr[-2500:])
ok(p.returncode == 0, "a 12 s stream: ps-serve --follow serves the checkpoints, fresh (--check 6)")
print("FAILED:" if fails else "all passed", *fails, sep="\n  ")
sys.exit(1 if fails else 0)
