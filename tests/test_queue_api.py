"""The queue view and a project's queue (issue 24, items 4 and 6), through the API and console
``rlark server`` serves, on a real SQLite store, with no controller (submitted Runs stay Pending):
``GET /api/v1/queue`` lists the Runs not admitted yet with their place, priority, requests and
waiting time, the same on both runtimes; a project names its queue where the runtime has queues
(Kubernetes with Kueue), and is refused one where it has not (the local runtime).
"""

from __future__ import annotations

import pytest

from tests.access import admin_token, api_client, make_user


def job_doc(name: str, priority: int = 0, gpu: int = 0) -> dict:
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"headRole": "head", "runScript": "python train.py", "priority": priority,
                     "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                                "resources": {"cpu": 1, "memory": "1Gi", "gpu": gpu}},
                               {"name": "pool", "workers": 2, "image": "docker.io/rlinf/rlinf:0.3.0",
                                "resources": {"cpu": 2, "memory": "2Gi", "gpu": gpu}}]}}


@pytest.fixture
def k8s_app_store(rlark_home):
    """``(app, store)`` as :func:`tests.conftest.app_store`, for a Kubernetes server in namespace
    ``rlark`` whose projects wait in LocalQueue ``shared`` unless they name another, priority
    1000 mapped to WorkloadPriorityClass ``urgent`` (``--k8s-priority-class urgent=1000``; no
    cluster is asked anything: no controller, no capacity inventory)."""
    from rlark.runtimes.kubernetes.profile import KubernetesProfile
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests import db_templates

    url = f"sqlite:///{rlark_home / 'rlark.db'}"
    db_templates.fill(url)
    st = Store(url)
    profile = KubernetesProfile(default_queue="shared", priority_classes={"urgent": 1000})
    yield create_app(JobService(st, runtime="kubernetes", namespace="rlark", profile=profile)), st
    st.dispose()


def test_the_local_queue_lists_waiting_runs_by_priority_then_age_with_their_place(app_store):
    app, store = app_store
    admin = api_client(app, admin_token(store))
    member = api_client(app, make_user(store, "mia", "default", "member"))
    stranger = api_client(app, make_user(store, "otto", "other", "member"))
    for name, priority in (("old", 0), ("urgent", 5), ("young", 0)):
        assert admin.post("/api/v1/jobs", json=job_doc(name, priority)).status_code == 201
    items = admin.get("/api/v1/queue").json()["items"]
    assert [(i["job"], i["position"], i["priority"]) for i in items] == [
        ("urgent", 1, 5), ("old", 2, 0), ("young", 3, 0)]
    first = items[0]
    assert first["queue"] == "this machine's queue" and first["project"] == "default"
    assert first["run"] == 1 and first["workers"] == 3
    assert first["requests"] == {"cpu": 5.0, "memory": 5 * 1024**3, "gpu": 0}
    assert first["waitingSeconds"] >= 0
    # a member sees its project's Runs; someone of another project none of them
    assert [i["job"] for i in member.get("/api/v1/queue").json()["items"]] == ["urgent", "old", "young"]
    assert stranger.get("/api/v1/queue").json() == {"items": []}
    # a stopped Run is not waiting any more
    assert admin.post("/api/v1/jobs/urgent/stop").status_code == 200
    assert [(i["job"], i["position"]) for i in admin.get("/api/v1/queue").json()["items"]] == [
        ("old", 1), ("young", 2)]
    # the console's Queue page lists the same
    page = admin.get("/queue")
    assert page.status_code == 200 and 'data-job="old"' in page.text and 'data-position="1"' in page.text


def test_a_project_may_name_no_queue_where_the_runtime_has_none(app_store):
    app, store = app_store
    admin = api_client(app, admin_token(store))
    r = admin.post("/api/v1/projects", json={"name": "vision", "queue": "team"})
    assert r.status_code == 422, r.text
    said = r.json()["detail"]
    assert said["code"] == "Invalid" and "local runtime" in said["message"], said
    assert "Kueue LocalQueue" in said["message"]
    assert admin.post("/api/v1/projects", json={"name": "vision"}).json()["queue"] is None
    assert admin.put("/api/v1/projects/vision/queue", json={"queue": "team"}).status_code == 422


