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
    ``rlark`` whose projects wait in LocalQueue ``shared`` unless they name another (no cluster
    is asked anything: no controller, no capacity inventory)."""
    from rlark.runtimes.kubernetes.profile import KubernetesProfile
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests import db_templates

    url = f"sqlite:///{rlark_home / 'rlark.db'}"
    db_templates.fill(url)
    st = Store(url)
    profile = KubernetesProfile(default_queue="shared")
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
