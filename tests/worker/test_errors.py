"""ps-worker off the happy path (issue 17), with real servers through deploy/ember-local: every
failure of the run is one line naming the flag or the file and exit status 1 (the refusals
before connecting, exit 2, are in test_flags.sh); checkpoints are written at the end of
training, resume from a finished run, refuse a changed key meaning and a damaged dense.bin.
Each check names what the code before issue 17 did instead."""
import gzip
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-16-8", "--mlp-top", "16-1", "--emb-dim", "8", "--threads", "1",
         "--batch", "256", "--progress-every", "30"]


def worker(args, workers=1, timeout=180):
    """ember-local with one server and `workers` workers; (exit status, output)."""
    cmd = [h.LOCAL, "--bin", h.BIN, "--servers", "1", "--workers", str(workers), "--"]
    return h.run(cmd + SMALL + ["--timeout-ms", "20000"] + args, timeout)


def lines_of(out, needle):
    return [l for l in out.splitlines() if needle in l]


def latest(ck):
    p = os.path.join(ck, "latest")
    return open(p).read().strip() if os.path.exists(p) else "no latest"


def listing(ck):
    return sorted(os.listdir(ck)) if os.path.isdir(ck) else []


r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 2800, 1000, seed=3)  # 11 steps of 256
    with open(train) as f:
        good = f.read().splitlines(keepends=True)

    # 1. A --checkpoint-dir that does not exist is created (it used to exit 1 at the first
    # checkpoint, silently).
    new = os.path.join(d, "new", "ckpt")
    rc, out = worker(["--train", train, "--checkpoint-dir", new, "--max-steps", "2"])
    r.check("missing --checkpoint-dir is created", rc == 0 and latest(new) == "step-2",
            f"rc={rc} {latest(new)}")

    # 8. --checkpoint-every 4 on 11 steps ends with a checkpoint at step 11 (it used to stop at
    # step 8).
    ck = os.path.join(d, "ckpt")
    os.makedirs(ck)
    rc, out = worker(["--train", train, "--checkpoint-dir", ck, "--checkpoint-every", "4"])
    r.check("final checkpoint at the last step", rc == 0 and latest(ck) == "step-11", latest(ck))
    r.check("checkpoints at 4, 8, 11 only",
            listing(ck) == ["latest", "step-11", "step-4", "step-8"], f"{listing(ck)}")
    r.check("checkpoint records its key flags",
            os.path.exists(os.path.join(ck, "step-11", "config")))

    # 9. Resuming a finished run evaluates the checkpoint and writes the summary (it used to
    # fail: "checkpoint .../step-11/shards/shard-0 already exists").
    fin = os.path.join(d, "fin")
    os.makedirs(fin)
    rc, out = worker(["--train", train, "--checkpoint-dir", fin])
    assert rc == 0 and latest(fin) == "step-11", out
    summary = os.path.join(d, "resumed.json")
    rc, out = worker(["--train", train, "--test", test, "--checkpoint-dir", fin, "--resume",
                      "--summary", summary])
    ok = rc == 0 and os.path.exists(summary)
    r.check("resume of a finished run evaluates", ok and "test auc" in out, f"rc={rc} "
            + " | ".join(lines_of(out, "ERROR")[:2]))
    r.check("no second checkpoint of step 11", "checkpoint at step 11" not in out)

    # 7. --resume with another --hash-buckets (what a key means) is refused before connecting.
    rc, out = worker(["--train", train, "--checkpoint-dir", ck, "--resume",
                      "--hash-buckets", "1000"])
    msg = lines_of(out, "--hash-buckets")
    r.check("resume with another --hash-buckets refused", rc == 2 and len(msg) == 1
            and "1000" in msg[0] and "trained with 0" in msg[0], f"rc={rc} {msg}")
    # ... and a checkpoint without a config (older ps-worker) resumes with a warning.
    old = os.path.join(d, "old")
    shutil.copytree(ck, old)
    if os.path.exists(os.path.join(old, "step-11", "config")):
        os.remove(os.path.join(old, "step-11", "config"))
    rc, out = worker(["--train", train, "--checkpoint-dir", old, "--resume"])
    r.check("checkpoint without config resumes with a warning", rc == 0
            and "no config" in out, f"rc={rc}")

    # 10. A damaged dense.bin is refused at resume (64 bytes overwritten in the parameters
    # used to resume silently).
    bad = os.path.join(d, "bad")
    shutil.copytree(ck, bad)
    with open(os.path.join(bad, latest(ck), "dense.bin"), "r+b") as f:
        f.seek(200)
        f.write(os.urandom(64))
    rc, out = worker(["--train", train, "--checkpoint-dir", bad, "--resume"])
    msg = lines_of(out, "checksum")
    r.check("damaged dense.bin refused", rc == 1 and len(msg) == 1 and "dense.bin" in msg[0],
            f"rc={rc} {msg}")

    # ... and an EMBERCK1 dense.bin (before the checksum) resumes with a warning.
    v1 = os.path.join(d, "v1")
    shutil.copytree(ck, v1)
    dense = os.path.join(v1, latest(ck), "dense.bin")
    with open(dense, "rb") as f:
        body = f.read()
    with open(dense, "wb") as f:
        f.write(b"1KCREBME" + body[8:-8])  # the old magic, little-endian; no checksum
    rc, out = worker(["--train", train, "--checkpoint-dir", v1, "--resume"])
    r.check("dense.bin without checksum resumes with a warning", rc == 0
            and len(lines_of(out, "has no checksum")) == 1, f"rc={rc}")

    # 3. A file of bad lines, an empty file and one with 5% bad lines fail (exit 0 before).
    allbad = os.path.join(d, "allbad.tsv")
    with open(allbad, "w") as f:
        f.writelines("x\ty\n" for _ in range(600))
    rc, out = worker(["--train", allbad])
    msg = lines_of(out, "0 samples")
    r.check("all lines bad fails", rc == 1 and len(msg) == 1 and "600 of 600 lines were bad"
            in msg[0], f"rc={rc} {msg}")
    empty = os.path.join(d, "empty.tsv")
    open(empty, "w").close()
    rc, out = worker(["--train", empty])
    msg = lines_of(out, "no lines")
    r.check("empty --train fails", rc == 1 and len(msg) == 1 and empty in msg[0], f"rc={rc} {msg}")
    some = os.path.join(d, "some.tsv")
    with open(some, "w") as f:
        for i, l in enumerate(good):
            f.write("bad line\n" if i % 20 == 0 else l)
    rc, out = worker(["--train", some])
    msg = lines_of(out, "lines were bad")
    r.check("5% bad lines fail", rc == 1 and len(msg) == 1 and "140 of 2800" in msg[0]
            and "--max-bad-fraction" in msg[0], f"rc={rc} {msg}")
    rc, out = worker(["--train", some, "--max-bad-fraction", "0.1"])
    r.check("5% bad lines pass --max-bad-fraction 0.1", rc == 0, f"rc={rc}")

    # 4. A truncated .gz is an I/O error naming the file (it was one bad line, exit 0).
    gz = os.path.join(d, "cut.tsv.gz")
    with open(gz, "wb") as f:
        f.write(gzip.compress("".join(good).encode())[:-4000])
    rc, out = worker(["--train", gz])
    msg = lines_of(out, "truncated")
    r.check("truncated .gz fails", rc == 1 and len(msg) == 1 and gz in msg[0], f"rc={rc} {msg}")

    # 5. A binary file with a corrupt record: exit 1 with the reader's message (silent before).
    binf = os.path.join(d, "train.bin")
    rc, out = h.run([f"{h.BIN}/ps-convert", "-i", train, "-o", binf], 60)
    assert rc == 0, out
    with open(binf, "r+b") as f:
        f.seek(64 + 183 * 164)
        f.write(b"\x07")
    rc, out = worker(["--train", binf])
    msg = lines_of(out, "record 183 is corrupt")
    r.check("corrupt binary record named", rc == 1 and len(msg) == 1, f"rc={rc} {msg}")

    # 11. A peer that leaves mid-run: the survivor says which collective failed and that a
    # peer probably exited (Gloo's own message was all it said).
    late = os.path.join(d, "late-bad.tsv")
    with open(late, "w") as f:
        for i, l in enumerate(good):
            f.write("bad line\n" if i == 1500 else l)
    rc, out = worker(["--train", late, "--bad-lines", "fail"], workers=2)
    msg = lines_of(out, "probably exited")
    r.check("peer exit named", rc == 1 and len(msg) >= 1, f"rc={rc} {msg}")
r.finish()