def test_a_projects_queue_on_kubernetes_its_own_or_the_servers_or_none(k8s_app_store):
    app, store = k8s_app_store
    admin = api_client(app, admin_token(store))
    member = api_client(app, make_user(store, "mia", "default", "member"))
    p = admin.post("/api/v1/projects", json={"name": "vision", "queue": "team-vision"}).json()
    assert (p["queue"], p["queueSet"]) == ("team-vision", "team-vision")
    p = admin.get("/api/v1/projects/default").json()
    assert (p["queue"], p["queueSet"]) == ("shared", None)  # the server's (--k8s-queue)
    p = admin.put("/api/v1/projects/vision/queue", json={"queue": "none"}).json()
    assert (p["queue"], p["queueSet"]) == (None, "none")
    p = admin.put("/api/v1/projects/vision/queue", json={"queue": None}).json()
    assert (p["queue"], p["queueSet"]) == ("shared", None)
    r = admin.put("/api/v1/projects/vision/queue", json={"queue": "Team_B"})
    assert r.status_code == 422 and "not a Kueue LocalQueue name" in r.json()["detail"]["message"], r.text
    assert member.put("/api/v1/projects/default/queue", json={"queue": "x"}).status_code == 403
    audit = [(e["action"], e["detail"]) for e in admin.get("/api/v1/audit").json()["items"]]
    assert [d for a, d in audit if a == "project.queue"] == ["the server's", "none"]  # newest first
    assert ("project.create", "namespace rlark-vision, queue team-vision") in audit
    # a Run not launched yet is shown in the queue its project names
    assert admin.post("/api/v1/jobs", json=job_doc("ppo", gpu=1)).status_code == 201
    [item] = admin.get("/api/v1/queue").json()["items"]
    assert (item["queue"], item["position"], item["requests"]["gpu"]) == ("shared", None, 3)
    # the console's project page shows it and offers the field to site administrators
    page = admin.get("/admin/projects")
    assert 'data-queue="shared"' in page.text and 'data-action="set-queue"' in page.text


def test_a_priority_a_queue_cannot_map_is_refused_at_submit_and_at_start(k8s_app_store):
    """In a Kueue LocalQueue a priority is a WorkloadPriorityClass: a Job whose spec.priority the
    server maps to none is refused at submit (422, the field, the value, the classes there are),
    not left to fail at launch; a project without a queue takes any priority; a Job stored then
    is refused at start once its project waits in a queue."""
    app, store = k8s_app_store
    admin = api_client(app, admin_token(store))
    r = admin.post("/api/v1/jobs", json=job_doc("odd", priority=5))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    [found] = [f for f in detail["findings"] if f["severity"] == "error"]
    assert (found["code"], found["path"]) == ("PriorityUnmapped", "spec.priority"), found
    assert found["message"] == (
        "spec.priority = 5 names no WorkloadPriorityClass this server knows (rlark server "
        "--k8s-priority-class NAME=VALUE): 1000 (urgent); the Run would wait in Kueue LocalQueue "
        "shared, where a priority is a WorkloadPriorityClass"), found["message"]
    assert "--k8s-priority-class" in found["hint"]
    assert admin.get("/api/v1/jobs").json()["items"] == []  # nothing stored
    for name, priority in (("urgent", 1000), ("plain", 0)):  # a class's value; Kueue's default
        assert admin.post("/api/v1/jobs", json=job_doc(name, priority=priority)).status_code == 201
    # a project in no queue: the priority orders nothing on the cluster, so nothing to map
    assert admin.post("/api/v1/projects", json={"name": "vision", "queue": "none"}).status_code == 201
    r = admin.post("/api/v1/jobs", json=job_doc("odd", priority=5), params={"project": "vision"})
    assert r.status_code == 201, r.text
    assert admin.post("/api/v1/jobs/odd/stop", params={"project": "vision"}).status_code == 200
    # ... until it waits in one: its next Run is refused before anything starts
    assert admin.put("/api/v1/projects/vision/queue", json={"queue": "team-v"}).status_code == 200
    for verb in ("start", "restart"):
        r = admin.post(f"/api/v1/jobs/odd/{verb}", params={"project": "vision"})
        assert r.status_code == 422, (verb, r.text)
        codes = [f["code"] for f in r.json()["detail"]["findings"]]
        assert codes == ["PriorityUnmapped"], (verb, codes)
        assert "Kueue LocalQueue team-v" in r.json()["detail"]["findings"][0]["message"]


