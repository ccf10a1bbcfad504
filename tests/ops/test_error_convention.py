#!/usr/bin/env python3
"""docs/DESIGN.md "Errors", enforced on every public function: the declarations of every public
header (a tracked .h outside tests/ and bench/ whose name does not end in _int.h) are parsed,
each function's error convention is classified and counted, and the rules below are checked:

  R1  a `ps_error *` parameter comes last, and its function returns ps_status;
  R2  a ps_status return without `ps_error *err` (a bare status) only for the compute and
      collectives vtables' families, or on the allow-list with its reason;
  R3  no int status: an int whose comment says it returns -1 or "0 on success" is a ps_status
      with err (int is for counts and values), and an int predicate (_is_, _has_) is a bool;
  R4  a constructor (_create, _new, _open, _load, _unpack, _pack) returns ps_status and its
      object through an out pointer, not a pointer that is NULL on failure.

ALLOWED lists today's exceptions, each with why; an entry that no longer breaks its rule fails
too (the list only shrinks). A self-check plants a header breaking each rule and requires each
to be reported. Prints the counts per convention."""
import collections
import os
import re
import subprocess
import sys

SRC = os.environ.get("EMBER_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# The mechanism itself: ps_error_set/_prefix/_clear/_str take err first.
EXEMPT_FILES = {"common/ps_status.h"}

# R2's families (DESIGN.md "Errors", exceptions on purpose): the compute backends' operations
# (the ps_kern_i vtable and its inline wrappers) and the collectives' operations.
BARE_FAMILIES = (("kernels/", "ps_kern_"), ("kernels/", "ps_cuda_"),
                 ("worker/collectives/", "ps_coll_"))

# name -> why it is allowed today. Removing an exception = fixing the function and its line.
ALLOWED = {
    # -- R2, bare status: the failure is a caller's bug (a bad size or id) or no memory, and
    #    the status says it all; a message would be formatted on a hot path for nobody.
    "ps_client_rdv_set": "rendezvous callback: keeps the ps_rendezvous signature",
    "ps_client_rdv_get": "rendezvous callback: keeps the ps_rendezvous signature",
    "ps_ckpt_step_name": "path builder: fails only on a too-long path (PS_ERR_INVALID)",
    "ps_ckpt_step_path": "path builder: fails only on a too-long path",
    "ps_ckpt_file_path": "path builder: fails only on a too-long path",
    "ps_ckpt_shard_path": "path builder: fails only on a too-long path",
    "ps_ckpt_step_shard_path": "path builder: fails only on a too-long path",
    "ps_ckpt_server_root": "path builder: fails only on a too-long path",
    "ps_ckpt_latest_path": "path builder: fails only on a too-long path",
    "ps_dedup_create": "hot path: fails only on no memory",
    "ps_dedup_keys": "hot path: fails only on no memory",
    "ps_dedup_sum_at": "hot path: fails only on a bad index (a bug)",
    "ps_dedup_gather_unique_at": "hot path: fails only on a bad index (a bug)",
    "ps_mkdir_p": "errno-style: the caller names the path; TODO err",
    "ps_rm_rf": "errno-style: the caller names the path; TODO err",
    "ps_copy_file": "errno-style: the caller names the path; TODO err",
    "ps_fsync_dir": "errno-style: the caller names the path; TODO err",
    "ps_metrics_create": "registry: fails only on no memory or a bad name (a bug)",
    "ps_metrics_counter": "registry: fails only on no memory or a bad name (a bug)",
    "ps_metrics_gauge": "registry: fails only on no memory or a bad name (a bug)",
    "ps_metrics_histogram": "registry: fails only on no memory or a bad name (a bug)",
    "ps_metric_series": "registry: fails only on no memory or a bad label count (a bug)",
    "ps_metric_set_collect": "registry: fails only on a bad family (a bug)",
    "ps_metrics_gauge_fn": "registry: fails only on no memory or a bad name (a bug)",
    "ps_metrics_counter_fn": "registry: fails only on no memory or a bad name (a bug)",
    "ps_metrics_add_process": "registry: fails only on no memory",
    "ps_metrics_render": "registry: fails only on no memory",
    "ps_cublas_fail": "ps_cuda_check.h's reporter: turns a cuBLAS code into a status, like "
                      "the compute ops it serves",
    "ps_quant_int8_encode": "hot path: fails only on a bad size (a bug)",
    "ps_store_get_spec": "hot path of the server: not found is the whole story",
    "ps_store_pull": "hot path of the server: the status travels in the reply",
    "ps_store_pull_rows": "hot path of the server: the status travels in the reply",
    "ps_store_push": "hot path of the server: the status travels in the reply",
    "ps_store_batch_create": "hot path of the server: the status travels in the reply",
    "ps_store_batch_check_shard": "hot path of the server: the status travels in the reply",
    "ps_store_pull_batch": "hot path of the server: the status travels in the reply",
    "ps_store_push_batch": "hot path of the server: the status travels in the reply",
    "ps_store_pull_state": "hot path of the server: the status travels in the reply",
    "ps_store_pull_state_batch": "hot path of the server: the status travels in the reply",
    "ps_store_warm": "hot path of the server: the status travels in the reply",
    "ps_store_warm_batch": "hot path of the server: the status travels in the reply",
    "ps_server_run": "the loop: a failure is logged once by the server's own event log",
    "ps_server_stats_init": "fails only on no memory",
    "ps_server_stats_read": "fails only on no memory",
    "ps_server_feed": "test hook: the status is the reply's",
    "ps_server_metrics_register": "registry: fails only on no memory",
    "ps_server_metrics_register_latency": "registry: fails only on no memory",
    "ps_ckpt_pull": "tools: not found is the whole story",
    "ps_export_model_pull": "tools: not found is the whole story",
    "ps_predictor_score": "tools: the client's status; TODO err",
    "ps_criteo_bin_decode": "hot path of the reader: a corrupt record is PS_ERR_CORRUPT",
    "ps_criteo_bin_decode_header": "a corrupt header is PS_ERR_CORRUPT; TODO err",
    "ps_criteo_bin_writer_create": "I/O: the caller names the file; TODO err",
    "ps_criteo_bin_write": "I/O: the caller names the file; TODO err",
    "ps_criteo_bin_writer_create_v2": "I/O: the caller names the file; TODO err",
    "ps_criteo_bin_write_sample": "I/O: the caller names the file; TODO err",
    "ps_criteo_bin_writer_close": "I/O: the caller names the file; TODO err",
    "ps_eval_create": "fails only on no memory",
    "ps_eval_add": "hot path: fails only on a bad size (a bug)",
    "ps_eval_merge": "fails only on mismatched shapes (a bug)",
    "ps_eval_compute": "fails only on no memory",
    "ps_eval_allgather": "a collectives op (bare, like them)",
    "ps_data_detect": "I/O: the caller names the file; TODO err",
    "ps_data_count_lines": "I/O: the caller names the file; TODO err",
    "ps_data_count_rows": "I/O: the caller names the file; TODO err",
    "ps_sample_buf_reserve": "hot path: fails only on no memory",
    "ps_sample_from_criteo": "hot path: a bad line is PS_ERR_PARSE, counted by the reader",
    "ps_sample_to_criteo": "hot path: fails only on a small buffer (a bug)",
    "ps_sample_check": "hot path: a bad sample is PS_ERR_PARSE, counted by the reader",
    "ps_shuffle_create": "fails only on no memory",
    "ps_shuffle_next": "the reader's status, passed through",
    "ps_dlrm_opt_parse": "name parser: the caller prints the flag and its choices",
    "ps_dlrm_interaction_parse": "name parser: the caller prints the flag and its choices",
    "ps_dlrm_precision_parse": "name parser: the caller prints the flag and its choices",
    "ps_dlrm_forward": "hot path: the compute vtable's status (DESIGN.md)",
    "ps_dlrm_backward": "hot path: the compute vtable's status",
    "ps_dlrm_step": "hot path: the compute vtable's status",
    "ps_dlrm_predict": "hot path: the compute vtable's status",
    "ps_dlrm_last_probs": "fails only on a bad size (a bug)",
    "ps_dlrm_get_params": "fails only on a bad size (a bug)",
    "ps_dlrm_set_params": "fails only on a bad size (a bug)",
    "ps_dlrm_get_grads": "fails only on a bad size (a bug)",
    "ps_dlrm_layer_info": "fails only on a bad index (a bug)",
    "ps_dlrm_cross_info": "fails only on a bad index (a bug)",
    "ps_dlrm_get_opt_state": "fails only on a bad size (a bug)",
    "ps_dlrm_set_opt_state": "fails only on a bad size (a bug)",
    "ps_train_run": "the trainer logs its own run (ps-worker's main prints nothing more)",
    "ps_rowcache_create": "fails only on no memory",
    # -- R3, int status.
    "ps_cli_run": "a main's helper: returns -1 to go on, else the exit status",
    "ps_log_apply_level": "a main's helper: prints PROG: ... and returns -1; callers in "
                          "server/, tools/ps_serve*, worker/ps_worker* (TODO)",
    "ps_split_list": "count or -1; callers in server/ and worker/ps_train* (TODO)",
    "ps_dlrm_parse_mlp": "count or -1; a caller in worker/ps_train* (TODO)",
    "ps_data_is_stream": "int predicate; a caller in worker/ps_train* (TODO bool)",
    "ps_schema_is_criteo": "int predicate; a caller in worker/ps_train* (TODO bool)",
    # -- R4, a constructor returning a pointer.
    "ps_hist_create": "fails only on no memory (NULL)",
    "ps_schema_sep_new": "fails only on no memory (NULL)",
    "ps_wire_header_unpack": "protobuf-c's own shape: NULL is a malformed header (PS_ERR_PROTO)",
    "ps_wire_header_pack": "protobuf-c's own shape: NULL is no memory",
}

ERR_LAST = re.compile(r'(const\s+)?(ps|ember)_error\s*\*\s*\w*$')
CTOR = re.compile(r'_(create|new|open|load|unpack|pack)(_\w+)?$')
INT_STATUS_DOC = re.compile(r'(?<![\w-])-1\b|\b0 on success|\b0 ok\b|nonzero on (error|failure)')


def public_headers():
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "*.h"], capture_output=True,
                             text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [os.path.relpath(os.path.join(d, f), SRC) for d, _, fs in os.walk(SRC)
               for f in fs if f.endswith(".h")]
    return sorted(p for p in out if not p.startswith(("tests/", "bench/", "build"))
                  and not p.endswith("_int.h"))


