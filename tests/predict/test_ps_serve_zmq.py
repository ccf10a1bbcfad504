"""ps-serve --listen (issue 34 item 2, ZeroMQ) and ps-bench --op score (item 3). A model trained
by ps-worker; ps-predict scores the test lines; ps-serve answers over HTTP and ZeroMQ (with
CURVE) at once, the requests made by tests/zmq_score (a DEALER client, docs/PROTOCOL.md):

1. Text bodies of 1 and 64 lines and a JSON body of 64 rows over ZeroMQ: "200\\n" and
   {"step": N, "scores": [...]} equal to ps-predict's and to HTTP's for the same rows.
2. CURVE: a client without CURVE and one whose key is not in --curve-clients get no reply;
   the listed key is served meanwhile.
3. Refusals, each one error reply while another client is served: a frame with no content
   type line (400), another content type (415), a bad line (400 naming line 2), a body over
   --max-body-kb (413); a message over twice the limit is cut by libzmq (no reply) while a
   request on another connection is answered. /metrics counts them by transport beside
   HTTP's.
4. Arguments, exit 2 with one line: a non-loopback --listen without --allow-remote (with it,
   it starts), --curve-secret without --curve-clients, a bad URL; ps-bench --op score without
   --url, with --servers, with CURVE keys for an HTTP --url.
5. ps-bench --op score, open loop at 50 requests/s of 8 candidates, against the HTTP and the
   ZeroMQ (CURVE) ends: every request answered, none failed, sane percentiles, the rate
   achieved.
Without --listen (or ps-bench --op score) none of this runs."""
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
import harness as h
import serve_proc

TESTS = os.environ.get("EMBER_TESTS", os.path.join(os.path.dirname(h.BIN), "tests"))
SMALL = ["--mlp-bot", "13-32-16", "--mlp-top", "32-1", "--emb-dim", "16", "--threads", "1",
         "--batch", "512"]
r = h.Results()
procs = []


