"""ps-serve (issue 34 item 2): the online scorer. Two models trained by ps-worker (through
deploy/ember-local, --checkpoint-dir) of different steps; ps-predict scores the same test lines
from each, and ps-serve must answer POST /v1/score with exactly those scores:

1. A text/plain body of 1, 64 and 300 lines and an application/json body ({"rows": [...]},
   objects keyed by column name, dense values as numbers, missing ones left out, no label):
   {"step": N, "scores": [...]} equal to ps-predict's "%.9g" scores and the checkpoint's step;
   the same with the rows from a ps-server --serve shard (--servers).
2. Refusals, each one clear line while another client is served: a bad line (400 naming line
   2), bad JSON, a row with an unknown column (400), another Content-Type (415), a body over
   --max-body-kb (413, from Content-Length, and for a chunked body); a client that sends half
   its headers, or half its body, and stalls is cut after --timeout-s, one that trickles a
   header byte every 0.5 s (slowloris) after --request-timeout-s, and a request on another
   connection is answered meanwhile. /metrics counts them and has the latency
   histogram.
3. Hot swap under load (--follow): four clients score 64 lines in a loop while LIVE/latest is
   flipped between the two models' step directories (renamed in, as ps-worker does). Every
   request succeeds; each reply's step is one of the two, and its scores are that step's
   ps-predict scores (a reply that mixed two models, or scored one model under the other's
   step, fails); both steps are served after the flips.
4. Bad arguments, exit 2 with one line: neither --checkpoint nor --export; --follow with
   --export; a bad --http.
Without ps-serve none of this runs."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "worker"))
import harness as h
import serve_proc

SMALL = h.SMALL
r = h.Results()
procs = []


def predict(ck, lines, d):
    """ps-predict's scores of lines (a list of strings) from checkpoint ck, scored as one batch
    (a batch's size changes the float rounding of the MLPs, so each request size has its own
    reference), with one compute thread as ps-serve's default."""
    inp, out = os.path.join(d, "in.tsv"), os.path.join(d, "out.txt")
    open(inp, "w").write("\n".join(lines) + "\n")
    p = subprocess.run([f"{h.BIN}/ps-predict", "--progress-every", "0", "--threads", "1",
                        "--checkpoint", ck,
                        "--input", inp, "--out", out], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [float(x) for x in open(out).read().split("\n")[:-1]]


def start(args, timeout=60):
    """ps-serve --http 127.0.0.1:0 ARGS; (process, port) once it printed where it listens."""
    import select
    p = subprocess.Popen([f"{h.BIN}/ps-serve", "--http", "127.0.0.1:0"] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    procs.append(p)
    ready = select.select([p.stdout], [], [], timeout)[0]
    line = p.stdout.readline() if ready else ""
    if "listening on" not in line:
        p.kill()
        raise AssertionError(f"ps-serve {args} did not start: {p.stderr.read()[-2000:]}")
    return p, int(line.strip().rsplit(":", 1)[1])


def post(port, body, ctype="text/plain", timeout=30):
    """(status, parsed JSON reply) of POST /v1/score."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/score", data=body.encode(),
                                 headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def as_json_rows(lines):
    """The lines as {"rows": [...]}: dense columns as numbers, missing values left out, no
    label (ps-serve puts 0)."""
    rows = []
    for l in lines:
        f = l.split("\t")
        o = {}
        for i in range(1, 14):
            if f[i] != "":
                o[f"I{i}"] = int(f[i])
        for i in range(26):
            if f[14 + i] != "":
                o[f"C{i + 1}"] = f[14 + i]
        rows.append(o)
    return json.dumps({"rows": rows})


def good(port, lines, want):
    st, rep = post(port, "\n".join(lines) + "\n")
    return st == 200 and rep.get("scores") == want


def raw(port, data, wait):
    """Sends data on a raw socket and waits for the server to close it; the seconds it took
    (None if it stayed open for `wait` s). Meanwhile `during` may run."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(data)
    t0 = time.time()
    try:
        while s.recv(4096):
            pass
        return time.time() - t0
    except socket.timeout:
        return None
    finally:
        s.close()


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name))


def step_of(ck):
    return int(open(os.path.join(ck, "latest")).read().strip().split("-")[1])


