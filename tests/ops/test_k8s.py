#!/usr/bin/python3
"""test_k8s: the Kubernetes manifests in deploy/k8s parse, fit together and launch what they say.

1. Every document parses (python3-yaml) and has the fields its kind requires.
2. Cross-checks: the StatefulSet's serviceName is a headless Service selecting its pods;
   selectors match template labels; --shards equals replicas; the shard comes from the pod
   ordinal; the workers' server list names exactly ember-server-I.<service>:<zmq port> for
   I < replicas; the Jobs are Indexed with completions = parallelism = --world and
   --rank from JOB_COMPLETION_INDEX; readiness probes GET /healthz on the port passed to
   --metrics-port; Prometheus annotations name that port; every container has resource
   requests; the CUDA variant requests nvidia.com/gpu; pods run as non-root; volume mounts
   refer to declared volumes or claim templates.
3. The container command lines are run for real through /bin/sh with the manifest's
   environment and a pod's HOSTNAME / JOB_COMPLETION_INDEX, against stand-in ps-server and
   ps-worker that record their argv: shard 1 of 2, rank 1 of 2, the right server list.
   CURVE (issue 18): the server's --curve-secret/--curve-clients and every worker's
   --curve-secret/--curve-server are items of one read-only Secret volume, none readable by
   others, whose keys fit together; deploy/k8s/curve-secret.sh prints that Secret.
4. Where kubectl is installed: `kubectl apply --dry-run=client --validate=false` of every
   file against a stand-in API discovery endpoint (kubectl needs discovery to map kinds; no
   cluster here), `kubectl set resources --local` (decodes workloads into the typed API
   structs, catching type errors), and `kubectl kustomize deploy/k8s`.
"""
import base64
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading

import yaml

from deploy_checks import SRC, check, finish

K8S = os.path.join(SRC, "deploy/k8s")


def load():
    docs = []
    for name in sorted(os.listdir(K8S)):
        if not name.endswith(".yaml") or name == "kustomization.yaml":
            continue
        with open(os.path.join(K8S, name)) as f:
            for d in yaml.safe_load_all(f):
                if d is not None:
                    docs.append((name, d))
    return docs


def flag(argv, name):
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def container_cmd(c):
    return " ".join(c.get("command", []) + c.get("args", []))