def test_rlark_queue_and_project_set_queue_on_the_command_line(rlark_home):
    """``rlark queue`` lists the waiting Runs (text and JSON); ``rlark project create --queue``
    and ``rlark project set-queue`` on a server whose runtime has queues, and their refusal
    where it has none. The real ``rlark`` process against the API ``rlark server`` serves (no
    controller: Runs stay Pending)."""
    import json
    import os
    import subprocess
    import sys

    from rlark.runtimes.kubernetes.profile import KubernetesProfile
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests import db_templates
    from tests.server import ThreadedServer

    def rlark(*args: str, url: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("RLARK_TOKEN", "RLARK_PROJECT")}
        env.update(RLARK_HOME=str(rlark_home), RLARK_SERVER=url, COLUMNS="250")
        proc = subprocess.run([sys.executable, "-m", "rlark.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        return proc

    for runtime, kw in (("local", {}), ("kubernetes", {"namespace": "rlark", "profile": KubernetesProfile(
            default_queue="shared", priority_classes={"p3": 3})})):
        url = f"sqlite:///{rlark_home / f'{runtime}.db'}"
        db_templates.fill(url)
        store = Store(url)
        srv = ThreadedServer(JobService(store, runtime=runtime, **kw)).start()
        try:
            assert rlark("queue", url=srv.url).stdout.strip() == "no Run is waiting"
            srv.app.state.jobs.create(job_doc("ppo", 3))
            out = rlark("queue", url=srv.url).stdout
            header, row = (line.strip() for line in out.strip().splitlines()[:2])
            assert header.split() == ["QUEUE", "POS", "PRIORITY", "PROJECT", "JOB", "RUN",
                                      "REQUESTS", "WAITING", "WAITS", "FOR"]
            if runtime == "local":
                assert row.startswith("this machine's queue  1    3 "), row
            else:
                assert row.startswith("shared  -    3 "), row
            assert "3 Workers: 5 CPUs, 5Gi" in row, row
            [item] = json.loads(rlark("queue", "-o", "json", url=srv.url).stdout)["items"]
            assert (item["job"], item["priority"]) == ("ppo", 3)
            made = rlark("project", "create", "vision", "--queue", "team-v", url=srv.url)
            ours = rlark("project", "set-queue", "default", "none", url=srv.url)
            if runtime == "local":
                assert made.returncode != 0 and "local runtime" in made.stderr, made.stderr
                assert ours.returncode != 0 and "local runtime" in ours.stderr, ours.stderr
            else:
                assert made.returncode == 0, made.stderr
                assert "project vision created (namespace rlark-vision, queue team-v)" in made.stdout
                assert ours.stdout.strip() == "project default: new Runs wait in no queue", ours.stdout
                back = rlark("project", "set-queue", "default", "default", url=srv.url)
                assert back.stdout.strip() == ("project default: new Runs wait in queue shared (the "
                                               "server's setting)"), back.stdout
                got = rlark("project", "get", "vision", url=srv.url).stdout
                assert "Queue:      team-v" in got, got
        finally:
            srv.stop()
            store.dispose()
