"""The real ``rlark`` command in a subprocess (``python -m rlark.cli``; every command's
``--help`` through Typer's CliRunner in this process, ``rlark --help`` alone as a process).

Local commands (validate, schema, --help) need no server. API commands run against the server
``rlark server`` builds (tests/server.py AppServer: local runtime, controller running), one for
the module, each test in a project of its own. A Job held on the module's first start takes every
CPU (:data:`HOLD_PROJECT`), so the Jobs the tests submit wait in the admission queue, Pending, and
change state only as the controller moves them (a stop ends a waiting Run Stopped, a delete is
finished by the controller). What only a running Run shows (``logs --follow``) is
tests/test_cli_run.py's.
"""

from __future__ import annotations

import json
import os
import itertools
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from rlark.spec import json_schema
from rlark.store import Base, JobRow, ProjectRow, RunRow, Store, WorkerRow
from tests.server import AppServer, free_port, ray_tmp_dir
from tests.test_api import BAD_JOB_YAML, job_yaml, set_worker_logs, snapshot

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FINDING_KEYS = {"code", "severity", "path", "message", "hint"}


def cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RLARK_SERVER", "NO_COLOR", "FORCE_COLOR")}
    env["COLUMNS"] = "200"  # Rich wraps at 80 columns when not on a terminal
    env.update(extra)
    return env


