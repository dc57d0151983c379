#!/usr/bin/env bash
# End-to-end check of the Kubernetes runtime against a real cluster (kind, k3d, or any), for
# someone who has one: the quickstart example as Pods, then three named failures.
#
#   scripts/k8s-smoke.sh            # uses the current kubectl context
#   scripts/k8s-smoke.sh --keep     # keep the namespaces and the server's logs afterwards
#
# Needs: kubectl pointing at the cluster; .venv (scripts/setup-env); a Worker image whose `python`
# has ray 2.60 and rlinf 0.3.0 (RLARK_SMOKE_IMAGE; pull it into kind with `kind load docker-image`
# if the nodes cannot reach the registry); nodes with ~7 GiB of memory free for the 3 Workers.
# Settings: RLARK_SMOKE_NAMESPACE (rlark-smoke), RLARK_SMOKE_IMAGE (docker.io/rlinf/rlinf:0.3.0),
# RLARK_SMOKE_PORT (18470), RLARK_SMOKE_TIMEOUT (900 s for the quickstart Run), RLARK_SMOKE_CPU
# (each quickstart Worker's CPU request; default the quickstart's own, 1: on a cluster with fewer
# than 3 CPUs free, e.g. one 2-core node, 500m still gives each Ray node 1 CPU, rounded up),
# RLARK_K8S_IMAGE_PULL_GRACE (20 s) and RLARK_K8S_MOUNT_GRACE (30 s) for checks 7 and 8,
# RLARK_SMOKE_MEMORY (each quickstart Worker's memory; default the quickstart's own, head 3Gi and
# pool 2Gi: where a container's memory cgroup is charged the page cache of the libraries its
# processes map, cgroup v1, a torch with CUDA libraries needs more, e.g. 5Gi).
#
# What it checks (each line says PASS or FAIL; exit status 1 if any failed):
#  1. the rendered objects pass the API server's own validation (kubectl apply --server-side
#     --dry-run=server: a client-side apply would copy the bootstrap's ConfigMap, over 256 KiB,
#     into an annotation, which the API server refuses)
#  2. `rlark nodes` reads the node inventory
#  3. the quickstart Run succeeds: 3 Pods, Ray cluster, RLinf placement check (exit 0)
#  4. its record has an image digest for each Worker and 3 of 3 Workers joined
#  5. the Run's Pods, Service, ConfigMap and Secrets are deleted after it ended; its logs stay
#  6. a Worker asking for more GPUs than any node has is refused at submit (capacity preflight)
#  7. an image that does not exist fails the Run as ImagePull
#  8. a hostPath that does not exist fails the Run as MountFailed
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=0
[ "${1:-}" = "--keep" ] && KEEP=1
NS=${RLARK_SMOKE_NAMESPACE:-rlark-smoke}
PNS="$NS-default"  # project default's Pods: never in the server's namespace
IMAGE=${RLARK_SMOKE_IMAGE:-docker.io/rlinf/rlinf:0.3.0}
PORT=${RLARK_SMOKE_PORT:-18470}
TIMEOUT=${RLARK_SMOKE_TIMEOUT:-900}
PY=.venv/bin/python
WORK=$(mktemp -d /tmp/rlark-smoke.XXXXXX)
export RLARK_HOME="$WORK/home" RLARK_SERVER="http://127.0.0.1:$PORT"
# the server's graces before an image pull or a mount is called failed (checks 7 and 8): shorter
# than its defaults, so the check ends sooner; a cluster whose pulls or mounts fail for a while
# before they succeed may need longer (set them in the environment)
export RLARK_K8S_IMAGE_PULL_GRACE=${RLARK_K8S_IMAGE_PULL_GRACE:-20} RLARK_K8S_MOUNT_GRACE=${RLARK_K8S_MOUNT_GRACE:-30}
export RLARK_K8S_PENDING_TIMEOUT=${RLARK_K8S_PENDING_TIMEOUT:-300}
rlark() { "$PY" -m rlark.cli "$@"; }
say() { printf '\033[1m[k8s-smoke]\033[0m %s\n' "$*"; }
FAILED=0
check() {  # check NAME COMMAND...
    local name=$1; shift
    if "$@"; then say "PASS $name"; else say "FAIL $name"; FAILED=1; fi
}
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
    if [ "$KEEP" = 1 ]; then
        say "kept namespaces $NS, $PNS and $WORK"
    else
        kubectl delete namespace "$NS" "$PNS" --wait=false >/dev/null 2>&1 || true
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

[ -x "$PY" ] || { say "no .venv: run scripts/setup-env first"; exit 2; }
command -v kubectl >/dev/null || { say "kubectl is not installed"; exit 2; }
say "cluster: $(kubectl config current-context) ($(kubectl get nodes --no-headers | wc -l) nodes)"
for ns in "$NS" "$PNS"; do
    kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
done

# The quickstart as a Kubernetes Job: its code and config travel in an env variable (the Pods do
# not see this machine's files) and are unpacked by the prepare script; the image provides python,
# ray and rlinf.
"$PY" - "$IMAGE" "$WORK" "${RLARK_SMOKE_CPU:-}" "${RLARK_SMOKE_MEMORY:-}" <<'EOF'
import base64, io, sys, tarfile, yaml
from pathlib import Path
image, work, cpu, memory = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
src = Path("examples/quickstart")
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    tar.add(src / "placement_check.py", "placement_check.py")
    tar.add(src / "config", "config")
