"""A Job's mounts on the local runtime, end to end (issue 22): a real ``rlark server``, one
Worker per Job, real Ray. A hostPath is bound at its mountPath (read-only where asked: the
kernel refuses the write), a pvc is the project's volume, which outlives the Run, passes to the
next Run's uid, and no other project's Worker can reach (objectStorage: tests/test_local_objects.py
in copy mode, tests/test_local_fuse.py in FUSE mode).
What the Workers wrote is read back from this machine after the Run."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.server import assert_nothing_left, serve
from tests.test_local_runtime import exchange_dir

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


@pytest.fixture
def mount_root():
    """A directory for mount points that does not exist on this machine: the keeper makes
    missing mount points as empty directories of root's; removed (empty) after the test."""
    root = Path("/mnt") / f"rlark-test-{uuid.uuid4().hex[:8]}"
    yield root
    for d, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
        os.rmdir(d)


def job_doc(name: str, mounts: list[dict], run: str) -> dict:
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"headRole": "head", "terminationGracePeriodSeconds": 5,
                     "failurePolicy": {"joinTimeoutSeconds": 180},
                     "roles": [{"name": "head", "workers": 1, "image": "docker.io/rlinf/rlinf:0.3.0",
                                "resources": {"cpu": 1, "memory": "1Gi"}, "mounts": mounts}],
                     "runScript": run}}


def submit(server, doc: dict, project: str = "default"):
    return server.http.post("/api/v1/jobs", params={"project": project}, content=json.dumps(doc),
                            headers={"Content-Type": "application/json"})


def wait_done(server, name: str, project: str = "default", timeout: float = 240) -> dict:
    """The Job once its current Run has ended and every Worker is gone."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        r = server.http.get(f"/api/v1/jobs/{name}", params={"project": project})
        assert r.status_code == 200, r.text
        job = r.json()
        if job["phase"] in ("Succeeded", "Failed", "Stopped") and all(
                w["finishedAt"] for w in job["currentRun"]["workers"]):
            return job
        assert time.monotonic() < deadline, f"{name} still {job['phase']} after {timeout} s"
        time.sleep(0.5)


def test_host_path_and_pvc_mounts_are_bound_and_read_back_after_the_run(server, tmp_path, mount_root):
    out = exchange_dir(tmp_path / "out")
    ro = exchange_dir(tmp_path / "ro")  # writable by anyone: only the read-only bind stops a write
    (ro / "hello.txt").write_text("from the host\n")
    at = str(mount_root)
    mounts = [{"name": "out", "type": "hostPath", "source": str(out), "mountPath": f"{at}/out"},
              {"name": "in", "type": "hostPath", "source": str(ro), "mountPath": f"{at}/in",
               "readOnly": True},
              {"name": "ckpt", "type": "pvc", "source": "ckpt", "mountPath": f"{at}/ckpt"}]
    # each Run writes files of its own in the shared host directory (the sticky bit keeps one
    # uid from replacing another's); the volume's file is the same one in every Run
    run = (f"set -e; u=$(id -u); mkdir {at}/out/$u; cat {at}/in/hello.txt > {at}/out/$u/read.txt; "
           f"echo written-by-run > {at}/out/$u/hostpath.txt; "
           f"echo step-$u >> {at}/ckpt/model.txt; "
           f"if touch {at}/in/forbidden 2> {at}/out/$u/ro-error.txt; then echo wrote; "
           f"else echo refused; fi > {at}/out/$u/ro-result.txt")
    r = submit(server, job_doc("mnt", mounts, run))
    assert r.status_code == 201, r.text
    assert [f["code"] for f in r.json()["findings"] if f["severity"] == "error"] == []
    job = wait_done(server, "mnt")
    assert (job["phase"], job["reason"]) == ("Succeeded", "Completed"), job
    assert_nothing_left(job)

    # read back on this machine after the Run: the hostPath's source, and the project's volume
    [uid1] = [int(p.name) for p in out.iterdir()]
    wrote = out / str(uid1)
    assert (wrote / "read.txt").read_text() == "from the host\n"
    assert (wrote / "hostpath.txt").read_text() == "written-by-run\n"
    assert (wrote / "ro-result.txt").read_text() == "refused\n"
    assert "Read-only file system" in (wrote / "ro-error.txt").read_text()
    assert not (ro / "forbidden").exists()
    volume = server.home / "volumes" / "default" / "ckpt"
    assert uid1 != 0 and (volume / "model.txt").read_text() == f"step-{uid1}\n"
    assert (volume / "model.txt").stat().st_uid == uid1

    listed = server.http.get("/api/v1/volumes").json()
    assert [(v["name"], v["bytes"], v["usedBy"]) for v in listed] == [
        ("ckpt", len(f"step-{uid1}\n"), ["mnt"])]
    cli = server.cli("volume", "list")
    assert cli.returncode == 0 and "ckpt" in cli.stdout and "mnt" in cli.stdout, cli.stderr

    # the next Run has a uid of its own, and is given what the earlier one wrote
    assert server.cli("restart", "mnt").returncode == 0
    job = wait_done(server, "mnt")
    assert (job["phase"], job["currentRun"]["number"]) == ("Succeeded", 2), job
    [uid2] = [int(p.name) for p in out.iterdir() if p.name != str(uid1)]
    assert (volume / "model.txt").read_text() == f"step-{uid1}\nstep-{uid2}\n"

    # another project's Job names a volume of the same name: its own, empty; the first
    # project's is not reachable at its host path either ($RLARK_HOME is covered)
    assert server.http.post("/api/v1/projects", json={"name": "other"}).status_code == 201
    out2 = exchange_dir(tmp_path / "out2")
    mounts2 = [{"name": "out", "type": "hostPath", "source": str(out2), "mountPath": f"{at}/out"},
               {"name": "ckpt", "type": "pvc", "source": "ckpt", "mountPath": f"{at}/ckpt"}]
    run2 = (f"ls -A {at}/ckpt > {at}/out/ls.txt; "
            f"cat {volume}/model.txt > {at}/out/theirs.txt 2>&1 || true")
    r = submit(server, job_doc("peek", mounts2, run2), project="other")
    assert r.status_code == 201, r.text
    job = wait_done(server, "peek", project="other")
    assert job["phase"] == "Succeeded", job
    assert (out2 / "ls.txt").read_text() == ""
    assert "step-" not in (out2 / "theirs.txt").read_text()
    assert (server.home / "volumes" / "other" / "ckpt").is_dir()
    assert (volume / "model.txt").read_text() == f"step-{uid1}\nstep-{uid2}\n"

    # deleted: gone from the machine and the list; the other project's is still there
    deleted = server.cli("volume", "delete", "ckpt", "-y")
    assert deleted.returncode == 0 and "deleted volume ckpt" in deleted.stdout, deleted.stderr
    assert not volume.exists()
    assert server.http.get("/api/v1/volumes").json() == []
    assert [v["name"] for v in server.http.get("/api/v1/volumes",
                                               params={"project": "other"}).json()] == ["ckpt"]
