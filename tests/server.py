"""A real ``rlark server`` in a subprocess, for end-to-end tests, plus process/port checks; the
server ``rlark server`` builds (its controller running) served by uvicorn in a thread of the test's
process, for the CLI tests; and the app alone (no controller) in a thread, for browser tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from rlark.runtimes.local.ports import UNIT, block_size, can_bind

TERMINAL = {"Succeeded", "Failed", "Stopped"}
_RAY_TMP_DIRS: list[Path] = []


def ray_tmp_dir() -> str:
    """A short, unique ``RLARK_RAY_TMP`` (Ray's socket paths must stay short: FACTS.md); every
    one handed out is removed when the test session ends (:func:`remove_ray_tmp_dirs`)."""
    import uuid

    top = Path("/tmp/rlt")
    # a server of another user (tests/test_leftovers.py: nobody) must reach its own dir below:
    # whichever server made /tmp/rlt first (a root server's umask is 077), it is traversable
    top.mkdir(exist_ok=True)
    if top.stat().st_uid == os.geteuid():
        top.chmod(0o711)
    path = top / uuid.uuid4().hex[:8]
    _RAY_TMP_DIRS.append(path)
    return str(path)


def serve(home: Path):
    """A real ``rlark server`` on ``home`` with its own Ray temp dir, for a fixture to yield
    from; stopped (its Workers with it) when the fixture ends."""
    srv = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir()}).start()
    try:
        yield srv
    finally:
        srv.stop()


def remove_ray_tmp_dirs() -> None:
    import shutil

    for path in _RAY_TMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)
    _RAY_TMP_DIRS.clear()


def serve_in_thread(server, thread: threading.Thread, url: str, seconds: float) -> None:
    """Start ``thread`` (running the uvicorn ``server``) and return once it serves; raise
    naming ``url`` when the thread dies or ``seconds`` pass first."""
    thread.start()
    deadline = time.monotonic() + seconds
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the RLark app did not start serving on {url} within {seconds:.0f} s")
        time.sleep(0.02)


class ThreadedServer:
    """uvicorn serving ``create_app(service)`` (API and console, no controller) on a free port in
    a background thread; ``url`` once started. ``token`` is the site administrator's, also
    stored in ``$RLARK_HOME/credentials`` for ``url`` so the CLI finds it, as with a real
    server's first start."""

    def __init__(self, service, policy=None):
        import uvicorn

        from rlark.cli import credentials
        from rlark.server import create_app
        from tests.access import admin_token

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(service, policy=policy)
        self.token = admin_token(service.store)
        credentials.put(self.url, self.token, user="admin")
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self):
        serve_in_thread(self.server, self.thread, self.url, 30)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


