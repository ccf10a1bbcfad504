#!/usr/bin/python3
"""ps-datagen --multi-hot M / --schema-out / --vocab-scale / --zipf-shift: reproducible files;
--multi-hot 1 and the defaults are the one-hot files byte for byte; every multi-hot line parses
under the schema it comes with (40 TAB fields, each categorical empty or '|'-separated 8-hex
ids); bag sizes uniform on 1..M and missing rates as the one-hot ones; the JSON/printed planted
AUC equals scikit-learn's AUC of the written probabilities on the written labels; the planted
signal is learnable by a sum-pooled (bag-of-ids counts) logistic regression; the vocabulary and
Zipf knobs move the distinct-value counts and the head the intended way; bad values exit 2.
--schema FILE: Criteo's own schema gives the default files byte for byte and the schema of
--multi-hot M the --multi-hot M files (the generator is the same, only its layout generalised);
a user schema (csv, a header with a quoted name, a skipped column, a dense column without
transform, one-value and multi-hot columns of two separators) gives files whose every line the
schema's own parser reads (ps-convert --schema: 0 bad lines), with the columns where the schema
puts them; --schema with --schema-out and a bad schema exit 2 with one line."""
import collections, csv, filecmp, json, os, re, subprocess, sys, tempfile
import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker"))
import harness as h  # noqa: E402  (BIN and the ok/FAIL tally of the integration tests)

BIN = h.BIN
results = h.Results()

def check(cond, msg):
    results.check(msg, cond)

def gen(d, tag, *flags, rows=20000, test=5000):
    p = {k: os.path.join(d, tag + k) for k in (".tsv", "_test.tsv", ".json", ".probs", ".schema.json")}
    r = subprocess.run([BIN + "/ps-datagen", "--rows", str(rows), "--out", p[".tsv"], "--test-rows", str(test),
                        "--test-out", p["_test.tsv"], "--json", p[".json"], "--probs-out", p[".probs"],
                        "--log-level", "warn"] + ([] if "--schema" in flags else ["--schema-out", p[".schema.json"]])
                       + list(flags),
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        sys.exit(1)
    return p

HEX8 = re.compile(r"^[0-9a-f]{8}$")

def parse(path, schema):
    """Reads a file by its schema: labels, dense strings, bags (lists of ids) per categorical."""
    cols = schema["columns"]
    y, bags, bad = [], [], 0
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) != len(cols):
            bad += 1
            continue
        row = []
        for c, v in zip(cols, f):
            if c["type"] == "label":
                y.append(int(v))
            elif c["type"] == "categorical":
                ids = v.split(c["separator"]) if v and "separator" in c else ([v] if v else [])
                bad += sum(1 for t in ids if not HEX8.match(t))
                row.append(ids)
        bags.append(row)
    return np.array(y), bags, bad

