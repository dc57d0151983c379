"""This Worker's Ray node: the ``ray start`` command line (a pure builder), the installed
Ray's version and what it allows (token authentication, per-node temp directories), and
:class:`RayNode`, which starts ``ray start --block``, waits until the node's raylet runs, and
stops what it started. The head's join barrier (``barrier.py``) and the Worker's life
(``worker.py``) build on it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO

from rlark.bootstrap.config import (EXIT_BAD_CONFIG, EXIT_NODE_LOST, EXIT_RAY_START_FAILED,
                                    EXIT_STOPPED, HEAD_POLL_SECONDS, JOIN_SLACK_SECONDS,
                                    BootstrapConfig, BootstrapError)
from rlark.bootstrap.facts import dist_version
from rlark.bootstrap.port_watch import watch_worker_ports
from rlark.bootstrap.report import emit, passthrough

LABEL_RANK = "rlark.io/node-rank"
LABEL_ROLE = "rlark.io/role"
LABEL_RUN = "rlark.io/run"

# Ray ports that a Worker may pin (``ray start --<name>=<port>``); head-only ones are skipped on
# other Workers. Flag names: `ray start --help` (Ray 2.60).
WORKER_PORT_FLAGS = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
    "min-worker-port",
    "max-worker-port",
)
HEAD_PORT_FLAGS = ("dashboard-port", "ray-client-server-port")
#: before Ray 2.55 `ray start --temp-dir` is ignored on non-head nodes (ray-project/ray#57735):
#: every node uses the head's session directory and takes the first socket and log names free
#: there, so nodes of one Run on one host must start one at a time
#: (:meth:`Bootstrap._take_start_lock`)
RAY_PER_NODE_TEMP_DIR = (2, 55)
#: the first Ray with token authentication of its GCS and every other service (RAY_AUTH_MODE=token
#: and RAY_AUTH_TOKEN on every node and driver): docs.ray.io/en/latest/ray-security/token-auth.html
RAY_TOKEN_AUTH = (2, 52)
#: what `ray start` prints once its node registered with the GCS, just before it blocks
#: (ray/scripts/scripts.py ``startup_msg``, the same in Ray 2.47-2.60)
RAY_STARTED_LINE = b"Ray runtime started."


def ray_version() -> tuple[int, int] | None:
    """(major, minor) of the installed Ray, from package metadata (nothing imported); None when
    Ray is not installed or its version is not ``X.Y...``."""
    raw = dist_version("ray") or ""
    parts = raw.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def node_labels(cfg: BootstrapConfig) -> dict[str, str]:
    """Ray node labels that carry the rank, role and run of this Worker."""
    labels = {LABEL_RANK: str(cfg.node_rank)}
    if cfg.role:
        labels[LABEL_ROLE] = cfg.role
    if cfg.run_id:
        labels[LABEL_RUN] = cfg.run_id
    return labels


def build_ray_start_command(cfg: BootstrapConfig, ray: str = "ray") -> list[str]:
    """The ``ray start`` argv for this Worker (always ``--block``: the process lives as long as
    the node, and SIGTERM to it stops every Ray process it started, no ``ray stop`` needed).

    Flags (``ray start --help``, Ray 2.60; ``--memory`` and ``--labels`` are hidden options):
    head: ``--head --port``; others: ``--address``; both: ``--node-ip-address``, pinned ports,
    ``--num-cpus``, ``--num-gpus``, ``--memory`` (bytes), ``--object-store-memory`` (bytes),
    ``--resources`` (JSON), ``--labels`` (k=v,...), ``--temp-dir``, ``--disable-usage-stats``.
    """
    cmd = [ray, "start", "--block", "--disable-usage-stats"]
    port_flags: tuple[str, ...]
    if cfg.is_head:
        cmd += ["--head", f"--port={cfg.head_port}"]
        cmd.append(f"--include-dashboard={'true' if cfg.include_dashboard else 'false'}")
        port_flags = WORKER_PORT_FLAGS + HEAD_PORT_FLAGS
    else:
        cmd.append(f"--address={cfg.head_address}")
        port_flags = WORKER_PORT_FLAGS
    if cfg.node_ip:
        cmd.append(f"--node-ip-address={cfg.node_ip}")
    for flag in port_flags:
        if flag in cfg.ray_ports:
            cmd.append(f"--{flag}={cfg.ray_ports[flag]}")
    if cfg.num_cpus is not None:
        cmd.append(f"--num-cpus={cfg.num_cpus}")
    if cfg.num_gpus is not None:
        cmd.append(f"--num-gpus={cfg.num_gpus}")
    if cfg.memory_bytes is not None:
        cmd.append(f"--memory={cfg.memory_bytes}")
    if cfg.object_store_bytes is not None:
        cmd.append(f"--object-store-memory={cfg.object_store_bytes}")
    if cfg.resources:
        cmd.append("--resources=" + json.dumps(cfg.resources, sort_keys=True))
    cmd.append("--labels=" + ",".join(f"{k}={v}" for k, v in sorted(node_labels(cfg).items())))
    if cfg.ray_temp_dir:
        cmd.append(f"--temp-dir={cfg.ray_temp_dir}")
    return cmd


def raylet_flags(argv: list[str]) -> dict[str, str]:
    """``--name=value`` arguments of a raylet command line as a mapping (``node_id``,
    ``raylet_socket_name``, ``store_socket_name``, ``log_dir``, ``session_dir``...: the flags
    ray._private.services.start_raylet passes, 2.47-2.60). Pure."""
    out = {}
    for arg in argv[1:]:
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            out[name] = value
    return out


def raylet_env_value(pid: int, name: str) -> str | None:
    """``name`` in the environment of process ``pid`` (``/proc/PID/environ``): what the raylet
    was started with, which every Ray worker process on that node (RLinf's node probe actor
    included, rlinf/scheduler/cluster/cluster.py ``get_sys_env_var``) inherits. None when unset.

    Raises:
        OSError: the process is gone or not readable.
    """
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            key, _, value = item.partition(b"=")
            if key.decode(errors="replace") == name:
                return value.decode(errors="replace")
    return None


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout`` seconds (the head's
    GCS port, before anything of Ray is asked)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def name_resolves(host: str, port: int) -> bool:
    """Whether ``host`` resolves to an address (``getaddrinfo``: an IP literal at once, a name
    through the resolver, which bounds its own wait: resolv.conf(5) ``timeout``/``attempts``)."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return True
    except (OSError, UnicodeError):
        return False


