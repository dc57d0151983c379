"""A real Kubernetes control plane for tests (``scripts/k8s-testbed``).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake Nodes that run Pods
through lifecycle stages, no kubelet), built from Go modules and started as local processes on
127.0.0.1. ``scripts/k8s-testbed build`` compiles them once into a cache outside the repository
(the first build takes a while; later builds are a no-op); this module starts one test bed per
pytest session and stops it at the end, whatever happens.

Use it from a test module (tests/conftest.py registers this module's fixtures, ``k8s_testbed``
and ``k8s_namespace``, for every test)::

    def test_something(k8s_testbed):
        api = k8s_testbed.core_v1()          # RLark's own ServiceAccount (deploy/kubernetes/ RBAC)
        admin = k8s_testbed.core_v1(admin=True)
        k8s_testbed.compact(restart_apiserver=True)  # etcd compaction; watches from before: 410
        k8s_testbed.restart_apiserver()      # stop and start kube-apiserver (etcd keeps the data)

A module that needs other Nodes makes its own fixture (a second test bed, on its own ports)::

    from tests.k8s_testbed import make_k8s_testbed_fixture
    big_cluster = make_k8s_testbed_fixture("--nodes", "8", "--node-gpus", "8")

A test bed whose one Node runs Pods for real (a kubelet with containerd, runc, a CNI bridge and
CoreDNS; the Worker image ``k8s_real_node.image``: docs/kubernetes.md, "Real node")::

    def test_pods(k8s_real_node):            # up --real-node --nodes 0; needs root and cgroup v1
        k8s_real_node.kill_container(ns, pod)  # SIGKILL to the container's process on the node

Fixtures with the same ``up`` arguments share one test bed for the whole session, whichever
module imported them. When the test bed cannot be built or started, the fixture **fails** with the
reason under CI (``CI=true``, or ``RLARK_TESTBED_REQUIRED=1``) and skips with the reason elsewhere.

Settings: ``RLARK_TESTBED_BUILD_TIMEOUT`` (seconds for a build, default 5400: a cold build on two
cores takes tens of minutes), ``RLARK_TESTBED_UP_TIMEOUT`` (default 300), ``RLARK_TESTBED_KEEP=1``
(leave the test bed running after the session and print its export lines; stop it with
``scripts/k8s-testbed down --dir DIR``), ``RLARK_TESTBED_ATTACH=DIR`` (use the test bed running in
DIR, started with the default fixture's arguments, e.g. one kept by ``RLARK_TESTBED_KEEP=1``,
instead of starting one: saves its start-up when running a few tests again and again;
``RLARK_TESTBED_ATTACH_REAL_NODE=DIR`` the same for ``k8s_real_node``),
``RLARK_TESTBED_CACHE`` (the script's binary cache).

Tests isolate themselves in a fresh namespace each (:meth:`K8sTestbed.project_namespace`: set up
as deploy/kubernetes/project-namespace.example.yaml says), drive Pods through kwok Stages
(tests/data/kwok-stages.yaml: :meth:`K8sTestbed.terminate`, images that cannot be pulled) and
write Pod logs through kwok ``Logs`` objects (:meth:`K8sTestbed.pod_log`, :class:`PodLog`).
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: the bound of the waits below: what the test bed's controllers and kwok do takes seconds, but
#: a full suite on CI's 2 cores (Ray nodes beside) once stretched it past 30 s
K8S_WAIT_SECONDS = 120.0
NAMESPACE_READY_SECONDS = 120

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "k8s-testbed"

#: The Nodes every test can count on (the default fixture): two GPU Nodes and one reserved Node
#: behind a taint, so nodeSelector and tolerations can be tested.
GPU_NODES = ("kwok-node-0", "kwok-node-1")
GPU_NODE_CPU, GPU_NODE_MEMORY, GPU_NODE_GPUS = "16", "64Gi", "4"
DEVICE_RESOURCE, GPU_NODE_DEVICES = "example.com/fpga", "2"
RESERVED_NODE = "kwok-reserved-0"
RESERVED_LABEL = ("rlark.io/pool", "reserved")
RESERVED_TAINT = ("rlark.io/reserved", "true", "NoSchedule")
#: kwok Stages RLark's tests add (a Pod that exits with a code, OOMKilled, an image that cannot be
#: pulled, a deleted Pod's container ending first): see the file's comments
STAGES_FILE = REPO / "tests" / "data" / "kwok-stages.yaml"
EXIT_ANNOTATION, REASON_ANNOTATION = "rlark.test/exit-code", "rlark.test/reason"
MISSING_IMAGE, PRIVATE_IMAGE = "registry.invalid/rlark/missing:1", "registry.invalid/rlark/private:1"
DEFAULT_UP_ARGS: tuple[str, ...] = (
    "--nodes", str(len(GPU_NODES)),
    "--node-cpu", GPU_NODE_CPU, "--node-memory", GPU_NODE_MEMORY, "--node-gpus", GPU_NODE_GPUS,
    "--node-device", f"{DEVICE_RESOURCE}={GPU_NODE_DEVICES}",
    "--node", f"{RESERVED_NODE}:cpu=8,memory=32Gi,nvidia.com/gpu=1,"
              f"label.{RESERVED_LABEL[0]}={RESERVED_LABEL[1]},"
              f"taint={RESERVED_TAINT[0]}={RESERVED_TAINT[1]}:{RESERVED_TAINT[2]}",
    "--apply", str(STAGES_FILE),
)
#: RLark's ServiceAccount (deploy/kubernetes/serviceaccount.yaml) and the project namespace
#: template (deploy/kubernetes/project-namespace.example.yaml, for namespace PROJECT_TEMPLATE_NS)
RLARK_SA = "system:serviceaccount:rlark:rlark"
PROJECT_TEMPLATE = REPO / "deploy" / "kubernetes" / "project-namespace.example.yaml"
PROJECT_TEMPLATE_NS = "rlark-team-a"
#: RLark's own RBAC (the server's namespace), its leader election Role and the Lease it names
RBAC_FILE = REPO / "deploy" / "kubernetes" / "rbac.yaml"
LEADER_ROLE, LEASE = "rlark-leader-election", "rlark-controller"

#: what Pod Security "restricted" asks of a Pod the tests make themselves (the test bed's
#: namespaces enforce it, as deploy/kubernetes/ labels them): see :func:`restricted`
RESTRICTED_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 1000,
                           "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def restricted(pod: dict) -> dict:
    """``pod`` (a Pod as a dict) with the securityContext Pod Security "restricted" admits, on
    the Pod and every container (in place; returned)."""
    spec = pod["spec"]
    spec["securityContext"] = dict(RESTRICTED_POD_SECURITY)
    for c in spec["containers"]:
        c["securityContext"] = dict(RESTRICTED_CONTAINER_SECURITY)
    return pod

#: the address of every kwok Node (scripts/k8s-testbed KWOK_NODE_IP: kwok's nodeIP, where it serves
#: their kubelet API)
KWOK_NODE_IP = "127.0.0.1"

PORT_RANGE = (16000, 19990)  # below 32768; PostgreSQL's tests use 15432-15999, RLark's API 8470
#: six for the control plane, four more for a real node, four for Kueue (--port-base); one test
#: bed's block starts every PORT_STEP ports
PORTS_PER_TESTBED = 14
PORT_STEP = 20

#: `up` arguments of the test bed with a real node alone: a kubelet that runs Pods (containerd,
#: runc, a CNI bridge, CoreDNS) and no kwok Node, so every Pod lands on it (docs/kubernetes.md,
#: "Real node"); the fixture ``k8s_real_node``
REAL_NODE_UP_ARGS: tuple[str, ...] = ("--real-node", "--nodes", "0")
REAL_NODE = "real-node"

#: `up` arguments of the test bed with Kueue (docs/kubernetes.md, "Kueue in the test bed"): the
#: default Nodes, and Kueue's manager with the Pod integration for namespaces that carry
#: KUEUE_NAMESPACE_LABEL; the fixture ``k8s_kueue_testbed``
KUEUE_UP_ARGS: tuple[str, ...] = (*DEFAULT_UP_ARGS, "--kueue")
KUEUE_NAMESPACE_LABEL = ("rlark.io/kueue", "enabled")
#: Kueue's names for a Pod's LocalQueue (label) and the scheduling gate it holds a queued Pod
#: behind (sigs.k8s.io/kueue pkg/controller/constants, pkg/controller/jobs/pod/constants)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"


class TestbedUnavailable(RuntimeError):
    """The test bed could not be built or started; the message says why."""


def _required() -> bool:
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("RLARK_TESTBED_REQUIRED", "") == "1")


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _base_free(base: int) -> bool:
    """Whether the block of ports from ``base`` is free, and no network interface of a real
    node on that base (``rlk<base>``, scripts/k8s-testbed.d/node-run.sh ``node_network``) is
    left on the host: `up --real-node` refuses such a base (a test bed killed before its `down`,
    e.g. by an earlier run's time limit, leaves its bridge; CI met one, 2026-12-07)."""
    if Path(f"/sys/class/net/rlk{base}").exists():
        return False
    for port in range(base, base + PORTS_PER_TESTBED):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """Run ``scripts/k8s-testbed ARGS`` in its own process group; on timeout the whole group
    (the script and e.g. its ``go build``) is killed. The daemons ``up`` starts run in their own
    sessions and are not in that group: after a timed-out ``up``, call ``down``."""
    if not SCRIPT.exists():
        raise TestbedUnavailable(f"{SCRIPT} is missing")
    proc = subprocess.Popen(["bash", str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise TestbedUnavailable(
            f"scripts/k8s-testbed {' '.join(args)} took longer than {timeout:.0f} s\n{_tail(err)}"
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _build_options(real_node: bool, kueue: bool) -> tuple[str, ...]:
    return (("--real-node",) if real_node else ()) + (("--kueue",) if kueue else ())


def build(timeout: float | None = None, real_node: bool = False, kueue: bool = False) -> str:
    """Build (or find cached) binaries (``real_node``: also the real node's parts and images;
    ``kueue``: also Kueue's manager and CRDs); returns the script's report. Raises
    TestbedUnavailable."""
    timeout = timeout or float(os.environ.get("RLARK_TESTBED_BUILD_TIMEOUT", "5400"))
    options = _build_options(real_node, kueue)
    proc = _script("build", *options, timeout=timeout)
    if proc.returncode != 0:
        hint = "" if shutil.which("go") else " (no `go` on PATH: install Go >= 1.26)"
        raise TestbedUnavailable(
            f"scripts/k8s-testbed {' '.join(('build', *options))} failed "
            f"(exit {proc.returncode}){hint}:\n{_tail(proc.stderr)}")
    return proc.stderr.strip()


def is_built(real_node: bool = False, kueue: bool = False) -> bool:
    """Whether ``scripts/k8s-testbed build [--real-node] [--kueue]`` has nothing left to do (no
    Go toolchain needed to tell)."""
    try:
        proc = _script("built", *_build_options(real_node, kueue), timeout=30)
    except TestbedUnavailable:
        return False
    return proc.returncode == 0


def setup_timeout(real_node: bool = False, kueue: bool = False) -> int:
    """A pytest-timeout for tests using the fixture: their setup may include a cold build
    (``pytestmark = pytest.mark.timeout(setup_timeout())``)."""
    if is_built(real_node, kueue):
        return 900 if real_node else 600
    return int(float(os.environ.get("RLARK_TESTBED_BUILD_TIMEOUT", "5400"))
               + float(os.environ.get("RLARK_TESTBED_UP_TIMEOUT", "300")) + 900)


@dataclass
class K8sTestbed:
    """A running test bed (what ``scripts/k8s-testbed up`` printed)."""

    dir: Path
    kubeconfig: Path            #: admin (system:masters) kubeconfig
    rlark_kubeconfig: Path      #: RLark's ServiceAccount rlark/rlark, bound by deploy/kubernetes/
    namespace: str = "rlark"
    up_output: str = ""
    up_seconds: float = 0.0
    #: with ``--real-node``: the Node that runs Pods, the Worker image ``up`` imported (its name
    #: and manifest digest), and containerd's ctr and socket (for what only the node can do)
    real_node: str | None = None
    image: str | None = None
    image_digest: str | None = None
    ctr_path: Path | None = None
    containerd_address: Path | None = None
    #: with ``--kueue``: the Kueue release that runs (RLARK_TESTBED_KUEUE) and the namespace
    #: label that puts a namespace under its Pod integration, as (key, value)
    kueue: str | None = None
    kueue_namespace_label: tuple[str, str] | None = None
    _stopped: bool = field(default=False, repr=False)
    #: attached to a test bed someone else started (RLARK_TESTBED_ATTACH): never stopped here
    attached: bool = False
    _cached: dict | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def start(cls, *up_args: str, base_dir: Path | None = None, timeout: float | None = None) -> "K8sTestbed":
        """``build`` then ``up`` on free ports in a new directory. Raises TestbedUnavailable."""
        build(real_node="--real-node" in up_args, kueue="--kueue" in up_args)
        # a real node's `up` imports the Worker image into containerd: 191 s of a 210 s `up` for its
        # 2.5 GB layer of torch's libraries on a loaded 2-core machine (docs/kubernetes.md)
        timeout = timeout or float(os.environ.get("RLARK_TESTBED_UP_TIMEOUT",
                                                  "600" if "--real-node" in up_args else "300"))
        parent = Path(base_dir) if base_dir else None
        if "--real-node" in up_args:
            # the real node's unix sockets live under its directory, and a socket path has at
            # most 107 bytes: pytest's basetemp (xdist's popen-gwN in it) can be too long for them
            parent = None if parent is None or len(str(parent)) > 30 else parent
        last_error = ""
        for _attempt in range(3):
            bases = [b for b in range(PORT_RANGE[0], PORT_RANGE[1], PORT_STEP) if _base_free(b)]
            if not bases:
                raise TestbedUnavailable(f"no {PORTS_PER_TESTBED} free loopback ports in {PORT_RANGE}")
            base = random.choice(bases)
            tb_dir = Path(tempfile.mkdtemp(prefix="rlark-k8s-testbed-", dir=parent))
            started = time.monotonic()
            try:
                proc = _script("up", "--dir", str(tb_dir), "--port-base", str(base), *up_args,
                               "--timeout", "120", timeout=timeout)
            except TestbedUnavailable as e:  # killed mid-way: stop what it had started
                _script("down", "--dir", str(tb_dir), timeout=180)
                raise TestbedUnavailable(f"{e}\n(logs in {tb_dir}/logs)") from None
            if proc.returncode == 0:
                env = _parse_exports(proc.stdout)
                try:
                    tb = cls(dir=Path(env["RLARK_TESTBED_DIR"]), kubeconfig=Path(env["KUBECONFIG"]),
                             rlark_kubeconfig=Path(env["RLARK_TESTBED_KUBECONFIG"]),
                             up_output=proc.stderr, up_seconds=time.monotonic() - started,
                             **_real_node_fields(env, "--real-node" in up_args),
                             **_kueue_fields(env, "--kueue" in up_args))
                except KeyError as e:
                    _script("down", "--dir", str(tb_dir), timeout=120)
                    raise TestbedUnavailable(f"`up` printed no export line for {e}:\n{proc.stdout}") from None
                return tb
            last_error = (f"scripts/k8s-testbed up failed (exit {proc.returncode}; logs in {tb_dir}/logs):\n"
                          f"{_tail(proc.stderr)}")
            _script("down", "--dir", str(tb_dir), timeout=120)  # keeps the logs
            if "is in use" not in proc.stderr:   # only a port race is worth another try
                break
        raise TestbedUnavailable(last_error)

    @classmethod
    def attach(cls, directory: str, real_node: bool = False) -> "K8sTestbed":
        """The test bed already running in ``directory`` (started with the default fixture's
        ``up`` arguments, DEFAULT_UP_ARGS; ``real_node``: with REAL_NODE_UP_ARGS). Raises
        TestbedUnavailable."""
        proc = _script("env", "--dir", directory, timeout=30)
        env = _parse_exports(proc.stdout)
        if proc.returncode != 0 or "KUBECONFIG" not in env:
            raise TestbedUnavailable(f"no test bed in {directory}:\n{_tail(proc.stderr)}")
        try:
            extra = _real_node_fields(env, real_node)
        except KeyError as e:
            raise TestbedUnavailable(f"the test bed in {directory} has no real node (no {e} exported)") from None
        return cls(dir=Path(env["RLARK_TESTBED_DIR"]), kubeconfig=Path(env["KUBECONFIG"]),
                   rlark_kubeconfig=Path(env["RLARK_TESTBED_KUBECONFIG"]), attached=True, **extra)

    def down(self) -> None:
        with self._lock:
            if self._stopped or self.attached:
                return
            self._stopped = True
        proc = _script("down", "--dir", str(self.dir), "--purge", timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/k8s-testbed down failed:\n{proc.stderr}")

    # -- operations tests need -----------------------------------------------------------------
    def _run(self, *args: str, timeout: float = 180) -> str:
        proc = _script(*args, "--dir", str(self.dir), timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/k8s-testbed {args[0]} failed (exit {proc.returncode}):\n"
                               f"{_tail(proc.stderr)}")
        return proc.stdout

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, by PID) and start it again; returns once /readyz is ok."""
        self._run("restart-apiserver")

    def stop_apiserver(self) -> None:
        self._run("stop-apiserver")

    def start_apiserver(self) -> None:
        self._run("start-apiserver")

    def compact(self, restart_apiserver: bool = False) -> int:
        """Compact etcd at its current revision; returns that revision.

        A list at an older (compacted) resourceVersion then gets ``410 Gone`` from etcd, but
        kube-apiserver's watch cache keeps serving watches from at least 75 s of history. With
        ``restart_apiserver=True`` the API server restarts right after the compaction (its
        cache starts empty), so a watch from an older resourceVersion gets ``410 Gone`` too."""
        args = ("compact", "--restart-apiserver") if restart_apiserver else ("compact",)
        return int(self._run(*args).split()[-1])

    def status(self) -> str:
        return self._run("status", timeout=60)

    # -- the real node ---------------------------------------------------------------------------
    def ctr(self, *args: str, timeout: float = 60) -> str:
        """containerd's own client on the real node's containerd, namespace ``k8s.io`` (the
        CRI's); returns stdout. Raises RuntimeError (not a real-node test bed, or ctr failed)."""
        if self.ctr_path is None or self.containerd_address is None:
            raise RuntimeError("this test bed has no real node (up --real-node)")
        proc = subprocess.run([str(self.ctr_path), "--address", str(self.containerd_address),
                               "--namespace", "k8s.io", *args], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def container_pid(self, namespace: str, pod: str, container: str | None = None) -> int:
        """The host PID of a running container's first process on the real node (its
        ``containerID`` in the Pod's status, looked up in containerd's task list)."""
        status = self.admin().read_namespaced_pod(pod, namespace).status
        found = [c for c in status.container_statuses or [] if container in (None, c.name)]
        if not found or not found[0].container_id:
            raise RuntimeError(f"Pod {namespace}/{pod} has no started container {container or ''}")
        runtime, _, cid = found[0].container_id.partition("://")
        if runtime != "containerd":
            raise RuntimeError(f"container {found[0].container_id} does not run in containerd")
        for line in self.ctr("tasks", "ls").splitlines()[1:]:  # TASK PID STATUS
            fields = line.split()
            if len(fields) >= 3 and fields[0] == cid:
                if fields[2] != "RUNNING":
                    raise RuntimeError(f"container {cid} is {fields[2]}, not running")
                return int(fields[1])
        raise RuntimeError(f"containerd has no task for container {cid} of Pod {namespace}/{pod}")

    def kill_container(self, namespace: str, pod: str, container: str | None = None,
                       sig: int = signal.SIGKILL) -> int:
        """Kill a container's first process from outside (as the OOM killer or an operator on
        the node would: a signal to its host PID, not through the API); returns the PID."""
        pid = self.container_pid(namespace, pod, container)
        os.kill(pid, sig)
        return pid

    def kubectl(self, *args: str, admin: bool = True, timeout: float = 60, check: bool = True) -> str:
        """Run the test bed's own kubectl (same version as the API server) as the admin or as
        RLark's ServiceAccount; returns stdout (raises on a non-zero exit unless check=False)."""
        kubectl = Path(_script("path", timeout=30).stdout.strip()) / "kubectl"
        cfg = self.kubeconfig if admin else self.rlark_kubeconfig
        proc = subprocess.run([str(kubectl), "--kubeconfig", str(cfg), *args], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def api_client(self, admin: bool = False):
        """A ``kubernetes.client.ApiClient`` for RLark's ServiceAccount (default) or the admin."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig if admin else self.rlark_kubeconfig))

    def core_v1(self, admin: bool = False):
        from kubernetes import client

        return client.CoreV1Api(self.api_client(admin=admin))

    @property
    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig), "RLARK_TESTBED_KUBECONFIG": str(self.rlark_kubeconfig),
                "RLARK_TESTBED_DIR": str(self.dir)}

    # -- namespaces, RBAC, kwok objects ---------------------------------------------------------
    def _clients(self):
        """Cached API clients (admin, RLark's ServiceAccount): one connection pool each."""
        if getattr(self, "_cached", None) is None:
            self._cached = {True: self.api_client(admin=True), False: self.api_client(admin=False)}
        return self._cached

    def custom(self):
        """``CustomObjectsApi`` as the admin (kwok's Stage, Logs objects)."""
        from kubernetes import client

        return client.CustomObjectsApi(self._clients()[True])

    def coordination(self):
        """``CoordinationV1Api`` (Leases) as the admin."""
        from kubernetes import client

        return client.CoordinationV1Api(self._clients()[True])

    def rbac(self):
        """``RbacAuthorizationV1Api`` as the admin."""
        from kubernetes import client

        return client.RbacAuthorizationV1Api(self._clients()[True])

    def admin(self):
        """``CoreV1Api`` as the admin (shared connection pool)."""
        from kubernetes import client

        return client.CoreV1Api(self._clients()[True])

    def can_i(self, verb: str, resource: str, namespace: str | None = None, subresource: str = "",
              group: str = "", name: str = "") -> bool:
        """Whether RLark's ServiceAccount may ``verb resource`` (of API ``group``, the object
        ``name``: a SelfSubjectAccessReview: the API server's own authorizer answers, as for any
        request)."""
        from kubernetes import client

        review = client.AuthorizationV1Api(self._clients()[False]).create_self_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace,
                                            "subresource": subresource, "group": group, "name": name}}})
        return bool(review.status.allowed)

    def wait_rbac(self, verb: str, resource: str, namespace: str | None, allowed: bool,
                  subresource: str = "", timeout: float = 30, group: str = "", name: str = "") -> None:
        """Poll until RLark's ServiceAccount may (``allowed``) or may not ``verb resource``: RBAC
        changes reach the authorizer through its informers, a moment after they are stored."""
        deadline = time.monotonic() + timeout
        while self.can_i(verb, resource, namespace, subresource, group, name) != allowed:
            if time.monotonic() > deadline:
                raise TimeoutError(f"RBAC: {verb} {resource}{'/' + subresource if subresource else ''} "
                                   f"in {namespace} still {'denied' if allowed else 'allowed'} after {timeout} s")
            time.sleep(0.1)

    def project_namespace(self, name: str | None = None, labels: dict[str, str] | None = None) -> str:
        """Create a namespace set up exactly as deploy/kubernetes/project-namespace.example.yaml
        says (the Namespace, RLark's Role and RoleBinding there; ``labels`` added to the
        Namespace's), as the admin; returns its name once RLark's ServiceAccount may watch Pods
        in it. A fresh namespace per test keeps tests apart on the shared test bed."""
        import uuid

        import yaml
        from kubernetes import client

        name = name or f"rlt-{uuid.uuid4().hex[:8]}"
        docs = list(yaml.safe_load_all(PROJECT_TEMPLATE.read_text().replace(PROJECT_TEMPLATE_NS, name)))
        core, rbac = self.admin(), client.RbacAuthorizationV1Api(self._clients()[True])
        for doc in docs:
            kind = doc["kind"]
            if kind == "Namespace":
                doc["metadata"].setdefault("labels", {}).update(labels or {})
                core.create_namespace(doc)
            elif kind == "Role":
                rbac.create_namespaced_role(name, doc)
            elif kind == "RoleBinding":
                rbac.create_namespaced_role_binding(name, doc)
            else:
                raise ValueError(f"{PROJECT_TEMPLATE} has a {kind}: teach project_namespace() about it")
        self.wait_rbac("watch", "pods", name, allowed=True)
        # Pods name the namespace's "default" ServiceAccount, which the controller-manager makes

        def default_account() -> bool:
            from kubernetes.client.rest import ApiException

            try:
                return bool(core.read_namespaced_service_account("default", name))
            except ApiException as e:
                if e.status != 404:
                    raise
                return False
        # the controller-manager makes it; on 2 busy cores (Ray tests beside) that took over 30 s
        deadline = time.monotonic() + NAMESPACE_READY_SECONDS
        while not default_account():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ServiceAccount default in namespace {name} after "
                                   f"{NAMESPACE_READY_SECONDS} s")
            time.sleep(0.05)
        return name

    def kueue_namespace(self) -> str:
        """A namespace as :meth:`project_namespace` makes it, labelled with
        :attr:`kueue_namespace_label`, so Kueue's Pod integration queues its Pods that name a
        LocalQueue (a test bed started with ``--kueue``). Raises RuntimeError without Kueue."""
        if self.kueue_namespace_label is None:
            raise RuntimeError("this test bed runs no Kueue (up --kueue)")
        key, value = self.kueue_namespace_label
        name = self.project_namespace(labels={key: value})
        # the API server's webhook selector and Kueue's webhook each read the label from their own
        # informer: a server-side dry run of a queued Pod comes back gated once both have it
        probe = restricted({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": "kueue-probe", "labels": {KUEUE_QUEUE_LABEL: "probe"}},
                            "spec": {"containers": [{"name": "c", "image": "example.invalid/probe:1"}]}})
        deadline = time.monotonic() + NAMESPACE_READY_SECONDS
        while True:
            pod = self.admin().create_namespaced_pod(name, probe, dry_run="All")
            if any(g.name == KUEUE_ADMISSION_GATE for g in pod.spec.scheduling_gates or []):
                return name
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kueue did not gate a Pod in namespace {name} after "
                                   f"{NAMESPACE_READY_SECONDS} s (is it labelled {key}={value}?)")
            time.sleep(0.1)

    def grant_leader_election(self, namespace: str, rules: list[dict] | None = None) -> None:
        """Create deploy/kubernetes/rbac.yaml's Role and RoleBinding ``rlark-leader-election``
        (the Lease of the server's replicas) in ``namespace``, the server's namespace in a test,
        as the admin (``rules``: instead of the Role's own); returns once RLark's ServiceAccount
        may do there what the rules allow."""
        import yaml

        docs = [d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d]
        rbac = self.rbac()
        for doc in docs:
            if doc["metadata"]["name"] != LEADER_ROLE or doc["kind"] not in ("Role", "RoleBinding"):
                continue
            doc["metadata"]["namespace"] = namespace
            if doc["kind"] == "Role":
                if rules is not None:
                    doc["rules"] = rules
                rbac.create_namespaced_role(namespace, doc)
            else:
                rbac.create_namespaced_role_binding(namespace, doc)
        for doc in docs:  # once the authorizer's informers have them
            if doc["metadata"]["name"] != LEADER_ROLE or doc["kind"] != "Role":
                continue
            for rule in doc["rules"]:
                for verb in rule["verbs"]:
                    self.wait_rbac(verb, "leases", namespace, allowed=True, group="coordination.k8s.io",
                                   name=(rule.get("resourceNames") or [""])[0])

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace and everything in it (the namespace controller finishes it later)."""
        from kubernetes.client.rest import ApiException

        try:
            self.admin().delete_namespace(name, propagation_policy="Background", grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise

    def pod_log(self, namespace: str, pod: str, directory: Path, follow: bool = True) -> "PodLog":
        """A file kwok serves as the log of ``pod``'s containers (a kwok ``Logs`` object, made
        by the admin): what is written to it is what ``pods/log`` returns, also followed
        (``follow=False``: a followed stream ends once it has sent what the file holds, as one
        a restarting kubelet or a proxy cuts)."""
        path = Path(directory) / namespace / f"{pod}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.custom().create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", namespace, "logs", {
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod},
            "spec": {"logs": [{"logsFile": str(path), "follow": follow}]},
        })
        return PodLog(path)

    def terminate(self, namespace: str, pod: str, exit_code: int, reason: str | None = None) -> None:
        """Make a Running Pod's container end with ``exit_code`` (and ``reason``, e.g.
        ``OOMKilled``): kwok's ``rlark-test-exit`` Stage (tests/data/kwok-stages.yaml)."""
        annotations = {EXIT_ANNOTATION: str(exit_code)}
        if reason:
            annotations[REASON_ANNOTATION] = reason
        self.admin().patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": annotations}})


