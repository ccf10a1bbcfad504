"""The embedding table's name follows the schema (issue 36, friction 12), with real servers
through deploy/ember-local:

1. A schema file clicks.json (docs/schemas/criteo.json's columns, no "table") trains a table
   named clicks_emb, not criteo_emb: the checkpoint's config says table-name=clicks_emb and its
   shard metadata names the table so.
2. A checkpoint written before the name followed the schema (its table criteo_emb, its config
   without table-name and checksum, as an older ps-worker wrote it) resumes with the same
   clicks.json: the resumed run declares the checkpoint's criteo_emb, not clicks_emb.
3. A bad "table" is refused by ember-local once, before any server starts (ps-worker --check),
   not once per worker after the servers are up."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

SMALL = ["--mlp-bot", "13-16-8", "--mlp-top", "16-1", "--emb-dim", "8", "--threads", "1",
         "--batch", "256"]
r = h.Results()


def schema(path, table=None):
    s = json.load(open(os.path.join(h.SRC, "docs", "schemas", "criteo.json")))
    if table is not None:
        s["table"] = table
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(s, f)
    return path


def ckpt_names(ck):
    """(config's table-name or None, the table names in shard-0.json) of ck's latest."""
    step = open(os.path.join(ck, "latest")).read().strip()
    conf = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(ck, step, "config"))
                if "=" in l and not l.startswith("#"))
    meta = json.load(open(os.path.join(ck, step, "shards", "shard-0.json")))
    return conf.get("table-name"), [t.get("name") for t in meta.get("tables", [])]


with tempfile.TemporaryDirectory() as d:
    tr, _, _ = h.datagen(d, 3000, 10, seed=3)
    clicks = schema(os.path.join(d, "new", "clicks.json"))
    # 1. the name from the schema file
    ck = os.path.join(d, "ck")
    h.train(1, 1, ["--schema", clicks, "--train", tr, "--checkpoint-dir", ck] + SMALL,
            timeout=300)
    name, tables = ckpt_names(ck)
    r.check("clicks.json trains table clicks_emb", name == "clicks_emb" and
            tables == ["clicks_emb"], f"config {name}, shard-0.json {tables}")

    # 2. an older checkpoint (table criteo_emb, no table-name line) resumes under clicks.json
    old = os.path.join(d, "old")
    h.train(1, 1, ["--schema", schema(os.path.join(d, "was", "clicks.json"), "criteo_emb"),
                   "--train", tr, "--max-steps", "4", "--checkpoint-dir", old] + SMALL,
            timeout=300)
    conf = os.path.join(old, open(os.path.join(old, "latest")).read().strip(), "config")
    lines = [l for l in open(conf) if not l.startswith(("table-name=", "checksum="))]
    with open(conf, "w") as f:
        f.writelines(lines)
    _, out = h.train(1, 1, ["--schema", clicks, "--train", tr, "--max-steps", "8",
                            "--checkpoint-dir", old, "--resume"] + SMALL, timeout=300)
    name, tables = ckpt_names(old)
    r.check("an older checkpoint resumes its criteo_emb under clicks.json",
            "resumed from" in out and tables == ["criteo_emb"] and name == "criteo_emb",
            f"config {name}, shard-0.json {tables}")

    # 3. "table" names it; a bad one is refused once, before any server starts (ember-local
    # checks the workers' arguments first: before, each of the 2 workers printed it, after the
    # servers were up)
    rc, out = h.run([h.LOCAL, "--bin", h.BIN, "--servers", "2", "--workers", "2", "--",
                     "--schema", schema(os.path.join(d, "bad", "clicks.json"), "a b"),
                     "--train", tr] + SMALL, 120)
    lines = [l for l in out.splitlines() if "\"table\"" in l]
    r.check("a bad \"table\" under ember-local: exit 2, one line, no server started",
            rc == 2 and len(lines) == 1 and "want a name of 1 to 63 letters" in lines[0] and
            "listening" not in out, f"rc={rc} {out[-600:]}")
r.finish()
