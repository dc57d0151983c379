"""The local runtime: every Worker is its own process group on this machine.

As root each Worker also gets its own PID namespace (``unshare --pid --fork --mount-proc``): the
bootstrap is PID 1 there, Ray's driver discovery only sees that Worker's raylet, and killing the
namespace's PID 1 takes every process of the Worker with it. Without root the Worker is a plain
process group (``setsid``). Stopping: SIGTERM to the group, SIGKILL after the grace period.
Never ``ray stop``: it is host-wide.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
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


def use_pid_namespace() -> bool:
    """True when Workers can get their own PID namespace (root and util-linux ``unshare``)."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None


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


def worker_argv(python: str, namespace: bool) -> list[str]:
    """The command line that starts one Worker's bootstrap (pure)."""
    argv = [python, str(BOOTSTRAP_FILE)]
    if namespace:
        # --kill-child: if unshare itself dies, PID 1 of the namespace gets SIGTERM and stops the
        # Worker; it also has a handler, so SIGTERM to the group reaches it (pid_namespaces(7)).
        argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM", *argv]
    return argv


class LocalRuntime:
    """Starts and watches Worker process groups. Keeps the ``Popen`` objects of the Workers it
    started so exit codes are exact; Workers it did not start (after a server restart) are
    watched through their PID and start time."""

    name = "local"

    def __init__(self, reservations: Reservations | None = None,
                 worker_env: Iterable[str] | None = None) -> None:
        self.namespace = use_pid_namespace()
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
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_path, "ab", buffering=0) as log:
            proc = subprocess.Popen(
                worker_argv(python, self.namespace),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=spec.env.get("RLARK_WORKING_DIR") or None,
            )
        self._procs[proc.pid] = proc
        try:
            started = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            started = None
        return Launched(pid=proc.pid, pid_started=started)

    def _same_process(self, pid: int, pid_started: float | None) -> bool:
        try:
            p = psutil.Process(pid)
            if pid_started is not None and abs(p.create_time() - pid_started) > 0.5:
                return False  # the PID was reused by another process
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def observe(self, ref: WorkerRef) -> Observed:
        if ref.pid is None:
            return Observed(alive=False)
        proc = self._procs.get(ref.pid)
        if proc is not None:
            code = proc.poll()
            if code is None:
                return Observed(alive=True)
            if code < 0:
                code = 128 - code  # killed by signal N -> 128+N, as shells report it
            return Observed(alive=False, exit_code=code)
        return Observed(alive=self._same_process(ref.pid, ref.pid_started))

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
        self._signal_group(ref, signal.SIGKILL)

    def forget(self, ref: WorkerRef) -> None:
        """Drop the ``Popen`` of a Worker whose exit has been recorded, and free its address
        and port block for other Workers on this machine."""
        if ref.pid is not None:
            proc = self._procs.pop(ref.pid, None)
            if proc is not None:
                proc.poll()
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
        users are not readable and are skipped. None: no such process."""
        found: dict[int, psutil.Process] = {}
        for p in psutil.process_iter():
            try:
                env = p.environ()
            except (psutil.Error, OSError):
                continue
            if env.get("RLARK_RUN_ID") == run_uid and env.get("RLARK_WORKER") == worker:
                found[p.pid] = p
        for pid, p in sorted(found.items()):
            try:
                if p.ppid() not in found:
                    return Launched(pid=pid, pid_started=p.create_time())
            except psutil.Error:
                continue
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