class PodLog:
    """A container log as a kubelet writes it (CRI format: ``<RFC 3339 time> stdout F <line>``),
    served by kwok through the API server's ``pods/log``."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def write(self, *lines: str, stream: str = "stdout", at: float | None = None) -> None:
        """Append ``lines``, stamped now (or at ``at``, Unix seconds)."""
        from datetime import datetime, timezone

        with self._lock, open(self.path, "a") as f:
            for line in lines:
                when = datetime.now(timezone.utc) if at is None else datetime.fromtimestamp(at, timezone.utc)
                stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
                f.write(f"{stamp} {stream} F {line}\n")

    def event(self, token: str | None, event: str, **data) -> None:
        """One lifecycle line, built by the bootstrap's own line builder
        (:func:`rlark.bootstrap.lifecycle.lifecycle_line`, which the keeper writes each of its
        lines with), stamped now. ``token``: the event token a Run made before the keeper had
        its lines carry (None for every Run of this version: the keeper's lines need none)."""
        from rlark.bootstrap.lifecycle import lifecycle_line

        self.write(lifecycle_line(event, **data, **({"tok": token} if token else {})))


def _real_node_fields(env: dict[str, str], real_node: bool) -> dict:
    """The K8sTestbed fields of a real node, from ``up``'s export lines (KeyError: one missing)."""
    if not real_node:
        return {}
    return {"real_node": env["RLARK_TESTBED_REAL_NODE"], "image": env["RLARK_TESTBED_IMAGE"],
            "image_digest": env["RLARK_TESTBED_IMAGE_DIGEST"], "ctr_path": Path(env["RLARK_TESTBED_CTR"]),
            "containerd_address": Path(env["RLARK_TESTBED_CONTAINERD_ADDRESS"])}


def _kueue_fields(env: dict[str, str], kueue: bool) -> dict:
    """The K8sTestbed fields of Kueue, from ``up``'s export lines (KeyError: one missing)."""
    if not kueue:
        return {}
    key, _, value = env["RLARK_TESTBED_KUEUE_NAMESPACE_LABEL"].partition("=")
    return {"kueue": env["RLARK_TESTBED_KUEUE"], "kueue_namespace_label": (key, value)}


def _parse_exports(stdout: str) -> dict[str, str]:
    env = {}
    for line in stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key.strip()] = value.strip().strip("'\"")
    return env


