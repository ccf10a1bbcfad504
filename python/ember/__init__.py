"""ember: Python binding of Ember's client library (libember.so, ember.h) -- embedding tables
on Ember's parameter servers, pulled and pushed as numpy arrays.

    c = ember.Client(["tcp://127.0.0.1:5555"], timeout_ms=10000)
    t = c.table("user_emb", dim=16, optimizer="adagrad", lr=0.1, init=0.01)
    s = c.table("criteo_emb")    # no dim: attach read-only to the table as the servers hold it
    rows = t.pull(keys)          # uint64 [n] -> float32 [n, dim]
    t.push(keys, grads)          # float32 [n, dim]; the server applies the optimizer
    c.step(); c.barrier(); c.checkpoint("ckpt"); c.close()

Design decisions: ctypes over the C API (no compiler, no package index: Debian's Python and
numpy are enough); each call hands whole arrays to C (no Python loop per key), and ctypes
releases the GIL for the duration of the call, so other threads run during network waits.
Failures raise ember.EmberError carrying Ember's one-line message and code. The PyTorch module
is ember.torch (imported on demand: numpy alone is enough for this one)."""
import ctypes
import zlib

import numpy as np

from ._lib import Error as _Error, lib as _lib, _u32p, _u64p, _f32p

__all__ = ["Client", "Table", "EmberError", "hash_feature", "hash_missing", "version"]


class EmberError(RuntimeError):
    """A failed Ember call: .code is Ember's status (ember.h EMBER_E*), str() its message."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def _check(rc, err):
    if rc != 0:
        raise EmberError(rc, err.msg.decode("utf-8", "replace") or f"ember error {rc}")


def version():
    return _lib.ember_version().decode()


def _options(d):
    """{"k": v} -> b"k=v,..." (None values left out; bools as 0/1)."""
    items = []
    for k, v in d.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = int(v)
        s = str(v)
        if "," in s:
            raise ValueError(f"option {k}={s!r}: ',' is not allowed in a value")
        items.append(f"{k}={s}")
    return ",".join(items).encode()


def _keys(keys):
    k = np.ascontiguousarray(keys, dtype=np.uint64)
    if k.ndim != 1:
        raise ValueError(f"keys must be one-dimensional, not of shape {k.shape}")
    return k


class Request:
    """A pull or push in flight (Table.pull_start / push_start); wait() finishes it and, for a
    pull, returns the rows."""

    def __init__(self, client, handle, rows, keep):
        self._client, self._h, self._rows, self._keep = client, handle, rows, keep

    def wait(self):
        if self._h is not None:
            err = _Error()
            h, self._h = self._h, None
            rc = _lib.ember_wait(self._client._c, ctypes.byref(h), ctypes.byref(err))
            self._keep = None
            _check(rc, err)
        return self._rows


class Table:
    """A declared table of a Client: pull and push by uint64 key (pull only when attached by
    name, read_only)."""

    def __init__(self, client, tid, name, dim, read_only=False):
        self.client, self.id, self.name, self.dim = client, tid, name, dim
        self.read_only = read_only

    def _call(self, fn, k, rows, *handle):
        """fn(client, table, keys, n, rows, [handle,] err): one C call over whole arrays."""
        err = _Error()
        rc = fn(self.client._handle(), self.id, k.ctypes.data_as(_u64p), k.shape[0],
                rows.ctypes.data_as(_f32p), *handle, ctypes.byref(err))
        _check(rc, err)

    def _rows(self, k):
        return np.empty((k.shape[0], self.dim), dtype=np.float32)

    def _grads(self, k, grads):
        g = np.ascontiguousarray(grads, dtype=np.float32)
        if g.shape != (k.shape[0], self.dim):
            raise ValueError(f"grads must have shape ({k.shape[0]}, {self.dim}), not {g.shape}")
        return g

    def pull(self, keys):
        """keys: uint64 [n] -> float32 [n, dim] (duplicates fetched once)."""
        k = _keys(keys)
        out = self._rows(k)
        self._call(_lib.ember_pull, k, out)
        return out

    def push(self, keys, grads):
        """grads: float32 [n, dim], the gradient of each key's row (duplicates summed)."""
        k = _keys(keys)
        self._call(_lib.ember_push, k, self._grads(k, grads))

    def pull_start(self, keys):
        """Sends the pull and returns a Request whose wait() gives the rows."""
        k = _keys(keys)
        out, h = self._rows(k), ctypes.c_void_p()
        self._call(_lib.ember_pull_start, k, out, ctypes.byref(h))
        return Request(self.client, h, out, None)

    def push_start(self, keys, grads):
        """Sends the push; wait() on the returned Request reports its outcome."""
        k = _keys(keys)
        g, h = self._grads(k, grads), ctypes.c_void_p()
        self._call(_lib.ember_push_start, k, g, ctypes.byref(h))
        return Request(self.client, h, None, g)

    def __repr__(self):
        ro = ", read_only=True" if self.read_only else ""
        return f"ember.Table({self.name!r}, id={self.id}, dim={self.dim}{ro})"


