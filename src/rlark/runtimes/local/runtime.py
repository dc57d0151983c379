"""The local runtime: every Worker is its own process group on this machine.

Each Worker starts as its keeper (``bootstrap/keeper.py``, run from the bootstrap archive with this
server's own Python in isolated mode), which writes the Worker's lifecycle lines and starts the
workload (the bootstrap's ``worker`` with the role's Python, the scripts, Ray) under the Run's own
uid in a mount
namespace that hides the server's files, where this server can give that
(:mod:`rlark.runtimes.local.identity`, :mod:`rlark.runtimes.local.sandbox`).

Each Worker's processes are kept together so that ending the Worker ends all of them, also those
that made their own session (``setsid``) or were orphaned by a double fork: in its own PID
namespace where this server can make one, else in its own cgroup (or a PID namespace inside a user
namespace), as probed once at start (:mod:`rlark.runtimes.local.isolation`). Stopping: SIGTERM to
the group, SIGKILL to the group and the cgroup after the grace period; whatever is left once the
bootstrap has exited is killed before the Worker counts as gone.
Never ``ray stop``: it is host-wide.

Long because: the Runtime protocol's methods on keepers and process groups, with the environment
each Worker gets; the pure parts are already modules of their own (identity, isolation, sandbox,
ports, reservations, preflight, outputs).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import psutil

from rlark import settings
from rlark.bootstrap import archive
from rlark.bootstrap import fuse as keeper_fuse
from rlark.bootstrap import objects as keeper_objects
from rlark.ranks import PlannedWorker
from rlark.runtimes.capacity import Amounts, Capacity
from rlark.runtimes.base import (
    AdoptSpec,
    LaunchSpec,
    local_block_size,
    local_worker_ports,
    ray_resources,
    Launched,
    LaunchRefused,
    Observed,
    Placement,
    Taken,
    WorkerPlace,
    WorkerRef,
    secret_env,
)
from rlark.runtimes.local import isolation as iso
from rlark.runtimes.local import objects, sandbox, volumes
from rlark.runtimes.local.identity import Identity, UidRange, candidates, choose, many_users_message
from rlark.runtimes.local.isolation import Isolation, Mode
from rlark.runtimes.local.preflight import unprovided_mounts
from rlark.runtimes.local.reservations import Reservations
from rlark.runtimes.local.settings import s3fs_path, worker_identity, worker_isolation, worker_uid_range
from rlark.runtimes.local.ports import block_units, can_bind, pick_loopback, pick_port_block, port_layout
from rlark.findings import Finding
from rlark.findings import error as _err
from rlark.findings import warning as _warn
from rlark.spec import RESERVED_ENV, RESERVED_ENV_PREFIX, Job, MountType, Role

log = logging.getLogger("rlark.runtime.local")


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


def ray_auth_env(ray_token: str | None) -> dict[str, str]:
    """Token authentication for one Run's Ray cluster (pure): every Ray node and driver of the
    Run gets the Run's own random token (:attr:`rlark.runtimes.base.LaunchSpec.ray_token`),
    which no other Run has, so a process of another Job (local Workers share the loopback
    network) cannot connect to this Run's GCS and run code in it; nothing without a token (a
    Run launched by an older server) gets one."""
    if not ray_token:
        return {}
    return {RAY_AUTH_MODE: "token", RAY_AUTH_TOKEN: ray_token}


#: the keeper's own PATH (it runs nothing it looks up but these system programs' neighbours)
KEEPER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def keeper_environment(run_uid: str, worker: str, python: str) -> dict[str, str]:
    """The keeper's own environment (pure): a fixed ``PATH`` and locale, which Python runs the
    workload, and the Run and Worker it belongs to (:meth:`LocalRuntime.find` finds a Worker by
    them). Nothing of the Job's. The workload runs the keeper's own archive unless
    ``RLARK_KEEPER_BOOTSTRAP`` names the Worker's copy (:meth:`LocalRuntime._sandbox`)."""
    return {"PATH": KEEPER_PATH, "LANG": "C.UTF-8", "RLARK_RUN_ID": run_uid,
            "RLARK_WORKER": worker, "RLARK_KEEPER_PYTHON": python}


def server_archive() -> str:
    """The bootstrap archive the keepers and the composer jail run from (as root where this
    server is root): ``$RLARK_HOME/bootstrap/<name>`` (:func:`rlark.bootstrap.archive.install`
    of :func:`~rlark.bootstrap.archive.local_archive`: with this interpreter's bytecode),
    inside the server's private home, so only this server's user may change it. Written when
    missing or different, checked on every call.

    Raises:
        OSError: it cannot be written there.
    """
    where = settings.rlark_home() / "bootstrap"
    where.mkdir(mode=0o700, exist_ok=True)
    return archive.install(str(where), archive.local_archive())