# -- one test bed per distinct `up` arguments, shared by every module in the session ------------

_shared: dict[tuple[str, ...], tuple[K8sTestbed | TestbedUnavailable, int]] = {}
_shared_lock = threading.Lock()


def _stop_all_at_exit() -> None:
    for tb, _ in list(_shared.values()):
        if isinstance(tb, K8sTestbed) and os.environ.get("RLARK_TESTBED_KEEP") != "1":
            try:
                tb.down()
            except Exception as e:  # noqa: BLE001 - best effort at interpreter exit
                print(f"k8s-testbed: down at exit failed: {e}", file=sys.stderr)


atexit.register(_stop_all_at_exit)


def _acquire(up_args: tuple[str, ...], base_dir: Path) -> K8sTestbed:
    with _shared_lock:
        if up_args in _shared:
            tb, refs = _shared[up_args]
        else:
            try:
                attach = os.environ.get("RLARK_TESTBED_ATTACH")
                attach_real = os.environ.get("RLARK_TESTBED_ATTACH_REAL_NODE")
                if attach and up_args == DEFAULT_UP_ARGS:
                    tb = K8sTestbed.attach(attach)
                elif attach_real and up_args == REAL_NODE_UP_ARGS:
                    tb = K8sTestbed.attach(attach_real, real_node=True)
                else:
                    tb = K8sTestbed.start(*up_args, base_dir=base_dir)
            except TestbedUnavailable as e:
                tb = e
            refs = 0
        _shared[up_args] = (tb, refs + 1)
    if isinstance(tb, TestbedUnavailable):
        reason = f"Kubernetes test bed unavailable: {tb}"
        if _required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return tb