def set_latest(live, name):
    with open(os.path.join(live, "latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.rename(os.path.join(live, "latest.tmp"), os.path.join(live, "latest"))


try:
    with tempfile.TemporaryDirectory() as d:
        train, test, _ = h.datagen(d, 12000, 1000, seed=11)
        cks = []
        for i, n in enumerate((12000, 7000)):
            ck = os.path.join(d, f"ck{i}")
            os.makedirs(ck)
            part = os.path.join(d, f"train{i}.tsv")
            open(part, "w").writelines(open(train).readlines()[:n])
            h.train(1, 1, ["--train", part, "--checkpoint-dir", ck] + SMALL)
            cks.append(ck)
        steps = [step_of(c) for c in cks]
        r.check("two models of different steps", steps[0] != steps[1], str(steps))
        lines = open(test).read().split("\n")[:300]
        SIZES = (1, 3, 64, 300)
        ref = [{n: predict(c, lines[:n], d) for n in SIZES} for c in cks]

        # 1. the scores of ps-predict
        p, port = start(["--checkpoint", cks[0], "--threads", "4", "--timeout-s", "2",
                         "--request-timeout-s", "3", "--max-body-kb", "100"])
        for n in (1, 64, 300):
            st, rep = post(port, "\n".join(lines[:n]) + "\n")
            r.check(f"text body of {n} line(s): ps-predict's scores and step",
                    st == 200 and rep["scores"] == ref[0][n] and rep["step"] == steps[0],
                    f"{st} {str(rep)[:200]}")

        st, rep = post(port, as_json_rows(lines[:64]), "application/json")
        r.check("JSON body of 64 rows: ps-predict's scores", st == 200 and rep["scores"] == ref[0][64],
                f"{st} {str(rep)[:200]}")

        # rows from a serving shard (ps-server --serve, --servers): the same scores
        _, url = serve_proc.start(["--serve", cks[0], "--shard", "0", "--shards", "1"], None, procs)
        q, qport = start(["--checkpoint", cks[0], "--servers", url])
        st, rep = post(qport, "\n".join(lines[:64]) + "\n")
        r.check("--servers: rows from a serving shard, ps-predict's scores",
                st == 200 and rep["scores"] == ref[0][64], f"{st} {str(rep)[:200]}")
        q.terminate()
        q.wait(timeout=30)

        # 2. refusals, another client served meanwhile
        bad = [("a bad line", lines[0] + "\nnot\ta\tline\n", "text/plain", 400, "line 2"),
               ("bad JSON", '{"rows": [', "application/json", 400, "JSON body"),
               ("no rows", '{"rows": []}', "application/json", 400, "rows"),
               ("an unknown column", '{"rows": [{"I1": 3, "nope": 1}]}', "application/json", 400,
                "no column 'nope'"),
               ("another content type", lines[0], "application/xml", 415, "Content-Type"),
               ("an oversized body", "\n".join(lines * 2), "text/plain", 413, "max-body-kb")]
        for name, body, ctype, want, text in bad:
            st, rep = post(port, body, ctype)
            r.check(f"{name}: {want}, one clear line", st == want and text in rep.get("error", ""),
                    f"{st} {rep}")
            r.check(f"{name}: the next request is served", good(port, lines[:3], ref[0][3]))
        # a chunked body over the limit (no Content-Length)
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = ("\n".join(lines[:100]) + "\n").encode()
        for _ in range(6):
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        s.sendall(b"0\r\n\r\n")
        resp = s.recv(4096).decode(errors="replace")
        s.close()
        r.check("a chunked body over the limit: 413", resp.startswith("HTTP/1.1 413"), resp.split("\r\n")[0])
        # slow clients: half the headers, half the body; stalled
        for name, data in [("half the headers", b"POST /v1/score HTTP/1.1\r\nHost: x\r\n"),
                           ("half the body", b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            b"text/plain\r\nContent-Length: 5000\r\n\r\n" + lines[0].encode())]:
            res = {}
            th = threading.Thread(target=lambda: res.update(t=raw(port, data, 15)))
            th.start()
            time.sleep(0.3)
            served = good(port, lines[:64], ref[0][64])
            th.join()
            r.check(f"a slow client ({name}): another client is served meanwhile", served)
            r.check(f"a slow client ({name}): cut after --timeout-s 2",
                    res.get("t") is not None and res["t"] < 6, str(res))
        # slowloris: a byte of the headers every 0.5 s (under the idle timeout) is cut by the
        # request deadline (--request-timeout-s 3) while another client is served
        res = {}

        def trickle():
            s = socket.create_connection(("127.0.0.1", port), timeout=15)
            t0 = time.time()
            try:
                for ch in b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n":
                    s.sendall(bytes([ch]))
                    time.sleep(0.5)
                    if time.time() - t0 > 12:
                        break
                res["t"] = None
            except OSError:
                res["t"] = time.time() - t0
            finally:
                s.close()

        th = threading.Thread(target=trickle)
        th.start()
        time.sleep(1)
        served = good(port, lines[:64], ref[0][64])
        th.join()
        r.check("slowloris (a byte every 0.5 s): another client is served meanwhile", served)
        r.check("slowloris: cut by --request-timeout-s 3", res.get("t") is not None and
                res["t"] < 7, str(res))
        r.check("/metrics: the latency histogram counts the requests",
                metric(port, "ember_serve_request_seconds_count") >= 10)
        r.check("/metrics: 400s counted", metric(port, 'ember_serve_requests_total{transport="http",code="400"}') == 4)
        r.check("/metrics: rows scored", metric(port, "ember_serve_rows_total") > 365)
        p.terminate()
        p.wait(timeout=30)
        r.check("ps-serve stops on SIGTERM with 0", p.returncode == 0, str(p.returncode))

        # 3. hot swap under load
        live = os.path.join(d, "live")
        os.makedirs(live)
        names = []
        for c in cks:
            n = open(os.path.join(c, "latest")).read().strip()
            shutil.copytree(os.path.join(c, n), os.path.join(live, n))
            names.append(n)
        set_latest(live, names[0])
        p, port = start(["--checkpoint", live, "--follow", "--poll-ms", "20", "--threads", "4"])
        stop = threading.Event()
        seen, errors = {}, []
        body = "\n".join(lines[:64]) + "\n"
        want = {steps[i]: ref[i][64] for i in range(2)}

        def client():
            while not stop.is_set():
                try:
                    st, rep = post(port, body)
                except Exception as e:  # noqa: BLE001 -- any failure is a failed request
                    errors.append(repr(e))
                    continue
                if st != 200 or want.get(rep.get("step")) != rep.get("scores"):
                    errors.append(f"{st} step {rep.get('step')}")
                else:
                    seen[rep["step"]] = seen.get(rep["step"], 0) + 1

        ths = [threading.Thread(target=client) for _ in range(4)]
        for t in ths:
            t.start()
        swapped = []
        for k in range(8):
            time.sleep(0.4)
            set_latest(live, names[(k + 1) % 2])
            # Each flip is waited for (bounded): on a loaded machine (an ASan build beside
            # other jobs) loading a version took longer than 0.4 s, and two flips in one poll
            # are one swap, or none.
            end = time.time() + 30
            while metric(port, "ember_serve_swaps_total") != k + 1 and time.time() < end:
                time.sleep(0.05)
            swapped.append(metric(port, "ember_serve_swaps_total"))
        time.sleep(0.5)
        stop.set()
        for t in ths:
            t.join()
        total = sum(seen.values())
        r.check("hot swap: no request failed, every reply one version's scores",
                not errors and total > 20, f"{total} ok, {len(errors)} bad {errors[:3]}")
        r.check("hot swap: both steps served", len(seen) == 2, str(seen))
        r.check("/metrics: swaps counted, one per flip of latest",
                swapped == list(range(1, 9)) and metric(port, "ember_serve_swaps_total") == 8,
                str(swapped))
        p.terminate()
        p.wait(timeout=30)
        r.check("--follow: stops on SIGTERM with 0 (every version freed: ASan's leak check)",
                p.returncode == 0, "" if p.returncode == 0 else p.stderr.read()[-1500:])

        # 4. bad arguments
        for name, args, text in [("no model", [], "--checkpoint"),
                                 ("--follow with --export", ["--export", d, "--follow"], "--follow"),
                                 ("bad --http", ["--checkpoint", cks[0], "--http", "nowhere"], "--http")]:
            q = subprocess.run([f"{h.BIN}/ps-serve"] + args, capture_output=True, text=True, timeout=60)
            err = [l for l in q.stderr.splitlines() if l.startswith("ps-serve:")]
            r.check(f"{name}: exit 2, one line", q.returncode == 2 and len(err) == 1 and text in err[0],
                    f"{q.returncode} {q.stderr[-300:]!r}")
finally:
    serve_proc.kill_all(procs)
r.finish()
