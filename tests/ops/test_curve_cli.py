#!/usr/bin/python3
"""test_curve_cli: the command lines of CURVE (issue 18).

1. ps-keygen --out PREFIX: PREFIX.secret is mode 0600 and PREFIX.public 0644, each one Z85 key
   and a newline; the public key is the X25519 public key of the secret as Python's
   `cryptography` computes it (Z85 decoded here by the RFC 32 alphabet, checked on the RFC's
   own example); a second run refuses to overwrite (exit 2, one line, files unchanged);
   --force replaces the pair; --help exits 0.
2. Bad key files and half a flag pair, for ps-server (--curve-secret/--curve-clients) and for
   every client binary (ps-worker, ps-bench: --curve-secret/--curve-server): exit 2 with one
   line naming the problem, before anything is bound or connected (the server prints no
   "listening" line; a bounded run that did not refuse would time out).
3. ps-server without the flags logs exactly one WARN line saying it is unauthenticated, and
   with them none, but a line naming CURVE and the number of client keys.
4. ps-net-bench --curve (its own servers and client with fresh pairs) measures Ember.
"""
import os
import shutil
import signal
import stat
import subprocess
import tempfile

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from deploy_checks import check as _check, finish, free_port

BIN = os.environ.get("EMBER_BIN", "build/bin")
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def check(name, cond, detail=""):
    """deploy_checks' check, with the name of the rule first and its details on failure."""
    return _check(cond, f"{name}: {detail}" if detail else name)


def z85_decode(s):
    out = bytearray()
    for i in range(0, len(s), 5):
        v = 0
        for ch in s[i:i + 5]:
            v = v * 85 + Z85.index(ch)
        out += v.to_bytes(4, "big")
    return bytes(out)


