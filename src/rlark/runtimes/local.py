"""The local runtime: every Worker is its own process group on this machine.

Each Worker's processes are kept together so that ending the Worker ends all of them, also those
that made their own session (``setsid``) or were orphaned by a double fork: in its own PID
namespace where this server can make one, else in its own cgroup (or a PID namespace inside a user
namespace), as probed once at start (:mod:`rlark.runtimes.local_isolation`). Stopping: SIGTERM to
the group, SIGKILL to the group and the cgroup after the grace period; whatever is left once the
bootstrap has exited is killed before the Worker counts as gone.
Never ``ray stop``: it is host-wide.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

import psutil

from rlark import settings
from rlark.controller.admission import Amounts, Capacity
from rlark.ranks import PlannedWorker
from rlark.runtimes.base import (
    AdoptSpec,
    LaunchSpec,
    local_block_size,
    local_worker_ports,
    Launched,
    Observed,
    Placement,
    Taken,
    WorkerPlace,
    WorkerRef,
    secret_env,
)
from rlark.runtimes import local_isolation as iso
from rlark.runtimes.local_isolation import Isolation, Mode
from rlark.runtimes.local_reservations import Reservations
from rlark.runtimes.local_ports import block_units, can_bind, pick_loopback, pick_port_block, port_layout
from rlark.spec import RESERVED_ENV, RESERVED_ENV_PREFIX, Job

log = logging.getLogger("rlark.runtime.local")

BOOTSTRAP_FILE = Path(__file__).resolve().parent.parent / "bootstrap" / "worker.py"

#: what a Worker takes from the server's environment, and nothing else (the server's own
#: secrets, its database URL, cloud credentials stay with it): where programs and the user's
#: files are, language and time zone, the proxy, the GPUs this machine gives RLark; plus the
#: names ``rlark server --worker-env`` / ``RLARK_WORKER_ENV`` add
WORKER_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
    "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY",
})
#: ... and every variable of these families (locale categories)
WORKER_ENV_PREFIXES = ("LC_",)


def worker_environment(server_env: Mapping[str, str], launch_env: Mapping[str, str],
                       secrets: Mapping[str, str] | None = None,
                       allow: Iterable[str] = ()) -> dict[str, str]:
    """The whole environment of a local Worker (pure).

    ``server_env``: the server's environment, of which only :data:`WORKER_ENV_NAMES`,
    :data:`WORKER_ENV_PREFIXES` and the names in ``allow`` pass (never ``RLARK_*``,
    ``RAY_ADDRESS`` or ``RLINF_NODE_RANK``: those are RLark's to set); ``launch_env``: the
    bootstrap environment (the role's plain ``env`` and RLark's variables,
    :func:`rlark.runtimes.base.bootstrap_env`); ``secrets``: the role's variables whose values
    come from secrets (:func:`rlark.runtimes.base.secret_env`). ``PYTHONUNBUFFERED=1`` last.
    """
    allowed = WORKER_ENV_NAMES | set(allow)
    env = {k: v for k, v in server_env.items()
           if (k in allowed or k.startswith(WORKER_ENV_PREFIXES))
           and k not in RESERVED_ENV and not k.startswith(RESERVED_ENV_PREFIX)}
    env.update(launch_env)
    env.update(secrets or {})  # secret_env leaves out the names RLark sets
    env["PYTHONUNBUFFERED"] = "1"
    return env


#: Ray's token authentication (Ray >= 2.52 reads both variables on every node and in every
#: driver; older Ray ignores them): source docs.ray.io/en/latest/ray-security/token-auth.html
RAY_AUTH_MODE, RAY_AUTH_TOKEN = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"


def ray_auth_env(run_uid: str, event_token: str | None) -> dict[str, str]:
    """Token authentication for one Run's Ray cluster on this machine (pure): every Ray node
    and driver of the Run gets the same token, which no other Run has, so a process of another
    Job (local Workers share the loopback network) cannot connect to this Run's GCS and run code
    in it. The token is HMAC-SHA256 of the Run's uid under its event token (a per-Run secret
    of 128 bits, :attr:`rlark.store.RunRow.event_token`); nothing without an event token
    (an old Run) gets one."""
    if not event_token:
        return {}
    token = hmac.new(event_token.encode(), f"ray-auth:{run_uid}".encode(), hashlib.sha256).hexdigest()
    return {RAY_AUTH_MODE: "token", RAY_AUTH_TOKEN: token}


@functools.lru_cache(maxsize=None)
def probed_isolation(requested: str = "auto", cgroup_parent: str | None = None) -> Isolation:
    """:func:`rlark.runtimes.local_isolation.probe`, once per process and request (what this
    process may do does not change while it runs).

    Raises:
        ValueError: ``requested`` is unknown or cannot be given here.
    """
    return iso.probe(requested, cgroup_parent)


def use_pid_namespace() -> bool:
    """True when Workers get their own PID namespace here (probed: CAP_SYS_ADMIN and util-linux
    ``unshare``; being root is not enough inside a container)."""
    return iso.probe_namespace(Mode.pid_namespace) == "ok"


def python_for(spec_python: str | None) -> str:
    """The interpreter for a role: the given executable, ``<dir>/bin/python`` for a virtualenv
    directory, or this process's interpreter."""
    if not spec_python:
        return sys.executable
    path = Path(spec_python)
    if path.is_dir():
        return str(path / "bin" / "python")
    return str(path)


