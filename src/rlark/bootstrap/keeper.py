"""RLark's keeper: the first process of every Worker, the runtime's agent inside it.

The Worker's workload (the rest of the bootstrap, ``worker``, and everything it starts: the
prepare script, ``ray start``, Ray's processes, the run script) is the user's code. The keeper is
not: it starts before any of it, imports everything it needs first (standard library only, run
as ``python -I -S`` so no site-packages, ``.pth`` file or ``PYTHON*`` variable is read), and is
the only writer of the Worker's lifecycle lines. Design (docs/security.md, "The control channel"):

* **The channel is the keeper's.** Its standard output is the Worker's log (a file the local
  runtime opened, out of the workload's reach; a container's log on Kubernetes). The workload
  writes into pipes the keeper relays line by line: a workload line that begins like a lifecycle
  line is relayed after ``ESCAPE``, so it cannot be read as one, and the keeper starts every
  line of its own on a fresh line, so output without a final newline cannot swallow or carry it.
  No token is needed, so none is in any line, environment or Pod spec.
* **The keeper is out of the workload's reach.** On the local runtime it runs as root and the
  workload under the Run's own uid; elsewhere (a Pod, a server that is not root) they share a
  uid and the keeper makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, prctl(2)): no
  process of that uid may ptrace it or open its ``/proc/<pid>/{mem,environ,fd}``. Its first line
  (``keeper``) says which held.
* **Results are observed, not reported.** The keeper starts the head's run script itself and
  waits for it: ``run_finished`` carries the exit status the kernel gave it. What the workload
  reports (``facts``, ``phase``, ``nodes``, ``failed``, ``warning``, and ``start_run`` when the
  join barrier passed) comes through a pipe (``RLARK_REPORT_FD``) as JSON lines, each checked
  against its kind's shape (``lifecycle.check_report``) and rate-bounded (``lifecycle.Bucket``) before the
  keeper writes it; the workload can never write ``keeper``, ``running``, ``run_finished``,
  ``stopped``, ``exit``, ``alive`` or ``usage`` (the Worker's CPU, memory and GPUs, which
  the keeper samples itself: usage.py).
* **Memory kills are counted, not guessed.** The kernel's OOM killer kills the biggest process
  of a memory cgroup that reached its limit: a run or prepare script, not the keeper, so a
  container lives on and does not end ``OOMKilled``. The keeper reads its memory cgroup's
  OOM-kill count (``cgroups.MemoryCgroup``, opened before anything starts) when the run script
  starts and ends, and when the workload starts (its prepare script is its first step) and
  reports a failure; a count that rose goes into that ``run_finished`` or ``failed`` line
  (``oom_kills``, with the cgroup's ``memory_limit``), fields the workload may not report
  (``lifecycle.KEEPER_FIELDS``); RLark ends the Run ``OOMKilled`` from them
  (``rlark.controller.phases``).
* **Fail closed.** A failure the workload reports while the run script runs (a lost Ray node)
  stops the run script; so does the end of the workload's node monitor. The Worker exits with
  the run script's status, else the workload's.

Local runtime only, and only as root: before starting anything the keeper builds the Worker's
mount namespace from ``RLARK_KEEPER_SANDBOX`` (``sandbox.apply_sandbox``; the plan is made by the
runtime, ``rlark.runtimes.local.sandbox``), makes its object-storage mounts (FUSE mode:
``fuse.py``, s3fs at ``RLARK_KEEPER_S3FS``; copy mode: ``objects.py``) and starts the workload as
``RLARK_KEEPER_UID``; when the workload is gone it undoes them (FUSE: unmounted, s3fs waited for)
or copies them out (``keeper_mounts.py``).

Inputs (environment; the ``RLARK_KEEPER_*`` ones are removed before the workload starts):
``RLARK_KEEPER_BOOTSTRAP`` (the bootstrap archive the workload runs, ``python <it> worker``;
default the archive this keeper runs from), ``RLARK_KEEPER_PYTHON`` (the interpreter for it;
default this one), ``RLARK_KEEPER_UID``/``RLARK_KEEPER_GID``, ``RLARK_KEEPER_SANDBOX`` (JSON),
``RLARK_KEEPER_HOST_MNTNS`` (the server's mount namespace: the keeper never mounts in it);
``RLARK_KEEPER_OBJECT_STORAGE``, ``RLARK_KEEPER_OBJECTS_STATE`` and ``RLARK_KEEPER_S3_*`` (a
Pod's copy-mode mounts: ``rlark.runtimes.kubernetes.copymounts``); and
the bootstrap's own ``RLARK_RUN_SCRIPT``, ``RLARK_HEAD_ADDRESS``, ``RLARK_WORKING_DIR``,
``RLARK_STOP_GRACE_SECONDS``, ``RLARK_FACTS_BUDGET_SECONDS``, ``RLARK_USAGE_SECONDS`` (seconds
between ``usage`` lines, usage.py), ``RLINF_NODE_RANK``.
"""