def make_dir(path: str, owner: int, mode: int) -> None:
    """Make directory ``path`` (its parent must exist) or take the one there, give it to
    ``owner`` with ``mode``; a link or anything but a directory there is refused (never
    followed: root must not chown what a Worker pointed it at).

    Raises:
        LaunchRefused: ``path`` is a link or not a directory.
    """
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # ELOOP on a link
    except OSError as exc:
        raise LaunchRefused(f"{path} is not a directory RLark made ({exc.strerror}); nothing "
                            "was started") from None
    try:
        os.fchown(fd, owner, owner)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def feed_pipe(fd: int, data: bytes) -> None:
    """Write ``data`` to the pipe ``fd`` and close it, in a thread of its own (a keeper reads
    it at its start; a pipe holds only 64 KiB at a time). A keeper gone first is no error."""
    import threading

    def feed() -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass
        finally:
            os.close(fd)

    threading.Thread(target=feed, name="keeper-env", daemon=True).start()


def keeper_argv(archive_path: str, mode: Mode | None, cgroup: str | None = None) -> list[str]:
    """The command line that starts one Worker's keeper (pure): this server's interpreter in
    isolated mode without site-packages (``-I -S``: the keeper imports the standard library
    only, nothing the workload could change) running the bootstrap archive at ``archive_path``
    (:func:`server_archive`) as ``keeper``, in a PID namespace (and its own IPC namespace) for
    the namespace modes, joining the cgroup directory ``cgroup`` first for ``cgroup``."""
    argv = [sys.executable, "-I", "-S", archive_path, "keeper"]
    if mode in (Mode.pid_namespace, Mode.user_namespace):
        return [*iso.namespace_argv(mode), *argv]
    if mode == Mode.cgroup:
        if not cgroup:
            raise ValueError("a Worker in cgroup mode needs its cgroup directory")
        return iso.join_cgroup_argv(os.path.join(cgroup, "cgroup.procs"), argv)
    return argv


@functools.lru_cache(maxsize=None)
def probed_isolation(requested: str = "auto", cgroup_parent: str | None = None) -> Isolation:
    """:func:`rlark.runtimes.local.isolation.probe`, once per process and request (what this
    process may do does not change while it runs).

    Raises:
        ValueError: ``requested`` is unknown or cannot be given here.
    """
    return iso.probe(requested, cgroup_parent)


def probed_identity(requested: str, isolation: Isolation, uids: UidRange) -> Identity:
    """Who this server's Workers run as (:func:`rlark.runtimes.local.identity.choose` for what
    this process may do: root, and PID namespaces as the isolation probe found them).

    Raises:
        ValueError: ``requested`` is unknown or cannot be given here.
    """
    return choose(requested, root=os.geteuid() == 0,
                  pid_namespace=isolation.mode == Mode.pid_namespace, rng=uids)


def server_python_roots() -> list[str]:
    """This server's own Python installation (its virtualenv and base installation): Workers
    that run the server's interpreter (roles without ``local.python``) may always read it."""
    return sandbox.python_prefixes(sys.executable)


#: the first Ray with token authentication (bootstrap/ray_node.py's RAY_TOKEN_AUTH)
RAY_TOKEN_AUTH = (2, 52)


def installed_version(prefix: str, dist: str,
                      listdir: Callable[[str], list[str]] = os.listdir) -> tuple[int, int] | None:
    """(major, minor) of distribution ``dist`` installed in the Python environment at ``prefix``
    (a virtualenv or installation), read from the name of its ``<dist>-<version>.dist-info``
    directory in ``lib/python3.*/site-packages`` (PEP 376/427): nothing of it is run. None when
    it is not found there."""
    try:
        libs = [d for d in listdir(os.path.join(prefix, "lib")) if d.startswith("python3")]
    except OSError:
        return None
    for lib in sorted(libs):
        site = os.path.join(prefix, "lib", lib, "site-packages")
        try:
            names = listdir(site)
        except OSError:
            continue
        for name in names:
            base, sep, rest = name.partition("-")
            if sep and base.lower().replace("_", "-") == dist and name.endswith(".dist-info"):
                parts = rest[: -len(".dist-info")].split(".")
                try:
                    return int(parts[0]), int(parts[1])
                except (IndexError, ValueError):
                    return None
    return None


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


#: the mounts the local runtime binds into a Worker's mount namespace (objectStorage: the
#: Worker's own directory its keeper copies the bucket's prefix into, :mod:`.objects`)
BOUND_MOUNTS = (MountType.host_path, MountType.pvc, MountType.object_storage)


#: why a copy-mode object-storage mount needs each Worker in a PID namespace of its own
COPY_NEEDS_PID_NAMESPACE = (
    "an object-storage copy runs with the bucket's credentials after the Worker's code ended, "
    "and only a keeper that is PID 1 of the Worker's own PID namespace can make sure nothing of "
    "that code is left beside it (this server's Worker isolation is not pid-namespace)")


