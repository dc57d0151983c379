"""A real Kubernetes control plane for tests (``scripts/k8s-testbed``).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake Nodes that run Pods
through lifecycle stages, no kubelet), built from Go modules and started as local processes on
127.0.0.1. ``scripts/k8s-testbed build`` compiles them once into a cache outside the repository
(the first build takes a while; later builds are a no-op); this module starts one test bed per
pytest session and stops it at the end, whatever happens.

Use it from a test module::

    from tests.k8s_testbed import k8s_testbed  # noqa: F401  (the session fixture)

    def test_something(k8s_testbed):
        api = k8s_testbed.core_v1()          # RLark's own ServiceAccount (deploy/kubernetes/ RBAC)
        admin = k8s_testbed.core_v1(admin=True)
        k8s_testbed.compact(restart_apiserver=True)  # etcd compaction; watches from before: 410
        k8s_testbed.restart_apiserver()      # stop and start kube-apiserver (etcd keeps the data)

A module that needs other Nodes makes its own fixture (a second test bed, on its own ports)::

    from tests.k8s_testbed import make_k8s_testbed_fixture
    big_cluster = make_k8s_testbed_fixture("--nodes", "8", "--node-gpus", "8")

Fixtures with the same ``up`` arguments share one test bed for the whole session, whichever
module imported them. When the test bed cannot be built or started, the fixture **fails** with the
reason under CI (``CI=true``, or ``RLARK_TESTBED_REQUIRED=1``) and skips with the reason elsewhere.

Settings: ``RLARK_TESTBED_BUILD_TIMEOUT`` (seconds for a build, default 5400: a cold build on two
cores takes tens of minutes), ``RLARK_TESTBED_UP_TIMEOUT`` (default 300), ``RLARK_TESTBED_KEEP=1``
(leave the test bed running after the session and print its export lines; stop it with
``scripts/k8s-testbed down --dir DIR``), ``RLARK_TESTBED_CACHE`` (the script's binary cache).
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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
DEFAULT_UP_ARGS: tuple[str, ...] = (
    "--nodes", str(len(GPU_NODES)),
    "--node-cpu", GPU_NODE_CPU, "--node-memory", GPU_NODE_MEMORY, "--node-gpus", GPU_NODE_GPUS,
    "--node-device", f"{DEVICE_RESOURCE}={GPU_NODE_DEVICES}",
    "--node", f"{RESERVED_NODE}:cpu=8,memory=32Gi,nvidia.com/gpu=1,"
              f"label.{RESERVED_LABEL[0]}={RESERVED_LABEL[1]},"
              f"taint={RESERVED_TAINT[0]}={RESERVED_TAINT[1]}:{RESERVED_TAINT[2]}",
)

PORT_RANGE = (16000, 19990)  # below 32768; PostgreSQL's tests use 15432-15999, RLark's API 8470
PORTS_PER_TESTBED = 6


class TestbedUnavailable(RuntimeError):
    """The test bed could not be built or started; the message says why."""


def _required() -> bool:
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("RLARK_TESTBED_REQUIRED", "") == "1")


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _ports_free(base: int) -> bool:
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


def build(timeout: float | None = None) -> str:
    """Build (or find cached) binaries; returns the script's report. Raises TestbedUnavailable."""
    timeout = timeout or float(os.environ.get("RLARK_TESTBED_BUILD_TIMEOUT", "5400"))
    proc = _script("build", timeout=timeout)
    if proc.returncode != 0:
        hint = "" if shutil.which("go") else " (no `go` on PATH: install Go >= 1.26)"
        raise TestbedUnavailable(
            f"scripts/k8s-testbed build failed (exit {proc.returncode}){hint}:\n{_tail(proc.stderr)}")
    return proc.stderr.strip()


def is_built() -> bool:
    """Whether ``scripts/k8s-testbed build`` has nothing left to do (no Go toolchain needed)."""
    try:
        proc = _script("path", timeout=30)
    except TestbedUnavailable:
        return False
    return proc.returncode == 0 and (Path(proc.stdout.strip()) / ".complete").exists()


def setup_timeout() -> int:
    """A pytest-timeout for tests using the fixture: their setup may include a cold build
    (``pytestmark = pytest.mark.timeout(setup_timeout())``)."""
    if is_built():
        return 600
    return int(float(os.environ.get("RLARK_TESTBED_BUILD_TIMEOUT", "5400"))
               + float(os.environ.get("RLARK_TESTBED_UP_TIMEOUT", "300")) + 600)


@dataclass
class K8sTestbed:
    """A running test bed (what ``scripts/k8s-testbed up`` printed)."""

    dir: Path
    kubeconfig: Path            #: admin (system:masters) kubeconfig
    rlark_kubeconfig: Path      #: RLark's ServiceAccount rlark/rlark, bound by deploy/kubernetes/
    namespace: str = "rlark"
    up_output: str = ""
    up_seconds: float = 0.0
    _stopped: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def start(cls, *up_args: str, base_dir: Path | None = None, timeout: float | None = None) -> "K8sTestbed":
        """``build`` then ``up`` on free ports in a new directory. Raises TestbedUnavailable."""
        build()
        timeout = timeout or float(os.environ.get("RLARK_TESTBED_UP_TIMEOUT", "300"))
        parent = Path(base_dir) if base_dir else None
        last_error = ""
        for _attempt in range(3):
            bases = [b for b in range(PORT_RANGE[0], PORT_RANGE[1], 10) if _ports_free(b)]
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
                             up_output=proc.stderr, up_seconds=time.monotonic() - started)
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

    def down(self) -> None:
        with self._lock:
            if self._stopped:
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
        tb, refs = _shared[up_args]
        if refs > 1:
            _shared[up_args] = (tb, refs - 1)
            return
        del _shared[up_args]
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


#: The default test bed: see DEFAULT_UP_ARGS for its Nodes.
k8s_testbed = make_k8s_testbed_fixture(*DEFAULT_UP_ARGS)