class AppServer:
    """What ``rlark server`` serves, built by the same wiring (:func:`rlark.server.build_app`:
    store, local runtime, controller, services, API and console, authentication on), served by
    uvicorn in a thread of this process on a free loopback port; the controller runs from the
    app's start to its stop, and the stop ends every active Run (``--stop-runs-on-exit``), as
    :class:`RlarkServer` does. Cheaper than the real process (no interpreter to start, no
    second copy of RLark imported); what only the process does (signals, its umask, uvicorn's
    command line) is tests/test_server_start.py's.

    ``home`` must be ``$RLARK_HOME`` (the ``rlark_home`` fixture): the first start stores the
    site administrator's token in its credentials file for ``url``, where the CLI finds it;
    ``token`` is that token. ``store`` is the server's own Store; ``jobs`` its JobService."""

    def __init__(self, home: Path, database_url: str | None = None, **build):
        import uvicorn

        from rlark.cli import credentials
        from rlark.server import build_app, local_urls, security_policy

        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        build.setdefault("stop_runs_on_exit", True)
        if database_url is None:
            # a copy of a migrated store, not a migration per server (tests/db_templates.py)
            from tests import db_templates

            database_url = f"sqlite:///{home / 'rlark.db'}"
            db_templates.fill(database_url)
        self.app = build_app(database_url, self.url,
                             policy=security_policy("127.0.0.1"),
                             admin_urls=local_urls("127.0.0.1", self.port), **build)
        self.jobs = self.app.state.jobs
        self.store = self.jobs.store
        self.token = credentials.entry(self.url, home / "credentials")["token"]
        self.http = httpx.Client(base_url=self.url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.token}"})
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"rlark-app-{self.port}",
                                       daemon=True)

    def start(self) -> "AppServer":
        serve_in_thread(self.server, self.thread, self.url, 60)
        return self

    def stop(self, timeout: float = 90) -> None:
        """Shut down as ``rlark server`` does on SIGTERM: the controller stops every active Run
        (its Workers' processes end) before the thread ends; then the store is closed."""
        self.server.should_exit = True
        self.thread.join(timeout=timeout)
        self.http.close()
        self.store.dispose()
        if self.thread.is_alive():
            raise AssertionError(f"the RLark app on {self.url} did not shut down in {timeout} s")

    def job(self, name: str, project: str = "default") -> dict:
        r = self.http.get(f"/api/v1/jobs/{name}", params={"project": project})
        assert r.status_code == 200, r.text
        return r.json()

    def wait_for(self, name: str, what: str, done, timeout: float = 180,
                 project: str = "default") -> dict:
        """The Job (as ``GET /api/v1/jobs/NAME`` answers) once ``done(job)`` holds; ``what``
        names the wait when it runs out."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(name, project)
            if done(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: {what}, not within {timeout} s; it is {job['phase']} "
                                     f"({job['reason']}): {job['message']}")
            time.sleep(0.1)


def free_port(start: int = 18000, end: int = 19999) -> int:
    """A free TCP port below the ephemeral range."""
    import random

    for port in random.sample(range(start, end), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


class RlarkServer:
    """``wrap``: a command the server runs under (e.g. ``setpriv`` dropping a capability)."""

    def __init__(self, home: Path, extra_env: dict | None = None, wrap: list[str] | None = None):
        self.home = home
        self.wrap = list(wrap or [])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # tests end their server with its Runs (a real server leaves them to the next one; the
        # adoption tests, tests/test_adopt_local.py, set RLARK_STOP_RUNS_ON_EXIT=0)
        self.env = {**os.environ, "RLARK_HOME": str(home), "RLARK_SERVER": self.url,
                    "RLARK_STOP_RUNS_ON_EXIT": "1", **(extra_env or {})}
        self.env.pop("RLARK_DATABASE_URL", None) if "RLARK_DATABASE_URL" not in (extra_env or {}) else None
        self.proc: subprocess.Popen | None = None
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def start(self) -> "RlarkServer":
        from rlark.cli import credentials

        log = open(self.home / "server.log", "ab")
        self.proc = subprocess.Popen(
            [*self.wrap, sys.executable, "-m", "rlark.cli", "server", "--port", str(self.port)],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.home / "server.log").read_text()[-3000:])
            try:
                if self.http.get("/healthz").status_code == 200:
                    # the first start wrote the admin's token where the CLI finds it
                    self.token = credentials.entry(self.url, self.home / "credentials")["token"]
                    self.http.headers["Authorization"] = f"Bearer {self.token}"
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def crash(self) -> None:
        """``kill -9`` the server (no shutdown at all), as the OOM killer or a node loss would."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        # a wide, fixed width: the environment's COLUMNS (CI sets 80) would wrap Rich's tables
        return subprocess.run([sys.executable, "-m", "rlark.cli", *args],
                              env={**self.env, "COLUMNS": "250"},
                              capture_output=True, text=True, timeout=timeout)

    def submit(self, yaml_text: str) -> dict:
        r = self.http.post("/api/v1/jobs", content=yaml_text.encode(),
                           headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, name: str) -> dict:
        r = self.http.get(f"/api/v1/jobs/{name}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_phase(self, name: str, phases: set[str], timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(name)
            if job["phase"] in phases:
                return job
            if job["phase"] in TERMINAL and not (phases & TERMINAL):
                raise AssertionError(f"{name} ended {job['phase']} ({job['reason']}): {job['message']}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} still {job['phase']} after {timeout} s: {job}")
            time.sleep(0.2)

    def wait_released(self, name: str, timeout: float = 60) -> dict:
        """Wait until every Worker of the current Run has ended (finishedAt set)."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(name)
            workers = job["currentRun"]["workers"]
            if job["phase"] in TERMINAL and all(w["finishedAt"] for w in workers):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"Workers of {name} still alive after {timeout} s: {workers}")
            time.sleep(0.2)

    def succeeded(self, name: str, timeout: float = 180) -> dict:
        """The Job ``name`` once its current Run Succeeded and every Worker of it ended (a Run
        that Fails instead fails the caller at once, showing the Job)."""
        job = self.wait_phase(name, {"Succeeded", "Failed"}, timeout=timeout)
        assert job["phase"] == "Succeeded", job
        return self.wait_released(name)


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _is_namespace_init(pid: int) -> bool:
    """PID 1 of a PID namespace below ours (``NSpid: <ours> ... 1``)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                ids = line.split()[1:]
                return len(ids) > 1 and ids[-1] == "1"
    except OSError:
        pass
    return False


def _environ_has(pid: int, needle: str) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False


def _in_worker_cgroup(pid: int, run_uid: str) -> bool:
    """The process is in a Worker cgroup of the Run (``.../<run uid>-<rank>``, any hierarchy)."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    return any(line.rsplit("/", 1)[-1].startswith(f"{run_uid}-") for line in text.splitlines())


def run_processes(run_uid: str) -> list[psutil.Process]:
    """Every process on the host that belongs to the Run.

    With PID namespaces (root with CAP_SYS_ADMIN; or inside a user namespace) each Worker is its
    own PID namespace whose PID 1 is the bootstrap RLark started with ``RLARK_RUN_ID=<uid>``:
    every process in such a namespace belongs to the Run, whatever its environment says (a
    process cannot leave its PID namespace; one that drops or rewrites its environment is still
    found), and the namespace ends with its PID 1. With a cgroup per Worker, every process in
    one of the Run's Worker cgroups (``<uid>-<rank>``) is the Run's. Processes outside them are
    the Run's when they carry the uid themselves (the ``unshare`` wrappers, and every process of
    a Worker that runs in a mere process group)."""
    needle = f"RLARK_RUN_ID={run_uid}"
    ours = _pid_namespace("self")
    procs = list(psutil.process_iter(["pid"]))
    namespaces = {
        ns for p in procs
        if _is_namespace_init(p.pid) and _environ_has(p.pid, needle)
        and (ns := _pid_namespace(p.pid)) not in (None, ours)
    }
    found = []
    for p in procs:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        if (_pid_namespace(p.pid) in namespaces or _environ_has(p.pid, needle)
                or _in_worker_cgroup(p.pid, run_uid)):
            found.append(p)
    return found


def assert_nothing_left(job: dict, timeout: float = 30) -> None:
    """No process of the current Run survives, and every Worker's ports can be bound again."""
    run = job["currentRun"]
    deadline = time.monotonic() + timeout
    while True:
        left = run_processes(run["uid"])
        if not left:
            break
        if time.monotonic() > deadline:
            raise AssertionError("left running: " + "; ".join(
                f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left))
        time.sleep(0.3)
    # a Worker's block: its 16 own ports and its role's worker ports (what describe shows)
    sizes = {t["role"]: block_size(t["rayNode"]["workerPorts"])
             for t in run.get("tasks", []) if t.get("rayNode")}
    for w in run["workers"]:
        if w["portBase"] is None:
            continue
        size = sizes.get(w["role"], UNIT)
        ports = range(w["portBase"], w["portBase"] + size)
        deadline = time.monotonic() + timeout
        while not can_bind(w["ip"], ports):
            if time.monotonic() > deadline:
                raise AssertionError(f"ports of {w['name']} ({w['portBase']}+{size}) still taken")
            time.sleep(0.5)