def _release(up_args: tuple[str, ...]) -> None:
    with _shared_lock:
        if up_args in _released_early:
            return  # stopped after its last user (_stop_after_last_user)
        tb, refs = _shared[up_args]
        if refs > 1:
            _shared[up_args] = (tb, refs - 1)
            return
        del _shared[up_args]
    _stop(tb)


def _stop(tb: K8sTestbed | TestbedUnavailable) -> None:
    """``down`` a test bed no test needs any more, or, with RLARK_TESTBED_KEEP=1, say how to."""
    if isinstance(tb, K8sTestbed):
        if os.environ.get("RLARK_TESTBED_KEEP") == "1":
            print(f"\nk8s-testbed kept running: stop it with scripts/k8s-testbed down --dir {tb.dir}\n"
                  + "\n".join(f"export {k}={v}" for k, v in tb.env.items()), file=sys.stderr)
            return
        tb.down()


def make_k8s_testbed_fixture(*up_args: str):
    """A session fixture yielding a :class:`K8sTestbed` started with ``up *up_args``."""
    key = tuple(up_args)

    @pytest.fixture(scope="session")
    def _k8s_testbed(tmp_path_factory):
        tb = _acquire(key, tmp_path_factory.getbasetemp())
        try:
            yield tb
        finally:
            _release(key)

    return _k8s_testbed