with tempfile.TemporaryDirectory() as d:
    M = 5
    a = gen(d, "a", "--seed", "3", "--multi-hot", str(M))
    b = gen(d, "b", "--seed", "3", "--multi-hot", str(M))
    check(filecmp.cmp(a[".tsv"], b[".tsv"], shallow=False), "same seed: byte-identical multi-hot file")
    o0 = gen(d, "o0", "--seed", "3", rows=3000, test=10)
    o1 = gen(d, "o1", "--seed", "3", "--multi-hot", "1", rows=3000, test=10)
    check(filecmp.cmp(o0[".tsv"], o1[".tsv"], shallow=False), "--multi-hot 1 is the one-hot file")

    schema = json.load(open(a[".schema.json"]))
    want = ([{"name": "label", "type": "label"}] + [{"name": f"i{k}", "type": "dense"} for k in range(1, 14)] +
            [{"name": f"c{k}", "type": "categorical", "separator": "|"} for k in range(1, 27)])
    check(schema == {"format": "tsv", "header": False, "columns": want}, "multi-hot schema: label, i1..i13, c1..c26 with separator '|'")
    s1 = json.load(open(o1[".schema.json"]))
    check(all("separator" not in c for c in s1["columns"]) and len(s1["columns"]) == 40, "one-hot schema: no separators")

    y, bags, bad = parse(a[".tsv"], schema)
    check(bad == 0 and len(y) == 20000, f"every line parses under its schema ({bad} bad tokens/lines)")
    sizes = collections.Counter(len(r[f]) for r in bags for f in range(26) if r[f])
    n = sum(sizes.values())
    check(set(sizes) == set(range(1, M + 1)), f"bag sizes 1..{M}: {sorted(sizes)}")
    check(all(abs(sizes[k] / n - 1 / M) < 0.01 for k in sizes), "bag sizes uniform: " +
          ", ".join(f"{k}: {sizes[k] / n:.3f}" for k in sorted(sizes)))
    miss = [sum(1 for r in bags if not r[f]) / len(bags) for f in range(26)]
    check(abs(miss[21] - 0.8) < 0.02 and abs(miss[18] - 0.45) < 0.02 and miss[0] == 0,
          f"missing rates C22 {miss[21]:.3f} C19 {miss[18]:.3f} C1 {miss[0]:.3f}")

    js = json.load(open(a[".json"]))
    p = np.loadtxt(a[".probs"])
    auc = roc_auc_score(y, p)
    check(abs(auc - js["train_auc"]) < 1e-9, f"planted train AUC {js['train_auc']:.6f} == sklearn's {auc:.6f}")
    check(js["multi_hot"] == M and 0.75 < js["test_auc"] < 0.97, f"planted test AUC {js['test_auc']:.4f}")
    check(abs(y.mean() - 0.25) < 0.02 and abs(y.mean() - p.mean()) < 0.02, f"CTR {y.mean():.4f}, mean p {p.mean():.4f}")

    # Learnable by sum pooling: counts of (feature, id) over the bags, logistic regression.
    vocab = {}
    def counts(bb, build):
        ii, jj = [], []
        for i, r in enumerate(bb):
            for f, ids in enumerate(r):
                for t in (ids or ["<missing>"]):
                    k = vocab.setdefault((f, t), len(vocab)) if build else vocab.get((f, t))
                    if k is not None:
                        ii.append(i); jj.append(k)
        return sp.csr_matrix((np.ones(len(ii)), (ii, jj)), shape=(len(bb), len(vocab)))
    X = counts(bags, True)
    yt, tb, _ = parse(a["_test.tsv"], schema)
    m = LogisticRegression(C=0.05, max_iter=300, solver="liblinear").fit(X, y)
    lr = roc_auc_score(yt, m.predict_proba(counts(tb, False))[:, 1])
    check(0.70 < lr < js["test_auc"] + 0.01, f"learnable: bag-count logistic regression {lr:.4f} vs planted {js['test_auc']:.4f}")

    # Vocabulary and Zipf knobs (one-hot files, C3: 1e6 values, exponent 1.05).
    def c3(path):
        col = [l.split("\t")[16] for l in open(path)]
        vals = [v for v in col if v]
        return len(set(vals)), collections.Counter(vals).most_common(1)[0][1] / len(vals)
    base = c3(o0[".tsv"])
    small = c3(gen(d, "v", "--seed", "3", "--vocab-scale", "0.001", rows=3000, test=10)[".tsv"])
    steep = c3(gen(d, "z", "--seed", "3", "--zipf-shift", "0.5", rows=3000, test=10)[".tsv"])
    check(small[0] <= 1000 < base[0], f"--vocab-scale 0.001: C3 {small[0]} distinct (<= 1000) vs {base[0]}")
    check(steep[1] > 2 * base[1] and steep[0] < base[0], f"--zipf-shift 0.5: C3 head share {steep[1]:.3f} vs {base[1]:.3f}")
    for bad_flags in (["--multi-hot", "101"], ["--zipf-shift", "-0.5"], ["--vocab-scale", "0"]):
        r = subprocess.run([BIN + "/ps-datagen", "--rows", "1", "--out", os.path.join(d, "x.tsv")] + bad_flags,
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr.count("\n") == 1, f"{' '.join(bad_flags)}: exit 2, one line: {r.stderr.strip()}")

    # --schema FILE: the built-in layouts' schemas give the same bytes; a user schema's files
    # parse under it.
    crit = os.path.join(h.SRC, "docs", "schemas", "criteo.json")
    c0 = gen(d, "c0", "--seed", "3", "--schema", crit, rows=3000, test=10)
    check(filecmp.cmp(o0[".tsv"], c0[".tsv"], shallow=False) and
          filecmp.cmp(o0["_test.tsv"], c0["_test.tsv"], shallow=False),
          "--schema docs/schemas/criteo.json is the default file, byte for byte")
    m0 = gen(d, "m0", "--seed", "3", "--multi-hot", str(M), "--schema", a[".schema.json"])
    check(filecmp.cmp(a[".tsv"], m0[".tsv"], shallow=False),
          f"--schema (--multi-hot {M}'s --schema-out) --multi-hot {M} is the --multi-hot {M} file")
    user = os.path.join(d, "user.json")
    cols = [{"name": "id", "type": "skip"}, {"name": "click", "type": "label"},
            {"name": "price", "type": "dense"}, {"name": "age", "type": "dense", "transform": "none"},
            {"name": "site", "type": "categorical"},
            {"name": "tags", "type": "categorical", "separator": "|"},
            {"name": "a,b", "type": "categorical"},
            {"name": "cats", "type": "categorical", "separator": ";", "hash_buckets": 1000}]
    json.dump({"format": "csv", "header": True, "columns": cols}, open(user, "w"))
    u = gen(d, "u", "--seed", "4", "--schema", user, "--multi-hot", "3", rows=5000, test=1000)
    rows = list(csv.reader(open(u[".tsv"], newline="")))
    check(rows[0] == [c["name"] for c in cols], f"header line: the schema's names, csv-quoted: {rows[0]}")
    body = rows[1:]
    shape = (all(len(r) == len(cols) and r[0] == "" and r[1] in ("0", "1") for r in body) and
             all(HEX8.match(r[4]) or r[4] == "" for r in body) and
             {len(r[5].split("|")) for r in body if r[5]} == {1, 2, 3} and
             {len(r[7].split(";")) for r in body if r[7]} == {1, 2, 3} and
             all(re.match(r"^-?[0-9]*$", r[2]) for r in body))
    check(len(body) == 5000 and shape, "user schema: columns where the schema puts them, bags of 1..3")
    js = json.load(open(u[".json"]))
    uy = np.array([int(r[1]) for r in body])
    ua = roc_auc_score(uy, np.loadtxt(u[".probs"]))
    check(abs(ua - js["train_auc"]) < 1e-9 and 0.55 < js["test_auc"] < 0.97,
          f"user schema: planted train AUC {js['train_auc']:.6f} == sklearn's {ua:.6f} on the "
          f"labels of its column (4 features, 2 of them noise: test AUC {js['test_auc']:.4f})")
    for path, n in ((u[".tsv"], 5000), (u["_test.tsv"], 1000)):
        r = subprocess.run([BIN + "/ps-convert", "--schema", user, "--in", path, "--out",
                            os.path.join(d, "u.bin")], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and f"rows {n} bad_lines 0" in r.stdout + r.stderr,
              f"user schema: ps-convert --schema reads every line of {os.path.basename(path)}")
    for bad_flags, needle in ((["--schema", user, "--schema-out", os.path.join(d, "s.json")], "--schema-out"),
                              (["--schema", os.path.join(d, "none.json")], "none.json")):
        r = subprocess.run([BIN + "/ps-datagen", "--rows", "1", "--out", os.path.join(d, "x.tsv")] + bad_flags,
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr.count("\n") == 1 and needle in r.stderr,
              f"{' '.join(os.path.basename(f) for f in bad_flags)}: exit 2, one line: {r.stderr.strip()}")

results.finish()
