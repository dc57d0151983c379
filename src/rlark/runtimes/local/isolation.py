"""How the local runtime keeps a Worker's processes together, so that ending the Worker ends every
process it started: the kinds of isolation, the probe that picks one once at server start, and
the per-Worker cgroup used where no PID namespace can be made.

Kinds, strongest first (``auto`` takes the first one this server can make; docs/security.md):

``pid-namespace``
    ``unshare --pid --fork --mount-proc`` (needs CAP_SYS_ADMIN: root outside a container). The
    bootstrap is PID 1 of the Worker's own PID namespace; when PID 1 ends, the kernel kills every
    other process in it, whatever session or process group they made (pid_namespaces(7)).
``cgroup``
    A cgroup per Worker, ``<parent>/<run uid>-<rank>``, on cgroup v2 (also the ``unified``
    hierarchy of a hybrid setup) or else the cgroup v1 ``freezer`` hierarchy. The Worker joins it
    before the bootstrap starts (``echo 0 > cgroup.procs; exec ...``), every descendant is born
    in it, and ending the Worker kills everything in it: ``cgroup.kill`` (v2, Linux 5.14+), else
    freeze, SIGKILL each member, thaw. Needs write access to the parent (root, or a cgroup
    delegated to the server's user, e.g. ``systemd-run --user --scope -p Delegate=yes``).
``user-namespace``
    A PID namespace inside a new user namespace that maps only the server's own user
    (``unshare --user --map-current-user``, util-linux 2.38+; user_namespaces(7)): what a
    non-root user can make where unprivileged user namespaces are allowed. Inside it a root
    server's Workers cannot override file permissions of files owned by other users (their owners
    are not mapped), hence after ``cgroup``.
``process-group``
    Weak: the Worker is a process group (``setsid``); a descendant that calls ``setsid()``
    escapes the group. Never chosen by ``auto``; only on request (``--worker-isolation
    process-group``). RLark then also kills what still carries the Worker's ``RLARK_RUN_ID`` and
    ``RLARK_WORKER`` in its environment, which a process started with ``env -i`` escapes too.

A Worker's cgroup path is its handle in the store (``WorkerRow.handle``, ``cgroup:<path>``), so a
later server kills it whole whatever isolation that server itself can give.
"""

from __future__ import annotations

import enum
import errno
import functools
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlark.bootstrap.cgroups import (CgroupMount, cgroup_dir, parse_mountinfo,  # noqa: F401
                                     parse_proc_cgroup)

log = logging.getLogger("rlark.runtime.local")

#: how long each probe may take (seconds); a probe that runs out counts as "cannot"
PROBE_TIMEOUT_SECONDS = 10.0
#: the parent of the Workers' cgroups, below the server's own cgroup, unless RLARK_CGROUP_PARENT
CGROUP_PARENT_NAME = "rlark-workers"
#: prefix of a Worker handle that names its cgroup
HANDLE_PREFIX = "cgroup:"
#: how long a freeze may take before the members are killed anyway (seconds)
FREEZE_WAIT_SECONDS = 1.0


class Mode(str, enum.Enum):
    """A kind of Worker isolation (module docstring)."""

    pid_namespace = "pid-namespace"
    cgroup = "cgroup"
    user_namespace = "user-namespace"
    process_group = "process-group"


#: what ``auto`` tries, in this order
AUTO_ORDER = (Mode.pid_namespace, Mode.cgroup, Mode.user_namespace)
REQUESTS = ("auto", *(m.value for m in Mode))


# --- pure builders -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def unshare_path() -> str:
    """util-linux ``unshare`` by its absolute path, found once on this server's own ``PATH``:
    a Worker's command line never looks a program up on a ``PATH`` a Job could set."""
    return shutil.which("unshare") or "/usr/bin/unshare"


def namespace_argv(mode: Mode) -> list[str]:
    """The ``unshare`` prefix of a Worker's command line for a namespace mode (pure): PID, mount
    (``--mount-proc``) and IPC namespaces of its own.

    ``--kill-child=SIGTERM``: if ``unshare`` itself dies, PID 1 of the namespace gets SIGTERM
    and stops the Worker; it also has a handler, so SIGTERM to the group reaches it."""
    argv = [unshare_path()]
    if mode == Mode.user_namespace:
        argv.append("--map-current-user")  # implies --user; util-linux 2.38
    # --ipc: System V IPC and POSIX message queues of its own (nothing one Run leaves there
    # reaches another)
    return [*argv, "--pid", "--fork", "--mount-proc", "--ipc", "--kill-child=SIGTERM"]