def _held_ips(res: Reservations) -> set[str]:
    return {name[3:] for name in res.held() if name.startswith("ip-")}


def worker_argv(python: str, mode: Mode | None = None, cgroup: str | None = None) -> list[str]:
    """The command line that starts one Worker's bootstrap (pure): in a PID namespace for the
    namespace modes (:func:`~rlark.runtimes.local_isolation.namespace_argv`), joining the cgroup
    directory ``cgroup`` first for ``cgroup`` (:func:`~rlark.runtimes.local_isolation.join_cgroup_argv`),
    as is otherwise."""
    argv = [python, str(BOOTSTRAP_FILE)]
    if mode in (Mode.pid_namespace, Mode.user_namespace):
        return [*iso.namespace_argv(mode), *argv]
    if mode == Mode.cgroup:
        if not cgroup:
            raise ValueError("a Worker in cgroup mode needs its cgroup directory")
        return iso.join_cgroup_argv(os.path.join(cgroup, "cgroup.procs"), argv)
    return argv


class LocalRuntime:
    """Starts and watches Worker process groups. Keeps the ``Popen`` objects of the Workers it
    started so exit codes are exact; Workers it did not start (after a server restart) are
    watched through their PID and start time."""

    name = "local"

    def __init__(self, reservations: Reservations | None = None,
                 worker_env: Iterable[str] | None = None,
                 isolation: Isolation | None = None) -> None:
        """``isolation``: what keeps each Worker's processes together (default: probed once for
        ``RLARK_WORKER_ISOLATION``, :func:`probed_isolation`).

        Raises:
            ValueError: a setting is unusable, or no isolation is available and weak isolation
                was not asked for (:func:`~rlark.runtimes.local_isolation.unavailable_message`).
        """
        self.isolation = isolation or probed_isolation(settings.worker_isolation(),
                                                       settings.cgroup_parent())
        if self.isolation.mode is None:
            raise ValueError(iso.unavailable_message(self.isolation))
        #: names of the server's variables Workers get beyond :data:`WORKER_ENV_NAMES`
        #: (``rlark server --worker-env``; default :func:`rlark.settings.worker_env`)
        self.worker_env = tuple(settings.worker_env() if worker_env is None else worker_env)
        self._procs: dict[int, subprocess.Popen] = {}
        self.reservations = reservations or Reservations()
        self._run_places: dict[str, list[tuple[str, int]]] = {}
        #: port block base -> its size, for the blocks this runtime reserved (unit by unit)
        self._block_sizes: dict[int, int] = {}
        self._capacity: Capacity | None = None
        self.capacity()  # a bad RLARK_MAX_STARTING_NODES / RLARK_LOCAL_DEVICES stops the server now

    def capacity(self) -> Capacity:
        """What this machine carries, for admitting Runs (:mod:`rlark.controller.admission`):
        its CPU cores, memory and NVIDIA GPUs (:func:`rlark.preflight.host_capacity`, the numbers
        preflight warns against), the devices ``RLARK_LOCAL_DEVICES`` names, and
        ``RLARK_MAX_STARTING_NODES`` Ray nodes starting at once. Measured once per runtime.

        Raises:
            ValueError: one of those settings is unusable (the message names it).
        """
        if self._capacity is None:
            from rlark.preflight import host_capacity

            host = host_capacity()
            self._capacity = Capacity(
                total=Amounts(cpu=float(host["cpu"]), memory=int(host["memory"]), gpu=int(host["gpu"]),
                              devices=settings.local_devices()),
                max_starting_nodes=settings.max_starting_nodes(),
            )
        return self._capacity

    def place(self, job: Job, run_uid: str, workers: list[PlannedWorker], taken: Taken,
              namespace: str | None = None) -> Placement:
        """Each Worker gets the lowest free loopback address from 127.0.0.2 and the lowest free
        block of ports in 20000-32767 sized to its role (:func:`rlark.runtimes.base.local_block_size`;
        free: overlapping no live Worker's range in the store, reserved host-wide unit by unit,
        and bindable now); its Ray temp dir is ``<settings.ray_tmp_root()>/<run uid>-<rank>``."""
        ips, ranges = set(taken.ips), set(taken.port_ranges)
        host_cpus = os.cpu_count() or 1
        tmp_root = Path(settings.ray_tmp_root())
        places: dict[int, WorkerPlace] = {}
        held: list[tuple[str, int]] = []
        head_address: str | None = None
        res = self.reservations

        def free_block(b: int, ip: str, size: int) -> bool:
            # reserved host-wide first (every unit), then checked unbound (a crashed server's
            # Workers)
            got = []
            for unit in block_units(b, size):
                if not res.try_reserve("ports", unit):
                    break
                got.append(unit)
            else:
                if can_bind(ip, range(b, b + size)):
                    return True
            for unit in got:
                res.release("ports", unit)
            return False

        try:
            for w in sorted(workers, key=lambda w: w.node_rank):
                ip = pick_loopback(ips | _held_ips(res))
                while not res.try_reserve("ip", ip):
                    ips.add(ip)
                    ip = pick_loopback(ips | _held_ips(res))
                held.append((ip, -1))
                role = job.role(w.role)
                if role is None:
                    raise RuntimeError(f"Worker {w.name}: role {w.role!r} is not in the Job's spec")
                size = local_block_size(role, host_cpus)
                base = pick_port_block(ranges, size, functools.partial(free_block, ip=ip, size=size))
                self._block_sizes[base] = size
                held[-1] = (ip, base)
                ips.add(ip)
                ranges.add((base, base + size))
                if w.is_head:
                    head_address = f"{ip}:{port_layout(base)['gcs']}"
                places[w.node_rank] = WorkerPlace(
                    node_ip=ip,
                    port_base=base,
                    ray_ports={k: v for k, v in port_layout(
                        base, size, local_worker_ports(role, host_cpus)).items() if k != "gcs"},
                    ray_temp_dir=str(tmp_root / f"{run_uid}-{w.node_rank}"),
                )
        except BaseException:
            for ip, base in held:
                res.release("ip", ip)
                self._release_block(base if base >= 0 else None)
            raise
        self._run_places[run_uid] = held
        if head_address is None:
            raise RuntimeError("the Run has no head Worker")
        return Placement(head_address=head_address, workers=places)

    def launch(self, spec: LaunchSpec) -> Launched:
        role = spec.job.role(spec.worker.role)
        python = python_for(role.local.python if role else None)
        if not os.access(python, os.X_OK):
            raise FileNotFoundError(
                f"the Python interpreter {python!r} for role {spec.worker.role!r} does not exist "
                "or is not executable; fix spec.roles[].local.python"
            )
        env = worker_environment(os.environ, spec.env,
                                 secret_env(role, spec.secrets) if role is not None else {},
                                 allow=self.worker_env)
        env.update(ray_auth_env(spec.run_uid, spec.env.get("RLARK_EVENT_TOKEN")))
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        mode = self.isolation.mode
        cgroup = self._make_cgroup(spec) if mode == Mode.cgroup else None
        try:
            with open(spec.log_path, "ab", buffering=0) as log:
                proc = subprocess.Popen(
                    worker_argv(python, mode, cgroup),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=spec.env.get("RLARK_WORKING_DIR") or None,
                )
        except BaseException:
            if cgroup:
                iso.remove_cgroup(cgroup)
            raise
        self._procs[proc.pid] = proc
        try:
            started = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            started = None
        return Launched(pid=proc.pid, pid_started=started,
                        handle=iso.handle_of(cgroup) if cgroup else None)

    def _make_cgroup(self, spec: LaunchSpec) -> str:
        """The Worker's own cgroup, ``<parent>/<run uid>-<rank>``, made empty.

        Raises:
            RuntimeError: it cannot be made, or exists with processes in it.
        """
        parent = self.isolation.cgroup_parent
        assert parent is not None
        path = os.path.join(parent, iso.worker_cgroup_name(spec.run_uid, spec.worker.node_rank))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise RuntimeError(f"cannot create the Worker's cgroup {path}: {exc.strerror}") from None
        if iso.cgroup_pids(path):
            raise RuntimeError(f"the Worker's cgroup {path} already has processes in it")
        return path

    def _same_process(self, pid: int, pid_started: float | None) -> bool:
        try:
            p = psutil.Process(pid)
            if pid_started is not None and abs(p.create_time() - pid_started) > 0.5:
                return False  # the PID was reused by another process
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def observe(self, ref: WorkerRef) -> Observed:
        """Alive while the Worker's bootstrap runs. Once it has exited, whatever it left (in its
        cgroup; with weak isolation, what still names it in its environment) is killed, and the
        Worker counts as alive until that is gone too, so a released Worker has no process left."""
        if ref.pid is None:
            return Observed(alive=False)
        proc = self._procs.get(ref.pid)
        code = None
        if proc is not None:
            code = proc.poll()
            if code is None:
                return Observed(alive=True)
            if code < 0:
                code = 128 - code  # killed by signal N -> 128+N, as shells report it
        elif self._same_process(ref.pid, ref.pid_started):
            return Observed(alive=True)
        if self._kill_leftovers(ref):
            return Observed(alive=True)
        return Observed(alive=False, exit_code=code)

    def _kill_leftovers(self, ref: WorkerRef) -> int:
        """SIGKILL what is left of a Worker besides its bootstrap: everything in its cgroup, and
        with weak isolation the processes whose environment names it. Returns how many there
        were. (In a PID namespace the kernel does this when the bootstrap, PID 1, ends.)"""
        cgroup = iso.cgroup_of_handle(ref.handle)
        if cgroup:
            return iso.kill_cgroup(cgroup)
        if self.isolation.mode == Mode.process_group and ref.run_uid:
            found = self._marked(ref.run_uid, ref.name)
            for p in found:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            return len(found)
        return 0

    def _signal_group(self, ref: WorkerRef, sig: int) -> None:
        if ref.pid is None:
            return
        if ref.pid not in self._procs and not self._same_process(ref.pid, ref.pid_started):
            return
        try:
            os.killpg(ref.pid, sig)  # the Worker is a session leader: its pgid is its pid
        except (ProcessLookupError, PermissionError):
            pass

    def signal_stop(self, ref: WorkerRef) -> None:
        self._signal_group(ref, signal.SIGTERM)

    def kill(self, ref: WorkerRef) -> None:
        """SIGKILL the Worker's process group and everything in its cgroup."""
        self._signal_group(ref, signal.SIGKILL)
        cgroup = iso.cgroup_of_handle(ref.handle)
        if cgroup:
            iso.kill_cgroup(cgroup)

    def forget(self, ref: WorkerRef) -> None:
        """Drop the ``Popen`` of a Worker whose exit has been recorded, and free its address
        and port block for other Workers on this machine."""
        if ref.pid is not None:
            proc = self._procs.pop(ref.pid, None)
            if proc is not None:
                proc.poll()
        cgroup = iso.cgroup_of_handle(ref.handle)
        if cgroup:
            iso.remove_cgroup(cgroup)
        self.reservations.release("ip", ref.node_ip)
        self._release_block(ref.port_base)
        places = self._run_places.get(ref.run_uid or "")
        held = (ref.node_ip, ref.port_base)
        if places and held[0] is not None and held[1] is not None and (held[0], held[1]) in places:
            places.remove((held[0], held[1]))

    def find(self, run_uid: str, worker: str, namespace: str | None = None) -> Launched | None:
        """The Worker's process group although its PID never reached the store: the outermost
        process whose environment carries ``RLARK_RUN_ID=run_uid`` and ``RLARK_WORKER=worker``
        (what :meth:`launch` started: the bootstrap, or ``unshare`` around it). Processes of other
        users are not readable and are skipped. The handle names the process's cgroup when this
        server puts Workers in cgroups and it is in one of them. None: no such process."""
        found = {p.pid: p for p in self._marked(run_uid, worker)}
        for pid, p in sorted(found.items()):
            try:
                if p.ppid() not in found:
                    return Launched(pid=pid, pid_started=p.create_time(), handle=self._cgroup_handle(pid))
            except psutil.Error:
                continue
        return None

    @staticmethod
    def _marked(run_uid: str, worker: str) -> list[psutil.Process]:
        """Processes whose environment carries ``RLARK_RUN_ID=run_uid`` and ``RLARK_WORKER=worker``
        (those of other users are not readable and are skipped)."""
        found = []
        for p in psutil.process_iter():
            try:
                env = p.environ()
            except (psutil.Error, OSError):
                continue
            if env.get("RLARK_RUN_ID") == run_uid and env.get("RLARK_WORKER") == worker:
                found.append(p)
        return found

    def _cgroup_handle(self, pid: int) -> str | None:
        """The handle of the Worker cgroup (below this server's parent) process ``pid`` is in."""
        parent = self.isolation.cgroup_parent
        if self.isolation.mode != Mode.cgroup or not parent:
            return None
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return None
        mount, _, _ = iso.cgroup_setup(parent)
        if mount is None:
            return None
        path = iso.parse_proc_cgroup(text).get(iso.hierarchy_key(mount))
        where = iso.cgroup_dir(mount, path) if path is not None else None
        if where and os.path.dirname(where) == parent.rstrip("/"):
            return iso.handle_of(where)
        return None

    def adopt(self, spec: AdoptSpec) -> None:
        """Take back the host-wide reservations of a Worker an earlier server process placed
        (its loopback address and port block; the operating system dropped them with that
        process), so no other Run is placed on them. A reservation another server holds now is
        logged and left (the store still keeps this server's own Runs off it)."""
        ref = spec.ref
        if ref.node_ip is None or ref.port_base is None:
            return
        role = spec.job.role(spec.role) if spec.role else None
        size = local_block_size(role, os.cpu_count() or 1) if role is not None else None
        res, refused = self.reservations, []
        if f"ip-{ref.node_ip}" not in res.held() and not res.try_reserve("ip", ref.node_ip):
            refused.append(ref.node_ip)
        for unit in block_units(ref.port_base, size) if size else (ref.port_base,):
            if f"ports-{unit}" not in res.held() and not res.try_reserve("ports", unit):
                refused.append(f"port block unit {unit}")
        if size:
            self._block_sizes[ref.port_base] = size
        self._run_places.setdefault(ref.run_uid or "", []).append((ref.node_ip, ref.port_base))
        if refused:
            log.warning("Worker %s: another process holds the reservation of %s", ref.name,
                        ", ".join(refused))

    def end_run(self, run_uid: str, namespace: str | None = None) -> None:
        """Free whatever of the Run is still reserved (Workers that never launched)."""
        for ip, base in self._run_places.pop(run_uid, []):
            self.reservations.release("ip", ip)
            self._release_block(base)

    def _release_block(self, base: int | None) -> None:
        """Release every unit of the port block at ``base`` that this runtime reserved."""
        if base is None:
            return
        size = self._block_sizes.pop(base, None)
        for unit in block_units(base, size) if size else (base,):
            self.reservations.release("ports", unit)
