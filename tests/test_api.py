"""The REST API (FastAPI app, no controller) on SQLite and PostgreSQL, through TestClient.

No Worker is ever started: Runs stay Pending unless a test moves them on by writing the Store,
as the controller would. Every rejected request must answer 4xx with a JSON body naming what was
wrong, and must leave the Store exactly as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from fastapi.routing import APIRoute
from sqlalchemy import select

from rlark import __version__, settings
from rlark.server import create_app
from rlark.services.jobs import JobService
from rlark.spec import json_schema
from rlark.store import Base, EventRow, JobRow, ProjectRow, RunRow, Store, TokenRow, WorkerRow
from tests.access import admin_token, api_client

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REPO = Path(__file__).resolve().parent.parent

# pool before head in spec order; ranks: head role first (demo-head-0 -> 0), then pool 1, 2
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
        python train.py
      roles:
        - name: pool
          workers: 2
          image: docker.io/rlinf/rlinf:0.3.0
          resources: {{cpu: 1, memory: 2Gi}}
        - name: head
          workers: 1
          image: docker.io/rlinf/rlinf:0.3.0
    """
)


#: three value errors at once: name, head role, workers (and an image without a version)
BAD_JOB_YAML = textwrap.dedent(
    """\
    apiVersion: rlark.io/v1
    kind: Job
    metadata: {name: Bad_Name}
    spec:
      headRole: nohead
      runScript: "true"
      roles:
        - {name: head, image: python, workers: 0}
    """
)


def job_yaml(name: str = "demo") -> str:
    return JOB_YAML.format(name=name)


def job_dict(name: str = "demo") -> dict:
    return yaml.safe_load(job_yaml(name))


# --- store helpers ------------------------------------------------------------------------------


def snapshot(store: Store) -> dict[str, list[tuple]]:
    """Every row of every table, in primary-key order; a token's ``last_used_at`` is left out
    (using a token to send a request is not a change the request made)."""
    out = {}
    with store.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            columns = [c for c in table.columns
                       if not (table.name == TokenRow.__tablename__ and c.name == "last_used_at")]
            rows = conn.execute(select(*columns).order_by(*table.primary_key.columns)).all()
            out[table.name] = [tuple(r) for r in rows]
    return out


def set_run_state(store: Store, name: str, phase: str, *, released: bool | None = None,
                  number: int | None = None) -> None:
    """Move a Run (default: the current one) to ``phase`` as the controller would."""
    with store.session() as s:
        job = s.scalar(select(JobRow).where(JobRow.name == name))
        run = s.scalar(select(RunRow).where(RunRow.job_id == job.id,
                                            RunRow.number == (number or max(r.number for r in job.runs))))
        run.phase = phase
        if phase in ("Succeeded", "Failed", "Stopped"):
            run.finished_at = datetime.now(timezone.utc)
        if run.id == job.current_run_id:
            job.phase = phase
        if released is not None:
            for w in run.workers:
                w.released = released


def set_worker_logs(store: Store, name: str, lines: dict[str, list[str]],
                    project: str = "default") -> dict[str, Path]:
    """Give Workers of the current Run of Job ``name`` in ``project`` a log file with ``lines``
    (worker name -> lines), the way the local runtime does (``log_path`` in the Store, the file
    under ``$RLARK_HOME/logs/<project>/<job>/<run>``)."""
    paths = {}
    with store.session() as s:
        job = s.scalar(select(JobRow).join(ProjectRow).where(JobRow.name == name,
                                                            ProjectRow.name == project))
        run = s.get(RunRow, job.current_run_id)
        for w in run.workers:
            if w.name not in lines:
                continue
            path = settings.job_logs_dir(job.project.name, name) / str(run.number) / f"{w.name}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(line + "\n" for line in lines[w.name]))
            w.log_path = str(path)
            w.pid = 4242  # as a live local Worker has
            paths[w.name] = path
    return paths


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def app(store):
    return create_app(JobService(store))


@pytest.fixture
def client(app, store):
    """A client with the site administrator's token (who may call what is tested in
    test_access_routes.py; here, what the API does)."""
    with api_client(app, admin_token(store)) as c:
        yield c


def create(client, name: str = "demo") -> dict:
    r = client.post("/api/v1/jobs", content=job_yaml(name), headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return r.json()


def rejected(client, store, method: str, url: str, status: int | tuple = (400, 499), **kw) -> dict:
    """Send a request that must be refused: 4xx (or exactly ``status``), JSON detail with code
    and message, no traceback, and the Store unchanged. Returns the ``detail``."""
    before = snapshot(store)
    r = client.request(method, url, **kw)
    if isinstance(status, int):
        assert r.status_code == status, (r.status_code, r.text[:2000])
    else:
        assert status[0] <= r.status_code <= status[1], (r.status_code, r.text[:2000])
    assert r.headers["content-type"].startswith("application/json"), r.headers
    assert "Traceback" not in r.text
    detail = r.json()["detail"]
    assert isinstance(detail, dict), detail
    assert detail["code"] and detail["message"], detail
    assert snapshot(store) == before, "a rejected request changed the Store"
    return detail


# --- create ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/yaml", "text/yaml", "application/x-yaml"])
def test_create_from_yaml(client, store, content_type):
    r = client.post("/api/v1/jobs", content=job_yaml("demo").encode(),
                    headers={"Content-Type": content_type})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["name"] == "demo"
    assert job["phase"] == "Pending" and job["reason"] == "Submitted"
    assert job["desired"] == "Running"
    assert job["labels"] == {"team": "rl"}
    assert job["headRole"] == "head"
    assert job["workersTotal"] == 3 and job["workersReady"] == 0
    assert job["spec"]["spec"]["roles"][0]["name"] == "pool"
    run = job["currentRun"]
    assert run["number"] == 1 and run["cause"] == "Submitted" and run["phase"] == "Pending"
    assert [(w["name"], w["nodeRank"], w["isHead"]) for w in run["workers"]] == [
        ("demo-head-0", 0, True), ("demo-pool-0", 1, False), ("demo-pool-1", 2, False)]
    assert [r["number"] for r in job["runs"]] == [1]
    # stored: GET answers the same view
    assert client.get("/api/v1/jobs/demo").json() == job
    with store.session() as s:
        assert s.scalar(select(JobRow.name)) == "demo"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_a_body_a_browser_can_send_cross_site_is_415(client, store, content_type):
    """text/plain, form and multipart bodies need no CORS preflight, so a hostile page could
    send them: the API refuses them (and a body without a Content-Type) before reading them."""
    headers = {"Content-Type": content_type} if content_type else {}
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=415,
                      content=job_yaml("demo").encode(), headers=headers)
    assert detail["code"] == "UnsupportedMediaType"
    assert "application/json" in detail["message"]


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_create_from_json(client, content_type):
    r = client.post("/api/v1/jobs", content=json.dumps(job_dict("j1")),
                    headers={"Content-Type": content_type})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "j1"
    assert r.json()["spec"]["spec"]["runScript"] == "python train.py\n"


