"""Types for status (issue 12, item 3): one source of truth for phases and reasons
(``rlark/status.py``), layers that point one way, and the static facts that keep it so.

Pure: no database, no processes. The scans read ``src/`` with :mod:`ast`.
"""

from __future__ import annotations

import ast
import re
from enum import StrEnum
from pathlib import Path

import pytest

from rlark.controller.phases import ALLOWED, Transition, failure_conditions, observed_conditions
from rlark.controller.phases import RunView, WorkerView
from rlark.status import (
    ACTIVE,
    TERMINAL,
    Cause,
    ConditionType,
    Desired,
    Phase,
    Reason,
    REPORTED_WORKER_PHASES,
    WorkerPhase,
    conditions_of,
    reported_reason,
    set_condition,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "rlark"


def _modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (SRC / pkg).rglob("*.py"))


# --- layers ---------------------------------------------------------------------------------------


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports (``import a.b``, ``from a.b import c``: ``a.b`` and
    ``a.b.c``), anywhere in it (functions included), with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def test_services_api_and_console_never_import_the_controller():
    """Layers point one way: what services, routes and pages share lives in ``store/`` or
    ``services/`` (e.g. ``store/runs.py``: new_run, add_event), never in the controller."""
    found = [f"{p.relative_to(SRC.parent)}:{line} imports {name}"
             for p in _modules("services", "api", "console")
             for line, name in _imports(p)
             if name == "rlark.controller" or name.startswith("rlark.controller.")]
    assert not found, "\n".join(found)


def test_the_import_scan_sees_imports_inside_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from rlark.controller.loop import add_event\n")
    assert (2, "rlark.controller.loop") in _imports(f)


# --- no status spelled as a string outside rlark/status.py ------------------------------------------

#: the words the scan looks for: every Run/Task/Worker phase, cause and desired state
STATUS_WORDS = {m.value for e in (Phase, WorkerPhase, Cause, Desired) for m in e}

