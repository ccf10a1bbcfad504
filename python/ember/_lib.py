"""_lib: loads libember.so and declares the C signatures of ember.h for ctypes.

Where the library is: $EMBER_LIBRARY when set (tests and the build tree), else the path that
the install wrote into _paths.py (relative to this package: P/lib from P/lib/python3/
dist-packages/ember), else the loader's search path (libember.so.0). ctypes.CDLL releases the
GIL around every call, so network waits do not hold it."""
import ctypes
import os

_u64p = ctypes.POINTER(ctypes.c_uint64)
_u32p = ctypes.POINTER(ctypes.c_uint32)
_f32p = ctypes.POINTER(ctypes.c_float)


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 512)]


def _find():
    env = os.environ.get("EMBER_LIBRARY")
    if env:
        return env
    try:
        from . import _paths
        here = os.path.dirname(os.path.abspath(__file__))
        p = os.path.normpath(os.path.join(here, _paths.LIBDIR_FROM_PACKAGE, _paths.SONAME))
        if os.path.exists(p):
            return p
        return _paths.SONAME
    except ImportError:
        return "libember.so.0"


lib = ctypes.CDLL(_find())
_P = ctypes.c_void_p
_E = ctypes.POINTER(Error)
_SIGS = {
    "ember_version": (ctypes.c_char_p, []),
    "ember_api_version": (ctypes.c_int, []),
    "ember_client_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_P), _E]),
    "ember_client_close": (None, [ctypes.POINTER(_P)]),
    "ember_table_declare": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32,
                                           ctypes.c_char_p, _E]),
    "ember_table_attach": (ctypes.c_int, [_P, ctypes.c_char_p, _u32p, _u32p, _E]),
    "ember_table_dim": (ctypes.c_uint32, [_P, ctypes.c_uint32]),
    "ember_pull": (ctypes.c_int, [_P, ctypes.c_uint32, _u64p, ctypes.c_size_t, _f32p, _E]),
    "ember_push": (ctypes.c_int, [_P, ctypes.c_uint32, _u64p, ctypes.c_size_t, _f32p, _E]),
    "ember_pull_start": (ctypes.c_int, [_P, ctypes.c_uint32, _u64p, ctypes.c_size_t, _f32p,
                                        ctypes.POINTER(_P), _E]),
    "ember_push_start": (ctypes.c_int, [_P, ctypes.c_uint32, _u64p, ctypes.c_size_t, _f32p,
                                        ctypes.POINTER(_P), _E]),
    "ember_wait": (ctypes.c_int, [_P, ctypes.POINTER(_P), _E]),
    "ember_step": (ctypes.c_int, [_P, ctypes.c_uint32, _E]),
    "ember_current_step": (ctypes.c_uint64, [_P]),
    "ember_set_step": (None, [_P, ctypes.c_uint64]),
    "ember_barrier": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, _E]),
    "ember_checkpoint": (ctypes.c_int, [_P, ctypes.c_char_p, _E]),
    "ember_hash_feature": (ctypes.c_uint64, [ctypes.c_uint32, ctypes.c_uint32]),
    "ember_hash_missing": (ctypes.c_uint64, [ctypes.c_uint32]),
    "ember_hash_features": (None, [ctypes.c_uint32, _u32p, ctypes.c_size_t, _u64p]),
    "ember_hash_value": (ctypes.c_uint64, [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]),
}
for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
