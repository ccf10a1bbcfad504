#!/usr/bin/env bash
# curve-secret.sh: prints the Kubernetes Secret ember-curve that server.yaml and worker*.yaml
# mount: fresh CURVE key pairs (ps-keygen) for the servers and for the workers.
#
#   deploy/k8s/curve-secret.sh | kubectl apply -f -        (before kubectl apply -k deploy/k8s)
#   deploy/k8s/curve-secret.sh --bin DIR --name NAME       (ps-keygen from DIR; another name)
#
# Keys: server.secret, server.public, worker.secret, worker.public. The servers mount
# server.secret and worker.public (as their --curve-clients directory), the workers
# worker.secret and server.public. The keys exist only in this output and in the cluster: run
# it again to rotate them (then restart the servers and workers). Nothing is written to disk
# but a temporary directory, removed at exit.
set -euo pipefail
bin="${EMBER_BIN:-}" name="ember-curve"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="${2:?--bin needs a value}"; shift 2 ;;
    --name) name="${2:?--name needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "curve-secret.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$bin" ]; then keygen="$bin/ps-keygen"
else
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  keygen="$(command -v ps-keygen || echo "$here/../../build/bin/ps-keygen")"
fi
[ -x "$keygen" ] || { echo "curve-secret.sh: ps-keygen not found (build it, or pass --bin DIR)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$keygen" --out "$tmp/server" > /dev/null
"$keygen" --out "$tmp/worker" > /dev/null
cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: $name
  labels: {app.kubernetes.io/name: ember}
type: Opaque
data:
YAML
for k in server.secret server.public worker.secret worker.public; do
  echo "  $k: $(base64 -w0 < "$tmp/$k")"
done