def rlark(*args: str, env: dict | None = None, cwd: Path | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rlark.cli", *args], env=env or cli_env(),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one ``error: ...`` line a failing command prints on stderr."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- files ----------------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    d = tmp_path / "jobs"
    d.mkdir()
    (d / "code").mkdir()
    out = {}
    out["good"] = d / "good.yaml"
    out["good"].write_text(job_yaml("demo"))
    out["json"] = d / "good.json"
    out["json"].write_text(json.dumps(yaml.safe_load(job_yaml("from-json"))))
    out["bad"] = d / "bad.yaml"
    out["bad"].write_text(BAD_JOB_YAML)
    out["warn"] = d / "warn.yaml"
    doc = yaml.safe_load(job_yaml("warned"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    out["warn"].write_text(yaml.safe_dump(doc))
    out["relative"] = d / "relative.yaml"
    doc = yaml.safe_load(job_yaml("relative"))
    doc["spec"]["workingDir"] = "code"
    out["relative"].write_text(yaml.safe_dump(doc))
    out["binary"] = d / "image.png"
    out["binary"].write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    out["broken"] = d / "broken.yaml"
    out["broken"].write_text("apiVersion: rlark.io/v1\nspec: {roles: [1, 2\n  kind: : Job\n")
    out["list"] = d / "list.yaml"
    out["list"].write_text("- a\n- b\n")
    return out


# --- validate ------------------------------------------------------------------------------------


def offline() -> dict:
    """The CLI's environment with no server answering: validate and check run what this
    machine can check, and say what they could not (tests/test_one_set_of_checks.py)."""
    return cli_env(RLARK_SERVER=f"http://127.0.0.1:{free_port()}")


def test_validate_good_file(files):
    proc = rlark("validate", str(files["good"]), env=offline())
    assert proc.returncode == 0, proc.stderr
    assert f"valid: {files['good']} (3 Workers, 2 roles; checked here, without a server)" in proc.stdout

    proc = rlark("validate", str(files["json"]), "--format", "json", env=offline())
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["valid"] is True and data["server"] is None
    assert [(f["severity"], f["code"]) for f in data["findings"]] == [("info", "RuntimeNotChecked")]


def test_validate_bad_file_text(files):
    proc = rlark("validate", str(files["bad"]))
    assert proc.returncode == 1
    out = proc.stdout
    for code in ("InvalidName", "HeadRoleUnknown", "WorkersBelowOne", "ImageNoVersion"):
        assert code in out
    assert "Bad_Name" in out and "fix: " in out
    assert f"invalid: {files['bad']}" in out


def test_validate_bad_file_json_shape(files):
    proc = rlark("validate", str(files["bad"]), "-o", "json", env=offline())
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert set(data) == {"valid", "findings", "server"} and data["valid"] is False
    assert all(set(f) == FINDING_KEYS for f in data["findings"])
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert {f["path"] for f in errors} == {
        "metadata.name", "spec.headRole", "spec.roles[0].workers", "spec.roles[0].image"}
    assert [f["code"] for f in data["findings"] if f["severity"] != "error"] == ["RuntimeNotChecked"]
    assert all(f["hint"] for f in data["findings"])


def test_validate_warnings_only_is_valid(files):
    proc = rlark("validate", str(files["warn"]), "--format", "json", env=offline())
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["valid"] is True
    assert [(f["severity"], f["path"].split("[")[0]) for f in data["findings"]] == [
        ("warning", "spec.roles"), ("info", "$")]
    text = rlark("validate", str(files["warn"]), env=offline())
    assert text.returncode == 0 and "1 warning;" in text.stdout and "warning" in text.stdout


def test_validate_missing_file(tmp_path):
    proc = rlark("validate", str(tmp_path / "nope.yaml"))
    assert proc.returncode != 0
    assert "nope.yaml" in error_line(proc) and "No such file" in error_line(proc)
    proc = rlark("validate", str(tmp_path))
    assert proc.returncode != 0 and "cannot read" in error_line(proc)


@pytest.mark.parametrize("kind, needle", [("binary", "not UTF-8"), ("broken", "not valid YAML at line"),
                                          ("list", "got list")])
def test_validate_non_yaml_file(files, kind, needle):
    proc = rlark("validate", str(files[kind]))
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if "InvalidDocument" in line]
    assert len(lines) == 1 and needle in lines[0], proc.stdout
    js = rlark("validate", str(files[kind]), "--format", "json")
    assert js.returncode == 1
    data = json.loads(js.stdout)
    assert data["valid"] is False
    assert [(f["code"], f["path"]) for f in data["findings"]] == [("InvalidDocument", "$")]
    assert "\n" not in data["findings"][0]["message"]


def test_errors_stay_on_one_line_when_piped(files):
    """Off a terminal Rich would wrap at 80 columns and split one-line errors and Findings."""
    env = cli_env()
    env.pop("COLUMNS")
    env.pop("LINES", None)
    proc = rlark("validate", str(files["broken"]), env=env)
    lines = [line for line in proc.stdout.splitlines() if "InvalidDocument" in line]
    assert lines and "expected" in lines[0] and "got" in lines[0], proc.stdout


def test_validate_resolves_relative_working_dir_against_the_file(files, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = rlark("validate", str(files["relative"]), "--format", "json", cwd=elsewhere,
                 env=offline())
    assert proc.returncode == 0, proc.stdout
    data = json.loads(proc.stdout)
    assert data["valid"] is True
    assert "RelativePath" not in {f["code"] for f in data["findings"]}
    # a relative path given on the command line works too
    proc = rlark("validate", "jobs/relative.yaml", cwd=tmp_path, env=offline())
    assert proc.returncode == 0 and "RelativePath" not in proc.stdout


def test_validate_unknown_format(files):
    proc = rlark("validate", str(files["good"]), "--format", "xml")
    assert proc.returncode != 0
    assert "'xml'" in error_line(proc) and "json" in error_line(proc)


def test_schema_prints_the_json_schema():
    proc = rlark("schema")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == json_schema()


# --- help ----------------------------------------------------------------------------------------

def all_commands() -> list[tuple[str, ...]]:
    """Every command and command group of the ``rlark`` Typer app (``()`` is ``rlark`` itself)."""
    from rlark.cli.commands import app

    def name(cmd) -> str:
        return cmd.name or cmd.callback.__name__.replace("_", "-")

    found = [()]
    for cmd in app.registered_commands:
        found.append((name(cmd),))
    for group in app.registered_groups:
        found.append((group.name,))
        found.extend((group.name, name(cmd)) for cmd in group.typer_instance.registered_commands)
    return found


COMMANDS = all_commands()
#: the commands this file is about; others may be added, none of these may go
KNOWN = {
    (), ("validate",), ("schema",), ("server",), ("submit",), ("get",), ("get", "jobs"),
    ("describe",), ("describe", "job"), ("logs",), ("stop",), ("start",), ("restart",),
    ("delete",), ("record",), ("get", "job"), ("describe", "jobs"), ("get", "nodes"),
}


def test_known_commands_exist():
    assert KNOWN <= set(COMMANDS)
    assert len(COMMANDS) == len(set(COMMANDS))


def test_help_of_every_command():
    """``--help`` of every command: ``rlark --help`` as a process (the entry point, its imports
    quiet on stderr), every command in this process through Typer's CliRunner (the same app that
    process runs, without an interpreter start and the CLI's imports for each of ~70 commands)."""
    from typer.testing import CliRunner

    from rlark.cli.commands import app

    top = rlark("--help")
    assert top.returncode == 0 and "Usage:" in top.stdout and top.stderr == "", top
    runner = CliRunner()
    # cli_env's environment: a wide fixed width; no colour forced or refused, no server named
    env = {"COLUMNS": "200", "RLARK_SERVER": None, "NO_COLOR": None, "FORCE_COLOR": None}
    by = {}
    for cmd in COMMANDS:
        got = runner.invoke(app, [*cmd, "--help"], env=env, prog_name="python -m rlark.cli")
        out, err = strip_ansi(got.stdout), strip_ansi(got.stderr)
        assert got.exit_code == 0 and got.exception is None, (cmd, got.exception, err)
        assert "Traceback" not in out + err, (cmd, out + err)
        assert "Usage:" in out, cmd
        assert err == "", (cmd, err)
        by[cmd] = out
    assert "rlark submit" in by[()]  # the typical session
    assert "--format" in by[("validate",)]
    assert "--wait" in by[("submit",)] and "--server" in by[("submit",)]
    assert "--follow" in by[("logs",)] and "--rank" in by[("logs",)]
    assert "--output" in by[("record",)]
    assert "RLARK_SERVER" in by[("get", "jobs")]


def strip_ansi(text: str) -> str:
    """``text`` without terminal colours (Typer colours its help where the environment asks it
    to, e.g. on GitHub Actions, read when it is imported)."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# --- no server -------------------------------------------------------------------------------------


def test_no_server_says_how_to_start_one(files):
    url = f"http://127.0.0.1:{free_port()}"
    commands = [
        ("get", "jobs"), ("describe", "job", "x"), ("logs", "x"), ("logs", "x", "--follow"),
        ("submit", str(files["good"])), ("stop", "x"), ("start", "x"), ("restart", "x"),
        ("delete", "x"), ("record", "x"),
    ]
    env = cli_env(RLARK_SERVER=url)
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda c: (c, rlark(*c, env=env)), commands))
    for cmd, proc in procs:
        assert proc.returncode != 0, cmd
        line = error_line(proc)
        assert f"no RLark server answers at {url}" in line, (cmd, line)
        assert "start one with `rlark server`" in line.lower(), (cmd, line)
        assert proc.stdout == "", (cmd, proc.stdout)


# --- against a real HTTP server --------------------------------------------------------------------


#: the Job that holds this machine for the module: one Worker asking every CPU, whose prepare
#: script waits (so no Ray node ever starts), in a project of its own that no test reads. With it
#: running, every Job a test submits waits in the admission queue (Pending, Queued),
#: as on a full machine, instead of starting three Ray nodes; a test that needs a real Run to run
#: is tests/test_cli_run.py's
HOLD_PROJECT = "hold"


def hold_yaml() -> str:
    return textwrap.dedent(f"""\
        apiVersion: rlark.io/v1
        kind: Job
        metadata: {{name: machine-held}}
        spec:
          headRole: hold
          runScript: "true"
          roles:
            - name: hold
              image: docker.io/rlinf/rlinf:0.3.0
              resources: {{cpu: {os.cpu_count() or 1}}}
              prepareScript: "sleep 3600"
        """)


def serve_live(home: Path):
    """``rlark server`` as it is built (:class:`tests.server.AppServer`: local runtime, its
    controller running) on a fresh store in ``home`` (``$RLARK_HOME``), for a fixture to yield
    from; every Run it started is stopped when the fixture ends."""
    app = AppServer(home).start()
    try:
        yield app
    finally:
        app.stop()


def serve_held(tmp_path_factory, name: str = "cli-server"):
    """:func:`serve_live` on a fresh ``$RLARK_HOME`` (``tmp_path_factory``: a module-scoped
    fixture's), with the machine held (:data:`HOLD_PROJECT`) before it is handed out, for a
    module-scoped fixture to yield from: every Job submitted to it waits in the admission queue,
    Pending, until the controller stops it. ``RLARK_HOME``, ``RLARK_RAY_TMP`` and no
    ``RLARK_DATABASE_URL`` hold for as long as it is served."""
    home = tmp_path_factory.mktemp(name) / "rlark-home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RLARK_HOME", str(home))
        env.delenv("RLARK_DATABASE_URL", raising=False)
        env.setenv("RLARK_RAY_TMP", ray_tmp_dir())
        for app in serve_live(home):
            r = app.http.post("/api/v1/projects", json={"name": HOLD_PROJECT})
            assert r.status_code == 201, r.text
            r = app.http.post("/api/v1/jobs", params={"project": HOLD_PROJECT},
                              content=hold_yaml().encode(),
                              headers={"Content-Type": "application/yaml"})
            assert r.status_code == 201, r.text
            # held from the moment its Worker is planned; preparing: launched and steady
            app.wait_for("machine-held", "its Worker preparing (holding every CPU)",
                         lambda j: [w["phase"] for w in j["currentRun"]["workers"]] == ["Preparing"],
                         timeout=120, project=HOLD_PROJECT)
            yield app


@pytest.fixture(scope="module")
def held_server(tmp_path_factory):
    """The module's server, with the machine held (:data:`HOLD_PROJECT`) before any test runs."""
    yield from serve_held(tmp_path_factory)


class LiveServer:
    """One test's side of the module's server: a project of its own (``project``), so what a
    test submits, lists and deletes is its own, with the CLI pointed at the server and the
    project through RLARK_SERVER and RLARK_PROJECT."""

    def __init__(self, app: AppServer, project: str):
        self.app = app
        self.url, self.port, self.token, self.store = app.url, app.port, app.token, app.store
        self.project = project

    @classmethod
    def in_new_project(cls, app: AppServer) -> "LiveServer":
        """A test's side of ``app`` in a project made for it (``t1``, ``t2``...)."""
        project = f"t{next(_projects)}"
        r = app.http.post("/api/v1/projects", json={"name": project})
        assert r.status_code == 201, r.text
        return cls(app, project)

    def env(self, **extra) -> dict:
        return cli_env(RLARK_SERVER=self.url, RLARK_PROJECT=self.project, **extra)

    def cli(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """The CLI pointed at this server and project."""
        kw.setdefault("env", self.env())
        return rlark(*args, **kw)

    def names(self) -> list[str]:
        with self.store.session() as s:
            return sorted(s.scalars(select(JobRow.name).join(ProjectRow)
                                    .where(ProjectRow.name == self.project)))

    def http_get(self, path: str):
        """The API's JSON answer to ``GET path`` in this project, with the administrator's token."""
        r = self.app.http.get(path, params={"project": self.project})
        assert r.status_code == 200, r.text
        return r.json()

    def job(self, name: str) -> dict:
        return self.app.job(name, self.project)

    def waiting(self, name: str) -> dict:
        """The Job once the controller has put its current Run in the admission queue."""
        return self.app.wait_for(name, "its Run waiting for capacity",
                                 lambda j: j["reason"] == "Queued", project=self.project)

    def stopped(self, name: str) -> dict:
        """The Job once the controller has ended its current Run ``Stopped``."""
        return self.app.wait_for(name, "its Run Stopped", lambda j: j["phase"] == "Stopped",
                                 project=self.project)


def current_run(s, server: LiveServer, name: str) -> RunRow:
    """The current Run of the test's Job ``name``, in session ``s``."""
    job = s.scalar(select(JobRow).join(ProjectRow).where(JobRow.name == name,
                                                        ProjectRow.name == server.project))
    return s.get(RunRow, job.current_run_id)


def stored(store: Store) -> dict[str, list[tuple]]:
    """:func:`tests.test_api.snapshot` less what the controller writes whatever the requests
    do: its heartbeat, and what the held machine's Worker reports while it prepares (the rows
    of :data:`HOLD_PROJECT`'s Job, its Run and Worker, and its Events)."""
    from rlark.store import EventRow

    with store.session() as s:
        job_ids = set(s.scalars(select(JobRow.id).join(ProjectRow).where(ProjectRow.name == HOLD_PROJECT)))
        run_ids = set(s.scalars(select(RunRow.id).where(RunRow.job_id.in_(job_ids))))
    out = snapshot(store)
    del out["controller_state"]
    column = {t: [c.name for c in Base.metadata.tables[t].columns] for t in out}
    for table, key, ids in ((JobRow.__tablename__, "id", job_ids), (RunRow.__tablename__, "job_id", job_ids),
                            (WorkerRow.__tablename__, "run_id", run_ids),
                            (EventRow.__tablename__, "job_id", job_ids)):
        i = column[table].index(key)
        out[table] = [row for row in out[table] if row[i] not in ids]
    return out


_projects = itertools.count(1)


@pytest.fixture
def server(held_server):
    return LiveServer.in_new_project(held_server)


def test_submit_without_wait_leaves_the_job_pending(server, files):
    proc = server.cli("submit", str(files["good"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "job/demo submitted (run 1, 3 Workers)"
    assert server.names() == ["demo"]
    assert server.waiting("demo")["phase"] == "Pending"


def test_submit_resolves_relative_paths_and_keeps_warnings(server, files, tmp_path):
    proc = server.cli("submit", "jobs/relative.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with server.store.session() as s:
        spec = s.scalar(select(JobRow.spec).join(ProjectRow).where(
            JobRow.name == "relative", ProjectRow.name == server.project))
    assert spec["spec"]["workingDir"] == str(files["relative"].parent / "code")
    proc = server.cli("submit", str(files["warn"]))
    assert proc.returncode == 0
    assert "warning" in proc.stderr and "job/warned submitted" in proc.stdout
    # describe keeps the warnings, each naming its field path once
    findings = [line for line in server.cli("describe", "job", "warned").stdout.splitlines()
                if line.startswith("Finding:")]
    assert findings
    for line in findings:
        code, path = line.split()[1:3]
        assert line.count(path.rstrip(":")) == 1, line


@pytest.mark.parametrize("kind", ["bad", "broken", "binary"])
def test_submit_invalid_file_prints_findings_and_submits_nothing(server, files, kind):
    server.cli("submit", str(files["good"]))
    server.waiting("demo")  # the controller's first pass over it done: it writes nothing more
    before = stored(server.store)
    proc = server.cli("submit", str(files[kind]))
    assert proc.returncode == 1
    assert "nothing was submitted" in error_line(proc)
    assert ("InvalidName" if kind == "bad" else "InvalidDocument") in proc.stderr
    assert "fix: " in proc.stderr
    assert stored(server.store) == before


def test_submit_duplicate_is_refused(server, files):
    assert server.cli("submit", str(files["good"])).returncode == 0
    server.waiting("demo")  # the controller's first pass over it done: it writes nothing more
    before = stored(server.store)
    proc = server.cli("submit", str(files["good"]))
    assert proc.returncode == 1
    assert "'demo' already exists" in error_line(proc) and "`rlark apply`" in error_line(proc)
    assert stored(server.store) == before


def test_get_jobs_table_and_json(server, files):
    proc = server.cli("get", "jobs")
    assert proc.returncode == 0 and "no Jobs" in proc.stdout and "rlark submit" in proc.stdout
    server.cli("submit", str(files["good"]))
    server.cli("submit", str(files["json"]))
    server.waiting("demo")
    assert server.cli("stop", "from-json").returncode == 0
    server.stopped("from-json")

    proc = server.cli("get", "jobs")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "REASON", "WORKERS", "ROLES", "RUN", "CREATED"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["demo"][1:6] == ["Pending", "Queued", "0/3", "pool:2,head:1", "1"]
    assert rows["from-json"][1] == "Stopped"
    assert [line.split()[0] for line in lines[1:]] == ["from-json", "demo"]  # newest first

    data = json.loads(server.cli("get", "jobs", "-o", "json").stdout)
    assert data["total"] == 2 and [j["name"] for j in data["items"]] == ["from-json", "demo"]
    pending = json.loads(server.cli("get", "jobs", "--phase", "Pending", "-o", "json").stdout)
    assert [j["name"] for j in pending["items"]] == ["demo"]
    found = json.loads(server.cli("get", "jobs", "-q", "json", "-o", "json").stdout)
    assert [j["name"] for j in found["items"]] == ["from-json"]
    one = json.loads(server.cli("get", "jobs", "--limit", "1", "-o", "json").stdout)
    assert len(one["items"]) == 1 and one["total"] == 2
    none = server.cli("get", "jobs", "--phase", "Succeeded")
    assert none.returncode == 0 and "no Jobs in phase Succeeded" in none.stdout


@pytest.mark.parametrize("args, needle", [
    (("--phase", "Bogus"), "phase='Bogus'"),
    (("--limit", "0"), "limit='0'"),
])
def test_get_jobs_bad_option_names_it(server, args, needle):
    proc = server.cli("get", "jobs", *args)
    assert proc.returncode == 1
    assert needle in error_line(proc)


def test_describe_job_text_and_json(server, files):
    server.cli("submit", str(files["good"]))
    server.waiting("demo")
    proc = server.cli("describe", "job", "demo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Name:      demo" in out and "Pending" in out and "Head role: head" in out
    workers = [line.split() for line in out.splitlines() if "demo-" in line and "Pending" in line]
    assert [(w[0], w[1], w[2]) for w in workers] == [
        ("0", "demo-head-0", "head"), ("1", "demo-pool-0", "pool"), ("2", "demo-pool-1", "pool")]
    assert "Job accepted: 3 Workers in 2 roles" in out
    start = out.index("Tasks (one per role)")
    tasks = out[start:out.index("\nWorkers", start)].splitlines()
    assert [line.split()[:4] for line in tasks[2:] if line.strip()] == [
        ["head", "Pending", "0/1", "0"], ["pool", "Pending", "0/2", "1-2"]]
    assert "Conditions" not in out  # a Run the controller has not launched has none
    data = json.loads(server.cli("describe", "job", "demo", "--format", "json").stdout)
    assert data["name"] == "demo" and data["phase"] == "Pending"
    assert [(w["name"], w["nodeRank"]) for w in data["currentRun"]["workers"]] == [
        ("demo-head-0", 0), ("demo-pool-0", 1), ("demo-pool-1", 2)]
    assert [e["reason"] for e in data["events"]] == ["Submitted", "Queued"]
    assert data["currentRun"]["conditions"] == []

    # Exit codes of Workers ended by a signal and conditions at fixed times: written into the
    # rows of the ended Run (the controller leaves an ended Run's rows alone), because a real Run
    # reaches these values only by chance of timing; a real Run's conditions are shown in
    # tests/test_cli_run.py
    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    # a Worker ended by a signal: the code says which (143 = 128 + SIGTERM, stopped by RLark)
    with server.store.session() as s:
        run = current_run(s, server, "demo")
        run.workers[1].exit_code, run.workers[1].phase = 143, "Completed"
        run.workers[0].exit_code = 0
    out = server.cli("describe", "job", "demo").stdout
    rows = {line.split()[1]: line for line in out[out.index("\nWorkers"):].splitlines()[2:]
            if line.split()[1:2] and line.split()[1].startswith("demo-")}
    pool0, head0 = rows["demo-pool-0"], rows["demo-head-0"]
    assert "143 (SIGTERM)" in pool0
    assert "SIG" not in head0 and " 0 " in head0 + " "

    # the Run's conditions, as the controller writes them (rlark.status.set_condition)
    from rlark.status import ConditionType, Reason, set_condition

    with server.store.session() as s:
        run = current_run(s, server, "demo")
        conditions = set_condition([], ConditionType.AllJoined, False, Reason.WaitingForWorkers,
                                   "1/3 Ray nodes joined", "2026-12-01T04:12:03Z")
        run.conditions = set_condition(conditions, ConditionType.HeadReady, True,
                                       Reason.RayHeadStarted, "the Ray head on demo-head-0 is up",
                                       "2026-12-01T04:12:05Z")
    out = server.cli("describe", "job", "demo").stdout
    start = out.index("Conditions")
    rows = [line.strip().split(None, 4) for line in out[start:out.index("\nWorkers", start)].splitlines()[2:]]
    assert rows == [["AllJoined", "False", "WaitingForWorkers", "2026-12-01T04:12:03", "1/3 Ray nodes joined"],
                    ["HeadReady", "True", "RayHeadStarted", "2026-12-01T04:12:05",
                     "the Ray head on demo-head-0 is up"]]

    data = json.loads(server.cli("describe", "job", "demo", "--format", "json").stdout)
    assert [(c["type"], c["status"], c["reason"]) for c in data["currentRun"]["conditions"]] == [
        ("AllJoined", "False", "WaitingForWorkers"), ("HeadReady", "True", "RayHeadStarted")]

    missing = server.cli("describe", "job", "nosuch")
    assert missing.returncode == 1 and "no Job named 'nosuch'" in error_line(missing)


def test_describe_and_get_take_a_job_name_as_kubectl_users_type_it(server, files):
    """Issue 19 item 13: `rlark describe quickstart` said only "No such command"."""
    server.cli("submit", str(files["good"]))
    for short, full in ((("describe", "demo"), ("describe", "job", "demo")),
                        (("get", "demo"), ("get", "job", "demo")),
                        (("get", "-o", "json", "demo"), ("get", "job", "demo", "-o", "json")),
                        (("describe", "demo", "-o", "yaml"), ("describe", "job", "demo", "-o", "yaml"))):
        a, b = server.cli(*short), server.cli(*full)
        assert a.returncode == 0 and "No such command" not in a.stderr, (short, a.stderr)
        assert a.stdout == b.stdout and "demo" in a.stdout, short
    missing = server.cli("describe", "nosuch")
    assert missing.returncode == 1 and "no Job named 'nosuch'" in error_line(missing)
    for kind in ("describe", "get"):
        help_text = rlark(kind, "--help").stdout
        assert f"rlark {kind} NAME" in help_text and f"rlark {kind} job NAME" in help_text
    assert "rlark describe quickstart" in rlark("--help").stdout  # the typical session


def test_events_of_a_job_and_of_one_run(server, files):
    server.cli("submit", str(files["good"]))
    server.waiting("demo")
    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    assert server.cli("start", "demo").returncode == 0  # run 2
    server.waiting("demo")
    table = server.cli("events", "demo")
    assert table.returncode == 0, table.stderr
    rows = [line.split(None, 6) for line in table.stdout.splitlines()[1:]]
    got = [(r[2], r[3], r[4], r[5]) for r in rows]
    assert got == [("1", "Normal", "Submitted", "admin"), ("1", "Normal", "Queued", "-"),
                   ("1", "Normal", "StopRequested", "admin"), ("1", "Normal", "StopRequested", "-"),
                   ("2", "Normal", "Started", "admin"), ("2", "Normal", "Queued", "-")], got
    assert table.stdout.split()[:6] == ["TIME", "RUN", "TYPE", "REASON", "USER", "MESSAGE"]
    api = server.http_get("/api/v1/jobs/demo/events")
    assert json.loads(server.cli("events", "demo", "-o", "json").stdout) == {"items": api}
    assert yaml.safe_load(server.cli("events", "demo", "-o", "yaml").stdout) == {"items": api}
    one = json.loads(server.cli("events", "demo", "--run", "2", "-o", "json").stdout)
    assert [(e["run"], e["reason"]) for e in one["items"]] == [(2, "Started"), (2, "Queued")]
    missing = server.cli("events", "demo", "--run", "9")
    assert missing.returncode == 1 and "Job 'demo' has no run 9" in error_line(missing)
    nosuch = server.cli("events", "nosuch")
    assert nosuch.returncode == 1 and "no Job named 'nosuch'" in error_line(nosuch)


@pytest.mark.parametrize("code,text", [(None, ""), (0, "0"), (1, "1"), (7, "7"), (128, "128"),
                                       (137, "137 (SIGKILL)"), (143, "143 (SIGTERM)"),
                                       (130, "130 (SIGINT)"), (255, "255")])
def test_exit_text(code, text):
    from rlark.exitcodes import exit_text

    assert exit_text(code) == text


def test_stop_start_restart_delete(server, files):
    server.cli("submit", str(files["good"]))
    proc = server.cli("start", "demo")
    assert proc.returncode == 1
    assert "Job 'demo' is Pending (run 1); stop it first or use restart" in error_line(proc)

    proc = server.cli("stop", "demo")
    assert proc.returncode == 0 and proc.stdout.strip() == "job/demo stopping (phase Pending)"
    server.stopped("demo")
    proc = server.cli("start", "demo")
    assert proc.returncode == 0 and proc.stdout.strip() == "job/demo started run 2"
    proc = server.cli("restart", "demo")
    assert proc.returncode == 0 and proc.stdout.strip() == "job/demo restarting as run 3"

    # run 3 is active: the server only marks the Job for deletion, the CLI waits until the
    # controller has stopped every Run and finished the delete
    assert server.job("demo")["currentRun"]["number"] == 3
    proc = server.cli("delete", "demo", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "job/demo deleted"
    assert server.names() == []
    for verb in ("stop", "start", "restart", "delete"):
        proc = server.cli(verb, "demo")
        assert proc.returncode == 1 and "no Job named 'demo'" in error_line(proc), verb


def test_delete_inactive_job_at_once(server, files):
    server.cli("submit", str(files["good"]))
    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    proc = server.cli("delete", "demo", "--yes", timeout=20)
    assert proc.returncode == 0 and proc.stdout.strip() == "job/demo deleted"
    assert server.names() == []


def on_a_terminal(server: LiveServer, args: tuple[str, ...], typed: str) -> subprocess.CompletedProcess:
    """``rlark *args`` with a terminal (a pseudo-terminal) as stdin, on which ``typed`` is typed."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "rlark.cli", *args], stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=server.env())
        os.write(master, typed.encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_delete_asks_on_a_terminal_and_refuses_without_one_unless_told_yes(server, files):
    """Issue 19 item 15: `rlark delete` removed Runs, records and logs without asking."""
    server.cli("submit", str(files["good"]))
    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    assert server.cli("start", "demo").returncode == 0  # run 2, Pending

    refused = server.cli("delete", "demo")  # stdin is no terminal here
    assert refused.returncode == 1 and server.names() == ["demo"]
    line = error_line(refused)
    assert f"not deleting job/demo of project {server.project} (its 2 Runs with their run records and " \
           "Worker logs, and its Events; its active Run 2 (Pending) is stopped first)" in line, line
    assert "stdin is not a terminal" in line and f"`rlark delete demo -p {server.project} --yes`" in line

    kept = on_a_terminal(server, ("delete", "demo"), "n\n")
    assert kept.returncode == 1 and server.names() == ["demo"], kept.stderr
    assert f"Delete job/demo of project {server.project}: its 2 Runs" in kept.stdout
    assert f"job/demo of project {server.project} not deleted" in kept.stdout

    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    gone = on_a_terminal(server, ("delete", "demo"), "y\n")
    assert gone.returncode == 0 and server.names() == [], gone.stderr
    assert "job/demo deleted" in gone.stdout

    server.cli("submit", str(files["good"]))
    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    told = server.cli("delete", "job", "demo", "-y")  # kubectl's form too
    assert told.returncode == 0 and told.stdout.strip() == "job/demo deleted", told.stderr
    assert server.names() == []


def test_record_formats_and_output_file(server, files, tmp_path):
    server.cli("submit", str(files["good"]))
    js = server.cli("record", "demo", "--format", "json")
    assert js.returncode == 0
    rec = json.loads(js.stdout)
    assert rec["job"] == "demo" and rec["run"] == 1
    assert [w["nodeRank"] for w in rec["workers"]["items"]] == [0, 1, 2]
    ym = server.cli("record", "demo", "--format", "yaml")
    assert ym.returncode == 0 and yaml.safe_load(ym.stdout) == rec
    md = server.cli("record", "demo")  # md is the default
    assert md.returncode == 0 and md.stdout.startswith("# Run record: demo run 1")

    target = tmp_path / "out" / "record.json"
    target.parent.mkdir()
    proc = server.cli("record", "demo", "-o", "json", "--save", str(target))
    assert proc.returncode == 0 and f"wrote {target}" in proc.stdout
    assert json.loads(target.read_text()) == rec
    target_md = tmp_path / "record.md"
    assert server.cli("record", "demo", "--save", str(target_md)).returncode == 0
    assert target_md.read_text() == md.stdout
    assert server.cli("record", "demo", "--format", "md").stdout == md.stdout  # the older name
    # -o/--output is the format on every read command; a file name there says where files go
    mixed = server.cli("record", "demo", "--output", str(target))
    assert mixed.returncode == 1 and f"--save {target}" in error_line(mixed)

    bad = server.cli("record", "demo", "--format", "pdf")
    assert bad.returncode == 1 and "'pdf'" in error_line(bad)
    missing = server.cli("record", "demo", "--run", "9")
    assert missing.returncode == 1 and "has no run 9" in error_line(missing)


def test_logs(server, files):
    # the logs of three Workers, one without a log yet, with known lines: written for the ended
    # (stopped) Run, whose rows the controller leaves alone; three real Workers would be three
    # Ray nodes, and their logs hold the bootstrap's lines too. A real Worker's log, followed
    # while it runs, is tests/test_cli_run.py's
    server.cli("submit", str(files["good"]))
    assert server.cli("stop", "demo").returncode == 0
    server.stopped("demo")
    set_worker_logs(server.store, "demo", {"demo-head-0": ["h1", "h2", "h3"], "demo-pool-0": ["p1"]},
                    project=server.project)

    proc = server.cli("logs", "demo")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["[demo-head-0] h1", "[demo-head-0] h2", "[demo-head-0] h3",
                                        "[demo-pool-0] p1"]
    assert server.cli("logs", "demo", "--rank", "0", "--tail", "2").stdout.splitlines() == ["h2", "h3"]
    assert server.cli("logs", "demo", "--role", "head").stdout.splitlines() == ["h1", "h2", "h3"]
    assert server.cli("logs", "demo", "--worker", "demo-pool-0").stdout.splitlines() == ["p1"]
    pool = server.cli("logs", "demo", "--role", "pool").stdout.splitlines()
    assert pool == ["[demo-pool-0] p1"]  # demo-pool-1 has no log yet

    ghost = server.cli("logs", "demo", "--worker", "ghost")
    assert ghost.returncode == 1
    line = error_line(ghost)
    assert "demo-head-0 (rank 0, role head)" in line and "demo-pool-1 (rank 2, role pool)" in line
    bad = server.cli("logs", "demo", "--tail", "-1")
    assert bad.returncode == 1 and "tail='-1'" in error_line(bad)


def test_server_flag_and_env_are_honoured(server, files):
    server.cli("submit", str(files["good"]))
    dead = f"http://127.0.0.1:{free_port()}"
    # RLARK_SERVER alone
    proc = rlark("get", "jobs", "-o", "json", env=cli_env(RLARK_SERVER=server.url, RLARK_PROJECT=server.project))
    assert proc.returncode == 0 and json.loads(proc.stdout)["total"] == 1
    # --server wins over RLARK_SERVER, both ways
    proc = rlark("get", "jobs", "-o", "json", "--server", server.url, env=cli_env(RLARK_SERVER=dead, RLARK_PROJECT=server.project))
    assert proc.returncode == 0 and json.loads(proc.stdout)["total"] == 1
    proc = rlark("get", "jobs", "--server", dead, env=cli_env(RLARK_SERVER=server.url, RLARK_PROJECT=server.project))
    assert proc.returncode != 0 and dead in error_line(proc)
    proc = rlark("describe", "job", "demo", "-s", server.url, env=cli_env(RLARK_PROJECT=server.project))
    assert proc.returncode == 0 and "demo-pool-1" in proc.stdout
    # host:port without a scheme
    proc = rlark("get", "jobs", "-o", "json", env=cli_env(RLARK_SERVER=f"127.0.0.1:{server.port}",
                                                         RLARK_PROJECT=server.project))
    assert proc.returncode == 0 and json.loads(proc.stdout)["total"] == 1
    # neither: the default address, which nothing here serves
    proc = rlark("get", "jobs", env=cli_env())
    if proc.returncode != 0:
        assert "http://127.0.0.1:8470" in error_line(proc)


def test_nodes_on_the_local_runtime_lists_this_machine(server):
    import socket

    proc = server.cli("nodes")
    assert proc.returncode == 0, proc.stderr
    row = next(line.split() for line in proc.stdout.splitlines()
               if line.strip().startswith(socket.gethostname()))
    assert row[1] == "Ready" and row[2].endswith(f"/{os.cpu_count()}")
    assert "free = this machine minus what the Workers of active RLark Jobs ask for" in proc.stdout
    data = json.loads(server.cli("nodes", "-o", "json").stdout)
    assert data["runtime"] == "local" and data["freeBasis"] == "rlark" and len(data["items"]) == 1
