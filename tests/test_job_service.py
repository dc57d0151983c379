"""JobService on SQLite and PostgreSQL, without a controller: nothing here starts a Worker, so
Runs stay Pending unless a test moves them on by writing the Store directly."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from sqlalchemy import select

from rlark.services.errors import Conflict, Invalid, NotFound
from rlark.services.jobs import JobService
from rlark.store import EventRow, JobRow, RunRow, Store

# head role second in spec order, with 2 Workers: ranks follow headRole first, then spec order
JOB_YAML = textwrap.dedent(
    """\
    apiVersion: rlark.io/v1
    kind: Job
    metadata:
      name: {name}
      labels: {{team: rl}}
    spec:
      headRole: head
      runScript: |
        python train.py --config-name ppo
      roles:
        - name: pool
          workers: 2
          image: docker.io/rlinf/rlinf:0.3.0
          resources: {{cpu: 1, memory: 2Gi}}
        - name: head
          workers: 2
          image: docker.io/rlinf/rlinf:0.3.0
          resources: {{cpu: 2, memory: 4Gi}}
        - name: env
          workers: 1
          image: python:3.11-slim
    """
)


def job_yaml(name: str = "demo") -> str:
    return JOB_YAML.format(name=name)


def job_dict(name: str = "demo") -> dict:
    return yaml.safe_load(job_yaml(name))


def small(name: str, **spec_extra) -> dict:
    """A one-Worker Job as a dict."""
    doc = {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"headRole": "head", "runScript": "true",
                 "roles": [{"name": "head", "image": "python:3.11"}]},
    }
    doc["spec"].update(spec_extra)
    return doc


#: the service's logic must not depend on the test machine's size (host-capacity Findings have
#: their own tests in tests/test_server_lock_and_apply.py)
ROOMY_HOST = {"cpu": 64, "memory": 512 * 1024**3, "gpu": 8}


@pytest.fixture
def svc(store):
    wakes: list[int] = []
    service = JobService(store, wake=lambda: wakes.append(1), host=ROOMY_HOST)
    service.wakes = wakes  # type: ignore[attr-defined]
    return service


def set_run(store: Store, name: str, number: int, **values) -> None:
    """Play the controller: change a Run (and the Job's mirrored phase) in the Store."""
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        run = s.scalar(select(RunRow).where(RunRow.job_id == job.id, RunRow.number == number))
        for k, v in values.items():
            setattr(run, k, v)
        if job.current_run_id == run.id and "phase" in values:
            job.phase = values["phase"]


def run_row(store: Store, name: str, number: int) -> RunRow:
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        return s.scalar(select(RunRow).where(RunRow.job_id == job.id, RunRow.number == number))


def job_row(store: Store, name: str) -> JobRow | None:
    with store.session() as s:
        return s.scalar(select(JobRow).where(JobRow.name == name))


# --- create ---------------------------------------------------------------------------------------


def test_create_from_yaml_text(svc):
    out = svc.create(job_yaml("from-yaml"))
    assert out["name"] == "from-yaml"
    assert (out["phase"], out["reason"], out["desired"]) == ("Pending", "Submitted", "Running")
    assert out["labels"] == {"team": "rl"}
    assert out["headRole"] == "head"
    assert out["roles"] == [{"name": "pool", "workers": 2}, {"name": "head", "workers": 2},
                            {"name": "env", "workers": 1}]
    assert (out["workersTotal"], out["workersReady"]) == (5, 0)
    assert out["run"] == 1 and out["runtime"] == "local"
    assert out["findings"] == []
    assert out["deleting"] is False
    # the stored spec is the normalised document (camelCase, defaults filled in)
    assert out["spec"]["spec"]["roles"][1]["resources"] == {"cpu": 2, "memory": "4Gi", "gpu": 0,
                                                            "devices": {}}
    assert out["spec"]["spec"]["failurePolicy"]["joinTimeoutSeconds"] == 300
    assert [r["number"] for r in out["runs"]] == [1]
    assert out["currentRun"]["phase"] == "Pending" and out["currentRun"]["cause"] == "Submitted"
    assert len(out["currentRun"]["uid"]) == 12
    assert svc.wakes == [1]
    assert svc.get("from-yaml")["spec"] == out["spec"]


def test_create_from_json_text_and_bytes_and_dict(svc):
    a = svc.create(json.dumps(job_dict("from-json")))
    b = svc.create(job_yaml("from-bytes").encode())
    c = svc.create(job_dict("from-dict"))
    assert [a["name"], b["name"], c["name"]] == ["from-json", "from-bytes", "from-dict"]
    # the same document gives the same stored spec whatever its encoding
    strip = lambda d: {**d["spec"], "metadata": {}}  # noqa: E731
    assert strip(a) == strip(b) == strip(c)
    assert svc.list()["total"] == 3


def test_create_writes_a_submitted_event(svc):
    svc.create(job_yaml("ev"))
    events = svc.events("ev")
    assert [e["reason"] for e in events] == ["Submitted"]
    (e,) = events
    assert e["type"] == "Normal" and e["run"] == 1 and e["worker"] is None
    assert "5 Workers in 3 roles" in e["message"]
    assert e["time"] is not None and e["time"].endswith("+00:00")
    assert svc.events("ev", run=1) == events
    with pytest.raises(NotFound, match="Job 'ev' has no run 2"):  # as its record would say
        svc.events("ev", run=2)


def test_warnings_are_kept_on_the_job(svc):
    doc = small("warned")
    doc["spec"]["roles"][0]["env"] = [{"name": "FOO", "value": "1"}, {"name": "FOO", "value": "2"}]
    out = svc.create(doc)
    assert [(f["code"], f["severity"], f["path"]) for f in out["findings"]] == [
        ("DuplicateEnv", "warning", "spec.roles[0].env[1].name")]
    assert svc.get("warned")["findings"] == out["findings"]
    warnings = [e for e in svc.events("warned") if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == ["DuplicateEnv"]
    assert warnings[0]["message"].startswith("spec.roles[0].env[1].name = ")


# --- invalid specs ----------------------------------------------------------------------------------


def _invalid(svc, document) -> list[tuple[str, str]]:
    with pytest.raises(Invalid) as info:
        svc.create(document)
    err = info.value
    assert err.status == 422 and err.findings
    assert err.to_dict()["findings"][0]["code"] == err.findings[0].code
    return [(f.code, f.path) for f in err.findings]


def test_invalid_value_names_the_field_path(svc):
    text = job_yaml("bad").replace("python:3.11-slim", "python")  # no tag on roles[2].image
    assert _invalid(svc, text) == [("ImageNoVersion", "spec.roles[2].image")]
    with pytest.raises(Invalid) as info:
        svc.create(text)
    assert info.value.findings[0].severity.value == "error"
    assert "1 error" in info.value.message


def test_several_errors_are_all_reported(svc):
    doc = job_dict("bad")
    doc["spec"]["headRole"] = "nope"
    doc["spec"]["roles"][0]["workers"] = 0
    doc["spec"]["roles"][1]["resources"]["memory"] = "4"
    doc["spec"]["roles"][1]["env"] = [{"name": "RLINF_NODE_RANK", "value": "3"}]
    findings = _invalid(svc, doc)
    assert set(findings) == {
        ("HeadRoleUnknown", "spec.headRole"),
        ("WorkersBelowOne", "spec.roles[0].workers"),
        ("InvalidMemory", "spec.roles[1].resources.memory"),
        ("ReservedEnv", "spec.roles[1].env[0].name"),
    }


def test_structural_errors_name_the_field_path(svc):
    doc = job_dict("bad")
    doc["spec"]["roles"][1]["workerz"] = 3
    del doc["spec"]["headRole"]
    assert set(_invalid(svc, json.dumps(doc))) == {
        ("UnknownField", "spec.roles[1].workerz"),
        ("MissingField", "spec.headRole"),
    }
    doc = job_dict("bad")
    doc["spec"]["roles"][0]["workers"] = "many"
    assert _invalid(svc, doc) == [("InvalidValue", "spec.roles[0].workers")]


def test_bad_names_are_invalid(svc):
    assert _invalid(svc, small("Bad_Name")) == [("InvalidName", "metadata.name")]
    assert _invalid(svc, small("a" * 60)) == [("NameTooLong", "metadata.name"),
                                              ("NameTooLong", "spec.roles[0].name")]


def test_unparseable_documents_are_invalid(svc):
    assert _invalid(svc, "spec: [unclosed") == [("InvalidDocument", "$")]
    assert _invalid(svc, "- just\n- a list\n") == [("InvalidDocument", "$")]
    assert _invalid(svc, "") == [("InvalidDocument", "$")]


def test_invalid_jobs_are_not_stored(svc):
    with pytest.raises(Invalid):
        svc.create(job_yaml("bad").replace("headRole: head", "headRole: ghost"))
    assert svc.list()["total"] == 0
    assert svc.wakes == []
    with pytest.raises(NotFound):
        svc.get("bad")


# --- conflicts and unknown names --------------------------------------------------------------------


def test_duplicate_name_is_a_conflict(svc, store):
    first = svc.create(job_yaml("twice"))
    other = job_dict("twice")
    other["spec"]["runScript"] = "something else"
    with pytest.raises(Conflict) as info:
        svc.create(other)
    assert info.value.status == 409 and "twice" in info.value.message
    assert svc.get("twice")["spec"] == first["spec"]  # the first Job is untouched
    assert len(svc.runs("twice")) == 1
    with store.session() as s:
        assert len(s.scalars(select(EventRow)).all()) == 1


@pytest.mark.parametrize("op", ["get", "runs", "workers", "events", "record", "stop", "start",
                                "restart", "delete"])
def test_unknown_name_is_not_found(svc, op):
    svc.create(small("known"))
    with pytest.raises(NotFound) as info:
        getattr(svc, op)("unknown")
    assert info.value.status == 404 and "'unknown'" in info.value.message


def test_unknown_run_number_is_not_found(svc):
    svc.create(small("known"))
    with pytest.raises(NotFound, match="no run 7"):
        svc.workers("known", run=7)


# --- list --------------------------------------------------------------------------------------------


def test_list_filters_by_phase(svc, store):
    for name in ("alpha", "beta", "gamma"):
        svc.create(small(name))
    set_run(store, "beta", 1, phase="Failed")
    assert {j["name"] for j in svc.list(phase="Pending")["items"]} == {"alpha", "gamma"}
    failed = svc.list(phase="Failed")
    assert [j["name"] for j in failed["items"]] == ["beta"] and failed["total"] == 1
    assert svc.list(phase="Running") == {"items": [], "total": 0, "limit": 100, "offset": 0}


def test_list_searches_names_by_substring(svc):
    for name in ("ppo-maniskill", "grpo-math", "ppo-libero", "sft"):
        svc.create(small(name))
    assert {j["name"] for j in svc.list(q="po")["items"]} == {"ppo-maniskill", "grpo-math",
                                                              "ppo-libero"}
    assert {j["name"] for j in svc.list(q="ppo-")["items"]} == {"ppo-maniskill", "ppo-libero"}
    assert [j["name"] for j in svc.list(q="math")["items"]] == ["grpo-math"]
    assert svc.list(q="o-l")["total"] == 1
    assert svc.list(q="nothing")["total"] == 0
    # LIKE wildcards in the search text are literal characters, not patterns
    assert svc.list(q="%")["total"] == 0
    assert svc.list(q="_")["total"] == 0
    assert svc.list(q="p%o")["total"] == 0
    assert svc.list(q="pp_")["total"] == 0


def test_list_search_is_case_insensitive_on_both_databases(svc):
    svc.create(small("ppo-maniskill"))
    assert [j["name"] for j in svc.list(q="PPO")["items"]] == ["ppo-maniskill"]


def test_list_pages_newest_first(svc):
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        svc.create(small(name))
    newest_first = list(reversed(names))
    seen = []
    for offset in (0, 2, 4):
        page = svc.list(limit=2, offset=offset)
        assert (page["total"], page["limit"], page["offset"]) == (5, 2, offset)
        seen += [j["name"] for j in page["items"]]
    assert seen == newest_first
    assert svc.list(limit=2, offset=10)["items"] == []
    filtered = svc.list(q="job-", limit=1, offset=1)
    assert filtered["total"] == 5 and [j["name"] for j in filtered["items"]] == ["job-3"]


def test_list_summary_fields(svc):
    svc.create(job_yaml("summary"))
    (item,) = svc.list()["items"]
    assert item["name"] == "summary"
    assert (item["phase"], item["run"], item["workersTotal"], item["workersReady"]) == (
        "Pending", 1, 5, 0)
    assert item["roles"][1] == {"name": "head", "workers": 2}
    assert "spec" not in item  # lists stay small


# --- get: Run, Workers, ranks, Tasks -----------------------------------------------------------------


def test_get_returns_current_run_with_workers_and_node_ranks(svc):
    svc.create(job_yaml("ranks"))
    out = svc.get("ranks")
    run = out["currentRun"]
    assert run["number"] == 1 and run["workersTotal"] == 5
    workers = [(w["name"], w["role"], w["index"], w["nodeRank"], w["isHead"], w["phase"])
               for w in run["workers"]]
    assert workers == [
        ("ranks-head-0", "head", 0, 0, True, "Pending"),
        ("ranks-head-1", "head", 1, 1, False, "Pending"),
        ("ranks-pool-0", "pool", 0, 2, False, "Pending"),
        ("ranks-pool-1", "pool", 1, 3, False, "Pending"),
        ("ranks-env-0", "env", 0, 4, False, "Pending"),
    ]
    assert all(w["pid"] is None and w["startedAt"] is None for w in run["workers"])
    tasks = {t["role"]: (t["nodeRanks"], t["total"], t["ready"], t["phase"]) for t in run["tasks"]}
    assert tasks == {
        "head": ([0, 1], 2, 0, "Pending"),
        "pool": ([2, 3], 2, 0, "Pending"),
        "env": ([4, 4], 1, 0, "Pending"),
    }
    assert svc.workers("ranks") == run["workers"]


def test_head_role_first_in_spec_order(svc):
    doc = small("first", roles=[{"name": "head", "image": "python:3.11"},
                                {"name": "rollout", "workers": 3, "image": "python:3.11"}])
    run = svc.create(doc)["currentRun"]
    assert [(w["role"], w["nodeRank"]) for w in run["workers"]] == [
        ("head", 0), ("rollout", 1), ("rollout", 2), ("rollout", 3)]
    assert [t["nodeRanks"] for t in run["tasks"]] == [[0, 0], [1, 3]]


# --- stop / start / restart ---------------------------------------------------------------------------


def test_stop_a_pending_job(svc, store):
    svc.create(small("stopme"))
    out = svc.stop("stopme")
    assert out["desired"] == "Stopped"
    assert run_row(store, "stopme", 1).stop_requested is True
    assert job_row(store, "stopme").desired == "Stopped"
    assert [e["reason"] for e in svc.events("stopme")] == ["Submitted", "StopRequested"]
    svc.stop("stopme")  # idempotent: no second event
    assert [e["reason"] for e in svc.events("stopme")] == ["Submitted", "StopRequested"]
    assert svc.wakes == [1, 1, 1]


def test_stop_a_finished_job_only_records_the_wish(svc, store):
    svc.create(small("done"))
    set_run(store, "done", 1, phase="Succeeded")
    svc.stop("done")
    assert run_row(store, "done", 1).stop_requested is False
    assert job_row(store, "done").desired == "Stopped"
    assert [e["reason"] for e in svc.events("done")] == ["Submitted"]


@pytest.mark.parametrize("phase", ["Pending", "Starting", "Running", "Stopping"])
def test_start_on_an_active_run_is_a_conflict(svc, store, phase):
    svc.create(small("busy"))
    set_run(store, "busy", 1, phase=phase)
    with pytest.raises(Conflict, match=phase):
        svc.start("busy")
    assert [r["number"] for r in svc.runs("busy")] == [1]


def test_start_after_the_run_ended_creates_a_new_run(svc, store):
    svc.create(small("again"))
    svc.stop("again")
    set_run(store, "again", 1, phase="Stopped")
    out = svc.start("again")
    assert out["desired"] == "Running"
    assert (out["phase"], out["reason"], out["run"]) == ("Pending", "Started", 2)
    assert out["currentRun"]["number"] == 2 and out["currentRun"]["cause"] == "Started"
    assert [(r["number"], r["phase"]) for r in out["runs"]] == [(1, "Stopped"), (2, "Pending")]
    assert svc.events("again", run=2)[0]["reason"] == "Started"


def test_restart_creates_run_2_and_stops_run_1(svc, store):
    first = svc.create(job_yaml("re"))
    out = svc.restart("re")
    assert out["run"] == 2 and out["desired"] == "Running" and out["reason"] == "Restarted"
    assert out["currentRun"]["cause"] == "Restarted"
    assert [r["number"] for r in out["runs"]] == [1, 2]
    assert out["currentRun"]["uid"] != first["currentRun"]["uid"]
    assert run_row(store, "re", 1).stop_requested is True
    assert run_row(store, "re", 2).stop_requested is False
    # same spec, same Worker names and node ranks
    ranks = lambda run: [(w["name"], w["nodeRank"]) for w in run["workers"]]  # noqa: E731
    assert ranks(out["currentRun"]) == ranks(first["currentRun"])
    assert [(e["reason"], e["run"]) for e in svc.events("re")] == [
        ("Submitted", 1), ("StopRequested", 1), ("Restarted", 2)]
    assert len(svc.workers("re", run=1)) == len(svc.workers("re", run=2)) == 5


def test_restart_after_a_stopped_job_clears_the_stop(svc, store):
    svc.create(small("back"))
    svc.stop("back")
    set_run(store, "back", 1, phase="Stopped")
    out = svc.restart("back")
    assert out["desired"] == "Running" and out["run"] == 2
    assert [e["reason"] for e in svc.events("back")] == ["Submitted", "StopRequested", "Restarted"]


# --- delete ------------------------------------------------------------------------------------------


def test_delete_of_a_pending_job_is_left_to_the_controller(svc):
    # A Pending Run may be being launched by the controller at this very moment, so the service
    # never removes it itself: it marks the Job deleting and the controller finishes the job
    # (tests/test_controller.py covers that part).
    svc.create(small("fresh"))
    assert svc.delete("fresh") == {"name": "fresh", "project": "default", "deleted": False,
                                    "deleting": True}
    job = svc.get("fresh")
    assert job["deleting"] is True and job["desired"] == "Stopped"


def test_delete_of_a_job_whose_runs_never_launched(svc, store, rlark_home):
    svc.create(small("never"))
    svc.restart("never")
    set_run(store, "never", 1, phase="Stopped")
    set_run(store, "never", 2, phase="Stopped")
    svc.create(small("other"))
    logs = rlark_home / "logs" / "default" / "never" / "1"  # logs/<project>/<job>/<run>
    logs.mkdir(parents=True)
    (logs / "never-head-0.log").write_text("x")
    assert svc.delete("never") == {"name": "never", "project": "default", "deleted": True}
    with pytest.raises(NotFound):
        svc.get("never")
    assert not (rlark_home / "logs" / "default" / "never").exists()
    assert [j["name"] for j in svc.list()["items"]] == ["other"]
    with store.session() as s:  # Runs, Workers and Events went with it
        assert {r.number for r in s.scalars(select(RunRow))} == {1}
        assert len(s.scalars(select(EventRow)).all()) == 1
    svc.create(small("never"))  # the name is free again
    assert svc.get("never")["run"] == 1


def test_delete_of_an_active_job_stops_it_first(svc, store):
    svc.create(small("live"))
    set_run(store, "live", 1, phase="Running")
    with store.session() as s:
        run = s.scalar(select(RunRow).join(JobRow).where(JobRow.name == "live"))
        run.workers[0].pid = 12345
    assert svc.delete("live") == {"name": "live", "project": "default", "deleted": False,
                                   "deleting": True}
    out = svc.get("live")
    assert out["deleting"] is True and out["desired"] == "Stopped"
    assert run_row(store, "live", 1).stop_requested is True
    assert svc.events("live")[-1]["reason"] == "DeleteRequested"
    with pytest.raises(Conflict, match="being deleted"):
        svc.start("live")
    with pytest.raises(Conflict, match="being deleted"):
        svc.restart("live")


# --- projects and actors ------------------------------------------------------------------------


@pytest.fixture
def other_project(store) -> str:
    from rlark.services.accounts import AccountService
    from rlark.services.auth import OPEN_PRINCIPAL, AuthService

    AccountService(AuthService(store)).create_project(OPEN_PRINCIPAL, None, "other")
    return "other"


def test_a_job_lives_in_one_project_and_its_name_is_free_in_others(svc, store, other_project):
    mine = svc.create(small("same"))
    theirs = svc.create(small("same", runScript="echo other"), project=other_project)
    assert (mine["project"], theirs["project"]) == ("default", "other")
    assert svc.get("same")["spec"]["spec"]["runScript"] == "true"
    assert svc.get("same", other_project)["spec"]["spec"]["runScript"] == "echo other"
    with pytest.raises(Conflict, match="already exists in project 'other'"):
        svc.create(small("same"), project=other_project)
    # a change in one project leaves the other's Job alone
    svc.stop("same", other_project)
    assert svc.get("same", other_project)["desired"] == "Stopped"
    assert svc.get("same")["desired"] == "Running"
    set_run_in(store, "same", other_project, phase="Stopped")
    assert svc.delete("same", other_project) == {"name": "same", "project": "other", "deleted": True}
    with pytest.raises(NotFound):
        svc.get("same", other_project)
    assert svc.get("same")["currentRun"]["phase"] == "Pending"  # untouched


def set_run_in(store: Store, name: str, project: str, **values) -> None:
    """:func:`set_run` for the first Run of the Job ``name`` of ``project``."""
    from rlark.store import ProjectRow

    with store.session() as s:
        job = s.scalar(select(JobRow).join(ProjectRow, ProjectRow.id == JobRow.project_id)
                       .where(JobRow.name == name, ProjectRow.name == project))
        for k, v in values.items():
            setattr(job.runs[0], k, v)


@pytest.mark.parametrize("op", ["get", "runs", "workers", "events", "record", "stop", "start",
                                "restart", "delete"])
def test_a_job_of_another_project_is_not_found_there(svc, other_project, op):
    svc.create(small("mine"))
    with pytest.raises(NotFound) as info:
        getattr(svc, op)("mine", project=other_project)
    assert info.value.status == 404 and "'mine'" in info.value.message
    with pytest.raises(NotFound):  # nor in a project that does not exist
        getattr(svc, op)("mine", project="nosuch")


def test_create_in_a_project_that_does_not_exist_is_not_found(svc, store):
    with pytest.raises(NotFound, match="nosuch"):
        svc.create(small("lost"), project="nosuch")
    with store.session() as s:
        assert s.scalars(select(JobRow)).all() == []


def test_list_is_limited_to_the_projects_asked_for(svc, other_project):
    svc.create(small("a"))
    svc.create(small("b"), project=other_project)
    assert [(j["name"], j["project"]) for j in svc.list()["items"]] == [("b", "other"), ("a", "default")]
    assert [j["name"] for j in svc.list(projects=["default"])["items"]] == ["a"]
    assert [j["name"] for j in svc.list(projects=["other"])["items"]] == ["b"]
    assert svc.list(projects=[]) == {"items": [], "total": 0, "limit": 100, "offset": 0}


def test_changes_name_their_actor_in_events_and_audit(svc, store):
    from rlark.services.audit import Actor
    from rlark.store import AuditRow

    alice = Actor("alice", "10.0.0.7")
    svc.create(small("acted"), actor=alice)
    svc.stop("acted", actor=alice)
    set_run(store, "acted", 1, phase="Stopped")
    svc.start("acted", actor=alice)
    svc.restart("acted", actor=alice)
    svc.replace("acted", small("acted", runScript="echo new"), actor=alice)
    by_reason = {e["reason"]: e for e in svc.events("acted")}
    for reason in ("Submitted", "StopRequested", "Started", "Restarted", "SpecUpdated"):
        assert by_reason[reason]["actor"] == "alice", reason
    assert "by alice" in by_reason["Submitted"]["message"]
    svc.delete("acted", actor=alice)
    svc.create(small("quiet"))  # RLark itself (no user): no actor
    assert svc.events("quiet")[0]["actor"] is None
    with store.session() as s:
        rows = s.scalars(select(AuditRow).order_by(AuditRow.id)).all()
        entries = [(a.action, a.actor, a.client, a.project, a.target) for a in rows]
    assert entries == [(f"job.{verb}", "alice", "10.0.0.7", "default", "acted")
                       for verb in ("create", "stop", "start", "restart", "replace", "delete")] + [
        ("job.create", None, None, "default", "quiet")]


# --- node inventory (local runtime) ------------------------------------------------------------


def test_local_node_subtracts_active_requests_and_never_goes_below_zero():
    from rlark.runtimes.local.profile import local_node

    host = {"cpu": 8, "memory": 16 * 1024**3, "gpu": 1}
    node = local_node("box", host, [{"cpu": 3.0, "memory": 4 * 1024**3, "gpu": 0},
                                    {"cpu": 7.0, "memory": 1024**3, "gpu": 1}])
    assert node["allocatable"] == {"cpu": 8, "memory": 16 * 1024**3, "nvidia.com/gpu": 1}
    assert node["requested"] == {"cpu": 10.0, "memory": 5 * 1024**3, "nvidia.com/gpu": 1}
    assert node["free"] == {"cpu": 0, "memory": 11 * 1024**3, "nvidia.com/gpu": 0}
    assert local_node("box", host, [])["free"] == node["allocatable"]


def test_local_nodes_count_only_the_workers_of_active_jobs(svc, store):
    svc.create(job_yaml("a"))  # pool 2x(1 cpu, 2Gi) + head 2x(2 cpu, 4Gi) + env 1x(nothing)
    svc.create(small("b", roles=[{"name": "head", "image": "python:3.11",
                                  "resources": {"cpu": "500m", "memory": "1Gi"}}]))
    data = svc.nodes()
    assert data["runtime"] == "local" and data["freeBasis"] == "rlark" and data["error"] is None
    (node,) = data["items"]
    gib = 1024**3
    # 500m is one whole Ray CPU (--num-cpus takes whole numbers)
    assert node["requested"] == {"cpu": 7.0, "memory": 13 * gib, "nvidia.com/gpu": 0}
    assert node["free"]["cpu"] == 64 - 7 and node["free"]["memory"] == 512 * gib - 13 * gib
    set_run(store, "a", 1, phase="Failed", reason="RunFailed")
    (node,) = svc.nodes()["items"]
    assert node["requested"] == {"cpu": 1.0, "memory": gib, "nvidia.com/gpu": 0}
    assert data["totals"] == {"cpu": 64, "memory": 512 * gib, "nvidia.com/gpu": 8}