def run_cmd(c, extra_env, fake_bin, out):
    """Runs container c's command with the manifest env plus extra_env, PATH = fake_bin;
    returns the argv the stand-in binary recorded."""
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "RECORD": out}
    # the downward API a kubelet would fill in: fieldRefs the manifests use
    downward = {"status.podIP": "127.0.0.1", "metadata.name": "ember-pod"}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            check(path in downward, f"{c['name']}: env {e['name']}: unexpected fieldRef {path}")
            env[e["name"]] = downward.get(path, "")
    env.update(extra_env)
    cmd = c.get("command", []) + c.get("args", [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=20)
    if not check(r.returncode == 0, f"{c['name']}: command failed: {r.stderr}"):
        return []
    with open(out) as f:
        return f.read().split("\n")[:-1]


def check_pod_spec(where, spec, labels):
    check(spec.get("securityContext", {}).get("runAsNonRoot") is True, f"{where}: pods must run as non-root")
    vols = {v["name"] for v in spec.get("volumes", [])}
    for c in spec.get("initContainers", []) + spec["containers"]:
        for k in ("name", "image"):
            check(k in c, f"{where}: container without {k}")
        check("requests" in c.get("resources", {}), f"{where}/{c.get('name')}: no resource requests")
    return vols


def main():
    docs = load()
    by_kind = {}
    for name, d in docs:
        for k in ("apiVersion", "kind", "metadata"):
            check(k in d, f"{name}: document without {k}")
        check("name" in d.get("metadata", {}), f"{name}: metadata.name missing")
        by_kind.setdefault(d.get("kind"), []).append((name, d))
    print(f"parsed {len(docs)} documents: " + ", ".join(f"{k} x{len(v)}" for k, v in sorted(by_kind.items())))

    services = {d["metadata"]["name"]: d for _, d in by_kind.get("Service", [])}
    claims = {d["metadata"]["name"] for _, d in by_kind.get("PersistentVolumeClaim", [])}
    for s in services.values():
        check(s["spec"].get("clusterIP") == "None", f"Service {s['metadata']['name']}: must be headless")

    fake = tempfile.mkdtemp(prefix="ember-k8s.")
    try:
        for b in ("ps-server", "ps-worker"):
            with open(os.path.join(fake, b), "w") as f:
                f.write('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\n')
            os.chmod(os.path.join(fake, b), 0o755)

        # --- servers
        sts_list = by_kind.get("StatefulSet", [])
        check(len(sts_list) == 1, "expected one StatefulSet")
        name, sts = sts_list[0]
        spec = sts["spec"]
        replicas = spec["replicas"]
        if not check(isinstance(replicas, int) and replicas >= 1, f"StatefulSet replicas {replicas!r} is not a positive integer"):
            replicas = int(str(replicas)) if str(replicas).isdigit() else 1
        svc = services.get(spec["serviceName"])
        check(svc is not None, f"StatefulSet serviceName {spec['serviceName']} is not a Service here")
        tmpl = spec["template"]
        labels = tmpl["metadata"]["labels"]
        check(spec["selector"]["matchLabels"].items() <= labels.items(), "StatefulSet selector does not match its template")
        check(svc and svc["spec"]["selector"].items() <= labels.items(), "server Service does not select the server pods")
        vols = check_pod_spec(name, tmpl["spec"], labels)
        vct = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        check(vct, "StatefulSet has no volumeClaimTemplates (a PVC per shard)")
        c = tmpl["spec"]["containers"][0]
        for m in c.get("volumeMounts", []):
            check(m["name"] in vols | vct, f"server mount {m['name']} has no volume")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        argv = run_cmd(c, {"HOSTNAME": f"ember-server-{replicas - 1}"}, fake, os.path.join(fake, "srv"))
        check(flag(argv, "--shard") == str(replicas - 1), f"pod ember-server-{replicas - 1} got --shard {flag(argv, '--shard')}")
        check(flag(argv, "--shards") == str(replicas), f"--shards {flag(argv, '--shards')} != replicas {replicas}")
        listen = flag(argv, "--listen") or ""
        check(listen.endswith(f":{ports['zmq']}"), f"--listen {listen} not on the zmq port")
        mport = flag(argv, "--metrics-port")
        check(mport == str(ports.get("metrics")), f"--metrics-port {mport} != metrics containerPort")
        # the kubelet's probe and Prometheus reach the pod's IP, not its loopback
        check(flag(argv, "--metrics-bind") == "0.0.0.0", "server: metrics not on --metrics-bind 0.0.0.0")
        data_dir = flag(argv, "--data-dir")
        check(any(m["mountPath"] == data_dir and m["name"] in vct for m in c["volumeMounts"]),
              f"--data-dir {data_dir} is not the per-shard PVC mount")
        rp = c.get("readinessProbe", {}).get("httpGet", {})
        check(rp.get("path") == "/healthz" and rp.get("port") in ("metrics", ports.get("metrics")),
              "server readiness probe must GET /healthz on the metrics port")
        ann = tmpl["metadata"].get("annotations", {})
        check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == mport,
              "server pods lack Prometheus scrape annotations for the metrics port")
        check(svc and {p["port"] for p in svc["spec"]["ports"]} >= {ports["zmq"]}, "Service lacks the zmq port")
        # path -> claim of every shared volume the server pods mount (for --checkpoint-dir)
        srv_claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                      for v in tmpl["spec"].get("volumes", []) if "persistentVolumeClaim" in v}
        srv_shared = {m["mountPath"]: srv_claims[m["name"]] for m in c.get("volumeMounts", [])
                      if m["name"] in srv_claims}
        server_urls = [f"tcp://ember-server-{i}.{spec['serviceName']}:{ports['zmq']}" for i in range(replicas)]
        curve_srv = (c, tmpl["spec"], argv)
        curve_wrk = []
        print(f"ok: StatefulSet {sts['metadata']['name']}: {replicas} shards, pod ember-server-{replicas - 1} runs: "
              + " ".join(argv))

        # --- workers
        jobs = by_kind.get("Job", [])
        check(len(jobs) >= 2, "expected a CPU and a CUDA worker Job")
        for name, job in jobs:
            js = job["spec"]
            check(js.get("completionMode") == "Indexed", f"{name}: Job must be Indexed")
            check(js.get("completions") == js.get("parallelism"), f"{name}: completions != parallelism")
            tmpl = js["template"]
            check(tmpl["spec"].get("restartPolicy") in ("Never", "OnFailure"), f"{name}: bad restartPolicy")
            sub = tmpl["spec"].get("subdomain")
            check(sub in services, f"{name}: subdomain {sub} is not a headless Service")
            check(services[sub]["spec"]["selector"].items() <= tmpl["metadata"]["labels"].items(),
                  f"{name}: worker Service does not select the worker pods")
            vols = check_pod_spec(name, tmpl["spec"], tmpl["metadata"]["labels"])
            for v in tmpl["spec"].get("volumes", []):
                if "persistentVolumeClaim" in v:
                    check(v["persistentVolumeClaim"]["claimName"] in claims, f"{name}: claim {v['name']} not declared")
            w = tmpl["spec"]["containers"][0]
            for m in w.get("volumeMounts", []):
                check(m["name"] in vols, f"{name}: mount {m['name']} has no volume")
            last = js["completions"] - 1
            argv = run_cmd(w, {"JOB_COMPLETION_INDEX": str(last)}, fake, os.path.join(fake, "wrk"))
            check(flag(argv, "--rank") == str(last), f"{name}: index {last} got --rank {flag(argv, '--rank')}")
            check(flag(argv, "--world") == str(js["completions"]), f"{name}: --world != completions")
            check(flag(argv, "--servers") == ",".join(server_urls),
                  f"{name}: --servers {flag(argv, '--servers')} != {','.join(server_urls)}")
            check(flag(argv, "--train") is not None, f"{name}: no --train")
            # Servers write their checkpoint shards into the worker's --checkpoint-dir: it must
            # lie on a claim the server pods mount at the same path, writable.
            ckpt = flag(argv, "--checkpoint-dir")
            if ckpt:
                wclaims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                           for v in tmpl["spec"].get("volumes", []) if "persistentVolumeClaim" in v}
                wm = [m for m in w.get("volumeMounts", []) if (ckpt + "/").startswith(m["mountPath"].rstrip("/") + "/")]
                m = max(wm, key=lambda m: len(m["mountPath"])) if wm else None
                check(m is not None and not m.get("readOnly") and
                      srv_shared.get(m["mountPath"]) == wclaims.get(m["name"]),
                      f"{name}: --checkpoint-dir {ckpt} is not on a volume the server pods mount at the same path"
                      f" (servers mount {srv_shared})")
            wports = {p["name"]: p["containerPort"] for p in w.get("ports", [])}
            ann = tmpl["metadata"].get("annotations", {})
            check(ann.get("prometheus.io/scrape") == "true" and
                  ann.get("prometheus.io/port") == flag(argv, "--metrics-port") == str(wports.get("metrics")),
                  f"{name}: Prometheus annotation / --metrics-port / containerPort disagree")
            check(flag(argv, "--metrics-bind") == "0.0.0.0", f"{name}: metrics not on --metrics-bind 0.0.0.0")
            gpu = flag(argv, "--device") == "cuda"
            res = w["resources"]
            if gpu:
                check(res.get("limits", {}).get("nvidia.com/gpu") == 1 and res.get("requests", {}).get("nvidia.com/gpu") == 1,
                      f"{name}: a CUDA worker must request and limit nvidia.com/gpu: 1")
            else:
                check("nvidia.com/gpu" not in res.get("limits", {}), f"{name}: CPU worker asks for a GPU")
            for ic in tmpl["spec"].get("initContainers", []):
                r = subprocess.run(["/bin/bash", "-n", "-c", " ".join(ic.get("args", []))], capture_output=True, text=True)
                check(r.returncode == 0, f"{name}/{ic['name']}: shell syntax: {r.stderr}")
                check(dict((e["name"], e["value"]) for e in ic.get("env", [])).get("EMBER_SERVERS") == ",".join(server_urls),
                      f"{name}/{ic['name']}: waits for other servers than the worker uses")
            curve_wrk.append((name, w, tmpl["spec"], argv))
            print(f"ok: Job {name}: {js['completions']} ranks{' on GPUs' if gpu else ''}, index {last} runs: " + " ".join(argv))
        check_curve(curve_srv, curve_wrk)
    finally:
        shutil.rmtree(fake, ignore_errors=True)

    kubectl_checks()
    finish("ok: all manifest checks passed")