def test_create_keeps_warnings_as_findings(client):
    doc = job_dict("warned")
    doc["spec"]["roles"][1]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    r = client.post("/api/v1/jobs", json=doc)
    assert r.status_code == 201, r.text
    events = client.get("/api/v1/jobs/warned/events").json()
    assert events[0]["reason"] == "Submitted"
    warnings = r.json()["findings"]
    assert warnings and {f["severity"] for f in warnings} == {"warning"}
    assert warnings[0]["path"].startswith("spec.roles[1].env")
    assert {e["reason"] for e in events if e["type"] == "Warning"} == {f["code"] for f in warnings}


def test_invalid_spec_is_422_with_findings_naming_paths(client, store):
    create(client, "keep")
    doc = BAD_JOB_YAML
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=422, content=doc,
                      headers={"Content-Type": "application/yaml"})
    assert detail["code"] == "Invalid"
    assert "4 errors" in detail["message"]
    by_path = {f["path"]: f for f in detail["findings"]}
    assert set(by_path) == {"metadata.name", "spec.headRole", "spec.roles[0].workers",
                            "spec.roles[0].image"}
    assert by_path["metadata.name"]["code"] == "InvalidName"
    assert "Bad_Name" in by_path["metadata.name"]["message"]
    assert by_path["spec.headRole"]["code"] == "HeadRoleUnknown"
    assert "head" in by_path["spec.headRole"]["hint"]
    for f in detail["findings"]:
        assert set(f) == {"code", "severity", "path", "message", "hint"}
        assert f["severity"] == "error" and f["hint"]


def test_structural_errors_name_paths(client, store):
    doc = job_dict("structural")
    doc["spec"]["roles"][0]["workers"] = "two"
    doc["spec"]["roles"][1]["imagee"] = "x"
    del doc["kind"]
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=422, json=doc)
    codes = {(f["code"], f["path"]) for f in detail["findings"]}
    assert codes == {("InvalidValue", "spec.roles[0].workers"),
                     ("UnknownField", "spec.roles[1].imagee"),
                     ("MissingField", "kind")}
    assert any('"two"' in f["message"] for f in detail["findings"])


@pytest.mark.parametrize(
    "body, needle",
    [
        (b"", "empty"),
        (b"  \n\t\n", "empty"),
        (b"\xff\xfe\x00\x81garbage", "not UTF-8"),
        (b"- a\n- b\n", "got list"),
        (b"42\n", "got int"),
        (b"a: [1, 2\nb: {{", "not valid YAML at line"),
        (b"{\"apiVersion\": ", "not valid YAML"),
        (b"null", "empty"),
    ],
    ids=["empty", "blank", "not-utf8", "list", "scalar", "bad-yaml", "bad-json", "null"],
)
def test_unreadable_bodies_are_4xx(client, store, body, needle):
    create(client, "keep")
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=422, content=body,
                      headers={"Content-Type": "application/yaml"})
    text = detail["message"] + " ".join(f["message"] for f in detail.get("findings", []))
    assert needle in text, detail
    if detail.get("findings"):
        assert detail["findings"][0]["path"] == "$"
        assert detail["findings"][0]["hint"]


def test_huge_document_is_4xx(client, store):
    create(client, "keep")
    doc = job_dict("huge")
    doc["spec"]["junk"] = "x" * (4 * 1024 * 1024)
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=(413, 422),
                      content=json.dumps(doc), headers={"Content-Type": "application/json"})
    assert any(f["path"] == "spec.junk" for f in detail.get("findings", [])) or "large" in detail["message"]


def test_many_fields_document_is_4xx(client, store):
    doc = job_dict("wide")
    doc["metadata"]["labels"] = {f"k{i}": "v" for i in range(5)}
    doc["spec"].update({f"unknown{i}": i for i in range(20000)})
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=(413, 422), json=doc)
    assert detail["code"] in ("Invalid", "TooLarge")


@pytest.mark.parametrize("kind", ["json-list", "yaml-flow-map"])
def test_deeply_nested_document_is_4xx(client, store, kind):
    depth = 5000
    body = (b"[" * depth + b"]" * depth) if kind == "json-list" else (b"{a: " * depth + b"1" + b"}" * depth)
    rejected(client, store, "POST", "/api/v1/jobs", content=body,
             headers={"Content-Type": "application/yaml"})


def test_moderately_nested_document_is_4xx(client, store):
    doc = job_dict("nested")
    doc["spec"]["junk"] = json.loads("[" * 100 + "]" * 100)
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=422, json=doc)
    assert [f["path"] for f in detail["findings"]] == ["spec.junk"]