# -- each test bed stopped after the last module that uses it ----------------------------------

#: fixture name -> the ``up`` arguments of its test bed
FIXTURE_UP_ARGS = {"k8s_testbed": DEFAULT_UP_ARGS, "k8s_real_node": REAL_NODE_UP_ARGS,
                   "k8s_kueue_testbed": KUEUE_UP_ARGS}
#: node id -> the test-bed fixtures to stop once that test is torn down (release_points)
_release_after: dict[str, set[str]] = {}
#: the ``up`` arguments of test beds stopped before the session's end
_released_early: set[tuple[str, ...]] = set()


def release_points(items: list[pytest.Item]) -> dict[str, set[str]]:
    """For each test-bed fixture, the last test of the last module (in run order) that uses it:
    ``node id -> {fixture names}``. After that test's teardown (its module's fixtures, which may
    still use the test bed, torn down with it) nothing of this process needs the test bed:
    every user is in the ``k8s`` group, run in this order on one worker (tests/xdist_groups.py).
    Pure."""
    last_module: dict[str, str] = {}
    last_item_of_module: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        last_item_of_module[module] = item.nodeid
        for name in FIXTURE_UP_ARGS.keys() & set(getattr(item, "fixturenames", ())):
            last_module[name] = module
    points: dict[str, set[str]] = {}
    for name, module in last_module.items():
        points.setdefault(last_item_of_module[module], set()).add(name)
    return points