from __future__ import annotations

import json
import os
import select
import selectors
import signal
import subprocess
import sys
import time

from rlark.bootstrap.cgroups import MemoryCgroup, find_memory_cgroup
from rlark.bootstrap import fuse as fuse_mounts
from rlark.bootstrap import objects as object_mounts
from rlark.bootstrap.lifecycle import (MAX_FACTS_BYTES, MAX_WARNINGS, REPORT_BURST, REPORT_LIMITS,
                                       REPORT_RATE, Bucket, check_report)
from rlark.bootstrap.relay import Channel, Lines, read_all, write_all
from rlark.bootstrap.sandbox import (SandboxError, apply_sandbox, make_undumpable, set_no_new_privs,
                                     set_subreaper)
from rlark.bootstrap.usage import Sampler, interval_of
from rlark.bootstrap.scripts import SCRIPT_SHELL
from rlark.bootstrap.keeper_mounts import EXIT_MOUNT_FAILED, copy_out, make_mounts, unmount

#: exit statuses of the keeper itself (the workload's own are 80-87, config.py)
EXIT_SANDBOX_FAILED = 88
EXIT_BAD_CONFIG = 87
EXIT_MONITOR_LOST = 86
EXIT_STOPPED = 143

#: seconds between the keeper's ``alive`` lines: the server's sign that the Worker is not frozen
#: (a stopped process answers nothing; its lines stop). Each says which of the workload's own
#: processes are stopped (``T`` in /proc/<pid>/stat), if any.
HEARTBEAT_SECONDS = 10.0