ALIAS_BOMB_CHILD = textwrap.dedent(
    """\
    import os, resource, sys
    assert os.environ["RLARK_HOME"]  # the test's own (rlark_home), removed with its tmp_path
    from fastapi.testclient import TestClient
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests.access import admin_token, api_client
    store = Store(f"sqlite:///{os.environ['RLARK_HOME']}/rlark.db")
    token = admin_token(store)
    lines = ["l0: &l0 [x,x,x,x,x,x,x,x,x]"]
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i-1}"] * 9) + "]")
    doc = "\\n".join(lines) + (
        "\\napiVersion: rlark.io/v1\\nkind: Job\\nmetadata: {name: *l8}\\n"
        "spec: {headRole: h, runScript: t, roles: [{name: h, image: 'python:3.11'}]}\\n")
    limit = 1024 ** 3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    with api_client(create_app(JobService(store)), token) as c:
        r = c.post("/api/v1/jobs", content=doc.encode(),
                   headers={"Content-Type": "application/yaml"})
    print("STATUS", r.status_code, len(doc))
    """
)


def test_yaml_alias_bomb_is_refused_cheaply(rlark_home):
    try:
        proc = subprocess.run([sys.executable, "-c", ALIAS_BOMB_CHILD], capture_output=True,
                              text=True, timeout=25, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("a 600-byte request took more than 25 s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = int(proc.stdout.split("STATUS", 1)[1].split()[0])
    assert 400 <= status < 500, proc.stdout


def test_lone_surrogate_is_refused_and_stores_nothing(client, store):
    create(client, "keep")
    doc = job_dict("surrogate")
    doc["spec"]["runScript"] = "echo \ud800"
    body = json.dumps(doc)  # ASCII, with the escape \ud800
    rejected(client, store, "POST", "/api/v1/jobs", status=422, content=body,
             headers={"Content-Type": "application/json"})


def test_nul_characters_in_a_spec_are_refused_naming_the_field(client, store):
    """A NUL cannot be stored in PostgreSQL nor passed to a process: the Job is refused with
    an InvalidText Finding on the field that holds it, and nothing is stored."""
    doc = job_dict("nul")
    doc["spec"]["runScript"] = "echo a\u0000b"
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=422, json=doc)
    findings = detail["findings"]
    assert [(f["code"], f["path"]) for f in findings] == [("InvalidText", "spec.runScript")]
    assert "NUL" in findings[0]["message"]
    assert client.get("/api/v1/jobs/nul").status_code == 404


@pytest.mark.parametrize("workers", [2**31, 2**63])
def test_workers_have_an_upper_bound(client, workers):
    doc = job_dict("many")
    doc["spec"]["roles"][0]["workers"] = workers
    body = client.post("/api/v1/validate", json=doc).json()
    assert body["valid"] is False
    assert "spec.roles[0].workers" in [f["path"] for f in body["findings"]]


def test_duplicate_name_is_409_and_keeps_the_first(client, store):
    first = create(client, "demo")
    other = job_dict("demo")
    other["spec"]["runScript"] = "python other.py"
    detail = rejected(client, store, "POST", "/api/v1/jobs", status=409, json=other)
    assert detail["code"] == "Conflict"
    assert "'demo'" in detail["message"] and "already exists" in detail["message"]
    job = client.get("/api/v1/jobs/demo").json()
    assert job["spec"] == first["spec"] and len(job["runs"]) == 1


def test_replace_with_a_bad_document_changes_nothing(client, store):
    create(client, "demo")
    other = job_dict("other")
    bad = job_dict("demo")
    bad["spec"]["roles"][0]["image"] = "python"
    for body, needle in [(b"", "empty"), (b"- a", "the Job spec"), (json.dumps(bad).encode(), "the Job spec"),
                         (json.dumps(other).encode(), "'other'")]:
        detail = rejected(client, store, "PUT", "/api/v1/jobs/demo", status=422, content=body,
                          headers={"Content-Type": "application/json"})
        assert detail["code"] == "Invalid" and needle in detail["message"], detail


# --- unknown jobs and bad parameters -------------------------------------------------------------


JOB_ROUTES = [
    ("GET", "/api/v1/jobs/{name}"),
    ("PUT", "/api/v1/jobs/{name}"),
    ("POST", "/api/v1/jobs/{name}/stop"),
    ("POST", "/api/v1/jobs/{name}/start"),
    ("POST", "/api/v1/jobs/{name}/restart"),
    ("DELETE", "/api/v1/jobs/{name}"),
    ("GET", "/api/v1/jobs/{name}/runs"),
    ("GET", "/api/v1/jobs/{name}/workers"),
    ("GET", "/api/v1/jobs/{name}/events"),
    ("GET", "/api/v1/jobs/{name}/timeline"),
    ("GET", "/api/v1/jobs/{name}/runs/1/timeline"),
    ("GET", "/api/v1/jobs/{name}/scalars"),
    ("GET", "/api/v1/jobs/{name}/runs/1/scalars"),
    ("GET", "/api/v1/jobs/{name}/usage"),
    ("GET", "/api/v1/jobs/{name}/runs/1/usage"),
    ("GET", "/api/v1/jobs/{name}/logs"),
    ("GET", "/api/v1/jobs/{name}/logs?follow=true"),
    ("GET", "/api/v1/jobs/{name}/record"),
    ("GET", "/api/v1/jobs/{name}/record?format=md"),
    ("GET", "/api/v1/jobs/{name}/outputs"),
    ("GET", "/api/v1/jobs/{name}/outputs/logs/file?path=exp/metrics.txt"),
]


def api_routes(app) -> set[tuple[str, str]]:
    """(METHOD, path) of every API route, also those of included routers (which FastAPI 0.165
    keeps as lazily flattened ``_IncludedRouter`` entries in ``app.routes``)."""
    found: set[tuple[str, str]] = set()

    def walk(routes, prefix: str) -> None:
        for r in routes:
            if isinstance(r, APIRoute) and r.include_in_schema:  # the console's pages are not API
                found.update((m, prefix + r.path) for m in r.methods)
            elif hasattr(r, "original_router"):
                walk(r.original_router.routes, prefix + getattr(r.include_context, "prefix", ""))

    walk(app.routes, "")
    return found


def test_every_job_route_is_listed_here(app):
    """JOB_ROUTES covers every /api/v1/jobs/{name}... route of the app."""
    # a Run's number is a real one in JOB_ROUTES (run 1), a parameter in the app's routes
    listed = {(m, p.split("?")[0].replace("/runs/1/", "/runs/{number}/")
               .replace("/outputs/logs/", "/outputs/{output}/")) for m, p in JOB_ROUTES}
    actual = {(m, p) for m, p in api_routes(app) if p.startswith("/api/v1/jobs/{name}")}
    assert actual == listed


def route_body(method: str, name: str) -> dict:
    """PUT replaces a Job: it needs a valid Job document of the same name."""
    return {"content": job_yaml(name), "headers": {"Content-Type": "application/yaml"}} if method == "PUT" else {}


@pytest.mark.parametrize("method, route", JOB_ROUTES)
def test_unknown_job_is_404(client, store, method, route):
    create(client, "demo")
    detail = rejected(client, store, method, route.format(name="nosuch"), status=404,
                      **route_body(method, "nosuch"))
    assert detail["code"] == "NotFound"
    assert "'nosuch'" in detail["message"]


def test_unknown_job_with_odd_name_is_404(client, store):
    for name in ["UPPER", "a.b", "x" * 300, "%E2%98%83", "a%20b"]:
        detail = rejected(client, store, "GET", f"/api/v1/jobs/{name}", status=404)
        assert detail["code"] == "NotFound"


def test_nul_in_job_name_is_404_on_sqlite(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    with api_client(create_app(JobService(store)), admin_token(store)) as c:
        for method, route in JOB_ROUTES:
            if method != "PUT":  # a NUL name is not a valid metadata.name: 422 first
                rejected(c, store, method, route.format(name="a%00b"), status=404)
    store.dispose()


@pytest.mark.postgres
def test_nul_in_job_name_is_4xx_on_postgres(postgres_url, rlark_home):
    store = Store(postgres_url)
    try:
        with api_client(create_app(JobService(store)), admin_token(store)) as c:
            for method, route in JOB_ROUTES + [("GET", "/api/v1/jobs?q=a%00b")]:
                rejected(c, store, method, route.format(name="a%00b"))
    finally:
        store.dispose()


@pytest.mark.parametrize("method, url", [("GET", "/api/v1/jobs/a/b"), ("GET", "/api/v1/nothing"),
                                         ("PATCH", "/api/v1/jobs/demo")])
def test_unmatched_routes_answer_the_error_shape(client, store, method, url):
    create(client, "demo")
    rejected(client, store, method, url)


BAD_PARAMS = [
    ("/api/v1/jobs", "limit", "0"),
    ("/api/v1/jobs", "limit", "abc"),
    ("/api/v1/jobs", "limit", "1001"),
    ("/api/v1/jobs", "offset", "-1"),
    ("/api/v1/jobs", "phase", "Bogus"),
    ("/api/v1/jobs", "q", "x" * 64),
    ("/api/v1/jobs/demo/workers", "run", "0"),
    ("/api/v1/jobs/demo/workers", "run", "abc"),
    ("/api/v1/jobs/demo/events", "run", "-3"),
    ("/api/v1/jobs/demo/logs", "run", "0"),
    ("/api/v1/jobs/demo/logs", "rank", "-1"),
    ("/api/v1/jobs/demo/logs", "rank", "1.5"),
    ("/api/v1/jobs/demo/logs", "tail", "-5"),
    ("/api/v1/jobs/demo/logs", "tail", "99999999999999999999"),
    ("/api/v1/jobs/demo/logs", "follow", "maybe"),
    ("/api/v1/jobs/demo/record", "format", "pdf"),
    ("/api/v1/jobs/demo/record", "run", "0"),
]


@pytest.mark.parametrize("path, param, value", BAD_PARAMS,
                         ids=[f"{p.rsplit('/', 1)[-1]}-{k}={v[:8]}" for p, k, v in BAD_PARAMS])
def test_bad_query_parameter_is_422_naming_it(client, store, path, param, value):
    create(client, "demo")
    detail = rejected(client, store, "GET", path, status=422, params={param: value})
    assert detail["code"] == "Invalid"
    assert detail["errors"][0]["field"] == param
    assert detail["errors"][0]["value"] == value
    assert detail["errors"][0]["message"]
    assert f"{param}=" in detail["message"] and value[:20] in detail["message"]


HUGE_INT_PARAMS = [
    ("/api/v1/jobs", "offset"),
    ("/api/v1/jobs/demo/workers", "run"),
    ("/api/v1/jobs/demo/events", "run"),
    ("/api/v1/jobs/demo/logs", "run"),
    ("/api/v1/jobs/demo/record", "run"),
]


@pytest.mark.parametrize("path, param", HUGE_INT_PARAMS,
                         ids=[f"{p.rsplit('/', 1)[-1]}-{k}" for p, k in HUGE_INT_PARAMS])
def test_huge_integer_query_parameter_is_4xx(client, store, path, param):
    create(client, "demo")
    detail = rejected(client, store, "GET", path, params={param: str(2**63)})
    assert param in json.dumps(detail)


@pytest.mark.postgres
def test_run_beyond_int32_is_4xx_on_postgres(postgres_url, rlark_home):
    store = Store(postgres_url)
    try:
        with api_client(create_app(JobService(store)), admin_token(store)) as c:
            create(c, "demo")
            rejected(c, store, "GET", "/api/v1/jobs/demo/workers", params={"run": str(2**31)})
    finally:
        store.dispose()


def test_large_run_number_within_range_is_404(client, store):
    create(client, "demo")
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/workers", status=404,
                      params={"run": str(2**31 - 1)})
    assert "no run" in detail["message"]


# --- list ----------------------------------------------------------------------------------------


def test_list_filters_and_pages(client, store):
    for name in ["alpha-one", "alpha-two", "beta-three"]:
        create(client, name)
    set_run_state(store, "alpha-two", "Succeeded")
    everything = client.get("/api/v1/jobs").json()
    assert everything["total"] == 3 and everything["limit"] == 100 and everything["offset"] == 0
    assert [j["name"] for j in everything["items"]] == ["beta-three", "alpha-two", "alpha-one"]
    item = everything["items"][2]
    assert item["roles"] == [{"name": "pool", "workers": 2}, {"name": "head", "workers": 1}]
    assert item["workersTotal"] == 3 and item["run"] == 1 and "spec" not in item

    pending = client.get("/api/v1/jobs", params={"phase": "Pending"}).json()
    assert [j["name"] for j in pending["items"]] == ["beta-three", "alpha-one"]
    assert pending["total"] == 2
    done = client.get("/api/v1/jobs", params={"phase": "Succeeded"}).json()
    assert [j["name"] for j in done["items"]] == ["alpha-two"]
    assert client.get("/api/v1/jobs", params={"phase": "Failed"}).json() == {
        "items": [], "total": 0, "limit": 100, "offset": 0}

    alpha = client.get("/api/v1/jobs", params={"q": "alpha"}).json()
    assert [j["name"] for j in alpha["items"]] == ["alpha-two", "alpha-one"]
    assert client.get("/api/v1/jobs", params={"q": "ALPHA-T"}).json()["total"] == 1
    # LIKE wildcards are literal
    assert client.get("/api/v1/jobs", params={"q": "_"}).json()["total"] == 0
    assert client.get("/api/v1/jobs", params={"q": "%"}).json()["total"] == 0
    both = client.get("/api/v1/jobs", params={"q": "alpha", "phase": "Pending"}).json()
    assert [j["name"] for j in both["items"]] == ["alpha-one"]

    page1 = client.get("/api/v1/jobs", params={"limit": 2}).json()
    page2 = client.get("/api/v1/jobs", params={"limit": 2, "offset": 2}).json()
    assert [j["name"] for j in page1["items"]] == ["beta-three", "alpha-two"]
    assert [j["name"] for j in page2["items"]] == ["alpha-one"]
    assert page1["total"] == page2["total"] == 3 and page2["offset"] == 2
    assert client.get("/api/v1/jobs", params={"offset": 10}).json()["items"] == []


# --- stop / start / restart / delete -------------------------------------------------------------


def test_stop_is_idempotent(client, store):
    create(client, "demo")
    r = client.post("/api/v1/jobs/demo/stop")
    assert r.status_code == 200, r.text
    assert r.json()["desired"] == "Stopped"
    assert client.post("/api/v1/jobs/demo/stop").status_code == 200
    events = client.get("/api/v1/jobs/demo/events").json()
    assert [e["reason"] for e in events] == ["Submitted", "StopRequested"]
    with store.session() as s:
        assert s.scalar(select(RunRow.stop_requested)) is True


def test_start_conflicts_while_active_then_starts_a_new_run(client, store):
    create(client, "demo")
    for phase in ("Pending", "Starting", "Running", "Stopping"):
        set_run_state(store, "demo", phase)
        detail = rejected(client, store, "POST", "/api/v1/jobs/demo/start", status=409)
        assert detail["code"] == "Conflict"
        assert phase in detail["message"] and "restart" in detail["message"]
    set_run_state(store, "demo", "Stopped", released=True)
    r = client.post("/api/v1/jobs/demo/start")
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["currentRun"]["number"] == 2 and job["currentRun"]["cause"] == "Started"
    assert job["phase"] == "Pending" and job["desired"] == "Running"
    assert [(r["number"], r["phase"]) for r in job["runs"]] == [(1, "Stopped"), (2, "Pending")]
    # same ranks for the same spec
    assert [(w["name"], w["nodeRank"]) for w in job["currentRun"]["workers"]] == [
        ("demo-head-0", 0), ("demo-pool-0", 1), ("demo-pool-1", 2)]


def test_restart_stops_the_active_run_and_starts_another(client, store):
    create(client, "demo")
    r = client.post("/api/v1/jobs/demo/restart")
    assert r.status_code == 200, r.text
    assert r.json()["currentRun"]["number"] == 2 and r.json()["currentRun"]["cause"] == "Restarted"
    with store.session() as s:
        flags = s.execute(select(RunRow.number, RunRow.stop_requested).order_by(RunRow.number)).all()
    assert [tuple(f) for f in flags] == [(1, True), (2, False)]
    runs = client.get("/api/v1/jobs/demo/runs").json()
    assert [(r["number"], r["cause"]) for r in runs] == [(1, "Submitted"), (2, "Restarted")]
    reasons = [e["reason"] for e in client.get("/api/v1/jobs/demo/events").json()]
    assert reasons == ["Submitted", "StopRequested", "Restarted"]


def test_delete_inactive_job_removes_everything(client, store):
    create(client, "demo")
    create(client, "other")
    set_worker_logs(store, "demo", {"demo-head-0": ["hello"]})
    set_run_state(store, "demo", "Succeeded", released=True)
    logs = settings.job_logs_dir("default", "demo")
    assert logs.exists()
    r = client.delete("/api/v1/jobs/demo")
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "demo", "project": "default", "deleted": True}
    assert client.get("/api/v1/jobs/demo").status_code == 404
    assert not logs.exists()
    with store.session() as s:
        assert s.scalars(select(JobRow.name)).all() == ["other"]
        assert {w.name for w in s.scalars(select(WorkerRow))} == {
            "other-head-0", "other-pool-0", "other-pool-1"}
        assert s.scalar(select(EventRow.id).where(EventRow.job_id != s.scalar(
            select(JobRow.id).where(JobRow.name == "other")))) is None
    assert client.get("/api/v1/jobs/other").status_code == 200