def host_mounts(role: Role) -> list[tuple[str, str, bool]]:
    """A role's ``hostPath`` mounts as ``(source, mountPath, readOnly)`` (pure): what the local
    runtime binds into each Worker's mount namespace, as Kubernetes mounts a hostPath volume."""
    return [(m.source, m.mount_path, m.read_only) for m in role.mounts
            if m.type == MountType.host_path]


def _held_ips(res: Reservations) -> set[str]:
    return {name[3:] for name in res.held() if name.startswith("ip-")}


class LocalRuntime:
    """Starts and watches Worker process groups. Keeps the ``Popen`` objects of the Workers it
    started so exit codes are exact; Workers it did not start (after a server restart) are
    watched through their PID and start time."""

    name = "local"
    #: a Job's secrets are RLark's only (no secret store of its own)
    own_secrets = False
    #: one launch at a time: each forks a process group of this server, and the reservations
    #: of addresses and ports are taken in launch order
    launch_concurrency = 1

    def __init__(self, reservations: Reservations | None = None,
                 worker_env: Iterable[str] | None = None,
                 isolation: Isolation | None = None,
                 identity: Identity | None = None,
                 read_paths: Iterable[str] | None = None,
                 serves_many: Callable[[], str | None] | None = None,
                 allow_unauthenticated_ray: bool | None = None) -> None:
        """``isolation``: what keeps each Worker's processes together (default: probed once for
        ``RLARK_WORKER_ISOLATION``, :func:`probed_isolation`); ``identity``: who Workers run as
        (default: :func:`probed_identity` for ``RLARK_WORKER_IDENTITY``); ``read_paths``: roots
        under which a path others cannot read may still be given to Workers (default
        ``RLARK_WORKER_READ_PATHS``; the server's own Python installation always is);
        ``serves_many``: says why this server serves more than one user (None: it serves one),
        asked at every launch when Workers would run as the server's own user;
        ``allow_unauthenticated_ray``: a role whose Ray is too old for token authentication
        may run without it (default ``RLARK_ALLOW_UNAUTHENTICATED_RAY``).

        Raises:
            ValueError: a setting is unusable, or no isolation is available and weak isolation
                was not asked for (:func:`~rlark.runtimes.local.isolation.unavailable_message`).
        """
        self.isolation = isolation or probed_isolation(worker_isolation(),
                                                       settings.cgroup_parent())
        if self.isolation.mode is None:
            raise ValueError(iso.unavailable_message(self.isolation))
        self.identity = identity or probed_identity(worker_identity(), self.isolation,
                                                    worker_uid_range())
        self.read_paths = tuple(dict.fromkeys(
            [*(settings.worker_read_paths() if read_paths is None else read_paths),
             *server_python_roots()]))
        self.serves_many = serves_many or (lambda: None)
        self.allow_unauthenticated_ray = (settings.allow_unauthenticated_ray()
                                          if allow_unauthenticated_ray is None
                                          else allow_unauthenticated_ray)
        #: names of the server's variables Workers get beyond :data:`WORKER_ENV_NAMES`
        #: (``rlark server --worker-env``; default :func:`rlark.settings.worker_env`)
        self.worker_env = tuple(settings.worker_env() if worker_env is None else worker_env)
        self._procs: dict[int, subprocess.Popen] = {}
        self.reservations = reservations or Reservations()
        self._run_places: dict[str, list[tuple[str, int]]] = {}
        #: run uid -> the Workers' uid this runtime reserved for it
        self._run_uids: dict[str, int] = {}
        #: port block base -> its size, for the blocks this runtime reserved (unit by unit)
        self._block_sizes: dict[int, int] = {}
        self._capacity: Capacity | None = None
        self.capacity()  # a bad RLARK_MAX_STARTING_NODES / RLARK_LOCAL_DEVICES stops the server now

    def capacity(self) -> Capacity:
        """What this machine carries, for admitting Runs (:mod:`rlark.controller.admission`):
        its CPU cores, memory and NVIDIA GPUs (:func:`rlark.runtimes.local.preflight.host_capacity`, the numbers
        preflight warns against), the devices ``RLARK_LOCAL_DEVICES`` names, and
        ``RLARK_MAX_STARTING_NODES`` Ray nodes starting at once. Measured once per runtime.

        Raises:
            ValueError: one of those settings is unusable (the message names it).
        """
        if self._capacity is None:
            from rlark.runtimes.local.preflight import host_capacity

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
        and bindable now); its Ray temp dir is ``<settings.ray_tmp_root()>/<run uid>/<rank>``.
        With an identity of their own (:attr:`identity`), the Run's Workers get a uid no live
        Run holds (``taken.uids``), reserved host-wide like ports.

        Raises:
            RuntimeError: no free address, port block or uid.
        """
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
                    ray_temp_dir=str(tmp_root / run_uid / str(w.node_rank)),
                )
            uid = self._reserve_uid(run_uid, taken.uids) if self.identity.own_uid else None
        except BaseException:
            for ip, base in held:
                res.release("ip", ip)
                self._release_block(base if base >= 0 else None)
            raise
        self._run_places[run_uid] = held
        if head_address is None:
            raise RuntimeError("the Run has no head Worker")
        for place in places.values():
            place.uid = uid
        return Placement(head_address=head_address, workers=places, worker_uid=uid)

    def _reserve_uid(self, run_uid: str, taken: frozenset[int]) -> int:
        """A uid of :attr:`identity`'s range for the Run, reserved host-wide (``uid-<n>``).

        Raises:
            RuntimeError: every uid of the range is held by a live Run.
        """
        # the range's last uid is the config composer's (composer_jail), never a Run's
        for uid in candidates(run_uid, self.identity.uids, taken | {self.identity.uids.last}):
            if self.reservations.try_reserve("uid", uid):
                self._run_uids[run_uid] = uid
                return uid
        raise RuntimeError(f"every uid of the Workers' range {self.identity.uids.first}-"
                           f"{self.identity.uids.last} is held by a live Run; widen "
                           "RLARK_WORKER_UIDS or wait for Runs to end")

    def launch(self, spec: LaunchSpec) -> Launched:
        """Start the Worker's keeper (:func:`keeper_argv`), which starts the bootstrap with the
        role's Python: under the Run's uid in its own mount namespace (:meth:`_sandbox`) when
        Workers have an identity of their own, else as this server's user (refused when this
        server serves more than one user).

        Raises:
            FileNotFoundError: the role's interpreter does not exist.
            RuntimeError: the Worker cannot be given what it needs (the message says what).
        """
        role = spec.job.role(spec.worker.role)
        python = python_for(role.local.python if role else None)
        if not os.access(python, os.X_OK):
            raise FileNotFoundError(
                f"the Python interpreter {python!r} for role {spec.worker.role!r} does not exist "
                "or is not executable; fix spec.roles[].local.python"
            )
        if not self.identity.own_uid:
            many = self.serves_many()
            if many:
                raise LaunchRefused(many_users_message(many))
        index = next((k for k, r in enumerate(spec.job.spec.roles) if r is role), 0)
        s3fs = s3fs_path()
        # judged again at launch: s3fs may have gone since the submit (fail closed)
        fuse = objects.fuse_problem(s3fs) \
            if role is not None and any(m.type == MountType.object_storage for m in role.mounts) \
            else None
        unprovided = unprovided_mounts(role, index, own_namespace=spec.place.uid is not None,
                                       fuse=fuse) if role is not None else []
        if unprovided:
            raise LaunchRefused("; ".join(f.message for f in unprovided) + "; nothing was started")
        env = worker_environment(os.environ, spec.env,
                                 secret_env(role, spec.secrets) if role is not None else {},
                                 allow=self.worker_env)
        copies = objects.copy_mounts(role, spec.secrets, fuse) if role is not None else []
        if copies and self.isolation.mode != Mode.pid_namespace:
            raise LaunchRefused(COPY_NEEDS_PID_NAMESPACE + "; nothing was started")
        env.update(ray_auth_env(spec.ray_token))
        if self.allow_unauthenticated_ray:
            env["RLARK_ALLOW_UNAUTHENTICATED_RAY"] = "1"
        # the keeper's own environment: fixed and minimal (it may run as root: nothing a Job
        # sets, LD_PRELOAD or PATH, reaches it or unshare); the workload's comes through a pipe
        own = keeper_environment(spec.run_uid, spec.worker.name, python)
        uid = spec.place.uid
        if uid is not None:
            sandboxed = self._sandbox(spec, python, uid)
            own.update({k: v for k, v in sandboxed.items() if k.startswith("RLARK_KEEPER_")})
            env.update({k: v for k, v in sandboxed.items() if not k.startswith("RLARK_KEEPER_")})
        elif spec.place.ray_temp_dir:
            os.makedirs(os.path.dirname(spec.place.ray_temp_dir), exist_ok=True)
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        keeper_archive = server_archive()
        mode = self.isolation.mode
        cgroup = self._make_cgroup(spec) if mode == Mode.cgroup else None
        read_end, write_end = os.pipe()
        own["RLARK_KEEPER_ENV_FD"] = str(read_end)
        if copies:
            # the keeper's alone: it takes them out of the workload's environment (keeper.py)
            env[keeper_objects.OBJECTS_VAR] = json.dumps(copies)
            # the copier's S3 client (boto3) is the server's; the sandbox binds its Python
            own[keeper_objects.COPY_PYTHON_VAR] = sys.executable
            if any(c["mode"] == objects.FUSE for c in copies):
                own[keeper_fuse.S3FS_VAR] = s3fs
        try:
            fd = os.open(spec.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            with open(fd, "ab", buffering=0) as log:
                proc = subprocess.Popen(
                    keeper_argv(keeper_archive, mode, cgroup),
                    env=own,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd="/",
                    pass_fds=(read_end,),
                )
        except BaseException:
            os.close(write_end)
            if cgroup:
                iso.remove_cgroup(cgroup)
            raise
        finally:
            os.close(read_end)
        feed_pipe(write_end, json.dumps(env).encode())
        self._procs[proc.pid] = proc
        try:
            started = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            started = None
        return Launched(pid=proc.pid, pid_started=started,
                        handle=iso.handle_of(cgroup) if cgroup else None)

    def _sandbox(self, spec: LaunchSpec, python: str, uid: int) -> dict[str, str]:
        """Make the Worker's own directories (owned by ``uid``) and return the keeper's settings
        for its identity and mount namespace (:func:`rlark.runtimes.local.sandbox.plan`) and the
        Worker's own ``HOME``, ``USER`` and ``TMPDIR``.

        Raises:
            RuntimeError: a path the Worker needs may not be given to it, or the plan fails.
        """
        home = str(settings.rlark_home())
        dirs = sandbox.worker_dirs(home, settings.ray_tmp_root(), spec.run_uid,
                                   spec.worker.node_rank)
        needed = self.worker_paths(spec.job, spec.worker.role, python)
        role = spec.job.role(spec.worker.role)
        mounts = role.mounts if role is not None else []
        problems = [p for p in (self.path_problem(path, what) for path, what, _ in needed) if p]
        problems += [p for p in (sandbox.host_source_problem(m.source, f"source of mount {m.name!r}")
                                 for m in mounts if m.type == MountType.host_path) if p]
        problems += [f"source of mount {m.name!r} = {m.source!r} is not a directory on this "
                     "machine" for m in mounts if m.type == MountType.host_path
                     and self.path_problem(m.source, "source") is None
                     and not os.path.isdir(m.source)]
        problems += [p for p in (self.target_problem(m.mount_path, f"mountPath of mount {m.name!r}")
                                 for m in mounts if m.type in BOUND_MOUNTS) if p]
        if any(m.type == MountType.pvc for m in mounts) and not spec.project:
            problems.append("the Run names no project, so its pvc volumes cannot be found")
        if problems:
            raise LaunchRefused("; ".join(problems))
        os.makedirs(os.path.join(home, "workers"), mode=0o700, exist_ok=True)
        os.makedirs(settings.ray_tmp_root(), exist_ok=True)
        # Every directory the Worker may write is made by root inside one only root may write,
        # and nothing root does later follows a link in it: a Worker started earlier cannot
        # plant a link where root would make or chown something (the Run's Ray directory
        # is root's; each Worker's own directory in it is the Worker's)
        for d, owner, mode in ((os.path.dirname(dirs.root), 0, 0o700), (dirs.root, 0, 0o700),
                               (dirs.home, uid, 0o700), (dirs.tmp, uid, 0o700),
                               (dirs.upper, uid, 0o755), (dirs.work, 0, 0o700),
                               (dirs.ray_run, 0, 0o755), (dirs.ray_temp, uid, 0o700)):
            make_dir(d, owner, mode)
        # the start lock of a Ray older than 2.55 (bootstrap/ray_node.py _start_lock_path), made
        # here: the Worker may not create files in the Run's Ray directory
        lock = os.open(os.path.join(dirs.ray_run, f".{spec.run_uid}.ray-start.lock"),
                       os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.fchown(lock, uid, uid)
        finally:
            os.close(lock)
        # the bootstrap the workload runs: the Run's own copy, in the Run's Ray directory (bound
        # into every Worker's view; root's, so the Worker reads the 0444 file and can neither
        # change nor replace it); the keeper itself runs the server's copy, which no Worker sees
        workload_archive = archive.install(dirs.ray_run, archive.local_archive())
        volumes = {m.source: self._volume(spec.project or "", m.source, uid)
                   for m in mounts if m.type == MountType.pvc}
        copied = {}  # mount index -> the Worker's own directory the keeper copies into
        for j, m in enumerate(mounts):
            if m.type == MountType.object_storage:
                copied[j] = objects.object_dir(dirs.root, j)
                make_dir(os.path.dirname(copied[j]), 0, 0o755)
                make_dir(copied[j], uid, 0o700)
        if copied:
            needed = needed + [(p, "the server's Python (the object-storage copy)", "python")
                               for p in sandbox.python_prefixes(sys.executable)]
        wd = spec.job.spec.working_dir
        shm = ray_resources(role).object_store_bytes if role is not None else 0
        real = os.path.realpath  # what was checked is what the keeper binds (it follows no link)
        try:
            plan = sandbox.plan(dirs, rlark_home=home,
                                read_only=[real(p) for p, _, kind in needed
                                           if kind in ("python", "config")],
                                working_dir=real(wd) if wd and os.path.isabs(wd) else None,
                                shm_bytes=shm, stat=os.stat,
                                host_mounts=[(real(m.source) if m.type == MountType.host_path
                                              else copied[j] if j in copied
                                              else volumes[m.source], m.mount_path,
                                              # the keeper remounts it read-only after the copy
                                              m.read_only and j not in copied)
                                             for j, m in enumerate(mounts)
                                             if m.type in BOUND_MOUNTS])
        except sandbox.SandboxPlanError as exc:
            raise RuntimeError(str(exc)) from None
        return {
            "RLARK_KEEPER_UID": str(uid), "RLARK_KEEPER_GID": str(uid),
            "RLARK_KEEPER_BOOTSTRAP": workload_archive,
            "RLARK_KEEPER_SANDBOX": json.dumps(plan),
            "RLARK_KEEPER_HOST_MNTNS": os.readlink("/proc/self/ns/mnt"),
            "HOME": dirs.home, "USER": f"rlark-{uid}", "LOGNAME": f"rlark-{uid}",
            "TMPDIR": "/tmp",
            **({"RLARK_WORKING_DIR": real(wd)} if wd and os.path.isabs(wd) else {}),
        }

    def _volume(self, project: str, name: str, uid: int) -> str:
        """The directory of volume ``name`` of ``project``
        (:func:`rlark.runtimes.local.volumes.volume_dir`), made on first use (root's
        ``volumes/`` and ``volumes/<project>``, mode 0700, hidden from every Worker with
        ``$RLARK_HOME``) and given to the Run's ``uid`` with all an earlier Run of this server
        wrote in it (:func:`~rlark.runtimes.local.volumes.claim`).

        Raises:
            LaunchRefused: a bad name, a link where a directory should be, or a walk that fails.
        """
        home = str(settings.rlark_home())
        try:
            path = volumes.volume_dir(home, project, name)
        except ValueError as exc:
            raise LaunchRefused(f"pvc volume: {exc}") from None
        make_dir(volumes.volumes_root(home), 0, 0o700)
        make_dir(os.path.dirname(path), 0, 0o700)
        make_dir(path, uid, 0o700)
        uids = self.identity.uids
        try:
            volumes.claim(path, uid, lambda u: uids.first <= u <= uids.last)
        except OSError as exc:
            raise LaunchRefused(f"pvc volume {name!r} of project {project!r} cannot be given to "
                                f"the Run: {exc.strerror or exc}") from None
        return path

    def volumes(self, project: str) -> list[dict]:
        """The pvc volumes of ``project`` (:func:`rlark.runtimes.local.volumes.listing`)."""
        return volumes.listing(str(settings.rlark_home()), project)

    def own_dirs(self) -> list[str]:
        """RLark's own directories besides ``$RLARK_HOME``, which no Worker may be given: the
        host-wide lock directory, the keepers' stage, the Ray temp root (real paths)."""
        return [os.path.realpath(d) for d in (settings.lock_dir(), sandbox.STAGE_DIR,
                                              settings.ray_tmp_root())]

    def path_problem(self, path: str, what: str) -> str | None:
        """Why a Worker may not be given ``path`` (:func:`rlark.runtimes.local.sandbox.access_problem`
        with this server's roots), None when it may."""
        return sandbox.access_problem(path, what, rlark_home=str(settings.rlark_home()),
                                      allowed=self.read_paths, stat=os.stat, own=self.own_dirs())

    def target_problem(self, target: str, what: str) -> str | None:
        """Why ``target`` cannot be a mount point in a Worker's view
        (:func:`rlark.runtimes.local.sandbox.mount_target_problem`), None when it can."""
        return sandbox.mount_target_problem(target, what, rlark_home=str(settings.rlark_home()),
                                            own=self.own_dirs())

    def composer_jail(self, roots: Sequence[str]) -> tuple[list[str], dict[str, str]] | None:
        """How this server runs the child that composes a Job's RLinf config
        (:func:`rlark.rlinf_config.isolated.set_jail`), where Workers have a uid of their own:
        in a mount namespace that shows what others may read, this server's own Python and
        code, and those of ``roots`` a Worker may be given (:meth:`path_problem`: never
        ``$RLARK_HOME``), as an unprivileged uid (the last of the Workers' range, which no Run
        gets). What a Job can make the composer read is then what its Workers could. None where
        Workers run as the server's own user (the composer does too)."""
        if not self.identity.own_uid:
            return None
        import rlark

        code = os.path.dirname(os.path.dirname(os.path.realpath(rlark.__file__)))
        readable = [os.path.realpath(r) for r in roots if self.path_problem(r, "config root") is None]
        plan = sandbox.reader_plan(rlark_home=str(settings.rlark_home()),
                                   read_only=[*server_python_roots(), code, *readable], stat=os.stat)
        uid = self.identity.uids.last
        argv = [iso.unshare_path(), "--mount", "--propagation", "private", sys.executable, "-I",
                "-S", server_archive(), "exec"]
        return argv, {"PATH": KEEPER_PATH, "LANG": "C.UTF-8", "RLARK_KEEPER_UID": str(uid),
                      "RLARK_KEEPER_GID": str(uid), "RLARK_KEEPER_SANDBOX": json.dumps(plan),
                      "RLARK_KEEPER_HOST_MNTNS": os.readlink("/proc/self/ns/mnt")}

    def path_reachable(self, path: str) -> bool:
        """Whether this server's Workers may see ``path`` at all (``preflight`` then says
        whether it exists); always where they run as the server's own user."""
        return not self.identity.own_uid or self.path_problem(path, "path") is None

    def preflight(self, job: Job) -> list[Finding]:
        """What this machine's identity and sandbox say about ``job`` (Findings, as submit and
        every launch path report them): a server whose Workers would run as itself refuses when
        it serves more than one user (``IdentityUnavailable``) and warns otherwise
        (``WorkersRunAsServer``); a path a Worker needs that may not be given to it is an error
        (``NotReadableByWorkers``, :func:`rlark.runtimes.local.sandbox.access_problem`); a role
        whose Ray has no token authentication is an error, or a warning where the server allows
        unauthenticated Ray (``RayTooOld``)."""
        out: list[Finding] = []
        if not self.identity.own_uid:
            many = self.serves_many()
            if many:
                out.append(_err("IdentityUnavailable", "spec.roles", many_users_message(many),
                                "ask the server's administrator (docs/security.md, \"Worker "
                                "identity\")"))
            else:
                out.append(_warn("WorkersRunAsServer", "spec.roles",
                                 f"Workers run as this server's own user: {self.identity.why}; a "
                                 "run script can read the server's credentials and database",
                                 "fine for one person on their own machine; for a team run the "
                                 "server as root so each Run gets a uid of its own"))
        seen: set[tuple[str, str]] = set()
        for i, role in enumerate(job.spec.roles):
            out.extend(self._mount_findings(i, role))
            python = python_for(role.local.python)
            if not os.access(python, os.X_OK) and self.path_reachable(python):
                continue  # check_for_local_runtime says PythonNotFound
            for path, what, _ in self.worker_paths(job, role.name, python):
                if (path, what) in seen or not self.identity.own_uid:
                    continue
                seen.add((path, what))
                problem = self.path_problem(path, what)
                if problem:
                    field = what if what.startswith("spec.") else f"spec.roles[{i}].local.python"
                    out.append(_err("NotReadableByWorkers", field, problem,
                                    "see docs/security.md, \"Worker identity\""))
            for j, m in enumerate(role.mounts):
                problem = (self.target_problem(m.mount_path, f"spec.roles[{i}].mounts[{j}].mountPath")
                           if m.type in BOUND_MOUNTS and self.identity.own_uid else None)
                if problem:
                    out.append(_err("InvalidMountPath", f"spec.roles[{i}].mounts[{j}].mountPath",
                                    problem, "mount at a directory of your own, e.g. /data/NAME"))
            version = (installed_version(sandbox.python_prefixes(python)[0], "ray")
                       if self.path_reachable(python) else None)
            if version is not None and version < RAY_TOKEN_AUTH:
                shown = ".".join(map(str, version))
                path = f"spec.roles[{i}].local.python"
                if self.allow_unauthenticated_ray:
                    out.append(_warn("RayTooOld", path,
                                     f"role {role.name!r} runs Ray {shown}, which has no token "
                                     "authentication (2.52+): its Ray cluster takes any process "
                                     "of this machine; the server allows that, and the record "
                                     "says so", "use ray>=2.52"))
                else:
                    out.append(_err("RayTooOld", path,
                                    f"role {role.name!r} runs Ray {shown}, which has no token "
                                    "authentication (2.52+): any process of this machine could "
                                    "join its Ray cluster and run code there",
                                    "use an environment with ray>=2.52 (or an administrator "
                                    "allows it: rlark server --allow-unauthenticated-ray)"))
        return out

    def _mount_findings(self, i: int, role: Role) -> list[Finding]:
        """hostPath and pvc mounts: bound at ``mountPath`` in a Worker's own mount namespace
        (identity ``uid``), where writing a hostPath needs its uid to be allowed
        (``HostPathNotWritable`` when others may not write there); a hostPath source that is or
        touches a system directory is refused (``HostPathNotAllowed``); where Workers run as the
        server's user (no mount namespace) what cannot be provided is refused
        (``MountUnavailable``, :func:`rlark.runtimes.local.preflight.unprovided_mounts`)."""
        # objectStorage: check_for_local_runtime says it, whoever the Workers are
        out = [] if self.identity.own_uid else unprovided_mounts(role, i, own_namespace=False,
                                                                  object_storage=False)
        if self.identity.own_uid and self.isolation.mode != Mode.pid_namespace:
            out += [_err("MountUnavailable", f"spec.roles[{i}].mounts[{j}].type",
                         f"spec.roles[{i}].mounts[{j}] ({m.source[:200]!r}): "
                         + COPY_NEEDS_PID_NAMESPACE, "run the server as root outside a container "
                         "(docs/security.md, \"Worker isolation\"), or use the Kubernetes runtime")
                    for j, m in enumerate(role.mounts) if m.type == MountType.object_storage]
        for j, m in enumerate(role.mounts):
            path = f"spec.roles[{i}].mounts[{j}]"
            if m.type != MountType.host_path or not self.path_reachable(m.source):
                continue  # one the Workers may not see: NotReadableByWorkers, nothing more
            system = sandbox.host_source_problem(m.source, f"{path}.source")
            if system:
                out.append(_err("HostPathNotAllowed", f"{path}.source", system,
                                "mount a directory of your own (e.g. under /data) or a pvc volume"))
            elif self.identity.own_uid and os.path.isdir(m.source) and not m.read_only \
                    and not os.stat(m.source).st_mode & 0o002:
                out.append(_warn(
                    "HostPathNotWritable", f"{path}.source",
                    f"{path}.source = {m.source!r}: Workers run under a uid of their own, which "
                    "may not write there (only its owner and group may)",
                    "use a directory others may write (chmod o+w, or 1777 like /tmp), or set "
                    "readOnly: true if the Job only reads it"))
        return out

    def worker_paths(self, job: Job, role_name: str,
                     python: str | None = None) -> list[tuple[str, str, str]]:
        """``(path, what, kind)`` of the paths of this machine a Worker of ``role_name`` needs
        besides its own directories (``what`` names the field; ``kind``: ``python``,
        ``workingDir``, ``config`` or ``mount``): its Python installation
        (:func:`~rlark.runtimes.local.sandbox.python_prefixes`), the Job's ``workingDir`` and
        absolute RLinf ``configDir``, and the sources of its ``hostPath`` mounts."""
        role = job.role(role_name)
        python = python or python_for(role.local.python if role else None)
        i = next((k for k, r in enumerate(job.spec.roles) if r.name == role_name), 0)
        what = (f"spec.roles[{i}].local.python" if role is not None and role.local.python
                else "the server's Python")
        out = [(p, what, "python") for p in sandbox.python_prefixes(python)]
        wd = job.spec.working_dir
        if wd and os.path.isabs(wd):
            out.append((wd, "spec.workingDir", "workingDir"))
        ref = job.spec.rlinf
        if ref is not None and ref.config_dir and os.path.isabs(ref.config_dir) and not (
                wd and os.path.normpath(ref.config_dir).startswith(os.path.normpath(wd) + "/")):
            out.append((ref.config_dir, "spec.rlinf.configDir", "config"))
        if role is not None:
            for j, m in enumerate(role.mounts):
                if m.type == MountType.host_path:
                    out.append((m.source, f"spec.roles[{i}].mounts[{j}].source", "mount"))
        return out

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
        if ref.uid is not None and ref.run_uid and ref.run_uid not in self._run_uids:
            if f"uid-{ref.uid}" in res.held() or res.try_reserve("uid", ref.uid):
                self._run_uids[ref.run_uid] = ref.uid
            else:
                refused.append(f"uid {ref.uid}")
        self._run_places.setdefault(ref.run_uid or "", []).append((ref.node_ip, ref.port_base))
        if refused:
            log.warning("Worker %s: another process holds the reservation of %s", ref.name,
                        ", ".join(refused))

    def end_run(self, run_uid: str, namespace: str | None = None) -> None:
        """Free whatever of the Run is still reserved (Workers that never launched, its uid)
        and remove its Ray temp directory once its Workers' own are gone."""
        for ip, base in self._run_places.pop(run_uid, []):
            self.reservations.release("ip", ip)
            self._release_block(base)
        self.reservations.release("uid", self._run_uids.pop(run_uid, None))
        ray_run = os.path.join(settings.ray_tmp_root(), run_uid)
        try:
            os.unlink(os.path.join(ray_run, f".{run_uid}.ray-start.lock"))
        except OSError:
            pass
        try:
            copies = [n for n in os.listdir(ray_run) if n.startswith(archive.NAME_PREFIX)
                      and n.endswith(archive.NAME_SUFFIX)]
        except OSError:
            copies = []
        for name in copies:  # the Workers' bootstrap (_sandbox), of this or an older server
            try:
                os.unlink(os.path.join(ray_run, name))
            except OSError:
                pass
        try:
            os.rmdir(ray_run)
        except OSError:
            pass  # kept Ray temp dirs (RLARK_KEEP_RAY_TEMP=1) or none made

    def _release_block(self, base: int | None) -> None:
        """Release every unit of the port block at ``base`` that this runtime reserved."""
        if base is None:
            return
        size = self._block_sizes.pop(base, None)
        for unit in block_units(base, size) if size else (base,):
            self.reservations.release("ports", unit)