class Config:
    """The keeper's settings: ``RLARK_KEEPER_*`` from its own environment (``own``), everything
    else from the workload's environment. Where the keeper runs as root (local runtime) its own
    environment is a fixed, minimal one and the workload's comes through the pipe
    ``RLARK_KEEPER_ENV_FD`` as JSON: no variable a Job sets (``LD_PRELOAD``, ``PATH``...) ever
    reaches a process of root. Without that descriptor (a Pod) the two are one environment."""

    def __init__(self, own: dict[str, str], workload: dict[str, str] | None = None,
                 archive: str | None = None):
        """``archive``: the bootstrap archive this keeper runs from, which the workload runs
        too unless ``RLARK_KEEPER_BOOTSTRAP`` names another copy (one the Worker's uid may read).

        Raises:
            ValueError: a setting is unusable, or there is no bootstrap to run.
        """
        env = own if workload is None else dict(workload)

        def take(name: str) -> str:
            value = own.pop(name, "") or ""
            if workload is not None:
                env.pop(name, None)  # the workload never names the keeper's settings
            return value

        self.bootstrap = take("RLARK_KEEPER_BOOTSTRAP") or archive or ""
        if not self.bootstrap:
            raise ValueError("no bootstrap to run: RLARK_KEEPER_BOOTSTRAP is not set and the "
                             "keeper does not run from the bootstrap archive")
        self.python = take("RLARK_KEEPER_PYTHON") or sys.executable
        uid, gid = take("RLARK_KEEPER_UID"), take("RLARK_KEEPER_GID")
        self.uid = int(uid) if uid else None
        self.gid = int(gid) if gid else self.uid
        raw = take("RLARK_KEEPER_SANDBOX")
        self.sandbox = json.loads(raw) if raw else None
        self.host_mntns = take("RLARK_KEEPER_HOST_MNTNS") or None
        self.copy_python = take(object_mounts.COPY_PYTHON_VAR) or self.python
        # credentials: only ever through the pipe (local runtime) or the keeper's own
        # environment (a Pod: secretKeyRef), and never into the workload's environment
        raw = (workload if workload is not None else own).get(object_mounts.OBJECTS_VAR, "")
        own.pop(object_mounts.OBJECTS_VAR, None)
        env.pop(object_mounts.OBJECTS_VAR, None)
        self.objects = object_mounts.parse_mounts(raw)
        if workload is None:
            # a Pod: the keys come from the Run's Secret (secretKeyRef), never from the plan
            for m in self.objects:
                m.pop("access_key_id", None)
                m.pop("secret_access_key", None)
            object_mounts.take_credentials(own, object_mounts.KEYS_PREFIX, self.objects)
        else:
            object_mounts.take_credentials(env, object_mounts.KEYS_PREFIX, [])
        #: a Pod's copy-mode mounts were copied in by its init container, which left its
        #: results here (None: the keeper copies in itself)
        self.objects_state = take(object_mounts.STATE_VAR) or None
        #: s3fs, for the mounts in FUSE mode (fuse.py)
        self.s3fs = take(fuse_mounts.S3FS_VAR) or "s3fs"
        self.sync_seconds = float(env.get("RLARK_OBJECT_SYNC_SECONDS") or 600.0)
        self.run_script = env.get("RLARK_RUN_SCRIPT", "")
        self.is_head = env.get("RLINF_NODE_RANK", "") == "0"
        self.head_address = env.get("RLARK_HEAD_ADDRESS", "")
        # a Worker under its own uid starts in its own home when the Job names no workingDir
        self.working_dir = env.get("RLARK_WORKING_DIR") or (
            env.get("HOME") if self.uid is not None else None) or None
        self.stop_grace = float(env.get("RLARK_STOP_GRACE_SECONDS") or 8.0)
        # after the run script: the workload's last facts (Hydra outputs) and Ray's shutdown
        self.finish_grace = float(env.get("RLARK_FACTS_BUDGET_SECONDS") or 20.0) + self.stop_grace
        #: seconds between ``usage`` lines (usage.py), None: none
        self.usage_seconds = interval_of(env.get("RLARK_USAGE_SECONDS"))
        self.env = env