def test_delete_active_job_stops_first_and_refuses_start(client, store):
    create(client, "demo")
    r = client.delete("/api/v1/jobs/demo")
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "demo", "project": "default", "deleted": False, "deleting": True}
    job = client.get("/api/v1/jobs/demo").json()
    assert job["deleting"] is True and job["desired"] == "Stopped"
    set_run_state(store, "demo", "Stopped", released=True)
    for verb in ("start", "restart"):
        detail = rejected(client, store, "POST", f"/api/v1/jobs/demo/{verb}", status=409)
        assert "being deleted" in detail["message"]
    # once nothing runs, delete removes it
    r = client.delete("/api/v1/jobs/demo")
    assert r.json()["deleted"] is True
    assert client.get("/api/v1/jobs/demo").status_code == 404


# --- runs, workers, events -----------------------------------------------------------------------


def test_runs_workers_events(client, store):
    create(client, "demo")
    set_run_state(store, "demo", "Failed", released=True)
    assert client.post("/api/v1/jobs/demo/start").status_code == 200

    runs = client.get("/api/v1/jobs/demo/runs").json()
    assert [(r["number"], r["phase"], r["workersTotal"]) for r in runs] == [
        (1, "Failed", 3), (2, "Pending", 3)]
    assert runs[0]["tasks"] == [
        {"role": "head", "phase": "Pending", "ready": 0, "total": 1, "nodeRanks": [0, 0]},
        {"role": "pool", "phase": "Pending", "ready": 0, "total": 2, "nodeRanks": [1, 2]},
    ]

    workers = client.get("/api/v1/jobs/demo/workers").json()
    assert [w["nodeRank"] for w in workers] == [0, 1, 2]
    assert {"name", "role", "nodeRank", "isHead", "phase", "host", "ip", "rayNodeId", "log"} <= set(workers[0])
    assert client.get("/api/v1/jobs/demo/workers", params={"run": 1}).json()[0]["name"] == "demo-head-0"
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/workers?run=9", status=404)
    assert "run 9" in detail["message"]

    events = client.get("/api/v1/jobs/demo/events").json()
    assert [(e["reason"], e["run"]) for e in events] == [("Submitted", 1), ("Started", 2)]
    assert [e["reason"] for e in client.get("/api/v1/jobs/demo/events?run=2").json()] == ["Started"]
    missing = client.get("/api/v1/jobs/demo/events?run=7")  # as the record of a Run never made
    assert missing.status_code == 404 and "has no run 7" in missing.json()["detail"]["message"]
    assert set(events[0]) == {"time", "type", "reason", "message", "run", "worker", "from", "to",
                              "actor"}
    assert [e["actor"] for e in events] == ["admin", "admin"]  # who asked: the token's user


