"""ps-worker --metrics-port: while training, /metrics serves the worker's series (samples,
step, loss, per-phase seconds) in the Prometheus text format, and they move as steps go by."""
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import harness as h

def value(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None

r = h.Results()
with tempfile.TemporaryDirectory() as d:
    train, test, _ = h.datagen(d, 60000, 1000, seed=3)
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    cmd = [h.LOCAL, "--bin", h.BIN, "--servers", "1", "--workers", "1", "--", "--train", train,
           "--batch", "256", "--threads", "1", "--metrics-port", str(port), "--epochs", "3"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    samples = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(samples) < 2 and p.poll() is None:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                v = value(text, "ember_worker_samples_total")
                if v and (not samples or v > samples[-1]):
                    samples.append(v)
                    last = text
            except OSError:
                pass
            time.sleep(0.3)
    finally:
        os.killpg(p.pid, 15)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
    r.check("samples counter grows while training", len(samples) >= 2, f"{samples}")
    if samples:
        r.check("step gauge present", (value(last, "ember_worker_step") or 0) > 0)
        r.check("loss gauge plausible", 0 < (value(last, "ember_worker_loss") or -1) < 5)
        r.check("phase seconds present", 'phase="compute"' in last)
        # issue 32: the wait on servers, its push part, and the row counters
        r.check("wait on servers and rows pulled present",
                'phase="push_wait"' in last and
                (value(last, "ember_worker_server_wait_seconds_total") or -1) > 0 and
                (value(last, "ember_worker_rows_pulled_total") or -1) > 0 and
                value(last, "ember_worker_rows_refreshed_total") is not None and
                value(last, "ember_worker_cache_hits_total") is not None and
                value(last, "ember_worker_cache_lookups_total") is not None)
        r.check("process metrics present", "process_resident_memory_bytes" in last)
r.finish()