def join_cgroup_argv(procs_file: str, argv: list[str]) -> list[str]:
    """``argv`` started from a shell that first moves itself into the cgroup whose
    ``cgroup.procs`` is ``procs_file`` (writing 0 there moves the writer; cgroups(7)) and only
    then ``exec``s it, so the Worker and every process it starts are in the cgroup from the
    first instruction on. A refused move ends the shell with status 1 before anything runs."""
    return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', procs_file, *argv]


def pick_hierarchy(mounts: list[CgroupMount]) -> CgroupMount | None:
    """The hierarchy Workers' cgroups go in: cgroup v2 (pure, or the ``unified`` one of a hybrid
    setup), else the v1 ``freezer`` hierarchy (it can stop a Worker's processes while they are
    killed); None when neither is mounted."""
    for m in mounts:
        if m.version == 2:
            return m
    for m in mounts:
        if m.version == 1 and "freezer" in m.controllers:
            return m
    return None


def hierarchy_key(mount: CgroupMount) -> str:
    """The key of ``mount`` in :func:`parse_proc_cgroup`'s answer."""
    return "2" if mount.version == 2 else "freezer"


def default_parent(mount: CgroupMount, proc_cgroup: dict[str, str]) -> str:
    """``<this process's cgroup>/rlark-workers`` in ``mount``: a place the server owns (a
    cgroup delegated to its user, or anywhere as root); the mount point itself when this
    process's cgroup is not visible there (pure)."""
    own = proc_cgroup.get(hierarchy_key(mount))
    base = cgroup_dir(mount, own) if own is not None else None
    return os.path.join(base or mount.mount_point, CGROUP_PARENT_NAME)


def worker_cgroup_name(run_uid: str, node_rank: int) -> str:
    """A Worker's cgroup directory name: ``<run uid>-<rank>`` (as its Ray temp dir)."""
    return f"{run_uid}-{node_rank}"


def handle_of(path: str) -> str:
    """The store handle of a Worker in cgroup ``path``."""
    return HANDLE_PREFIX + path


def cgroup_of_handle(handle: str | None) -> str | None:
    """The cgroup path a handle names (None: the Worker has no cgroup)."""
    if handle and handle.startswith(HANDLE_PREFIX):
        return handle[len(HANDLE_PREFIX):]
    return None


# --- cgroup operations (thin) -----------------------------------------------------------------