def pytest_collection_finish(session: pytest.Session) -> None:
    _release_after.clear()
    _released_early.clear()
    _release_after.update(release_points(session.items))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    for name in sorted(_release_after.get(item.nodeid, ())):
        _stop_after_last_user(FIXTURE_UP_ARGS[name])


def _stop_after_last_user(up_args: tuple[str, ...]) -> None:
    """:func:`_stop` the shared test bed of ``up_args`` now, whatever its references: an idle
    one costs 8-9 % of a core (its API server, etcd, controllers, kwok, a kubelet), measured."""
    with _shared_lock:
        entry = _shared.pop(up_args, None)
        if entry is None:
            return
        _released_early.add(up_args)
    _stop(entry[0])


@pytest.fixture(autouse=True)
def _no_testbed_after_its_last_user(request):
    """Fail, naming the cause, a test that asks for a test bed already stopped after its last
    user (the run order was not the one tests/xdist_groups.py makes)."""
    for name in FIXTURE_UP_ARGS.keys() & set(request.fixturenames):
        if FIXTURE_UP_ARGS[name] in _released_early:
            pytest.fail(f"{request.node.nodeid} uses {name}, whose test bed was stopped after what "
                        "was to be its last user: run the tests in tests/xdist_groups.py's order",
                        pytrace=False)


#: The default test bed: see DEFAULT_UP_ARGS for its Nodes.
k8s_testbed = make_k8s_testbed_fixture(*DEFAULT_UP_ARGS)

#: A test bed whose one Node is real (REAL_NODE_UP_ARGS): Pods run in containers, with the Worker
#: image ``k8s_real_node.image`` (imagePullPolicy IfNotPresent: no registry). Needs root, cgroup v1
#: and `build --real-node`; fails under CI when it cannot start, is skipped with the reason
#: elsewhere. A module using it starts containers: mark it ``pytest.mark.ray`` too; it runs in
#: the ``k8s`` serial group with the other test-bed modules (tests/xdist_groups.py).
k8s_real_node = make_k8s_testbed_fixture(*REAL_NODE_UP_ARGS)

#: A test bed with Kueue (KUEUE_UP_ARGS: the default Nodes, ``up --kueue``); its Pod integration
#: acts in namespaces made by :meth:`K8sTestbed.kueue_namespace`. Needs `build --kueue`.
k8s_kueue_testbed = make_k8s_testbed_fixture(*KUEUE_UP_ARGS)


# -- RLark on the test bed ----------------------------------------------------------------------


def wait_for(what: str, predicate, timeout: float = K8S_WAIT_SECONDS, interval: float = 0.1):
    """:func:`tests.waits.wait_until`, bounded by the test bed's K8S_WAIT_SECONDS by default."""
    from tests.waits import wait_until

    return wait_until(what, predicate, timeout, interval)


@contextmanager
def _environment(values: dict[str, str], drop_prefix: str):
    """``os.environ`` with ``values`` set and every other variable starting with ``drop_prefix``
    unset, restored as it was on leaving."""
    keys = {k for k in os.environ if k.startswith(drop_prefix)} | set(values)
    saved = {k: os.environ.get(k) for k in keys}
    try:
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(values)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class KwokWorkers:
    """The Workers of a Job played on kwok Nodes: no container runs, so the test writes into
    each Worker's Pod log (a kwok ``Logs`` file, :meth:`K8sTestbed.pod_log`) the lifecycle lines
    its keeper would write (``bootstrap/keeper.py``), each built by the keeper's own line builder
    (:meth:`PodLog.event`), and ends the containers with kwok Stages. Runs of Pods that really
    run the bootstrap are in tests/test_k8s_real_run.py (the real node).
    Create it before the Run starts: the log files exist before the Pods do."""

    def __init__(self, tb: K8sTestbed, namespace: str, job, directory: Path):
        from rlark.ranks import plan_workers

        self.tb, self.namespace = tb, namespace
        self.workers = plan_workers(job)
        self.head = next(w for w in self.workers if w.is_head)
        self.logs = {w.name: tb.pod_log(namespace, w.name, directory) for w in self.workers}

    def pod(self, name: str | None = None):
        """A Worker's Pod as the admin reads it (the head's by default)."""
        return self.tb.admin().read_namespaced_pod(name or self.head.name, self.namespace)

    def token(self) -> str | None:
        """The current Run's event token, from the head Pod's environment: None for a Run whose
        lines come from each Worker's keeper (bootstrap/keeper.py), which needs none."""
        env = {e.name: e.value for e in self.pod().spec.containers[0].env or []}
        return env.get("RLARK_EVENT_TOKEN")

    def wait_running(self, timeout: float = K8S_WAIT_SECONDS) -> None:
        """Until every Worker's Pod runs on a kwok Node (kwok's pod-ready Stage)."""
        def running():
            pods = self.tb.admin().list_namespaced_pod(self.namespace).items
            phases = {p.metadata.name: p.status.phase for p in pods if p.metadata.deletion_timestamp is None}
            return all(phases.get(w.name) == "Running" for w in self.workers) and phases
        wait_for(f"the Pods of {[w.name for w in self.workers]} to run", running, timeout)

    def join(self, protected: bool = True) -> str | None:
        """Every Worker's Ray node started, and the head saw all ranks join; returns the token
        (None: the Run's lines need none). ``protected``: what each keeper says of its channel
        (False: a keeper that could not make itself non-dumpable)."""
        tok = self.token()
        for w in self.workers:
            # the keeper's first line: whether its channel is out of the workload's reach; no
            # heartbeat field, so the server expects no `alive` lines (nothing here writes them)
            self.logs[w.name].event(tok, "keeper", pid=1, uid=1000, protected=protected,
                                    sandbox=False)
            self.logs[w.name].event(tok, "facts", hostname=w.name, ip=f"10.0.0.{w.node_rank + 1}")
            self.logs[w.name].event(tok, "phase", phase="RayStarted", ray_node_id=f"node-{w.node_rank}")
        self.logs[self.head.name].event(tok, "nodes", joined=[
            {"node_rank": w.node_rank, "ray_node_id": f"node-{w.node_rank}", "ip": f"10.0.0.{w.node_rank + 1}",
             "hostname": w.name, "role": w.role} for w in self.workers], missing=[])
        return tok

    def start_run_script(self) -> None:
        """The head started the run script (the Run becomes Running)."""
        self.logs[self.head.name].event(self.token(), "running", pid=4242)

    def finish_run_script(self, code: int = 0) -> None:
        """The head's run script exited with ``code``; the head's container ends with it."""
        tok = self.token()
        log = self.logs[self.head.name]
        log.event(tok, "run_finished", exit_code=code)
        log.event(tok, "exit", code=code)
        self.tb.terminate(self.namespace, self.head.name, code)