def z85_encode(b):
    s = ""
    for i in range(0, len(b), 4):
        v = int.from_bytes(b[i:i + 4], "big")
        s += "".join(Z85[(v // 85 ** k) % 85] for k in range(4, -1, -1))
    return s


def run(args, timeout=20):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def one_line_exit2(name, args, must_say):
    try:
        p = run(args, timeout=15)
    except subprocess.TimeoutExpired:
        check(name, False, "did not refuse (still running after 15 s)")
        return
    err = p.stderr.strip()
    check(name, p.returncode == 2 and len(err.splitlines()) == 1 and must_say in err
          and "listening" not in p.stdout,
          f"rc {p.returncode}, stderr {err!r}")


def test_keygen(d):
    check("z85 codec on RFC 32's example",
          z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld")
    p = run([f"{BIN}/ps-keygen", "--help"])
    check("ps-keygen --help", p.returncode == 0 and "--out" in p.stdout and "--force" in p.stdout)
    prefix = os.path.join(d, "k")
    os.umask(0)  # the modes must be ps-keygen's, not the umask's
    p = run([f"{BIN}/ps-keygen", "--out", prefix])
    os.umask(0o022)
    check("ps-keygen exit 0", p.returncode == 0, p.stderr)
    sec_text = open(prefix + ".secret").read()
    pub_text = open(prefix + ".public").read()
    check("secret mode 0600", stat.S_IMODE(os.stat(prefix + ".secret").st_mode) == 0o600)
    check("public mode 0644", stat.S_IMODE(os.stat(prefix + ".public").st_mode) == 0o644)
    check("one Z85 key and a newline each",
          all(len(t) == 41 and t.endswith("\n") and all(c in Z85 for c in t[:40])
              for t in (sec_text, pub_text)))
    key = X25519PrivateKey.from_private_bytes(z85_decode(sec_text[:40]))
    pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    check("public = X25519(secret) (cryptography)", z85_encode(pub) == pub_text[:40])
    check("the public key printed", pub_text[:40] in p.stdout)
    p = run([f"{BIN}/ps-keygen", "--out", prefix])
    check("no overwrite: exit 2, one line",
          p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--force" in p.stderr,
          p.stderr)
    check("no overwrite: files unchanged",
          open(prefix + ".secret").read() == sec_text and open(prefix + ".public").read() == pub_text)
    p = run([f"{BIN}/ps-keygen", "--out", prefix, "--force"])
    check("--force replaces the pair", p.returncode == 0 and open(prefix + ".public").read() != pub_text
          and stat.S_IMODE(os.stat(prefix + ".secret").st_mode) == 0o600)
    one_line_exit2("ps-keygen without --out", [f"{BIN}/ps-keygen"], "--out")
    p = run([f"{BIN}/ps-keygen", "--out", f"{d}/no/such/k"])
    check("ps-keygen into a missing dir: exit 1, one line",
          p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "no/such" in p.stderr,
          p.stderr)


def bad_files(d):
    """name -> (path, what the message must say) of key files every binary must refuse."""
    good = os.path.join(d, "good")
    run([f"{BIN}/ps-keygen", "--out", good])
    files = {}

    def put(name, text, mode):
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)
        return p
    sec = open(good + ".secret").read()
    files["missing"] = (os.path.join(d, "nope.secret"), "nope.secret")
    files["short"] = (put("short.secret", sec[:39] + "\n", 0o600), "not a key")
    files["not Z85"] = (put("notz85.secret", "~" + sec[1:], 0o600), "not Z85")
    files["readable by others"] = (put("open.secret", sec, 0o644), "chmod 600")
    return good, files


def test_server_flags(d, good, files):
    srv = f"{BIN}/ps-server"
    base = [srv, "--listen", f"tcp://127.0.0.1:{free_port()}", "--data-dir", f"{d}/never"]
    clients = os.path.join(d, "clients")
    os.makedirs(clients, exist_ok=True)
    shutil.copy(good + ".public", clients)
    one_line_exit2("ps-server --curve-secret alone", base + ["--curve-secret", good + ".secret"],
                   "go together")
    one_line_exit2("ps-server --curve-clients alone", base + ["--curve-clients", clients],
                   "go together")
    for name, (path, say) in files.items():
        one_line_exit2(f"ps-server secret {name}",
                       base + ["--curve-secret", path, "--curve-clients", clients], say)
    empty = os.path.join(d, "empty")
    os.makedirs(empty, exist_ok=True)
    one_line_exit2("ps-server empty clients dir",
                   base + ["--curve-secret", good + ".secret", "--curve-clients", empty],
                   "no NAME.public")
    badc = os.path.join(d, "badclients")
    os.makedirs(badc, exist_ok=True)
    shutil.copy(good + ".public", badc)
    with open(os.path.join(badc, "eve.public"), "w") as f:
        f.write("not a key\n")
    one_line_exit2("ps-server bad key in the clients dir",
                   base + ["--curve-secret", good + ".secret", "--curve-clients", badc],
                   "eve.public")
    check("no data dir made by a refused start", not os.path.exists(f"{d}/never"))


def test_client_flags(d, good, files):
    url = f"tcp://127.0.0.1:{free_port()}"  # nothing listens: a client that got past the keys
    # would wait on it (bounded by one_line_exit2's 15 s)
    data = os.path.join(d, "train.tsv")
    with open(data, "w") as f:
        f.write("1" + "\t1" * 13 + "\tab" * 26 + "\n")
    clients = {
        "ps-worker": [f"{BIN}/ps-worker", "--servers", url, "--train", data, "--timeout-ms", "60000"],
        "ps-bench": [f"{BIN}/ps-bench", "--servers", url, "--closed-loop", "--duration", "1",
                     "--timeout-ms", "60000"],
    }
    for prog, base in clients.items():
        one_line_exit2(f"{prog} --curve-secret alone", base + ["--curve-secret", good + ".secret"],
                       "go together")
        one_line_exit2(f"{prog} --curve-server alone", base + ["--curve-server", good + ".public"],
                       "go together")
        for name, (path, say) in files.items():
            one_line_exit2(f"{prog} secret {name}",
                           base + ["--curve-secret", path, "--curve-server", good + ".public"], say)
        one_line_exit2(f"{prog} server key missing",
                       base + ["--curve-secret", good + ".secret", "--curve-server", f"{d}/no.public"],
                       "no.public")
        p = run(base[:1] + ["--help"])
        check(f"{prog} --help lists the CURVE flags",
              "--curve-secret" in p.stdout and "--curve-server" in p.stdout)


def test_net_bench():
    p = run([f"{BIN}/ps-net-bench", "--curve", "--dims", "16", "--servers", "1", "--inflight", "1",
             "--ops", "pull", "--no-raw", "--duration", "0.2", "--warmup", "0.1", "--key-space", "4096"],
            timeout=120)
    check("ps-net-bench --curve measures Ember over CURVE",
          p.returncode == 0 and any(l.startswith("ember  pull") for l in p.stdout.splitlines()),
          p.stdout + p.stderr)


def server_log(args, d, name):
    """Starts ps-server with args, waits (bounded) for its listening line, stops it by PID;
    returns its stderr."""
    log = open(os.path.join(d, name + ".log"), "w+")
    p = subprocess.Popen([f"{BIN}/ps-server", "--listen", f"tcp://127.0.0.1:{free_port()}",
                          "--data-dir", os.path.join(d, name), "--threads", "0"] + args,
                         stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = p.stdout.readline()  # the listening line (or EOF if it died)
        check(f"{name}: started", "listening" in line, line)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    log.seek(0)
    return log.read()


def test_server_warning(d, good):
    err = server_log([], d, "plain")
    warn = [l for l in err.splitlines() if "WARN" in l and "unauthenticated" in l]
    check("unauthenticated server: one WARN line", len(warn) == 1, err)
    clients = os.path.join(d, "clients")
    err = server_log(["--curve-secret", good + ".secret", "--curve-clients", clients], d, "curve")
    check("CURVE server: no unauthenticated WARN", "unauthenticated" not in err, err)
    check("CURVE server: says CURVE and 1 client key", "CURVE" in err and "1 client key(s)" in err, err)


def main():
    d = tempfile.mkdtemp(prefix="ember-curve-cli-")
    try:
        test_keygen(d)
        good, files = bad_files(d)
        test_server_flags(d, good, files)
        test_client_flags(d, good, files)
        test_server_warning(d, good)
        test_net_bench()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish("ok: " + __doc__.split(chr(10))[0])


if __name__ == "__main__":
    main()
