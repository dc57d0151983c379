"""One server per store; `apply` replaces a Job's spec and starts a new Run; host capacity."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rlark.runtimes.local.preflight import _host_capacity
from rlark.services.errors import Invalid, NotFound
from rlark.services.jobs import JobService
from rlark.spec import parse_job
from rlark.store import Store
from tests.server import RlarkServer


def test_second_server_on_the_same_home_is_refused(tmp_path):
    first = RlarkServer(tmp_path).start()
    try:
        res = subprocess.run(
            [sys.executable, "-m", "rlark.cli", "server", "--port", "18999"],
            env=first.env, capture_output=True, text=True, timeout=60,
        )
        assert res.returncode == 1
        assert "another RLark server already uses" in res.stderr
        assert str(first.port) in res.stderr  # names the server holding the store
        assert "Traceback" not in res.stderr
        assert first.http.get("/healthz").status_code == 200  # the first one is untouched
    finally:
        first.stop()
    # once the first is gone, a new server process may take the store (on the same address:
    # the first start wrote the admin's token for that one; a later start writes none)
    first.start()
    try:
        assert first.http.get("/api/v1/me").json()["name"] == "admin"
    finally:
        first.stop()


def test_second_server_on_the_same_postgres_is_refused(tmp_path, postgres_url):
    from rlark.store.lock import ControllerLock, StoreBusy

    a, b = Store(postgres_url), Store(postgres_url)
    lock = ControllerLock(a.engine, {"pid": 1}).acquire()
    with pytest.raises(StoreBusy, match="another RLark server"):
        ControllerLock(b.engine, {"pid": 2}).acquire()
    lock.release()
    ControllerLock(b.engine, {"pid": 2}).acquire().release()


def test_replicas_share_a_store_and_a_single_server_cannot_join_them(db_url):
    """Replicas that elect a leader take the store lock shared (any number of them); a server
    without leader election takes it exclusively: neither kind joins the other."""
    from rlark.store.lock import ControllerLock, StoreBusy

    stores = [Store(db_url) for _ in range(3)]
    try:
        a = ControllerLock(stores[0].engine, {"pid": 1}, shared=True).acquire()
        b = ControllerLock(stores[1].engine, {"pid": 2}, shared=True).acquire()
        with pytest.raises(StoreBusy, match="another RLark server already uses .*--leader-elect"):
            ControllerLock(stores[2].engine, {"pid": 3}).acquire()
        a.release()
        b.release()
        single = ControllerLock(stores[2].engine, {"pid": 3}).acquire()
        with pytest.raises(StoreBusy, match="an RLark server without leader election already uses"):
            ControllerLock(stores[0].engine, {"pid": 1}, shared=True).acquire()
        single.release()
        ControllerLock(stores[0].engine, {"pid": 1}, shared=True).acquire().release()
    finally:
        for st in stores:
            st.dispose()


def test_replicas_starting_together_on_a_fresh_postgres_store_both_start(postgres_url):
    """Two replicas of a Deployment start at once on an empty database (two processes): the
    migrations run one after the other (an advisory lock), one of them makes the
    administrator, and both start."""
    start = (
        "import sys, time\n"
        "from rlark.services.auth import AuthService\n"
        "from rlark.store import Store\n"
        "while time.time() < float(sys.argv[2]): time.sleep(0.005)\n"  # both at once
        "st = Store(sys.argv[1])\n"
        "print(AuthService(st).bootstrap('rlark_' + 'x' * 40))\n")
    at = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", start, postgres_url, at], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert sorted(out.strip() for out, _ in outs) == ["None", "rlark_" + "x" * 40]


JOB = """apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  runScript: {run}
  roles:
  - {{name: head, image: "x/y:1", workers: {workers}}}
"""


def test_replace_gives_a_new_spec_and_a_new_run(rlark_home):
    svc = JobService(Store(f"sqlite:///{rlark_home / 'db.sqlite'}"))
    svc.create(JOB.format(name="app", run="'echo one'", workers=1))
    out = svc.replace("app", JOB.format(name="app", run="'echo two'", workers=2))
    assert out["currentRun"]["number"] == 2 and out["currentRun"]["cause"] == "Updated"
    assert out["spec"]["spec"]["runScript"] == "echo two"
    assert [w["nodeRank"] for w in out["currentRun"]["workers"]] == [0, 1]
    runs = svc.runs("app")
    assert len(runs) == 2
    # run 1 keeps its own snapshot
    assert svc.record("app", 1)["spec"]["spec"]["runScript"] == "echo one"
    assert "SpecUpdated" in [e["reason"] for e in svc.events("app")]


def test_replace_refuses_bad_specs_and_other_names(rlark_home):
    svc = JobService(Store(f"sqlite:///{rlark_home / 'db.sqlite'}"))
    svc.create(JOB.format(name="app", run="'true'", workers=1))
    with pytest.raises(Invalid) as exc:
        svc.replace("app", JOB.format(name="other", run="'true'", workers=1))
    assert exc.value.findings[0].code == "NameMismatch"
    with pytest.raises(Invalid) as exc:
        svc.replace("app", JOB.format(name="app", run="'true'", workers=0))
    assert exc.value.findings[0].path == "spec.roles[0].workers"
    with pytest.raises(NotFound):
        svc.replace("nope", JOB.format(name="nope", run="'true'", workers=1))
    assert len(svc.runs("app")) == 1  # nothing changed
    assert svc.get("app")["spec"]["spec"]["runScript"] == "true"


def _job(roles: list[dict]):
    data = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "cap"},
            "spec": {"headRole": roles[0]["name"], "runScript": "true", "roles": roles}}
    job, findings = parse_job(data)
    assert job is not None, findings
    return job


HOST = {"cpu": 2, "memory": 8 * 1024**3, "gpu": 0}


@pytest.mark.parametrize("roles, codes", [
    ([{"name": "a", "image": "x/y:1", "workers": 2, "resources": {"cpu": 1, "memory": "2Gi"}}], []),
    ([{"name": "a", "image": "x/y:1", "workers": 3, "resources": {"cpu": 1}}], ["ExceedsHostCpu"]),
    ([{"name": "a", "image": "x/y:1", "workers": 1, "resources": {"cpu": "500m"}},
      {"name": "b", "image": "x/y:1", "workers": 2, "resources": {"cpu": "100m"}}], ["ExceedsHostCpu"]),
    ([{"name": "a", "image": "x/y:1", "workers": 2, "resources": {"memory": "5Gi"}}], ["ExceedsHostMemory"]),
    ([{"name": "a", "image": "x/y:1", "workers": 1, "resources": {"gpu": 1}}], ["ExceedsHostGpu"]),
], ids=["fits", "cpu", "cpu-rounded-up-per-worker", "memory", "gpu"])
def test_host_capacity(roles, codes):
    findings = list(_host_capacity(_job(roles), HOST))
    assert [f.code for f in findings] == codes
    for f in findings:
        assert f.severity.value == ("error" if f.code == "ExceedsHostGpu" else "warning")
        assert "this machine has" in f.message