#: the runtime's graces of every :class:`RlarkOnK8s` unless its ``env`` says otherwise (the
#: variables of rlark.runtimes.kubernetes.settings.status_policy): short, so ImagePull and
#: MountFailed come within seconds; the pending timeout is not: at 2 s (1 to 2 s in fact, from a
#: creationTimestamp of whole seconds) a scheduler slowed by a busy machine can fail a Run as
#: Unschedulable whose Pods it binds a moment later (a test that wants Unschedulable sets
#: RLARK_K8S_PENDING_TIMEOUT itself)
SHORT_GRACES = {"RLARK_K8S_IMAGE_PULL_GRACE": "1", "RLARK_K8S_MOUNT_GRACE": "1",
                "RLARK_K8S_PENDING_TIMEOUT": "30"}


class RlarkOnK8s:
    """An RLark server on the test bed, built by the server's own wiring: the app
    ``server.build_app`` makes for ``rlark server --runtime kubernetes --namespace rlark
    --no-leader-elect --database-url sqlite:///<home>/rlark.db``, with RLark's ServiceAccount's
    kubeconfig (``KUBECONFIG``) and the administrator's token from ``RLARK_ADMIN_TOKEN``, as
    deploy/kubernetes/ runs it; its startup and shutdown are the app's own (its lifespan). What
    tests use is read from what the server built: :attr:`jobs` (the JobService the routes call),
    :attr:`ctl` (its controller), :attr:`store`, :attr:`runtime` (the controller's runtime, one
    per namespace) and :attr:`rt` (that of the project's namespace).

    ``env``: the server's Kubernetes settings, ``RLARK_K8S_*`` as ``rlark server`` reads them
    (e.g. ``{"RLARK_K8S_TOLERATIONS": "rlark.io/reserved"}``), over :data:`SHORT_GRACES`; no
    other ``RLARK_K8S_*`` of the test's environment reaches the server. They and ``KUBECONFIG``
    are set while the server is built (where it reads them) and restored after, so servers with
    different settings can run side by side; ``$RLARK_HOME`` is the test's (the rlark_home
    fixture), read by the server wherever it reads it. ``stop_runs_on_exit``: ``rlark server
    --stop-runs-on-exit``: :meth:`close` stops the active Runs (False: they carry on, as through
    a server upgrade, and the next RlarkOnK8s on ``home`` adopts them). ``preflight=False``:
    the capacity preflight off (see :meth:`__init__`).

    The server's namespace is the test bed's ``rlark`` (deploy/kubernetes/rbac.yaml's Roles are
    there), shared by every RlarkOnK8s: hence no leader election, whose one Lease there would
    make servers of different stores replicas of one another (tests/test_k8s_leader.py builds
    replicas). Project ``default`` runs its Pods in ``namespace``.
    """

    def __init__(self, tb: K8sTestbed, namespace: str, home: Path, *, env: dict[str, str] | None = None,
                 preflight: bool = True, stop_runs_on_exit: bool = True):
        import secrets as token_source

        from fastapi.testclient import TestClient
        from sqlalchemy import select

        from rlark import settings
        from rlark.server import build_app, local_urls, security_policy
        from rlark.services.auth import TOKEN_PREFIX
        from rlark.store import ProjectRow

        self.tb, self.namespace, self.home = tb, namespace, home
        self.server_namespace = tb.namespace
        self._closed = False
        self._served: list = []  # (uvicorn server, its thread) of each serve()
        host, port = "127.0.0.1", settings.DEFAULT_PORT
        #: the site administrator's token (``RLARK_ADMIN_TOKEN`` at the server's first start)
        self.admin_token = TOKEN_PREFIX + token_source.token_urlsafe(32)
        server_env = {**SHORT_GRACES, **(env or {}), "KUBECONFIG": str(tb.rlark_kubeconfig),
                      "RLARK_ADMIN_TOKEN": self.admin_token}
        with _environment(server_env, drop_prefix="RLARK_K8S_"):
            self.app = build_app(f"sqlite:///{home / 'rlark.db'}", f"http://{host}:{port}",
                                 runtime="kubernetes", namespace=tb.namespace,
                                 policy=security_policy(host), admin_urls=local_urls(host, port),
                                 stop_runs_on_exit=stop_runs_on_exit, leader_elect=False)
        self.jobs = self.app.state.jobs
        self.ctl = self.app.state.controller
        self.store = self.jobs.store
        self.runtime = self.ctl.runtime
        try:
            # no command moves project default to another namespace (`rlark project create
            # --namespace` gives a new project one): set as the store would hold it
            with self.store.session() as s:
                default = s.scalar(select(ProjectRow).where(ProjectRow.name == "default"))
                default.namespace = default.namespace or namespace
            if not preflight:
                # no setting of `rlark server` turns the capacity preflight off (it refuses what
                # no Node could run); a test that needs such a Job past it, to see the
                # scheduler's own verdict, takes the node inventory from the profile the server
                # built: the one part of this server that is not as `rlark server` has it
                self.jobs.profile.inventory = None
            self._client = TestClient(self.app, base_url=f"http://{host}:{port}")
            self._client.__enter__()  # the app's startup: its controller starts
        except BaseException:
            self.ctl.shutdown()  # the lock released, the runtime's watches stopped
            self.store.dispose()
            raise

    def serve(self) -> str:
        """This server's app also served over HTTP, by uvicorn in a thread on a free loopback
        port, for what runs in another process (the ``rlark`` CLI); its startup and shutdown
        stay the ones this object already ran (uvicorn runs no lifespan of its own). The
        administrator's token (:attr:`admin_token`) is stored in ``$RLARK_HOME/credentials`` for
        that address, where the CLI finds it. Returns the address; :meth:`close` stops serving it first."""
        import uvicorn

        from rlark.cli import credentials
        from tests.server import free_port, serve_in_thread

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        credentials.put(url, self.admin_token, user="admin")
        server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, name=f"rlark-k8s-app-{port}", daemon=True)
        serve_in_thread(server, thread, url, 60)
        self._served.append((server, thread))
        return url

    @property
    def rt(self):
        """The server's runtime of the project's namespace (a KubernetesRuntime, started on first
        use as the server starts it at a Run's launch)."""
        return self.runtime.runtime_for(self.namespace)

    def record_creates(self) -> list[tuple[str, str]]:
        """``(kind, name)`` of every object the server creates in the project's namespace from
        now on, in the order it sends them. No setting of `rlark server` tells what it sends the
        API server, and the test bed keeps no audit log: each create of that namespace's client
        is noted on its way, the call itself unchanged."""
        created: list[tuple[str, str]] = []
        kube = self.rt.kube
        send = kube.create

        def create(obj: dict, batch: bool = False) -> dict:
            created.append((obj["kind"], obj["metadata"]["name"]))
            return send(obj, batch=batch)

        kube.create = create
        return created

    def set_secret(self, name: str, data: dict[str, str], project: str = "default") -> dict:
        """``rlark secret set NAME KEY=VALUE...`` in ``project``, as a site administrator."""
        from rlark.services.auth import OPEN_PRINCIPAL

        return self.app.state.secrets.set(OPEN_PRINCIPAL, None, project, name, data)

    def close(self) -> None:
        """The server's shutdown (the app's: its controller's, which stops the active Runs and
        deletes their Pods unless ``stop_runs_on_exit`` is off, then the runtime's watches),
        then what a process's exit would end: the store's connections. Closing twice does
        nothing more."""
        if self._closed:
            return
        self._closed = True
        for server, thread in self._served:
            server.should_exit = True
            thread.join(timeout=15)
        try:
            self._client.__exit__(None, None, None)
        finally:
            self.store.dispose()

    def submit(self, yaml_text: str) -> dict:
        self.ctl.wake()
        return self.jobs.create(yaml_text)

    def job(self, name: str) -> dict:
        return self.jobs.get(name)

    def wait_phase(self, name: str, *phases: str, timeout: float = K8S_WAIT_SECONDS) -> dict:
        """The Job once its phase is one of ``phases`` (fails naming the last phase, reason and
        message seen, and the Job's last events)."""
        seen: dict = {}  # the last Job read

        def reached():
            seen["job"] = job = self.job(name)
            return job["phase"] in phases and job

        try:
            return wait_for(f"Job {name} to be {' or '.join(phases)}", reached, timeout)
        except pytest.fail.Exception as e:
            last = seen.get("job", {})
            events = [f"{ev.get('reason')}: {ev.get('message')}" for ev in self.jobs.events(name)[-8:]]
            pytest.fail(f"{e}; last seen: phase {last.get('phase')!r}, reason {last.get('reason')!r}, "
                        f"message {last.get('message')!r}; last events:\n  " + "\n  ".join(events),
                        pytrace=False)

    def wait_ended(self, name: str, timeout: float = K8S_WAIT_SECONDS) -> dict:
        """The Job once its Run is over and every Worker is released (its record is written)."""
        def ended():
            job = self.job(name)
            run = job.get("currentRun") or {}
            return (job["phase"] in ("Succeeded", "Failed", "Stopped")
                    and all(w.get("finishedAt") for w in run.get("workers", []) if w.get("startedAt"))
                    and self.run_row(name).record is not None and job)
        return wait_for(f"the Run of Job {name} to end and release its Workers", ended, timeout)

    def run_row(self, name: str, number: int | None = None):
        """The Job's latest Run (or Run ``number``) as stored (a detached RunRow)."""
        from sqlalchemy import select

        from rlark.store import JobRow, RunRow

        with self.store.session() as s:
            stmt = select(RunRow).join(JobRow, RunRow.job_id == JobRow.id).where(JobRow.name == name)
            stmt = stmt.where(RunRow.number == number) if number else stmt.order_by(RunRow.number.desc())
            row = s.scalars(stmt).first()
            s.expunge_all()
            return row

    def events(self, name: str) -> list[dict]:
        return self.jobs.events(name)

    def objects(self, selector: str = "") -> dict[str, list]:
        """Pods, Services, NetworkPolicies, ConfigMaps, PVCs and Secrets of the namespace (as the
        admin), by kind."""
        from kubernetes import client

        core = self.tb.admin()
        ns = self.namespace
        networking = client.NetworkingV1Api(core.api_client)
        return {
            "NetworkPolicy": networking.list_namespaced_network_policy(ns, label_selector=selector).items,
            "Pod": core.list_namespaced_pod(ns, label_selector=selector).items,
            "Service": core.list_namespaced_service(ns, label_selector=selector).items,
            "ConfigMap": [c for c in core.list_namespaced_config_map(ns, label_selector=selector).items
                          if c.metadata.name != "kube-root-ca.crt"],
            "PersistentVolumeClaim": core.list_namespaced_persistent_volume_claim(ns, label_selector=selector).items,
            "Secret": core.list_namespaced_secret(ns, label_selector=selector).items,
        }