def exit_status(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Keeper:
    """One Worker's life as its keeper sees it; :meth:`run` returns the Worker's exit status."""

    def __init__(self, cfg: Config, chan: Channel, memcg: MemoryCgroup | None = None):
        """``memcg``: the Worker's memory cgroup, whose OOM kills the keeper counts (None:
        none found, nothing is said about OOM kills)."""
        self.cfg, self.chan, self.memcg = cfg, chan, memcg
        #: the cgroup's OOM-kill count when the workload started (before its prepare script,
        #: its first step) and when the run script started
        self.oom_mark: int | None = None
        self.run_oom_mark: int | None = None
        self.bucket = Bucket(REPORT_RATE, REPORT_BURST)
        self.warnings = 0
        self.facts_bytes = 0
        self.dropped = 0
        self.dropped_said = 0.0
        self.stop_at: float | None = None  # monotonic time of the stop signal
        self.worker: subprocess.Popen | None = None
        self.worker_code: int | None = None
        self.run: subprocess.Popen | None = None
        self.run_code: int | None = None
        self.run_started = 0.0
        self.failed_reported = False
        self.ctl_w: int | None = None
        #: after the run script ended: when the workload must be done (its last facts, Ray's stop)
        self.finish_deadline: float | None = None
        #: the run script ended by itself (not stopped by the keeper): its status is the result
        self.run_ended_alone = False
        self.next_heartbeat = time.monotonic() + HEARTBEAT_SECONDS
        #: when the keeper began stopping the run script because the node monitor is gone
        self.stop_run_at: float | None = None
        self.sampler = (Sampler(cfg.usage_seconds, os.getpid(), cfg.env.get("CUDA_VISIBLE_DEVICES"))
                        if cfg.usage_seconds is not None else None)
        #: the head's ``run_finished`` waits for its copy-mode mounts to be copied out (the
        #: Run's result includes them): held here, with the moment the run script ended
        self.hold_finish = False
        self.held_finish: dict | None = None
        #: the Worker's FUSE-mode mounts, whose s3fs processes are the keeper's children
        self.fuse: fuse_mounts.FuseMounts | None = None

    # identity of everything the keeper starts
    def _identity(self) -> dict:
        if self.cfg.uid is None:
            return {}
        return {"user": self.cfg.uid, "group": self.cfg.gid, "extra_groups": [], "umask": 0o077}

    def _workload_env(self) -> dict[str, str]:
        env = dict(self.cfg.env)
        bindir = os.path.dirname(self.cfg.python)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        return env

    def on_signal(self, signum, _frame) -> None:
        if self.stop_at is None:
            self.stop_at = time.monotonic()
            for p in (self.worker, self.run):
                _killpg(p, signal.SIGTERM)

    def _report(self, line: bytes) -> None:
        report, why = check_report(line)
        if report is None:
            self._drop(f"a report was refused: {why}")
            return
        if not self.bucket.take():
            self._drop("the workload reports faster than "
                       f"{REPORT_RATE:g} lines/s (bursts of {REPORT_BURST})")
            return
        kind = report.pop("event")
        if kind == "start_run":
            self._start_run()
            return
        if kind == "warning":
            self.warnings += 1
            if self.warnings > MAX_WARNINGS:
                self._drop(f"more than {MAX_WARNINGS} warnings")
                return
        if kind == "facts":
            self.facts_bytes += len(line)
            if self.facts_bytes > MAX_FACTS_BYTES:
                self._drop(f"more than {MAX_FACTS_BYTES} bytes of facts")
                return
        if kind == "failed":
            report.update(self._oom_since(self.oom_mark))
            self.failed_reported = True
            if self.run is not None and self.run_code is None:
                _killpg(self.run, signal.SIGTERM)  # fail closed: e.g. a lost Ray node
        self.chan.emit(kind, **report)

    def _drop(self, why: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self.dropped_said >= 10.0:  # one line about it per 10 s, however many
            self.dropped_said = now
            self.chan.emit("warning", reason="ReportsDropped",
                           message=f"the keeper dropped {self.dropped} report(s) of this Worker "
                                   f"so far; latest: {why}")

    def _start_run(self) -> None:
        if not self.cfg.is_head or not self.cfg.run_script or self.run is not None \
                or self.stop_at is not None:
            self._drop("start_run: not the head, no run script, already started, or stopping")
            return
        env = self._workload_env()
        env["RAY_ADDRESS"] = self.cfg.head_address
        self.run_oom_mark = self._oom_count()
        try:
            self.run = subprocess.Popen(
                [*SCRIPT_SHELL, self.cfg.run_script], env=env, cwd=self.cfg.working_dir,
                stdin=subprocess.DEVNULL, stdout=self.out_w, stderr=self.out_w,
                start_new_session=True, **self._identity())
        except OSError as exc:
            self.chan.emit("failed", reason="RunFailed", status=127,
                           message=f"the run script could not start: {exc.strerror or exc}")
            self.run_code = 127
            self.failed_reported = True
            return
        self.run_started = time.time()
        self.chan.emit("running", pid=self.run.pid)

    def _oom_count(self) -> int | None:
        return self.memcg.oom_kills() if self.memcg is not None else None

    def _oom_since(self, mark: int | None) -> dict:
        """``{"oom_kills": n, "memory_limit": bytes}`` when the cgroup's OOM-kill count rose by
        ``n`` since ``mark`` (``memory_limit`` only when the cgroup has one); else nothing."""
        now = self._oom_count()
        if mark is None or now is None or now <= mark:
            return {}
        limit = self.memcg.limit if self.memcg is not None else None
        return {"oom_kills": now - mark, **({"memory_limit": limit} if limit is not None else {})}

    def _heartbeat(self, now: float) -> None:
        """An ``alive`` line every :data:`HEARTBEAT_SECONDS`, naming the workload's processes
        that are stopped (SIGSTOP, a debugger), which answer nothing while the keeper runs."""
        if now < self.next_heartbeat:
            return
        self.next_heartbeat = now + HEARTBEAT_SECONDS
        stopped = [name for name, p in (("bootstrap", self.worker), ("run script", self.run))
                   if p is not None and p.returncode is None and process_state(p.pid) in ("T", "t")]
        self.chan.emit("alive", **({"stopped": stopped} if stopped else {}))

    def _sample_usage(self, now: float) -> None:
        """A ``usage`` line (CPU, memory, GPUs of the processes below the keeper: usage.py)
        every ``RLARK_USAGE_SECONDS``; a line only the keeper writes (lifecycle.KEEPER_KINDS)."""
        if self.sampler is None or not self.sampler.due(now):
            return
        fields = self.sampler.sample(now)
        if fields is not None:
            self.chan.emit("usage", **fields)

    def _tell_worker(self, text: str) -> None:
        if self.ctl_w is None:
            return
        try:
            os.write(self.ctl_w, text.encode() + b"\n")
        except OSError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = exit_status(status)
            if self.worker is not None and pid == self.worker.pid:
                self.worker.returncode = code
                self.worker_code = code
            elif self.run is not None and pid == self.run.pid:
                self.run.returncode = code
                self.run_code = code
                self.run_ended_alone = not self.failed_reported and self.stop_at is None
                if self.run_ended_alone:
                    # ended by itself: its status is the Run's result (a run script the keeper
                    # stopped has none; the failure or the stop says why); after all it wrote
                    self._relay_ready()
                    finished = {"exit_code": code, **self._oom_since(self.run_oom_mark)}
                    if self.hold_finish:
                        self.held_finish = {**finished, "ts": round(time.time(), 3)}
                        # the Run's result waits for the copy out; meanwhile the other
                        # Workers lose the head's Ray node, which ends the Run, not fails it
                        self.chan.emit("copying_out", run_ended=self.held_finish["ts"])
                    else:
                        self.chan.emit("run_finished", **finished)
                self._tell_worker(f"run_finished {code} {self.run_started:.3f}")
                self.finish_deadline = time.monotonic() + self.cfg.finish_grace
            elif self.fuse is not None and self.fuse.note_exit(pid, code) is not None:
                self._fuse_lost(pid, code)
            # anything else: an orphan this PID 1 reaps

    def _fuse_lost(self, pid: int, code: int) -> None:
        """An s3fs exited while the Worker runs: its mount no longer reaches the bucket, so
        the Worker fails (``MountFailed``) and its run script stops (fail closed)."""
        u = self.fuse.owns(pid) if self.fuse is not None else None
        if u is None or self.stop_at is not None or self.failed_reported:
            return
        said = u.said()
        self.chan.emit("failed", reason="MountFailed", status=EXIT_MOUNT_FAILED,
                       message=f"mount {u.m['name']!r} ({u.m['source']}): s3fs exited (status "
                               f"{code}) while the Worker ran" + (f": {said}" if said else ""))
        self.failed_reported = True
        for p in (self.run, self.worker):
            _killpg(p, signal.SIGTERM)

    def _relay_ready(self) -> None:
        """Relay what the workload's output pipe holds now, without waiting: a process that
        exited wrote all it will write, so the keeper's next line comes after its last words
        (which may lack a newline), whenever the keeper noticed the exit."""
        while select.select([self.out_r], [], [], 0)[0]:
            try:
                data = os.read(self.out_r, 1 << 16)
            except InterruptedError:
                continue
            if not data:
                return
            self.chan.relay(data)

    def start(self) -> None:
        self.oom_mark = self._oom_count()
        self.out_r, self.out_w = os.pipe()
        rep_r, rep_w = os.pipe()
        ctl_r, self.ctl_w = os.pipe()
        env = self._workload_env()
        env["RLARK_REPORT_FD"], env["RLARK_CONTROL_FD"] = str(rep_w), str(ctl_r)
        self.worker = subprocess.Popen(
            [self.cfg.python, self.cfg.bootstrap, "worker"], env=env, cwd=self.cfg.working_dir,
            stdin=subprocess.DEVNULL, stdout=self.out_w, stderr=self.out_w,
            pass_fds=(rep_w, ctl_r), start_new_session=True, **self._identity())
        os.close(rep_w)
        os.close(ctl_r)
        self.rep_r = rep_r
        self.reports = Lines(max(REPORT_LIMITS.values()))

    def loop(self) -> int:
        sel = selectors.DefaultSelector()
        sel.register(self.out_r, selectors.EVENT_READ, "out")
        sel.register(self.rep_r, selectors.EVENT_READ, "rep")
        killed = False
        while True:
            for key, _ in sel.select(timeout=0.1):
                try:
                    data = os.read(key.fd, 1 << 16)
                except InterruptedError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    continue
                if key.data == "out":
                    self.chan.relay(data)
                else:
                    for line in self.reports.feed(data):
                        self._report(line)
            self._reap()
            now = time.monotonic()
            self._heartbeat(now)
            self._sample_usage(now)
            worker_done = self.worker_code is not None
            if self.stop_at is not None:
                if not killed and now - self.stop_at > self.cfg.stop_grace:
                    killed = True
                    for p in (self.worker, self.run):
                        _killpg(p, signal.SIGKILL)
                if worker_done and (self.run is None or self.run_code is not None):
                    break
                continue
            if self.run is not None and self.run_code is None and worker_done:
                # the node monitor is gone while the run script runs: nothing would notice a
                # lost Ray node any more, so the run stops (fail closed)
                if not self.failed_reported:
                    self.chan.emit("failed", reason="MonitorLost", status=EXIT_MONITOR_LOST,
                                   message="the Worker's bootstrap "
                                           f"exited with status {self.worker_code} while the "
                                           "run script ran; the run script is stopped")
                    self.failed_reported = True
                if self.stop_run_at is None:
                    self.stop_run_at = now
                    _killpg(self.run, signal.SIGTERM)
                elif now - self.stop_run_at > self.cfg.stop_grace:
                    _killpg(self.run, signal.SIGKILL)
                continue
            if self.run_code is not None:
                if worker_done:
                    break
                if self.finish_deadline is not None and now > self.finish_deadline:
                    _killpg(self.worker, signal.SIGKILL)
                continue
            if worker_done:
                break
        self._drain(sel)
        return self.outcome()

    def outcome(self) -> int:
        """The Worker's exit status: the run script's when it ended by itself; after a stop,
        143 (and a ``stopped`` line); after a reported failure, the workload's own status."""
        if self.run_ended_alone and self.run_code is not None:
            return self.run_code
        if self.stop_at is not None:
            self.chan.emit("stopped")
            return EXIT_STOPPED
        return self.worker_code if self.worker_code is not None else 1

    def _drain(self, sel) -> None:
        """What the workload wrote before it ended (bounded: Ray's daemons may hold the pipe)."""
        os.close(self.out_w)
        end = time.monotonic() + 1.0
        while sel.get_map() and time.monotonic() < end:
            for key, _ in sel.select(timeout=0.05):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    self.chan.relay(data)
                else:
                    for line in self.reports.feed(data):
                        self._report(line)


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (proc(5): field 3 of /proc/<pid>/stat, after the
    command in parentheses), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 1:].split()
    return rest[0].decode() if rest else None


def _killpg(proc: subprocess.Popen | None, sig: int) -> None:
    if proc is None or proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(archive: str | None = None) -> int:
    """``keeper``: ``python -I -S rlark-bootstrap.pyz keeper`` with the Worker's environment (or
    the keeper's own, and the Worker's through ``RLARK_KEEPER_ENV_FD``: :class:`Config`);
    ``archive``: the archive's path (the workload's default bootstrap). Returns the Worker's
    exit status."""
    # the mount points the keeper makes must be enterable by the Worker's uid (0755), whatever
    # umask the server has (077)
    os.umask(0o022)
    chan = Channel(lambda data: write_all(1, data))
    own = dict(os.environ)
    try:
        fd = own.pop("RLARK_KEEPER_ENV_FD", "")
        workload = None
        if fd:
            workload = json.loads(read_all(int(fd)))
            if not isinstance(workload, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in workload.items()):
                raise ValueError("the workload's environment is not a JSON object of strings")
        cfg = Config(own, workload, archive)
    except (ValueError, OSError) as exc:
        chan.emit("failed", reason="BadConfig", message=f"keeper settings: {exc}",
                  status=EXIT_BAD_CONFIG)
        chan.emit("exit", code=EXIT_BAD_CONFIG)
        return EXIT_BAD_CONFIG
    unprotected = make_undumpable()
    if unprotected and (cfg.uid is None or cfg.uid == os.getuid()) and any(
            m.get("access_key_id") for m in cfg.objects):
        # the workload, of this uid, could read the bucket's keys from this process: fail closed
        chan.emit("failed", reason="MountFailed", status=EXIT_MOUNT_FAILED,
                  message=f"the keeper holds object-storage keys and could not make itself "
                          f"non-dumpable ({unprotected}): the Worker's code could read them")
        chan.emit("exit", code=EXIT_MOUNT_FAILED)
        return EXIT_MOUNT_FAILED
    # before the sandbox, whose mount namespace may not show /sys
    memcg = find_memory_cgroup()
    if cfg.sandbox is not None:
        try:
            apply_sandbox(cfg.sandbox, cfg.host_mntns)
        except SandboxError as exc:
            chan.emit("failed", reason="SandboxFailed", status=EXIT_SANDBOX_FAILED,
                      message=f"the Worker's file system view could not be made: {exc}")
            chan.emit("exit", code=EXIT_SANDBOX_FAILED)
            return EXIT_SANDBOX_FAILED
    set_no_new_privs()
    # orphans of the workload (Ray's daemons) stay below the keeper: its usage lines count them
    set_subreaper()
    keeper = Keeper(cfg, chan, memcg)
    signal.signal(signal.SIGTERM, keeper.on_signal)
    signal.signal(signal.SIGINT, keeper.on_signal)
    # out of the workload's reach: it runs under another uid than the keeper's, or the keeper
    # is non-dumpable
    other_uid = cfg.uid is not None and cfg.uid != os.getuid()
    chan.emit("keeper", pid=os.getpid(),
              uid=cfg.uid if cfg.uid is not None else os.getuid(),
              protected=other_uid or not unprotected,
              **({"unprotected": unprotected} if unprotected and not other_uid else {}),
              sandbox=cfg.sandbox is not None, heartbeat=HEARTBEAT_SECONDS)
    mounts, ended = make_mounts(keeper)
    if ended is not None:
        return ended
    keeper.hold_finish = cfg.is_head and (
        (mounts is not None and mounts.writable())
        or (keeper.fuse is not None and keeper.fuse.writable()))
    try:
        keeper.start()
    except OSError as exc:
        unmount(keeper)
        chan.emit("failed", reason="BadConfig", status=EXIT_BAD_CONFIG,
                  message=f"the bootstrap {cfg.bootstrap!r} could not start with "
                          f"{cfg.python!r}: {exc.strerror or exc}")
        chan.emit("exit", code=EXIT_BAD_CONFIG)
        return EXIT_BAD_CONFIG
    code = keeper.loop()
    if keeper.fuse is not None or (mounts is not None and mounts.writable()):
        code = copy_out(keeper, mounts, code)
    chan.emit("exit", code=code)
    return code