def secret_items(path, container, spec):
    """What a container path is in a Secret volume: (secret name, {item path under path: key}),
    items of the file itself under "" -- or (None, {}) when no Secret volume is mounted there."""
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        root = m["mountPath"].rstrip("/") + "/"
        v = vols.get(m["name"], {})
        if not (path + "/").startswith(root) or "secret" not in v:
            continue
        rel = path[len(root):]
        sec = v["secret"]
        check(m.get("readOnly") is True, f"{container['name']}: the key volume must be read-only")
        mode = sec.get("defaultMode", 0o644)
        items = {}
        for it in sec.get("items", []):
            check(it.get("mode", mode) & 0o007 == 0, f"{container['name']}: {it['key']} readable by others")
            if it["path"] == rel:
                items[""] = it["key"]
            elif it["path"].startswith(rel + "/"):
                items[it["path"][len(rel) + 1:]] = it["key"]
        return sec.get("secretName"), items
    return None, {}


def check_curve(srv, workers):
    """CURVE wiring (issue 18): the server's --curve-secret and --curve-clients, each worker's
    --curve-secret and --curve-server, all from one Secret whose keys fit together (the
    workers' public key listed for the server, the server's public key given to the workers),
    and deploy/k8s/curve-secret.sh printing that Secret with real key pairs."""
    c, spec, argv = srv
    name, items = secret_items(flag(argv, "--curve-secret") or "", c, spec)
    check(name is not None and items.get("") == "server.secret",
          f"server --curve-secret {flag(argv, '--curve-secret')} is not server.secret of a Secret volume")
    cname, clients = secret_items(flag(argv, "--curve-clients") or "", c, spec)
    check(cname == name and clients and all(k.endswith(".public") and p.endswith(".public")
                                           for p, k in clients.items()),
          f"server --curve-clients is not a directory of *.public keys of Secret {name}: {clients}")
    needed = {"server.secret"} | set(clients.values())
    for wname, w, wspec, wargv in workers:
        sname, sitems = secret_items(flag(wargv, "--curve-secret") or "", w, wspec)
        vname, vitems = secret_items(flag(wargv, "--curve-server") or "", w, wspec)
        key = sitems.get("", "")
        check(sname == name and key.endswith(".secret") and key[:-7] + ".public" in clients.values(),
              f"{wname}: --curve-secret is not a key of Secret {name} whose public half the servers list")
        check(vname == name and vitems.get("") == "server.public",
              f"{wname}: --curve-server is not server.public of Secret {name}")
        needed |= {key, "server.public"}
    print(f"ok: CURVE: Secret {name} gives the servers their key and clients {sorted(clients.values())}, "
          f"the workers theirs and server.public")
    gen = os.path.join(K8S, "curve-secret.sh")
    keygen = os.path.join(os.environ.get("EMBER_BIN", ""), "ps-keygen")
    if not os.access(keygen, os.X_OK):
        print("note: no ps-keygen in EMBER_BIN: curve-secret.sh was not run")
        return
    r = subprocess.run([gen, "--bin", os.path.dirname(keygen)], capture_output=True, text=True, timeout=30)
    if not check(r.returncode == 0, f"curve-secret.sh failed: {r.stderr}"):
        return
    d = yaml.safe_load(r.stdout)
    check(d.get("kind") == "Secret" and d["metadata"]["name"] == name,
          f"curve-secret.sh prints {d.get('kind')} {d.get('metadata', {}).get('name')}, not Secret {name}")
    data = {k: base64.b64decode(v) for k, v in d.get("data", {}).items()}
    check(needed <= set(data), f"curve-secret.sh lacks keys {sorted(needed - set(data))}")
    z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    check(all(len(v) == 41 and v.endswith(b"\n") and all(chr(b) in z85 for b in v[:40]) for v in data.values()),
          "curve-secret.sh: a key is not 40 Z85 characters and a newline")
    check(data.get("server.public") != data.get("worker.public"), "curve-secret.sh: one pair for both")
    print(f"ok: curve-secret.sh prints Secret {name} with {sorted(data)}")