# --- validate, schema, health, openapi -----------------------------------------------------------


def test_validate_good_and_bad_store_nothing(client, store):
    create(client, "keep")
    before = snapshot(store)
    r = client.post("/api/v1/validate", content=job_yaml("fresh"),
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 200, r.text
    assert r.json() == {"valid": True, "findings": []}
    r = client.post("/api/v1/validate", json=job_dict("keep"))  # same name as a stored Job: fine
    assert r.json()["valid"] is True
    bad = job_dict("Bad_Name")
    bad["spec"]["roles"][0]["image"] = "python"
    r = client.post("/api/v1/validate", json=bad)
    assert r.status_code == 200
    body = r.json()
    assert body["valid"] is False
    assert {f["path"] for f in body["findings"]} == {"metadata.name", "spec.roles[0].image"}
    assert all(set(f) == {"code", "severity", "path", "message", "hint"} for f in body["findings"])
    r = client.post("/api/v1/validate", content=b"- not a job",
                    headers={"Content-Type": "application/yaml"})
    assert r.json()["valid"] is False and r.json()["findings"][0]["code"] == "InvalidDocument"
    assert snapshot(store) == before
    detail = rejected(client, store, "POST", "/api/v1/validate", status=422, content=b"")
    assert "empty" in detail["message"]


def test_validate_warning_is_still_valid(client):
    doc = job_dict("warned")
    doc["spec"]["roles"][1]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    body = client.post("/api/v1/validate", json=doc).json()
    assert body["valid"] is True
    assert body["findings"] and {f["severity"] for f in body["findings"]} == {"warning"}


def test_schema(client):
    r = client.get("/api/v1/schema")
    assert r.status_code == 200
    schema = r.json()
    assert schema == json_schema()
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(schema["properties"])
    assert schema["title"] == "RLark Job"


def test_healthz_and_the_server_state(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"ok": True}  # a probe's answer, nothing more
    r = client.get("/api/v1/server")  # the site administrator's
    assert r.status_code == 200
    # no controller in this app; a server's says whether it reconciles (leader election: who
    # leads, tests/test_k8s_leader.py)
    # workerIsolation: what the local runtime probed (none without one: a JobService alone);
    # logFollows: log streams open now and the server's limit; store: the last probe of the
    # database (tests/test_store_faults.py stops one)
    state = r.json()
    store = state.pop("store")
    assert state == {"version": __version__, "runtime": "local", "controller": None,
                     "workerIsolation": None, "logFollows": {"open": 0, "max": 64}}
    assert store["dialect"] in ("sqlite", "postgresql") and store["reachable"] is True
    assert store["error"] is None and store["latencyMs"] >= 0 and store["checkedAt"]
    assert client.get("/livez").json() == {"ok": True}


EXPECTED_ROUTES = {
    ("post", "/api/v1/jobs"), ("get", "/api/v1/jobs"), ("get", "/api/v1/jobs/{name}"),
    ("put", "/api/v1/jobs/{name}"),
    ("delete", "/api/v1/jobs/{name}"), ("post", "/api/v1/jobs/{name}/stop"),
    ("post", "/api/v1/jobs/{name}/start"), ("post", "/api/v1/jobs/{name}/restart"),
    ("get", "/api/v1/jobs/{name}/runs"), ("get", "/api/v1/jobs/{name}/workers"),
    ("get", "/api/v1/jobs/{name}/events"), ("get", "/api/v1/jobs/{name}/logs"),
    ("get", "/api/v1/jobs/{name}/record"), ("post", "/api/v1/validate"),
    ("get", "/api/v1/schema"), ("get", "/healthz"), ("get", "/livez"), ("get", "/api/v1/server"),
}


def test_openapi_lists_every_route_and_docs_serve_html(client, app):
    spec = client.get("/openapi.json").json()
    listed = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    routes = {(m.lower(), p) for m, p in api_routes(app)}
    assert routes == listed
    assert EXPECTED_ROUTES <= listed  # others may be added
    body = spec["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]
    assert {"application/yaml", "application/json"} <= set(body)
    for path, ops in spec["paths"].items():
        for op in ops.values():
            assert op.get("summary"), path
    docs = client.get("/docs")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert "swagger" in docs.text.lower() and "/openapi.json" in docs.text


# --- logs ----------------------------------------------------------------------------------------


def test_logs_tail_and_filters(client, store):
    create(client, "demo")
    set_worker_logs(store, "demo", {
        "demo-head-0": [f"head {i}" for i in range(5)],
        "demo-pool-0": ["pool0 a", "pool0 b"],
        "demo-pool-1": [],
    })
    r = client.get("/api/v1/jobs/demo/logs")
    assert r.status_code == 200, r.text
    ws = r.json()["workers"]
    assert [(w["name"], w["role"], w["nodeRank"], w["run"]) for w in ws] == [
        ("demo-head-0", "head", 0, 1), ("demo-pool-0", "pool", 1, 1), ("demo-pool-1", "pool", 2, 1)]
    assert ws[0]["lines"] == [f"head {i}" for i in range(5)]
    assert ws[2]["lines"] == []

    tail = client.get("/api/v1/jobs/demo/logs", params={"tail": 2}).json()["workers"]
    assert [w["lines"] for w in tail] == [["head 3", "head 4"], ["pool0 a", "pool0 b"], []]
    zero = client.get("/api/v1/jobs/demo/logs", params={"tail": 0}).json()["workers"]
    assert all(w["lines"] == [] for w in zero)

    pool = client.get("/api/v1/jobs/demo/logs", params={"role": "pool"}).json()["workers"]
    assert [w["name"] for w in pool] == ["demo-pool-0", "demo-pool-1"]
    rank1 = client.get("/api/v1/jobs/demo/logs", params={"rank": 1}).json()["workers"]
    assert [(w["name"], w["lines"]) for w in rank1] == [("demo-pool-0", ["pool0 a", "pool0 b"])]
    one = client.get("/api/v1/jobs/demo/logs", params={"worker": "demo-head-0", "tail": 1}).json()
    assert one["workers"] == [{"name": "demo-head-0", "role": "head", "nodeRank": 0, "run": 1,
                               "lines": ["head 4"], "truncated": False}]
    # a Worker without a log file yet has no lines
    with store.session() as s:
        s.scalar(select(WorkerRow).where(WorkerRow.name == "demo-pool-1")).log_path = None
    assert client.get("/api/v1/jobs/demo/logs?rank=2").json()["workers"][0]["lines"] == []


@pytest.mark.parametrize("params", [{"worker": "ghost"}, {"role": "actor"}, {"rank": 7},
                                    {"role": "pool", "rank": 0}])
def test_logs_no_matching_worker_is_404_naming_the_workers(client, store, params):
    create(client, "demo")
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/logs", status=404, params=params)
    assert detail["code"] == "NotFound"
    for name in ("demo-head-0", "demo-pool-0", "demo-pool-1"):
        assert name in detail["message"]
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/logs", status=404,
                      params={**params, "follow": "true"})
    assert "demo-pool-1" in detail["message"]


def test_logs_of_a_run_that_does_not_exist_is_404(client, store):
    create(client, "demo")
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/logs?run=2", status=404)
    assert "run 2" in detail["message"]


def parse_sse(text: str) -> list[tuple[str, str]]:
    events = []
    for block in text.split("\n\n"):
        event, data = "message", []
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            events.append((event, "\n".join(data)))
    return events


def line_events(events: list[tuple[str, str]], workers: list[str]) -> list[dict]:
    """The ``line`` items of a follow stream, checking its frame: an optional first ``workers``
    event naming the chosen Workers, then only ``line`` events, then exactly one ``end``."""
    if events and events[0][0] == "workers":
        assert json.loads(events[0][1]) == workers
        events = events[1:]
    assert events[-1] == ("end", "{}"), events[-3:]
    assert [e for e, _ in events[:-1]] == ["line"] * (len(events) - 1), events
    return [json.loads(d) for _, d in events[:-1]]


class LiveStream:
    """A follow stream read as it arrives, from a real HTTP server (uvicorn in a thread; the
    in-process TestClient hands over a response only once it is complete), so a test can act
    on what the stream has delivered so far instead of sleeping: ``until(pred)`` reads events
    until one satisfies ``pred``; ``rest()`` reads to the end. Events: ``(event, data)``."""

    def __init__(self, store, path: str, params: dict):
        import httpx

        from tests.server import ThreadedServer

        self.server = ThreadedServer(JobService(store)).start()
        self.http = httpx.Client(base_url=self.server.url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.server.token}"})
        self._cm = self.http.stream("GET", path, params=params)
        self.response = self._cm.__enter__()
        self._lines = self.response.iter_lines()
        self.events: list[tuple[str, str]] = []
        self.ended = False

    def _next(self) -> tuple[str, str] | None:
        event, data = "message", []
        for line in self._lines:
            if line == "":
                if data:
                    return event, "\n".join(data)
                event = "message"
                continue
            if line.startswith(":"):
                continue
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        self.ended = True
        return (event, "\n".join(data)) if data else None

    def until(self, pred) -> tuple[str, str]:
        while True:
            ev = self._next()
            assert ev is not None, f"the stream ended first: {self.events}"
            self.events.append(ev)
            if pred(ev):
                return ev

    def rest(self) -> list[tuple[str, str]]:
        while (ev := self._next()) is not None:
            self.events.append(ev)
        return self.events

    def close(self) -> None:
        self._cm.__exit__(None, None, None)
        self.http.close()
        self.server.stop()


def is_line(text: str):
    return lambda ev: ev[0] == "line" and json.loads(ev[1])["line"] == text


@pytest.mark.timeout(90)
def test_logs_follow_streams_lines_and_ends_when_released(client, store):
    """Tail first, then what is appended, then the end once the Workers are released; each
    write happens after the stream has shown what came before it (no sleeps)."""
    create(client, "demo")
    paths = set_worker_logs(store, "demo", {
        "demo-head-0": [f"old {i}" for i in range(12)],
        "demo-pool-0": ["pool old"],
    })
    set_run_state(store, "demo", "Running")
    stream = LiveStream(store, "/api/v1/jobs/demo/logs",
                        {"follow": "true", "role": "head", "tail": 3})
    try:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        stream.until(is_line("old 11"))  # the tail is out: now append
        with open(paths["demo-head-0"], "a") as f:
            f.write("new 1\nnew 2\n")
        stream.until(is_line("new 2"))  # followed: now a line without its newline, and another
        with open(paths["demo-head-0"], "a") as f:  # Worker's line (not followed: role head)
            f.write("partial")  # no newline: still delivered at the end
        with open(paths["demo-pool-0"], "a") as f:
            f.write("pool new\n")
        set_run_state(store, "demo", "Succeeded", released=True)
        events = stream.rest()
    finally:
        stream.close()
    lines = line_events(events, ["demo-head-0"])
    assert {item["worker"] for item in lines} == {"demo-head-0"}
    assert [item["line"] for item in lines] == ["old 9", "old 10", "old 11", "new 1", "new 2", "partial"]


@pytest.mark.timeout(90)
def test_logs_follow_many_workers_default_tail(client, store):
    create(client, "demo")
    set_worker_logs(store, "demo", {
        "demo-head-0": [f"h{i}" for i in range(15)],
        "demo-pool-0": ["p0"],
        "demo-pool-1": ["p1"],
    })
    set_run_state(store, "demo", "Failed", released=True)
    r = client.get("/api/v1/jobs/demo/logs", params={"follow": "true"})
    assert r.status_code == 200
    got: dict[str, list[str]] = {}
    for item in line_events(parse_sse(r.text), ["demo-head-0", "demo-pool-0", "demo-pool-1"]):
        got.setdefault(item["worker"], []).append(item["line"])
    assert got == {"demo-head-0": [f"h{i}" for i in range(5, 15)], "demo-pool-0": ["p0"],
                   "demo-pool-1": ["p1"]}


@pytest.mark.timeout(90)
def test_logs_follow_waits_while_the_run_is_terminal_but_workers_unreleased(client, store):
    """A terminal Run whose Workers are not released yet may still write: the stream stays
    open (a line written after the first was delivered still arrives) until they are."""
    create(client, "demo")
    paths = set_worker_logs(store, "demo", {"demo-head-0": ["a"]})
    set_run_state(store, "demo", "Succeeded", released=False)
    stream = LiveStream(store, "/api/v1/jobs/demo/logs", {"follow": "true", "worker": "demo-head-0"})
    try:
        stream.until(is_line("a"))
        with open(paths["demo-head-0"], "a") as f:
            f.write("b\n")
        stream.until(is_line("b"))  # still following: the Run ended, its Workers did not
        assert not stream.ended
        set_run_state(store, "demo", "Succeeded", released=True)
        events = stream.rest()
    finally:
        stream.close()
    assert stream.ended
    assert [item["line"] for item in line_events(events, ["demo-head-0"])] == ["a", "b"]


@pytest.mark.timeout(90)
def test_logs_follow_of_a_run_that_failed_before_any_worker_started_ends(client, store):
    """A Run that failed before launching (a secret deleted since the submit: SecretMissing)
    has Workers that never started and are never released: the stream ends at once instead of
    waiting for them forever."""
    create(client, "demo")
    set_run_state(store, "demo", "Failed")
    r = client.get("/api/v1/jobs/demo/logs", params={"follow": "true"})
    assert r.status_code == 200
    assert line_events(parse_sse(r.text), ["demo-head-0", "demo-pool-0", "demo-pool-1"]) == []


# --- record --------------------------------------------------------------------------------------


def test_record_formats(client, store):
    create(client, "demo")
    r = client.get("/api/v1/jobs/demo/record")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    rec = r.json()
    assert rec["job"] == "demo" and rec["run"] == 1 and rec["result"]["phase"] == "Pending"
    assert [w["nodeRank"] for w in rec["workers"]["items"]] == [0, 1, 2]
    assert rec["workers"]["expected"] == 3
    assert rec["images"] == {"pool": "docker.io/rlinf/rlinf:0.3.0", "head": "docker.io/rlinf/rlinf:0.3.0"}

    y = client.get("/api/v1/jobs/demo/record", params={"format": "yaml"})
    assert y.status_code == 200 and y.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(y.text) == rec

    md = client.get("/api/v1/jobs/demo/record", params={"format": "md"})
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert md.text.startswith("# Run record: demo run 1")
    assert "docker.io/rlinf/rlinf:0.3.0" in md.text


def test_record_of_a_stored_run_and_unknown_run(client, store):
    create(client, "demo")
    from rlark.record.build import build_record
    from tests.test_record_v2 import rows

    # the stored record (told from one built on reading by its message), as stored before
    # records said "provisional": read as final
    stored = build_record(*rows(), final=True)
    stored = {**{k: v for k, v in stored.items() if k != "provisional"}, "job": "demo", "run": 1,
              "result": {**stored["result"], "message": "stored"}}
    with store.session() as s:
        run = s.scalar(select(RunRow))
        run.record = stored
    assert client.get("/api/v1/jobs/demo/record?run=1").json() == {**stored, "provisional": False}
    detail = rejected(client, store, "GET", "/api/v1/jobs/demo/record?run=3", status=404)
    assert "run 3" in detail["message"]