def predict(ck, lines, d):
    """ps-predict's scores of lines as one batch, one compute thread (ps-serve's default)."""
    inp, out = os.path.join(d, "in.tsv"), os.path.join(d, "out.txt")
    open(inp, "w").write("\n".join(lines) + "\n")
    p = subprocess.run([f"{h.BIN}/ps-predict", "--progress-every", "0", "--threads", "1",
                        "--checkpoint", ck, "--input", inp, "--out", out], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [float(x) for x in open(out).read().split("\n")[:-1]]


def start(args, timeout=60):
    """ps-serve ARGS; (process, {scheme: endpoint}) once it printed its listening lines."""
    p = subprocess.Popen([f"{h.BIN}/ps-serve"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(p)
    want = 1 + ("--listen" in args and "--http" in args and "off" not in args)
    eps, lines = {}, queue.Queue()
    # a thread reads the lines: select() on a buffered pipe misses a second line already read
    threading.Thread(target=lambda: [lines.put(l) for l in p.stdout] + [lines.put("")],
                     daemon=True).start()
    deadline = time.time() + timeout
    while len(eps) < want and time.time() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if not line:
            break
        if "listening on" in line:
            ep = line.split("listening on ")[1].strip()
            eps[ep.split(":")[0]] = ep
    if len(eps) < want:
        p.kill()
        raise AssertionError(f"ps-serve {args} did not start: {p.stderr.read()[-2000:]}")
    return p, eps


def zmq(url, body, ctype="text/plain", keys=None, timeout_ms=30000, d=None):
    """(status, JSON) of one request through tests/zmq_score; (None, None) without a reply."""
    f = os.path.join(d, f"body-{threading.get_ident()}")
    open(f, "wb").write(body if isinstance(body, bytes) else body.encode())
    q = subprocess.run([f"{TESTS}/zmq_score", url, ctype, f, str(timeout_ms)] + (keys or []),
                       capture_output=True, timeout=timeout_ms / 1000 + 30)
    if q.returncode == 4:
        return None, None
    assert q.returncode == 0, q.stderr
    st, _, js = q.stdout.decode().partition("\n")
    return int(st), json.loads(js)


def post(url, body, ctype="text/plain"):
    req = urllib.request.Request(f"{url}/v1/score", data=body.encode(),
                                 headers={"Content-Type": ctype}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read())


def metric(url, name):
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name))


def json_rows(lines):
    rows = []
    for l in lines:
        f = l.split("\t")
        o = {f"I{i}": int(f[i]) for i in range(1, 14) if f[i] != ""}
        o.update({f"C{i + 1}": f[14 + i] for i in range(26) if f[14 + i] != ""})
        rows.append(o)
    return json.dumps({"rows": rows})


try:
    with tempfile.TemporaryDirectory() as d:
        train, test, _ = h.datagen(d, 8000, 1000, seed=5)
        ck = os.path.join(d, "ck")
        os.makedirs(ck)
        h.train(1, 1, ["--train", train, "--checkpoint-dir", ck] + SMALL)
        step = int(open(os.path.join(ck, "latest")).read().strip().split("-")[1])
        lines = open(test).read().split("\n")[:64]
        ref = {n: predict(ck, lines[:n], d) for n in (1, 3, 64)}
        for k in ("server", "client", "other"):
            subprocess.run([f"{h.BIN}/ps-keygen", "--out", os.path.join(d, k)], check=True,
                           capture_output=True)
        os.makedirs(os.path.join(d, "clients"))
        os.rename(os.path.join(d, "client.public"), os.path.join(d, "clients", "client.public"))
        ck_keys = [os.path.join(d, "client.secret"), os.path.join(d, "server.public")]
        bad_keys = [os.path.join(d, "other.secret"), os.path.join(d, "server.public")]

        p, eps = start(["--checkpoint", ck, "--http", "127.0.0.1:0", "--listen",
                        "tcp://127.0.0.1:0", "--curve-secret", os.path.join(d, "server.secret"),
                        "--curve-clients", os.path.join(d, "clients"), "--max-body-kb", "100",
                        "--threads", "2"])
        zurl, hurl = eps["tcp"], eps["http"]

        def good(n=3):
            st, rep = zmq(zurl, "\n".join(lines[:n]) + "\n", keys=ck_keys, d=d)
            return st == 200 and rep["scores"] == ref[n]

        # 1. the scores of ps-predict and of HTTP
        for n in (1, 64):
            body = "\n".join(lines[:n]) + "\n"
            st, rep = zmq(zurl, body, keys=ck_keys, d=d)
            hst, hrep = post(hurl, body)
            r.check(f"ZeroMQ, {n} line(s): ps-predict's scores and the step",
                    st == 200 and rep["scores"] == ref[n] and rep["step"] == step,
                    f"{st} {str(rep)[:200]}")
            r.check(f"ZeroMQ, {n} line(s): HTTP's reply", hst == 200 and hrep == rep)
        st, rep = zmq(zurl, json_rows(lines), "application/json", keys=ck_keys, d=d)
        r.check("ZeroMQ, a JSON body of 64 rows: ps-predict's scores",
                st == 200 and rep["scores"] == ref[64], f"{st} {str(rep)[:200]}")

        # 2. CURVE: no key, an unlisted key: nothing; the listed one is served meanwhile
        for name, keys in (("no CURVE", None), ("a key not in --curve-clients", bad_keys)):
            res = {}
            th = threading.Thread(target=lambda: res.update(
                r=zmq(zurl, lines[0] + "\n", keys=keys, timeout_ms=2500, d=d)))
            th.start()
            time.sleep(0.3)
            served = good()
            th.join()
            r.check(f"CURVE: a client with {name} gets no reply", res["r"] == (None, None),
                    str(res["r"])[:200])
            r.check(f"CURVE: the listed key is served meanwhile ({name})", served)

        # 3. refusals, each one error reply; the next request served
        bad = [("no content type line", b"text/plain", "raw", 400, "content type"),
               ("another content type", lines[0].encode(), "application/xml", 415,
                "content type 'application/xml'"),
               ("a bad line", (lines[0] + "\nnot\ta\tline\n").encode(), "text/plain", 400, "line 2"),
               ("bad JSON", b'{"rows": [', "application/json", 400, "JSON body"),
               ("a body over --max-body-kb", b"x" * 150 * 1024, "text/plain", 413, "max-body-kb")]
        for name, body, ctype, want, text in bad:
            st, rep = zmq(zurl, body, ctype, keys=ck_keys, d=d)
            r.check(f"{name}: {want}, one clear line",
                    st == want and text in (rep or {}).get("error", ""), f"{st} {rep}")
            r.check(f"{name}: the next request is served", good())
        res = {}
        th = threading.Thread(target=lambda: res.update(
            r=zmq(zurl, b"x" * 300 * 1024, keys=ck_keys, timeout_ms=2500, d=d)))
        th.start()
        time.sleep(0.2)
        served = good(64)
        th.join()
        r.check("a message over twice --max-body-kb: cut, no reply", res["r"] == (None, None),
                str(res["r"])[:200])
        r.check("a message over twice --max-body-kb: another client is served meanwhile", served)
        r.check("/metrics: ZeroMQ latency beside HTTP's",
                metric(hurl, 'ember_serve_request_seconds_count{transport="zmq"}') >= 12 and
                metric(hurl, 'ember_serve_request_seconds_count{transport="http"}') == 2)
        r.check("/metrics: ZeroMQ refusals by code",
                metric(hurl, 'ember_serve_requests_total{transport="zmq",code="413"}') == 1 and
                metric(hurl, 'ember_serve_requests_total{transport="zmq",code="415"}') == 1 and
                metric(hurl, 'ember_serve_requests_total{transport="zmq",code="400"}') == 3)

        # 5. ps-bench --op score against both ends (before stopping the server)
        for name, url, extra in (("HTTP", hurl, []), ("ZeroMQ with CURVE", zurl,
                                 ["--curve-secret", ck_keys[0], "--curve-server", ck_keys[1]])):
            out = os.path.join(d, "bench.json")
            q = subprocess.run([f"{h.BIN}/ps-bench", "--op", "score", "--url", url,
                                "--score-lines", test, "--candidates", "8", "--rate", "50",
                                "--duration", "2", "--warmup", "0.5", "--json", out] + extra,
                               capture_output=True, text=True, timeout=120)
            ok = q.returncode == 0 and os.path.exists(out)
            pt = json.load(open(out))["points"][0] if ok else {}
            lat = pt.get("latency_us", {})
            r.check(f"ps-bench --op score over {name}: every request answered, none failed",
                    ok and pt["requests"] >= 90 and pt["errors"] == 0 and pt["timeouts"] == 0,
                    f"rc {q.returncode} {q.stderr[-400:]} {str(pt)[:300]}")
            r.check(f"ps-bench --op score over {name}: sane percentiles and rate",
                    ok and 0 < lat.get("p50", 0) <= lat.get("p99", 0) <= lat.get("p999", 0) and
                    lat["p50"] < 1e6 and 30 <= pt["achieved_rate"] <= 60 and
                    pt["keys_per_s"] > 300, str(lat) + f" {pt.get('achieved_rate')}")
        p.terminate()
        p.wait(timeout=30)
        r.check("ps-serve --listen stops on SIGTERM with 0", p.returncode == 0,
                "" if p.returncode == 0 else p.stderr.read()[-1500:])

        # 4. arguments
        sec, cl = os.path.join(d, "server.secret"), os.path.join(d, "clients")
        for name, args, text in [
                ("a non-loopback --listen", ["--listen", "tcp://0.0.0.0:0"], "--allow-remote"),
                ("--curve-secret without --curve-clients", ["--listen", "tcp://127.0.0.1:0",
                                                            "--curve-secret", sec], "go together"),
                ("a bad --listen", ["--listen", "udp://x"], "tcp://HOST:PORT"),
                ("--http off without --listen", ["--http", "off"], "--listen")]:
            try:
                q = subprocess.run([f"{h.BIN}/ps-serve", "--checkpoint", ck, "--http",
                                    "127.0.0.1:0"] + args, capture_output=True, text=True,
                                   timeout=30)
            except subprocess.TimeoutExpired:  # it started and served: not refused
                r.check(f"{name}: exit 2, one line", False, "it started")
                continue
            err = [l for l in q.stderr.splitlines() if l.startswith("ps-serve:")]
            r.check(f"{name}: exit 2, one line", q.returncode == 2 and len(err) == 1 and
                    text in err[0], f"{q.returncode} {q.stderr[-300:]!r}")
        for name, args, text in [("without --url", ["--score-lines", test], "--url URL"),
                                 ("with --servers", ["--servers", "tcp://127.0.0.1:1", "--url",
                                                     hurl, "--score-lines", test], "no --servers"),
                                 ("CURVE over HTTP", ["--url", hurl, "--score-lines", test] +
                                  ["--curve-secret", ck_keys[0], "--curve-server", ck_keys[1]],
                                  "ZeroMQ --url")]:
            q = subprocess.run([f"{h.BIN}/ps-bench", "--op", "score", "--rate", "10"] + args,
                               capture_output=True, text=True, timeout=60)
            r.check(f"ps-bench --op score {name}: exit 2, one line", q.returncode == 2 and
                    len(q.stderr.splitlines()) == 1 and text in q.stderr, q.stderr[-300:])
        p, eps = start(["--checkpoint", ck, "--http", "off", "--listen", "tcp://0.0.0.0:0",
                        "--allow-remote", "--curve-secret", sec, "--curve-clients", cl])
        port = eps["tcp"].rsplit(":", 1)[1]
        st, rep = zmq(f"tcp://127.0.0.1:{port}", lines[0] + "\n", keys=ck_keys, d=d)
        r.check("--allow-remote: binds every interface, serves", st == 200 and
                rep["scores"] == ref[1], f"{eps} {st}")
        p.terminate()
        p.wait(timeout=30)
finally:
    serve_proc.kill_all(procs)
r.finish()