payload = base64.b64encode(buf.getvalue()).decode()
job = yaml.safe_load((src / "job.yaml").read_text())
spec = job["spec"]
spec["workingDir"] = "/tmp"
spec.pop("rlinf", None)
unpack = ('mkdir -p /tmp/quickstart && echo "$QUICKSTART_TGZ" | base64 -d | tar xz -C /tmp/quickstart\n'
          'python -c "import ray, rlinf.scheduler"\n')
for role in spec["roles"]:
    role["image"] = image
    if cpu:
        role["resources"]["cpu"] = cpu
    if memory:
        role["resources"]["memory"] = memory
    role["env"] = [{"name": "QUICKSTART_TGZ", "value": payload}]
    role["prepareScript"] = unpack
spec["runScript"] = ("cd /tmp/quickstart && python placement_check.py --config-dir config "
                     "--config-name quickstart --timeout 300\n")
(work / "quickstart.yaml").write_text(yaml.safe_dump(job, sort_keys=False))

def variant(name, **role):
    j = yaml.safe_load(yaml.safe_dump(job))
    j["metadata"]["name"] = name
    j["spec"]["roles"] = [dict(j["spec"]["roles"][0], **role)]
    (work / f"{name}.yaml").write_text(yaml.safe_dump(j, sort_keys=False))

variant("smoke-gpus", resources={"cpu": 1, "memory": "1Gi", "gpu": 4096})
variant("smoke-pull", image="docker.io/library/rlark-smoke-does-not-exist:0.0.1",
        resources={"cpu": 0.1, "memory": "256Mi"})
variant("smoke-mount", resources={"cpu": 0.1, "memory": "256Mi"},
        mounts=[{"name": "missing", "type": "hostPath", "source": "/rlark-smoke/does/not/exist",
                 "mountPath": "/data"}])
EOF

check "1 server-side dry run of the rendered objects" \
    bash -c "rlark() { \"$PY\" -m rlark.cli \"\$@\"; }; rlark render '$WORK/quickstart.yaml' -n '$PNS' --run-id smoke 2>/dev/null \
             | kubectl apply --server-side --dry-run=server -f - >/dev/null"

say "starting rlark server --runtime kubernetes --namespace $NS on port $PORT (log: $WORK/server.log)"
# Python itself in the background (not the rlark function, whose subshell $! would name): the
# cleanup's kill must reach the server, or it outlives the script
"$PY" -m rlark.cli server --runtime kubernetes --namespace "$NS" --port "$PORT" \
    --k8s-host-path-prefix /rlark-smoke >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
    curl -fs "$RLARK_SERVER/healthz" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
    sleep 0.2
done

check "2 rlark nodes" rlark nodes
check "3 the quickstart Run succeeds" timeout "$TIMEOUT" "$PY" -m rlark.cli submit "$WORK/quickstart.yaml" --wait
rlark describe job quickstart || true
rlark record quickstart -o json --save "$WORK/record.json" >/dev/null || true
check "4 the record has a digest per Worker and 3/3 joined" "$PY" - "$WORK/record.json" <<'EOF'
import json, sys
rec = json.load(open(sys.argv[1]))
digests = [w["facts"].get("imageDigest") for w in rec["workers"]["items"]]
print("digests:", digests, "joined:", rec["workers"]["actual"], "of", rec["workers"]["expected"])
sys.exit(0 if all(d and d.startswith("sha256:") for d in digests)
         and rec["workers"]["actual"] == rec["workers"]["expected"] == 3 else 1)
EOF
gone() {
    for _ in $(seq 60); do
        [ -z "$(kubectl get pods,services,configmaps,secrets -n "$PNS" -l rlark.io/job=quickstart -o name)" ] && return 0
        sleep 1
    done
    kubectl get pods,services,configmaps,secrets -n "$PNS" -l rlark.io/job=quickstart
    return 1
}
check "5 the Run's objects are deleted" gone
check "5 its logs stay" bash -c "rlark() { \"$PY\" -m rlark.cli \"\$@\"; }; rlark logs quickstart --role head | grep -q RLINF_PLACEMENT_SUMMARY"

refused() { ! rlark submit "$WORK/smoke-gpus.yaml" 2>"$WORK/gpus.err" && grep -q "no node has 4096 nvidia.com/gpu" "$WORK/gpus.err"; }
check "6 more GPUs than any node has is refused at submit" refused

fails_as() {  # fails_as JOB REASON
    rlark submit "$WORK/$1.yaml" --wait >/dev/null 2>&1 && return 1
    local reason
    reason=$(rlark get jobs -o json | "$PY" -c "import json,sys; print(next(j['reason'] for j in json.load(sys.stdin)['items'] if j['name']=='$1'))")
    say "$1: $reason"
    [ "$reason" = "$2" ]
}
check "7 a missing image fails as ImagePull" fails_as smoke-pull ImagePull
check "8 a missing hostPath fails as MountFailed" fails_as smoke-mount MountFailed

[ "$FAILED" = 0 ] && say "all checks passed" || say "some checks FAILED (server log: $WORK/server.log; --keep keeps it)"
exit "$FAILED"