def strip(text):
    """Comments, preprocessor lines (with continuations), __attribute__((...)) and extern "C"
    braces out, so that what is left is declarations and bodies."""
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', '', text)
    out, cont = [], False
    for line in text.split('\n'):
        if cont or line.lstrip().startswith('#'):
            cont = line.rstrip().endswith('\\')
            continue
        out.append(line)
    text = '\n'.join(out)
    while True:
        i = text.find('__attribute__')
        if i < 0:
            break
        k, depth = text.index('(', i), 0
        while True:
            depth += {'(': 1, ')': -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        text = text[:i] + ' ' + text[k + 1:]
    return re.sub(r'extern\s+"C"\s*\{', ' ', text)


def statements(text):
    """Top-level statements; an inline function's body and a struct's body are skipped."""
    cur, i, n = '', 0, len(text)
    while i < n:
        c = text[i]
        if c == ';':
            yield cur.strip()
            cur = ''
        elif c == '{':
            depth, i = 1, i + 1
            while depth and i < n:
                depth += (text[i] == '{') - (text[i] == '}')
                i += 1
            s = cur.strip()
            if re.search(r'\)\s*$', s) and not s.startswith(('typedef', 'struct', 'enum', 'union')):
                yield s
                cur = ''
            else:
                cur += ' {} '
            continue
        elif c != '}':
            cur += c
        i += 1


FN = re.compile(r'^(?P<ret>[\w\s\*]*?[\w\*])\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>.*)\)$', re.S)


def doc_of(raw_lines, name):
    """The comment block above a declaration of name (one comment may head a group of adjacent
    declarations: `int a(...);` right above is skipped), and its own line's trailing comment."""
    for i, line in enumerate(raw_lines):
        if re.search(r'\b' + name + r'\s*\(', line) and not line.lstrip().startswith(('*', '/')):
            j, doc = i - 1, [line]
            while j >= 0 and re.match(r'\w[^/]*\);\s*$', raw_lines[j]):
                j -= 1
            while j >= 0 and (raw_lines[j].lstrip().startswith(('/*', '*', '//'))
                              or raw_lines[j].rstrip().endswith('*/')):
                doc.insert(0, raw_lines[j])
                j -= 1
            return '\n'.join(doc)
    return ''


def functions(path, text):
    raw = text.split('\n')
    for s in statements(strip(text)):
        s = ' '.join(s.split())
        if s.startswith('typedef') or '{' in s:
            continue
        m = FN.match(s)
        if not m:
            continue
        ret = re.sub(r'\b(extern|static|inline)\b', ' ', m['ret'])
        ret = ' '.join(ret.replace('*', ' * ').split()).replace(' *', '*')
        if not ret or ret == 'return':
            continue
        yield {"file": path, "name": m['name'], "ret": ret, "params": m['params'],
               "doc": doc_of(raw, m['name'])}


def classify(f):
    """The convention of f: status+err, status, int status, bool, void, pointer, value."""
    ret, params = f["ret"], f["params"]
    has_err = re.search(r'\b(ps|ember)_error\b', params) is not None
    err_last = ERR_LAST.search(params.split(',')[-1].strip()) is not None
    if ret == 'ps_status' or (ret == 'int' and 'ember_error' in params):
        return 'status+err' if err_last else 'status'
    if ret == 'int' and (INT_STATUS_DOC.search(f["doc"]) or re.search(r'_(is|has)_', f["name"])):
        return 'int status'
    if has_err:
        return ret + '+err'
    if ret in ('bool', 'int', 'void'):
        return ret
    return 'pointer' if ret.endswith('*') else 'value'


def violations(funcs):
    """(name, rule, line) for each function breaking a rule, before the allow-list."""
    bad = []
    for f in funcs:
        if f["file"] in EXEMPT_FILES:
            continue
        name, ret, params, conv = f["name"], f["ret"], f["params"], classify(f)
        where = f"{f['file']}: {ret} {name}(...)"
        has_err = re.search(r'\b(ps|ember)_error\b', params) is not None
        if has_err and (conv != 'status+err'):
            bad.append((name, "R1", f"{where}: ps_error *err must be last and the return a "
                                    "ps_status"))
        elif conv == 'status' and not any(f["file"].startswith(d) and name.startswith(p)
                                          for d, p in BARE_FAMILIES):
            bad.append((name, "R2", f"{where}: a bare ps_status; take ps_error *err last"))
        elif conv == 'int status':
            bad.append((name, "R3", f"{where}: an int status; return ps_status (or bool for a "
                                    "predicate)"))
        elif ret.endswith('*') and CTOR.search(name):
            bad.append((name, "R4", f"{where}: a constructor returning a pointer; return "
                                    "ps_status with the object in an out pointer"))
    return bad


def check(funcs):
    bad = violations(funcs)
    fails = [line for name, _, line in bad if name not in ALLOWED]
    names = {f["name"] for f in funcs}
    broken = {name for name, _, _ in bad}
    for name in sorted(ALLOWED):
        if name not in broken:
            why = "is no longer declared" if name not in names else "follows the convention now"
            fails.append(f"ALLOWED[{name!r}] {why}: take it off the list")
    return fails, bad


def main():
    funcs = [f for p in public_headers()
             for f in functions(p, open(os.path.join(SRC, p), errors="replace").read())]
    # Self-check: one planted function per rule, each must be reported.
    planted = '''
/* Returns 0 on success, -1 on a bad value. */
int ps_selfcheck_parse(const char *s, int *out);
int ps_selfcheck_parse_too(const char *s, double *out);
int ps_selfcheck_is_ok(const char *s);
ps_status ps_selfcheck_bare(int x);
ps_status ps_selfcheck_first(ps_error *err, int x);
bool ps_selfcheck_pred(int x, ps_error *err);
struct ps_selfcheck *ps_selfcheck_create(int n);
static inline ps_status ps_selfcheck_inline(int x) { return x ? PS_OK : PS_ERR_INVALID; }
ps_status ps_selfcheck_fine(int x, ps_error *err);
'''
    got = {(n, r) for n, r, _ in violations(list(functions("common/ps_selfcheck.h", planted)))}
    want = {("ps_selfcheck_parse", "R3"), ("ps_selfcheck_parse_too", "R3"), ("ps_selfcheck_is_ok", "R3"),
            ("ps_selfcheck_bare", "R2"), ("ps_selfcheck_first", "R1"),
            ("ps_selfcheck_pred", "R1"), ("ps_selfcheck_create", "R4"),
            ("ps_selfcheck_inline", "R2")}
    if got != want:
        print("FAIL self-check: planted", sorted(want), "reported", sorted(got))
        return 1
    counts = collections.Counter(classify(f) for f in funcs)
    print(f"{len(funcs)} public functions in {len(public_headers())} public headers:",
          ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    fails, bad = check(funcs)
    allowed = collections.Counter(r for n, r, _ in bad if n in ALLOWED)
    print(f"{sum(allowed.values())} exceptions allowed today:",
          ", ".join(f"{r} {n}" for r, n in sorted(allowed.items())))
    print("".join(f"FAIL {line}\n" for line in fails) + ("0 passed, 1 failed" if fails else
                                                       "1 passed, 0 failed"))
    return int(bool(fails))


if __name__ == "__main__":
    sys.exit(main())