class RayNode:
    """The processes of one Worker and its Ray node: every child it starts (:meth:`spawn`) is
    stopped with it (:meth:`shutdown`, :meth:`on_stop_signal`); ``ray start`` is :attr:`ray`."""

    def __init__(self, cfg: BootstrapConfig, env: dict[str, str]):
        self.cfg = cfg
        self.env = dict(env)
        self.env["RLINF_NODE_RANK"] = str(cfg.node_rank)  # exported before `ray start`
        self.env.pop("RAY_ADDRESS", None)
        bindir = os.path.dirname(sys.executable)
        self.env["PATH"] = bindir + os.pathsep + self.env.get("PATH", "")
        self.stopping = threading.Event()
        self.children: list[subprocess.Popen] = []
        self.ray_proc: subprocess.Popen | None = None
        #: the join deadline counts from this Worker's start (its prepare script included), as
        #: RLark counts the Run's from the launch; JOIN_SLACK_SECONDS later, so that RLark's own
        #: check (which names every missing rank and what it is doing) comes first; this one
        #: holds when no server watches
        self.join_deadline = time.monotonic() + cfg.join_timeout + JOIN_SLACK_SECONDS
        #: this Worker's Ray node is up (its raylet runs): only then does ``ray start`` hold
        #: anything that SIGTERM must let it stop cleanly
        self.node_up = False
        self._start_lock_file: IO[str] | None = None  # see _take_start_lock
        self._port_watch_started = False
        self.raylet_pid: int | None = None  # this node's raylet, once own_raylet_args found it
        #: set once this Worker's ``ray start`` said its node registered (:data:`RAY_STARTED_LINE`;
        #: Workers other than the head, whose output :meth:`_pump_ray_output` reads)
        self.ray_runtime_started = threading.Event()
        self._pump: threading.Thread | None = None  # the reader of `ray start`'s stdout

    @property
    def ray(self) -> subprocess.Popen:
        """This Worker's ``ray start`` process (RuntimeError before :meth:`start_ray` ran it)."""
        if self.ray_proc is None:
            raise RuntimeError("`ray start` has not been run yet")
        return self.ray_proc

    def on_stop_signal(self, signum, _frame) -> None:
        """SIGTERM/SIGINT: mark the Worker stopping and pass the stop to every live child."""
        self.stopping.set()
        for proc in list(self.children):
            if proc.poll() is None:
                try:
                    proc.send_signal(self._stop_signal_for(proc))
                except ProcessLookupError:
                    pass

    def _stop_signal_for(self, proc: subprocess.Popen) -> int:
        """SIGTERM, except for a Worker's ``ray start`` whose node is not up yet: it may be
        retrying the head's GCS, where it ignores SIGTERM for up to a minute (Ray 2.60), and it
        has started nothing yet that needs a clean stop, so it gets SIGKILL."""
        if proc is self.ray_proc and not self.node_up and not self.cfg.is_head:
            return signal.SIGKILL
        return signal.SIGTERM

    def spawn(self, argv: list[str], env: dict[str, str] | None = None,
              stdout: int | None = None) -> subprocess.Popen:
        """Start ``argv`` as a child of this Worker (in its working directory, with its
        environment unless ``env``; its stdout this Worker's unless ``stdout``), stopped with it;
        one started while stopping is told at once."""
        proc = subprocess.Popen(
            argv,
            env=env or self.env,
            cwd=self.cfg.working_dir or None,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
        )
        self.children.append(proc)
        if self.stopping.is_set():
            proc.send_signal(signal.SIGTERM)
        return proc

    def _ray(self) -> str:
        if self.cfg.ray_executable:
            return self.cfg.ray_executable
        local = os.path.join(os.path.dirname(sys.executable), "ray")
        if os.access(local, os.X_OK):
            return local
        found = shutil.which("ray", path=self.env.get("PATH"))
        if not found:
            raise BootstrapError(
                "RayStartFailed",
                f"no `ray` executable next to {sys.executable} or on PATH; install ray in the "
                "Worker's environment",
                EXIT_RAY_START_FAILED,
            )
        return found

    def check_stopped(self) -> None:
        """Raises ``BootstrapError("Stopped")`` once a stop signal came."""
        if self.stopping.is_set():
            raise BootstrapError("Stopped", "stopped by signal", EXIT_STOPPED)

    def check_ray_auth(self) -> None:
        """Token authentication of this Run's Ray cluster (``RAY_AUTH_MODE=token`` from RLark):
        a Ray older than :data:`RAY_TOKEN_AUTH` ignores it, so it would run with a GCS anyone
        on its network may join. Refused (``RayTooOld``), unless the server allows
        unauthenticated Ray (``RLARK_ALLOW_UNAUTHENTICATED_RAY=1``); a ``facts`` line says
        which held (``ray_auth``), for the run record.

        Raises:
            BootstrapError: ``RayTooOld``.
        """
        if self.env.get("RAY_AUTH_MODE") != "token":
            emit("facts", ray_auth={"mode": "none", "why": "the server gave this Run no token"})
            return
        version = ray_version()
        if version is None or version >= RAY_TOKEN_AUTH:
            emit("facts", ray_auth={"mode": "token"})
            return
        shown = ".".join(map(str, version))
        want = ".".join(map(str, RAY_TOKEN_AUTH))
        if self.env.get("RLARK_ALLOW_UNAUTHENTICATED_RAY") == "1":
            for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
                self.env.pop(name, None)
            emit("facts", ray_auth={"mode": "none", "why": f"Ray {shown} has no token "
                                    f"authentication (Ray {want}+); the server allows that"})
            return
        raise BootstrapError(
            "RayTooOld",
            f"Ray {shown} in this Worker's environment has no token authentication (Ray {want} "
            "or later), so any process on its network could join this Run's Ray cluster; "
            f"install ray>={want} (e.g. in the prepare script), or have the server's "
            "administrator allow unauthenticated Ray (rlark server --allow-unauthenticated-ray)",
            EXIT_BAD_CONFIG,
        )

    def start_ray(self) -> subprocess.Popen:
        argv = build_ray_start_command(self.cfg, self._ray())
        if self.cfg.ray_temp_dir:
            os.makedirs(self.cfg.ray_temp_dir, exist_ok=True)
        self._take_start_lock()
        emit("phase", phase="StartingRay", command=shlex.join(argv))
        self.node_up = False
        self.raylet_pid = None
        self.ray_runtime_started = threading.Event()
        if self.cfg.is_head:
            self.ray_proc = self.spawn(argv)
        else:
            # read, so that a `ray start` that ends before its node registered is told from one
            # whose node was lost later (run_worker starts the first kind again)
            self.ray_proc = self.spawn(argv, stdout=subprocess.PIPE)
            self._pump = threading.Thread(target=self._pump_ray_output,
                                          args=(self.ray_proc, self.ray_runtime_started),
                                          daemon=True)
            self._pump.start()
        return self.ray_proc

    @staticmethod
    def _pump_ray_output(proc: subprocess.Popen, started: threading.Event) -> None:
        """Copy ``ray start``'s stdout into this Worker's log line by line, setting ``started``
        at :data:`RAY_STARTED_LINE`. Python buffers its stdout into a pipe as into the log file
        before, so the lines come when ``ray start`` exits (it flushes them then): enough to tell
        how it ended, without changing the buffering its Ray processes inherit."""
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                if RAY_STARTED_LINE in line:
                    started.set()
                passthrough(line)

    def start_failed_early(self, code: int | None) -> bool:
        """Whether this Worker's ``ray start``, now ended with ``code``, ended before its node
        registered with the GCS (its output, read to the end, never said
        :data:`RAY_STARTED_LINE`) and by an error of its own (an exit code above 0: a signal
        would have lost its unflushed output), not by a stop: a failed start, which may be
        tried again, not a node lost after it joined."""
        if self.cfg.is_head or code is None or code <= 0 or self.stopping.is_set():
            return False
        if self._pump is not None:
            self._pump.join(timeout=5.0)  # its last lines come at its exit
            if self._pump.is_alive():
                return False  # a Ray process still holds its stdout: not a plain failed start
        return not self.ray_runtime_started.is_set()

    def wait_raylet_gone(self, seconds: float = 10.0) -> None:
        """Wait up to ``seconds`` until no raylet of this node runs (one of a failed ``ray
        start`` dies with it: Ray starts its processes fate-shared with ``ray start --block``),
        so that the next start's node is not taken for it."""
        end = time.monotonic() + seconds
        while self.own_raylet_args() is not None and time.monotonic() < end:
            time.sleep(HEAD_POLL_SECONDS)

    def _start_lock_path(self) -> str | None:
        """The Run's start lock beside the Workers' Ray temp dirs, when this Worker's Ray puts
        every node of the Run into the head's session directory (Ray < 2.55 ignores a non-head
        node's ``--temp-dir``), i.e. the nodes share a host's /tmp (the local runtime); else
        None. Nodes then start one at a time, as Ray's own multi-node-on-one-host test cluster
        starts them (ray.cluster_utils), so each takes its own socket and log names there."""
        version = ray_version()
        if not self.cfg.ray_temp_dir or version is None or version >= RAY_PER_NODE_TEMP_DIR:
            return None
        parent = os.path.dirname(os.path.abspath(self.cfg.ray_temp_dir))
        return os.path.join(parent, f".{self.cfg.run_id or 'run'}.ray-start.lock")

    def _take_start_lock(self) -> None:
        """Hold the start lock (:meth:`_start_lock_path`) until :meth:`wait_node_up` ends.
        Other Workers first wait for the head's GCS (which the head opens holding the lock), so
        no Worker holds it while waiting for a head that cannot start."""
        path = self._start_lock_path()
        if path is None or self._start_lock_file is not None:
            return
        import fcntl

        if not self.cfg.is_head:
            while not port_open(self.cfg.head_host, self.cfg.head_port):
                self.check_stopped()
                if time.monotonic() > self.join_deadline:
                    return  # the caller's deadline check reports it
                time.sleep(HEAD_POLL_SECONDS)
        f = open(path, "a")
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if self.stopping.is_set() or time.monotonic() > self.join_deadline:
                    f.close()
                    self.check_stopped()
                    return
                time.sleep(HEAD_POLL_SECONDS)
        self._start_lock_file = f

    def _release_start_lock(self) -> None:
        f, self._start_lock_file = self._start_lock_file, None
        if f is not None:
            f.close()  # closing the file drops its flock

    def _watch_worker_ports(self, raylet: dict[str, str]) -> None:
        """Watch this node's Ray logs (the raylet's ``--log_dir``) in a thread and emit one
        ``warning`` lifecycle line (reason ``RayWorkerPortsExhausted``) when a worker process
        could not start for want of a port. Skipped where the log directory is the head's and
        this is not the head (Ray < 2.55, shared session): the head watches it for all nodes."""
        log_dir = raylet.get("log_dir")
        if not log_dir or self._port_watch_started:
            return
        own = (self.cfg.is_head or not self.cfg.ray_temp_dir
               or os.path.abspath(log_dir).startswith(os.path.abspath(self.cfg.ray_temp_dir) + os.sep))
        if not own:
            return
        self._port_watch_started = True
        watch_worker_ports(self.cfg, log_dir, self.stopping)

    def ray_exited(self, what: str) -> BootstrapError:
        """The failure of this Worker's ``ray start`` ending: ``RayStartFailed`` before its node
        was up; after, ``HeadLost`` on the head (its GCS and raylet are the Run's cluster, so
        the cluster is gone) and ``NodeLost`` on any other Worker."""
        code = self.ray.poll() if self.ray_proc else None
        self.check_stopped()
        if what == "start":
            return BootstrapError("RayStartFailed",
                                  f"`ray start` exited with code {code} before the node was up",
                                  EXIT_RAY_START_FAILED, exit_code=code)
        if self.cfg.is_head:
            return BootstrapError("HeadLost",
                                  f"the head's `ray start` (its GCS and raylet) exited with code "
                                  f"{code}: the Run's Ray cluster is gone", EXIT_NODE_LOST,
                                  exit_code=code)
        return BootstrapError("NodeLost",
                              f"`ray start` exited with code {code} while the node should be alive",
                              EXIT_NODE_LOST, exit_code=code)

    def ray_exits_within(self, seconds: float) -> bool:
        """Whether this Worker's ``ray start`` exits within ``seconds``."""
        try:
            self.ray.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def find_own_node_id(self) -> str | None:
        """This node's Ray node id from its raylet's command line (``--node_id=``)."""
        args = self.own_raylet_args()
        return args.get("node_id") if args else None

    def own_raylet_args(self) -> dict[str, str] | None:
        """This node's raylet's ``--name=value`` flags (``node_id``, ``raylet_socket_name``,
        ``store_socket_name``, ``log_dir``...; :func:`raylet_flags`), found the way Ray's own
        driver finds a local raylet (ray._private.services.find_node_ids); the node IP and
        node-manager port single it out when several raylets are visible. None: not running."""
        want_port = self.cfg.ray_ports.get("node-manager-port")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith(b"/raylet"):
                continue
            args = [a.decode(errors="replace") for a in argv]
            if self.cfg.node_ip and f"--node_ip_address={self.cfg.node_ip}" not in args:
                continue
            if want_port and f"--node_manager_port={want_port}" not in args:
                continue
            flags = raylet_flags(args)
            if flags.get("node_id"):
                self.raylet_pid = int(pid)
                return flags
        return None

    def _report_raylet_rank(self) -> None:
        """A ``facts`` line with the ``RLINF_NODE_RANK`` this node's raylet really has in its
        environment (:func:`raylet_env_value`), the value RLinf's node probe reads."""
        if self.raylet_pid is None:
            return
        try:
            value = raylet_env_value(self.raylet_pid, "RLINF_NODE_RANK")
            emit("facts", ray_node_rank={"rayletPid": self.raylet_pid, "rayletEnv": value,
                                         "source": f"/proc/{self.raylet_pid}/environ"})
        except OSError as exc:
            emit("facts", ray_node_rank={"rayletPid": self.raylet_pid,
                                         "absent": exc.strerror or str(exc)})

    def wait_node_up(self, deadline: float) -> str | None:
        """Wait until this node's raylet runs (it is started only once the GCS answered) and
        return its node id; None when ``ray start`` exited first or the deadline passed. Under
        :meth:`_start_lock` also until its sockets exist (the next node's names depend on them),
        and the lock is released on the way out. Starts :meth:`_watch_worker_ports`."""
        try:
            return self._wait_node_up(deadline)
        finally:
            self._release_start_lock()

    def _wait_node_up(self, deadline: float) -> str | None:
        while time.monotonic() < deadline:
            if self.ray.poll() is not None:
                return None
            self.check_stopped()
            args = self.own_raylet_args()
            if args and (self._start_lock_file is None or all(
                    os.path.exists(args.get(k) or "/")
                    for k in ("raylet_socket_name", "store_socket_name"))):
                self.node_up = True
                self._watch_worker_ports(args)
                self._report_raylet_rank()
                return args["node_id"]
            time.sleep(HEAD_POLL_SECONDS)
        return None

    def shutdown(self, grace: float = 10.0) -> None:
        """Terminate every child still running (Ray node, scripts): SIGTERM, then SIGKILL."""
        alive = [p for p in self.children if p.poll() is None]
        for proc in alive:
            try:
                proc.send_signal(self._stop_signal_for(proc))
            except ProcessLookupError:
                pass
        end = time.monotonic() + grace
        for proc in alive:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