def cgroup_pids(path: str) -> list[int]:
    """The processes in cgroup ``path`` (``cgroup.procs``); none when it is gone."""
    try:
        text = Path(path, "cgroup.procs").read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # removed while being read
            return []
        raise
    return [int(p) for p in text.split()]


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _wait_frozen(check, seconds: float = FREEZE_WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


def kill_cgroup(path: str) -> int:
    """SIGKILL every process in cgroup ``path``: ``cgroup.kill`` where the kernel has it (v2,
    Linux 5.14), else freeze the cgroup (so nothing forks meanwhile; ``cgroup.freeze`` on v2,
    ``freezer.state`` on v1), SIGKILL each member and thaw it. Returns how many processes were
    in it (0: empty or gone); call again until it returns 0 (killed processes leave the cgroup a
    moment later)."""
    pids = cgroup_pids(path)
    if not pids:
        return 0
    base = Path(path)
    if _write(base / "cgroup.kill", "1"):
        return len(pids)
    thaw = None
    if (base / "cgroup.freeze").exists() and _write(base / "cgroup.freeze", "1"):
        _wait_frozen(lambda: "frozen 1" in _read(base / "cgroup.events"))
        thaw = (base / "cgroup.freeze", "0")
    elif (base / "freezer.state").exists() and _write(base / "freezer.state", "FROZEN"):
        _wait_frozen(lambda: _read(base / "freezer.state").strip() == "FROZEN")
        thaw = (base / "freezer.state", "THAWED")
    pids = cgroup_pids(path)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if thaw is not None:
        _write(*thaw)  # a frozen process dies of its pending SIGKILL once thawed
    return len(pids)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def remove_cgroup(path: str) -> bool:
    """Remove the (empty) cgroup ``path``; True when it is gone. A cgroup that still has a
    process stays (EBUSY) and False is returned."""
    try:
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("cannot remove the Worker cgroup %s: %s", path, exc.strerror)
        return False


# --- the probe ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Isolation:
    """What isolation this server gives its local Workers, as probed at its start.

    ``mode``: the kind in use; None when ``auto`` found none (local Workers are then refused).
    ``requested``: ``auto`` or the kind asked for. ``probes``: kind -> ``"ok"`` or why it cannot
    be used here. ``cgroup_parent`` / ``cgroup_version``: where Worker cgroups go (mode cgroup)."""

    mode: Mode | None
    requested: str = "auto"
    probes: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str | None = None
    cgroup_version: int | None = None

    @property
    def strong(self) -> bool:
        """Ending a Worker ends every process it started (not so for ``process-group``)."""
        return self.mode is not None and self.mode != Mode.process_group

    def view(self) -> dict:
        """JSON-ready, for ``/api/v1/nodes`` and the server log: ``{"mode", "requested",
        "strong", "probes", "cgroupParent", "cgroupVersion"}``."""
        return {"mode": self.mode.value if self.mode else None, "requested": self.requested,
                "strong": self.strong, "probes": dict(self.probes),
                "cgroupParent": self.cgroup_parent, "cgroupVersion": self.cgroup_version}

    def summary(self) -> str:
        """One line for the server log."""
        why = "; ".join(f"{k}: {v}" for k, v in self.probes.items())
        if self.mode is None:
            return f"no Worker isolation available ({why})"
        where = f" under {self.cgroup_parent} (cgroup v{self.cgroup_version})" if self.mode == Mode.cgroup else ""
        return f"Worker isolation: {self.mode.value}{where} (requested {self.requested}; {why})"


def _run_probe(argv: list[str]) -> str:
    """``"ok"`` when ``argv`` exits 0 within :data:`PROBE_TIMEOUT_SECONDS`, else why not."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_SECONDS)
    except FileNotFoundError as exc:
        return f"{exc.filename} not found"
    except subprocess.TimeoutExpired:
        return f"{argv[0]} did not finish within {PROBE_TIMEOUT_SECONDS:g} s"
    if done.returncode == 0:
        return "ok"
    text = (done.stderr or done.stdout).strip().splitlines()
    return text[-1] if text else f"{argv[0]} exited with {done.returncode}"


def probe_namespace(mode: Mode) -> str:
    """Whether a Worker can be started in ``mode`` (a namespace mode): runs ``true`` the way a
    Worker is started. ``"ok"`` or the reason (unshare's own message, e.g. ``unshare failed:
    Operation not permitted`` without CAP_SYS_ADMIN)."""
    if shutil.which("unshare") is None:
        return "util-linux unshare not found"
    return _run_probe([*namespace_argv(mode), "true"])


def probe_cgroup(parent: str) -> str:
    """Whether Workers' cgroups can be made under ``parent``: makes the parent and a probe
    cgroup in it, starts a process in it as a Worker is started, kills the cgroup and removes
    it. ``"ok"`` or the reason."""
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        return f"cannot create {parent}: {exc.strerror}"
    probe = os.path.join(parent, f"probe-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        return f"cannot create a cgroup in {parent}: {exc.strerror}"
    proc = None
    try:
        proc = subprocess.Popen(join_cgroup_argv(os.path.join(probe, "cgroup.procs"),
                                                 ["sleep", "30"]),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + PROBE_TIMEOUT_SECONDS
        while proc.pid not in cgroup_pids(probe):
            if proc.poll() is not None:
                err = (proc.stderr.read().decode(errors="replace").strip() if proc.stderr else "")
                return f"cannot move a process into {probe}: {err or f'exit {proc.returncode}'}"
            if time.monotonic() > deadline:
                return f"a process did not join {probe} within {PROBE_TIMEOUT_SECONDS:g} s"
            time.sleep(0.01)
        while kill_cgroup(probe):
            if time.monotonic() > deadline:
                return f"the processes of {probe} could not be killed within {PROBE_TIMEOUT_SECONDS:g} s"
            time.sleep(0.01)
        return "ok"
    except OSError as exc:
        return f"probing {probe}: {exc.strerror or exc}"
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stderr:
                proc.stderr.close()
        deadline = time.monotonic() + 2
        while not _rmdir_quiet(probe) and time.monotonic() < deadline:
            time.sleep(0.01)


def _rmdir_quiet(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def cgroup_setup(parent: str | None = None) -> tuple[CgroupMount | None, str | None, str]:
    """The hierarchy and parent Workers' cgroups would use here: ``parent`` when given (it must
    lie in a mounted cgroup hierarchy), else :func:`default_parent` of :func:`pick_hierarchy`.
    Returns ``(mount, parent, problem)``; ``problem`` is empty when both were found."""
    try:
        mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        own = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
    except OSError as exc:
        return None, None, f"cannot read /proc: {exc.strerror}"
    if parent:
        real = os.path.realpath(parent)
        inside = [m for m in mounts if real == m.mount_point or real.startswith(m.mount_point.rstrip("/") + "/")]
        if not inside:
            return None, None, f"RLARK_CGROUP_PARENT={parent!r} is not inside a mounted cgroup hierarchy"
        return max(inside, key=lambda m: len(m.mount_point)), real, ""
    mount = pick_hierarchy(mounts)
    if mount is None:
        return None, None, "neither cgroup v2 nor the cgroup v1 freezer hierarchy is mounted"
    return mount, default_parent(mount, own), ""


def choose(requested: str, probes: dict[str, str]) -> Mode | None:
    """The mode to use (pure): the requested one (its probe must be ok, except
    ``process-group``, which needs none), or for ``auto`` the first of :data:`AUTO_ORDER` whose
    probe is ok; None when ``auto`` found none.

    Raises:
        ValueError: a requested mode this server cannot give (the message has the probe's reason).
    """
    if requested == Mode.process_group.value:
        return Mode.process_group
    if requested != "auto":
        mode = Mode(requested)
        if probes.get(mode.value) != "ok":
            raise ValueError(
                f"--worker-isolation {mode.value} is not available here: "
                f"{probes.get(mode.value, 'not probed')}; use --worker-isolation auto to take the "
                "strongest kind this server can give")
        return mode
    for mode in AUTO_ORDER:
        if probes.get(mode.value) == "ok":
            return mode
    return None


def probe(requested: str = "auto", cgroup_parent: str | None = None) -> Isolation:
    """Find out what isolation this server can give its Workers (run once at start: each probe
    starts a short process). ``requested``: ``auto`` (every kind of :data:`AUTO_ORDER` is
    probed, in order, until one works) or a kind of :class:`Mode` (only it is probed).

    Raises:
        ValueError: ``requested`` is unknown, or is a kind this server cannot give.
    """
    if requested not in REQUESTS:
        raise ValueError(f"--worker-isolation {requested!r} is not one of {', '.join(REQUESTS)}")
    probes: dict[str, str] = {}
    mount = parent = None
    wanted = AUTO_ORDER if requested == "auto" else tuple(m for m in Mode if m.value == requested)
    for mode in wanted:
        if mode == Mode.process_group:
            break
        if mode == Mode.cgroup:
            mount, parent, problem = cgroup_setup(cgroup_parent)
            probes[mode.value] = problem or probe_cgroup(parent)  # type: ignore[arg-type]
        else:
            probes[mode.value] = probe_namespace(mode)
        if probes[mode.value] == "ok":
            break
    chosen = choose(requested, probes)
    use_cgroup = chosen == Mode.cgroup
    return Isolation(mode=chosen, requested=requested, probes=probes,
                     cgroup_parent=parent if use_cgroup else None,
                     cgroup_version=mount.version if use_cgroup and mount else None)


def unavailable_message(iso: Isolation) -> str:
    """Why local Workers are refused, and the ways out (for the start-up error)."""
    why = "; ".join(f"{k}: {v}" for k, v in iso.probes.items())
    return (f"this server cannot keep a local Worker's processes together ({why}), so stopping a "
            "Run could leave processes behind. Give it one of: CAP_SYS_ADMIN (run as root outside "
            "a container), unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 "
            "/ user.max_user_namespaces > 0), or a cgroup it may write (root, or "
            "`systemd-run --user --scope -p Delegate=yes rlark server`; RLARK_CGROUP_PARENT names "
            "one). Or accept weak isolation, where a process that calls setsid() can outlive its "
            "Worker: `rlark server --worker-isolation process-group`")
