"""``/api/v1/volumes`` without Workers (the routes, the service, the runtime's seam): who may
list and delete, a volume an active Job mounts is kept, a bad name is a 4xx, and a runtime that
keeps no volumes (Kubernetes: the namespace's PersistentVolumeClaims) says so with a 400."""

from __future__ import annotations

import os

from rlark.server import create_app
from rlark.services.jobs import JobService
from rlark.store import Store
from tests.access import admin_token, api_client, make_user

JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: trainer}
spec:
  headRole: head
  runScript: 'true'
  roles:
    - name: head
      image: x/y:1
      mounts: [{name: c, type: pvc, source: ckpt, mountPath: /ckpt}]
"""


def test_volumes_of_a_project_on_the_local_runtime(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        jobs = JobService(store, runtime="local")
        app = create_app(jobs)
        admin = api_client(app, admin_token(store))
        viewer = api_client(app, make_user(store, "vera", role="viewer"))
        for name, size in (("ckpt", 10), ("data", 3)):
            path = rlark_home / "volumes" / "default" / name
            path.mkdir(parents=True)
            (path / "f").write_bytes(b"x" * size)
        jobs.create(JOB)  # no controller here: the Job stays Pending, which is active

        listed = viewer.get("/api/v1/volumes")
        assert listed.status_code == 200, listed.text
        assert [(v["name"], v["bytes"], v["entries"], v["usedBy"]) for v in listed.json()] == [
            ("ckpt", 10, 1, ["trainer"]), ("data", 3, 1, [])]
        assert viewer.delete("/api/v1/volumes/data").status_code == 403
        busy = admin.delete("/api/v1/volumes/ckpt")
        assert busy.status_code == 409 and "trainer" in busy.json()["detail"]["message"]
        assert (rlark_home / "volumes" / "default" / "ckpt" / "f").exists()
        bad = admin.delete("/api/v1/volumes/Not..A-Name")
        assert bad.status_code == 422 and "not a volume name" in bad.json()["detail"]["message"]
        assert admin.delete("/api/v1/volumes/nothing").status_code == 404
        gone = admin.delete("/api/v1/volumes/data")
        assert gone.status_code == 200 and gone.json()["bytes"] == 3
        assert not os.path.exists(rlark_home / "volumes" / "default" / "data")
        assert admin.get("/api/v1/volumes", params={"project": "nope"}).status_code in (403, 404)
    finally:
        store.dispose()


def test_a_runtime_without_volumes_of_its_own_says_where_they_are(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        app = create_app(JobService(store, runtime="kubernetes", namespace="rlark"))
        admin = api_client(app, admin_token(store))
        for r in (admin.get("/api/v1/volumes"), admin.delete("/api/v1/volumes/ckpt")):
            assert r.status_code == 400, r.text
            detail = r.json()["detail"]
            assert detail["code"] == "NotOnThisRuntime" and "PersistentVolumeClaim" in detail["message"]
    finally:
        store.dispose()