class Client:
    """A connection to Ember's servers (list order = shard order, as ps-worker's --servers).
    Options: timeout_ms, ckpt_timeout_ms, rank, world (for barrier), wire_f16, and CURVE keys
    curve_secret / curve_server (Z85 strings, as in ps-keygen's key files) or
    curve_secret_file / curve_server_file (the files themselves, as ps-worker's --curve-*)."""

    def __init__(self, urls, timeout_ms=30000, rank=0, world=1, wire_f16=False,
                 curve_secret=None, curve_server=None, ckpt_timeout_ms=None,
                 curve_secret_file=None, curve_server_file=None):
        if isinstance(urls, str):
            urls = [urls]
        opts = _options({"timeout_ms": timeout_ms, "ckpt_timeout_ms": ckpt_timeout_ms,
                         "rank": rank, "world": world, "wire_f16": wire_f16,
                         "curve_secret": curve_secret, "curve_server": curve_server,
                         "curve_secret_file": curve_secret_file,
                         "curve_server_file": curve_server_file})
        self._c = ctypes.c_void_p()
        err = _Error()
        rc = _lib.ember_client_open(",".join(urls).encode(), opts, ctypes.byref(self._c),
                                    ctypes.byref(err))
        _check(rc, err)
        self.tables = {}

    def _handle(self):
        if not self._c:
            raise EmberError(1, "the client is closed")
        return self._c

    def table(self, name, dim=None, id=None, optimizer="sgd", lr=0.01, init=0.05, **options):
        """Declares the table, or attaches to it when it exists with the same spec. id defaults
        to a hash of the name (1..65535); ps-worker's table is id=1, name "criteo_emb". Other options
        (ember.h): eps, beta1, beta2, l1, l2, lr_power, initial_accumulator, init_dist, init_a,
        init_b, seed, admit_threshold, ttl_steps, consistency, staleness, num_workers, and
        row_type ("f32", "f16" or "bf16": how the servers store the rows; half the bytes for
        the 16-bit ones, pulls still return float32).
        Without dim: attaches read-only by name to the table as the servers hold it (training
        or ps-server --serve), whatever its spec; its id and dim are the servers'; push raises."""
        if dim is None:
            if id is not None or options:
                raise ValueError("table(name) without dim attaches by name: no id or options")
            tid, tdim, err = ctypes.c_uint32(), ctypes.c_uint32(), _Error()
            rc = _lib.ember_table_attach(self._handle(), name.encode(), ctypes.byref(tid),
                                         ctypes.byref(tdim), ctypes.byref(err))
            _check(rc, err)
            t = Table(self, tid.value, name, tdim.value, read_only=True)
            self.tables[name] = t
            return t
        if id is None:
            id = zlib.crc32(name.encode()) % 65535 + 1
        opts = _options(dict({"optimizer": optimizer, "lr": repr(float(lr)),
                              "init": repr(float(init))}, **options))
        err = _Error()
        rc = _lib.ember_table_declare(self._handle(), id, name.encode(), dim, opts,
                                      ctypes.byref(err))
        _check(rc, err)
        t = Table(self, id, name, dim)
        self.tables[name] = t
        return t

    def step(self, table=None):
        """Ends the current step (on every table, or on `table`) and moves to the next."""
        err = _Error()
        rc = _lib.ember_step(self._handle(), table.id if table is not None else 0,
                             ctypes.byref(err))
        _check(rc, err)

    @property
    def current_step(self):
        return _lib.ember_current_step(self._handle())

    @current_step.setter
    def current_step(self, s):
        _lib.ember_set_step(self._handle(), s)

    def barrier(self, name="ember", world=0, timeout_ms=0):
        """Waits until `world` (0: the client's world) workers reached barrier `name`."""
        err = _Error()
        rc = _lib.ember_barrier(self._handle(), name.encode(), world, timeout_ms, ctypes.byref(err))
        _check(rc, err)

    def checkpoint(self, path):
        """A global checkpoint of every shard at the current step (relative paths: under each
        server's data dir)."""
        err = _Error()
        rc = _lib.ember_checkpoint(self._handle(), path.encode(), ctypes.byref(err))
        _check(rc, err)

    def close(self):
        if self._c:
            _lib.ember_client_close(ctypes.byref(self._c))
            self._c = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def hash_feature(feature_index, value):
    """ps-worker's key of categorical feature `feature_index` (0-based, C1 = 0) with value
    `value`: a 32-bit int (Criteo's 8 hex digits as an int), or a str / bytes as a schema's data
    file spells it (docs/SCHEMA.md: 8 hex digits are the number, any other value its hash, ""
    the missing key). value may be a numpy array (or a list) of either: keys come back as a
    uint64 array of its shape."""
    if isinstance(value, (str, bytes)):
        b = value.encode("utf-8") if isinstance(value, str) else value
        return int(_lib.ember_hash_value(feature_index, b, len(b)))
    if np.isscalar(value):
        return int(_lib.ember_hash_feature(feature_index, int(value)))
    a = np.asarray(value)
    if a.dtype.kind in "USO":  # strings (or objects: str or bytes): one call each
        out = np.fromiter((hash_feature(feature_index, x) for x in a.reshape(-1)), np.uint64, a.size)
        return out.reshape(a.shape)
    v = np.ascontiguousarray(a, dtype=np.uint32)
    out = np.empty(v.shape, dtype=np.uint64)
    _lib.ember_hash_features(feature_index, v.ctypes.data_as(_u32p), v.size,
                             out.ctypes.data_as(_u64p))
    return out


def hash_missing(feature_index):
    """ps-worker's key of a missing value of categorical feature `feature_index`."""
    return int(_lib.ember_hash_missing(feature_index))
