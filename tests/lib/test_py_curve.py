#!/usr/bin/python3
"""test_py_curve: the Python client through CURVE. A ps-server serving only the keys in its
clients directory (ps-keygen keys): ember.Client with the client's key files
(curve_secret_file / curve_server_file) or the same keys as Z85 strings (curve_secret /
curve_server) declares, pushes and pulls; without keys, or with a key the server does not
list, the declare fails on its bound with an EmberError naming the server; one key file
without the other is refused at once."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import BIN, Results, Servers, use_build_package  # noqa: E402

use_build_package()
import ember  # noqa: E402


def keygen(prefix):
    subprocess.run([os.path.join(BIN, "ps-keygen"), "--out", prefix], check=True, timeout=30,
                   capture_output=True)
    return prefix + ".secret", prefix + ".public"


def z85(path):
    """The Z85 key of a ps-keygen file (one line: the key)."""
    with open(path) as f:
        return f.read().strip()


def main():
    r = Results()
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "clients"))
        ssec, spub = keygen(os.path.join(d, "server"))
        csec, _ = keygen(os.path.join(d, "clients", "alice"))
        osec, _ = keygen(os.path.join(d, "other"))
        with Servers(1, extra=("--curve-secret", ssec, "--curve-clients", os.path.join(d, "clients"))) as s:
            url = s.urls[0]
            c = ember.Client([url], timeout_ms=10000, curve_secret_file=csec, curve_server_file=spub)
            t = c.table("curved", dim=4, optimizer="sgd", lr=1.0, init=0.1)
            k = np.array([1, 2], np.uint64)
            a = t.pull(k)
            t.push(k, np.ones((2, 4), np.float32))
            r.check("with key files: declare, push, pull", np.allclose(t.pull(k), a - 1, atol=1e-6))
            c.close()
            c = ember.Client([url], timeout_ms=10000, curve_secret=z85(csec), curve_server=z85(spub))
            r.check("with Z85 strings: the same table", np.allclose(c.table("curved", dim=4, optimizer="sgd", lr=1.0, init=0.1).pull(k), a - 1, atol=1e-6))
            c.close()
            for name, kw in [("no keys", {}),
                             ("a key the server does not list", dict(curve_secret_file=osec, curve_server_file=spub))]:
                c = ember.Client([url], timeout_ms=1500, **kw)
                try:
                    c.table("curved", dim=4, optimizer="sgd", lr=1.0, init=0.1)
                    ok, msg = False, "declared"
                except ember.EmberError as e:
                    ok, msg = url in str(e), str(e)
                r.check(f"{name}: EmberError naming the server", ok, msg)
                c.close()
            try:
                ember.Client([url], curve_secret_file=csec)
                ok, msg = False, "accepted"
            except ember.EmberError as e:
                ok, msg = e.code == 1, str(e)
            r.check("one key file without the other is refused", ok, msg)
    r.finish()


if __name__ == "__main__":
    main()