@pytest.fixture
def k8s_namespace(k8s_testbed):  # noqa: F811 - the session fixture above
    """A fresh namespace set up like deploy/kubernetes/project-namespace.example.yaml, deleted
    (with everything in it) after the test."""
    name = k8s_testbed.project_namespace()
    try:
        yield name
    finally:
        k8s_testbed.delete_namespace(name)


# --- Kueue objects (the Kueue test bed's modules) --------------------------------------------------

#: Kueue's API group and version, as RLark's runtime uses them (one source of truth)
from rlark.runtimes.kubernetes.kueue import GROUP as KUEUE_GROUP, VERSION as KUEUE_VERSION  # noqa: E402


def kueue_condition(obj: dict | None, kind: str, status: str = "True") -> dict | None:
    """The condition ``kind`` of a Kueue object (``status.conditions``) when its status is
    ``status``; None otherwise."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind and c["status"] == status:
            return c
    return None


def make_local_queue(api, ns: str, name: str, cluster_queue: str) -> None:
    """Create the LocalQueue ``ns/name`` of ``cluster_queue`` (``api``: a CustomObjectsApi) and
    wait until both the ClusterQueue and the LocalQueue say Active."""
    api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns, "localqueues", {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": "LocalQueue",
        "metadata": {"name": name}, "spec": {"clusterQueue": cluster_queue}})
    wait_for(f"ClusterQueue {cluster_queue} to be Active", lambda: kueue_condition(
        api.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue),
        "Active"))
    wait_for(f"LocalQueue {ns}/{name} to be Active", lambda: kueue_condition(
        api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns, "localqueues", name),
        "Active"))