class Discovery(http.server.BaseHTTPRequestHandler):
    """Just enough of the API server's discovery for kubectl to map kinds to resources;
    every object GET answers 404, so `apply` dry-runs a create."""

    @staticmethod
    def rl(gv, res):
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
            {"name": n, "singularName": n[:-1], "namespaced": True, "kind": k,
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]} for n, k in res]}

    def docs(self):
        return {
            "/version": {"major": "1", "minor": "28", "gitVersion": "v1.28.0"},
            "/api": {"kind": "APIVersions", "versions": ["v1"]},
            "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}} for g in ("apps", "batch")]},
            "/api/v1": self.rl("v1", [("services", "Service"), ("persistentvolumeclaims", "PersistentVolumeClaim")]),
            "/apis/apps/v1": self.rl("apps/v1", [("statefulsets", "StatefulSet")]),
            "/apis/batch/v1": self.rl("batch/v1", [("jobs", "Job")]),
        }

    def log_message(self, *a):
        pass

    def do_GET(self):
        doc = self.docs().get(self.path.split("?")[0])
        code = 200 if doc else 404
        if not doc:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def kubectl_checks():
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("note: kubectl not installed: the kubectl checks were not run (the checks above were)")
        return
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Discovery)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    home = tempfile.mkdtemp(prefix="ember-kube.")
    env = dict(os.environ, HOME=home, KUBECONFIG=os.path.join(home, "none"))
    try:
        server = f"http://127.0.0.1:{srv.server_address[1]}"
        for name in sorted(os.listdir(K8S)):
            if not name.endswith(".yaml") or name == "kustomization.yaml":
                continue
            path = os.path.join(K8S, name)
            r = subprocess.run([kubectl, f"--server={server}", "apply", "--dry-run=client", "--validate=false",
                                "-f", path], capture_output=True, text=True, env=env, timeout=60)
            ok = r.returncode == 0 and "(dry run)" in r.stdout
            check(ok, f"kubectl apply --dry-run=client {name}: {r.stdout}{r.stderr}")
            if ok:
                print(f"ok: kubectl apply --dry-run=client --validate=false {name}: " + r.stdout.strip().replace("\n", "; "))
            with open(path) as f:
                workloads = [d for d in yaml.safe_load_all(f) if d and d.get("kind") in ("StatefulSet", "Job")]
            for d in workloads:  # `set resources` takes pod-template kinds only: one at a time
                one = os.path.join(home, "one.yaml")
                with open(one, "w") as f:
                    yaml.safe_dump(d, f)
                r = subprocess.run([kubectl, "set", "resources", "--local", "-f", one, "--requests=cpu=1",
                                    "-o", "name"], capture_output=True, text=True, env=env, timeout=60)
                check(r.returncode == 0, f"kubectl set resources --local (typed decode) {name}: {r.stderr}")
        r = subprocess.run([kubectl, "kustomize", K8S], capture_output=True, text=True, env=env, timeout=60)
        check(r.returncode == 0 and "kind: StatefulSet" in r.stdout, f"kubectl kustomize: {r.stderr}")
        print("ok: kubectl typed decode of the workloads and kustomize build")
    finally:
        srv.shutdown()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