#: files the scan leaves out, and why
NOT_SCANNED = {
    # the definitions themselves
    "status.py",
    # ship alone into any RLinf image (stdlib + ray only, cannot import rlark): the bootstrap's
    # modules that report phases and reasons speak the lifecycle-line protocol, whose words
    # test_bootstrap_speaks_only_known_phases_and_reasons checks against the enums
    "bootstrap/worker.py", "bootstrap/barrier.py", "bootstrap/ray_node.py", "bootstrap/report.py",
    "bootstrap/scripts.py",
    # the phases whose moments a Worker's row keeps (TIMED_PHASES): checked against the enums in
    # test_the_timed_phases_are_reported_ones
    "bootstrap/lifecycle.py",
}
#: migrations are frozen history: they write out the values of their own revision
NOT_SCANNED_DIRS = ("store/migrations/",)
#: another system's vocabulary, spelled where RLark reads it: (file, enclosing class or module
#: constant). Kubernetes' Pod phases and RLark's reading of a Pod share some words with RLark's
#: phases; kubelet Event and Pod reasons do too ("Failed", "Terminated").
FOREIGN = {
    ("runtimes/kubernetes/status.py", "PodPhase"),
    ("runtimes/kubernetes/status.py", "PodState"),
    ("runtimes/kubernetes/status.py", "LOST_POD_REASONS"),
    ("runtimes/kubernetes/status.py", "PULL_FAILED_EVENTS"),
    ("runtimes/kubernetes/status.py", "PULL_RETRY_EVENTS"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the constant nodes that are docstrings (prose, not values)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def status_literals(path: Path, rel: str) -> list[str]:
    """``line: 'word'`` for every string constant in ``path`` that is exactly a status word
    (docstrings, comments and f-string text are prose and are not constants of their own;
    the FOREIGN definitions are left out)."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        owner = None
        if isinstance(node, ast.ClassDef):
            owner = node.name
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            owner = node.targets[0].id
        if owner and (rel, owner) in FOREIGN:
            skip |= {id(n) for n in ast.walk(node)}
    return [f"{rel}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip
            and n.value in STATUS_WORDS]


def test_no_phase_is_spelled_as_a_string_outside_status_py():
    """Phases (and causes, desired states) are enums everywhere: a literal "Running" in src/
    would be a second spelling of a fact that has one home. Templates compare with the enums
    too (the console passes ``Phase`` to Jinja); catalogs (JSON) translate the words and are
    keyed by them, which is prose, not code."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in NOT_SCANNED or rel.startswith(NOT_SCANNED_DIRS):
            continue
        found += status_literals(path, rel)
    assert not found, "\n".join(found)


def test_templates_compare_phases_with_the_enums():
    quoted = re.compile(r"""phase\s*[!=]=\s*['"]""")
    found = [f"{p.name}:{n}" for p in (SRC / "console" / "templates").rglob("*.html")
             for n, line in enumerate(p.read_text().splitlines(), 1) if quoted.search(line)]
    assert not found, found


def test_the_literal_scan_finds_a_phase_and_skips_prose(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Running is prose here."""\n# "Failed" in a comment\n'
                 'x = f"{1} Running"\nif y == "Stopped":\n    pass\n')
    assert status_literals(f, "m.py") == ["m.py:4: 'Stopped'"]


# --- the enums ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("enum", [Phase, WorkerPhase, Cause, Desired, Reason, ConditionType])
def test_members_are_named_as_their_values_and_serialise_to_them(enum: type[StrEnum]):
    import json

    for m in enum:
        assert m.name == m.value and f"{m}" == m.value and json.dumps(m) == f'"{m.value}"'


def test_every_run_reason_belongs_to_a_phase_the_state_machine_can_reach():
    reachable = set(ALLOWED) | {p for targets in ALLOWED.values() for p in targets}
    for r in Reason:
        assert r.run_phases <= reachable, r
    # a Job's reason is its new Run's cause until the Run moves: every cause is a Pending reason
    assert all(Phase.Pending in Reason(c.value).run_phases for c in Cause)
    assert ACTIVE | TERMINAL == set(Phase) and not ACTIVE & TERMINAL


def test_retry_follows_only_failures_a_new_run_may_not_repeat():
    retryable = {r for r in Reason if r.retryable}
    assert all(Phase.Failed in r.run_phases for r in retryable)
    assert {Reason.RunFailed, Reason.HeadLost, Reason.JoinTimeout, Reason.ImagePull} <= retryable
    # the same stored spec, the same environment: the next Run fails the same way
    assert not Reason.SpecUnreadable.retryable and not Reason.BadConfig.retryable
    assert not Reason.Completed.retryable and not Reason.StopRequested.retryable


def test_a_reason_this_version_does_not_know_still_reads_as_written():
    old = Reason.unrecognised("ControllerRestarted")  # written by an earlier RLark version
    assert isinstance(old, Reason) and old == "ControllerRestarted" and not old.known
    assert (old.run_phases, old.worker_phases, old.retryable) == (frozenset(), frozenset(), False)
    assert Reason.unrecognised("ControllerRestarted") is old
    assert Reason.unrecognised("HeadLost") is Reason.HeadLost and Reason.HeadLost.known
    with pytest.raises(ValueError):
        Reason("ControllerRestarted")  # the strict constructor still refuses it
    assert Reason.of("ControllerRestarted") is None and Reason.of(old) is None


def test_a_reported_failure_reason_is_kept_only_when_it_is_a_failure():
    assert reported_reason("PrepareFailed", "pip failed") == (Reason.PrepareFailed, "pip failed")
    # a bootstrap of another version: its word stays in the message
    assert reported_reason("DiskFull", "no space") == (Reason.WorkerFailed, "DiskFull: no space")
    assert reported_reason(None, "x") == (Reason.WorkerFailed, "x")
    # a known word that is no failure (a buggy or hostile line) does not become the Run's reason
    assert reported_reason("Completed", "fine") == (Reason.WorkerFailed, "Completed: fine")
    # a Worker the runtime could not stop is Failed (StopFailed); its Run never fails with it
    assert reported_reason("StopFailed", "rbac", worker=True)[0] is Reason.StopFailed
    assert reported_reason("StopFailed", "rbac")[0] is Reason.WorkerFailed


def test_a_transition_takes_the_enums_values_and_refuses_anything_else():
    t = Transition("Failed", "RunFailed", "exit 3")
    assert t.to is Phase.Failed and t.reason is Reason.RunFailed
    with pytest.raises(ValueError):
        Transition("Exploded", "RunFailed", "")
    with pytest.raises(ValueError):
        Transition("Failed", "Oops", "")


def _bootstrap_words() -> tuple[set[str], set[str]]:
    """The phases the bootstrap reports (``emit("phase", phase=...)``) and the reasons it
    reports (``BootstrapError("Reason", ...)``, ``emit(..., reason=...)``)."""
    phases, reasons = set(), set()
    nodes = [n for f in sorted((SRC / "bootstrap").glob("*.py"))
             for n in ast.walk(ast.parse(f.read_text()))]
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        kw = {k.arg: k.value for k in node.keywords}
        if name == "emit" and isinstance(kw.get("phase"), ast.Constant):
            phases.add(kw["phase"].value)
        if name == "emit" and isinstance(kw.get("reason"), ast.Constant):
            reasons.add(kw["reason"].value)
        if name == "BootstrapError" and node.args and isinstance(node.args[0], ast.Constant):
            reasons.add(node.args[0].value)
    return phases, reasons


def test_bootstrap_speaks_only_known_phases_and_reasons():
    """The bootstrap and the keeper cannot import rlark (they ship alone), so their words are
    checked here."""
    phases, reasons = _bootstrap_words()
    assert phases == {p.value for p in REPORTED_WORKER_PHASES}, phases
    unknown = {r for r in reasons if Reason.of(r) is None}
    assert not unknown, unknown
    # "stopped", and the warnings
    failures = reasons - {Reason.Stopped, Reason.RayWorkerPortsExhausted, Reason.ReportsDropped,
                          Reason.RayStartRetried}
    assert {"SandboxFailed", "MonitorLost", "RayTooOld"} <= reasons  # every module is read
    assert all(Phase.Failed in Reason(r).run_phases for r in failures), failures
    assert len(phases) >= 6 and len(reasons) >= 9  # the scan really read the file


def test_the_timed_phases_are_reported_ones():
    from rlark.bootstrap.lifecycle import TIMED_PHASES

    assert TIMED_PHASES <= {p.value for p in REPORTED_WORKER_PHASES}, TIMED_PHASES


def test_kubernetes_failure_reasons_are_run_failures():
    from rlark.runtimes.kubernetes import status

    named = set(re.findall(r"``([A-Z][A-Za-z]+)``", status.__doc__ or ""))
    ours = {n for n in named if Reason.of(n) is not None}
    assert {"ImagePull", "Unschedulable", "OOMKilled", "Evicted", "CrashLoop"} <= ours
    assert all(Phase.Failed in Reason(n).run_phases for n in ours), ours


# --- conditions -----------------------------------------------------------------------------------


def test_a_condition_keeps_its_time_until_its_status_changes():
    c = set_condition([], ConditionType.HeadReady, False, Reason.HeadStarting, "h: Preparing", "T1")
    assert c == [{"type": "HeadReady", "status": "False", "reason": "HeadStarting",
                  "message": "h: Preparing", "lastTransitionTime": "T1"}]
    assert set_condition(c, ConditionType.HeadReady, False, Reason.HeadStarting,
                         "h: Preparing", "T2") is None  # nothing changed: nothing to write
    c = set_condition(c, ConditionType.HeadReady, False, Reason.HeadStarting, "h: StartingRay", "T2")
    assert c[0]["lastTransitionTime"] == "T1" and c[0]["message"] == "h: StartingRay"
    c = set_condition(c, ConditionType.AllJoined, False, Reason.WaitingForWorkers, "0/2", "T3")
    c = set_condition(c, ConditionType.HeadReady, True, Reason.RayHeadStarted, "up", "T4")
    assert [(d["type"], d["status"], d["lastTransitionTime"]) for d in c] == [
        ("AllJoined", "False", "T3"), ("HeadReady", "True", "T4")]  # in ConditionType order
    # stored by another version: an unknown type is left out, an unknown reason still reads
    stored = c + [{"type": "Future", "status": "True"}]
    stored[0] = {**stored[0], "reason": "SomethingNew"}
    got = conditions_of(stored)
    assert [x.type for x in got] == [ConditionType.AllJoined, ConditionType.HeadReady]
    assert got[0].reason == "SomethingNew" and not got[0].reason.known


def _w(rank: int, **kw) -> WorkerView:
    names = {0: "ppo-head-0", 1: "ppo-pool-0"}
    base = dict(name=names[rank], role="head" if rank == 0 else "pool", node_rank=rank,
                is_head=rank == 0, launched=True, alive=True)
    return WorkerView(**{**base, **kw})


@pytest.mark.parametrize("phase, workers, expected", [
    ("Pending", [_w(0, launched=False, alive=False), _w(1, launched=False, alive=False)], []),
    ("Starting", [_w(0, reported_phase=WorkerPhase.Preparing), _w(1)],
     [("AllJoined", False, "WaitingForWorkers", "0/2 Ray nodes joined; waiting for rank 0 "
       "(ppo-head-0), rank 1 (ppo-pool-0)"),
      ("HeadReady", False, "HeadStarting", "ppo-head-0: Preparing")]),
    ("Starting", [_w(0, reported_phase=WorkerPhase.Joining, joined=True), _w(1)],
     [("AllJoined", False, "WaitingForWorkers", "1/2 Ray nodes joined; waiting for rank 1 (ppo-pool-0)"),
      ("HeadReady", True, "RayHeadStarted", "the Ray head on ppo-head-0 is up")]),
    ("Running", [_w(0, joined=True, running=True), _w(1, joined=True)],
     [("AllJoined", True, "AllJoined", "2/2 Ray nodes joined"),
      ("HeadReady", True, "RayHeadStarted", "the Ray head on ppo-head-0 is up")]),
    ("Running", [_w(0, joined=True, running=True), _w(1, joined=True, alive=False, exit_code=1)],
     [("AllJoined", False, "WorkerLost",
       "Worker ppo-pool-0 (rank 1, role pool) exited with code 1"),
      ("HeadReady", True, "RayHeadStarted", "the Ray head on ppo-head-0 is up")]),
    ("Running", [_w(0, joined=True, alive=False, exit_code=137), _w(1, joined=True)],
     [("AllJoined", False, "HeadLost",
       "Worker ppo-head-0 (rank 0, role head) was killed by signal 9"),
      ("HeadReady", False, "HeadLost", "Worker ppo-head-0 (rank 0, role head) was killed by signal 9")]),
    # a stopping or ended Run keeps its conditions as last observed
    ("Stopping", [_w(0, alive=False), _w(1, alive=False)], []),
    ("Succeeded", [_w(0, alive=False), _w(1, alive=False)], []),
])
def test_observed_conditions(phase, workers, expected):
    got = observed_conditions(RunView(phase=Phase(phase), stop_requested=False, workers=workers))
    assert [(c.type, c.status, c.reason, c.message) for c in got] == expected


def test_a_failure_names_the_condition_it_is_about():
    lost = Transition("Failed", "HeadLost", "the head exited\nlast lines...")
    assert [(c.type, c.status, c.reason, c.message) for c in failure_conditions(lost)] == [
        ("HeadReady", False, "HeadLost", "the head exited")]
    timeout = Transition("Failed", "JoinTimeout", "rank 1 did not join")
    assert failure_conditions(timeout)[0].type is ConditionType.AllJoined
    assert failure_conditions(Transition("Failed", "RunFailed", "exit 3")) == []
    assert failure_conditions(Transition("Stopped", "StopRequested", "")) == []
