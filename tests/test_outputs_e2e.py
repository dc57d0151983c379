"""Outputs proven and resume, end to end on the local runtime (issue 22, items 3, 4 and 5): a
real ``rlark server``, one Worker per Run, real Ray, and for object storage a real S3 server
(SeaweedFS, tests/s3_server.py).

The run script plays RLinf's part as RLinf 0.3 lays out its files (rlinf/runners/
embodied_runner.py ``_save_checkpoint``: ``<log_path>/<experiment>/checkpoints/global_step_<N>/
actor``; resume from ``runner.resume_dir``, whose ``global_step_<N>`` gives the step): it
starts at step 1, or after the checkpoint ``$RLARK_RESUME_DIR`` names, and writes the next
checkpoint, then its metrics. RLark gives it the resume as ``runner.resume_dir=...`` in
``$RLARK_RLINF_OVERRIDES``."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from tests.s3_server import s3_server  # noqa: F401  (the fixture)
from tests.server import RlarkServer, ray_tmp_dir
from tests.test_local_mounts import job_doc, mount_root, submit, wait_done  # noqa: F401
from tests.test_local_objects import s3_mount, secret
from tests.test_local_runtime import exchange_dir

pytestmark = pytest.mark.ray

BUCKET = "rlark-resume"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # the S3 server listens on 127.0.0.1: a network the server reads outputs back from only
    # where its administrator allowed it
    srv = RlarkServer(tmp_path_factory.mktemp("rlark-home"), {
        "RLARK_RAY_TMP": ray_tmp_dir(), "RLARK_OBJECT_STORAGE_ALLOW_NETWORKS": "127.0.0.0/8"}).start()
    try:
        yield srv
    finally:
        srv.stop()


def trainer(out: str, *, stop_at: int | None = None, fail_at: int | None = None) -> str:
    """A run script that trains like RLinf would, one checkpoint per Run: at step ``stop_at``
    it writes half a checkpoint and waits to be stopped; at ``fail_at`` it writes the
    checkpoint and its metrics, then fails (exit 3)."""
    return f"""
exp={out}/exp
mkdir -p $exp
echo "OVERRIDES=[$RLARK_RLINF_OVERRIDES]"
step=1
if [ -n "$RLARK_RESUME_DIR" ]; then
  test -f "$RLARK_RESUME_DIR/actor/model.pt"
  step=$(( ${{RLARK_RESUME_DIR##*global_step_}} + 1 ))
  cp "$RLARK_RESUME_DIR/actor/model.pt" "$exp/resumed-from-$(basename $RLARK_RESUME_DIR).pt"
fi
d=$exp/checkpoints/global_step_$step/actor
mkdir -p $d
if [ "$step" = "{stop_at}" ]; then
  echo half > $d/model.pt
  echo WRITING-STEP-$step
  exec sleep 600
fi
echo weights-$step > $d/model.pt
sleep 0.05
echo "step $step" >> $exp/metrics.txt
if [ "$step" = "{fail_at}" ]; then exit 3; fi
"""


def outputs(server, ref: str) -> dict:
    done = server.cli("outputs", ref, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for_line(server, name: str, text: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        r = server.http.get(f"/api/v1/jobs/{name}/logs")
        assert r.status_code == 200, r.text
        if any(text in line for w in r.json()["workers"] for line in w["lines"]):
            return
        job = server.job(name)
        assert job["phase"] in ("Pending", "Starting", "Running"), (
            job["reason"], job["message"], job["currentRun"].get("resume"), r.json())
        assert time.monotonic() < deadline, f"{text!r} not in the log of {name} after {timeout} s"
        time.sleep(0.5)


def test_a_run_stopped_mid_checkpoint_leaves_the_earlier_one_and_resume_takes_it(
        server, s3_server, mount_root):
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    # a first object outside the Job's prefix: SeaweedFS grows the new bucket's volumes on its
    # first write, which on a loaded machine may answer InternalError to the Worker's copy
    s3.put_object(Bucket=BUCKET, Key="other/readme.txt", Body=b"not the Job's\n")
    secret(server, "s3", "accessKeyId", s3_server.access_key)
    secret(server, "s3", "secretAccessKey", s3_server.secret_key)
    ckpt = f"{mount_root}/ckpt"
    doc = job_doc("resume", [s3_mount("ckpt", f"s3://{BUCKET}/ppo", ckpt, s3_server.endpoint,
                                      "s3")], trainer(f"{ckpt}/logs", stop_at=2))
    doc["spec"]["outputs"] = [{"name": "logs", "path": f"{ckpt}/logs"}]
    r = submit(server, doc)
    assert r.status_code == 201, r.text
    job = wait_done(server, "resume")
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    step1 = "ppo/logs/exp/checkpoints/global_step_1/actor/model.pt"
    first = s3.head_object(Bucket=BUCKET, Key=step1)

    # run 1's outputs, read back from the bucket after its Worker was gone
    listed = outputs(server, "resume:1")
    [out] = listed["outputs"]
    assert out["readBack"] == {"via": "objectStorage", "at": f"s3://{BUCKET}/ppo/logs",
                               "ok": True, "why": None}
    files = {f["path"]: f for f in out["files"]}
    assert files["exp/checkpoints/global_step_1/actor/model.pt"]["sha256"] == \
        hashlib.sha256(b"weights-1\n").hexdigest()
    assert listed["resume"]["checkpoint"] == f"{ckpt}/logs/exp/checkpoints/global_step_1"
    record = server.http.get("/api/v1/jobs/resume/record", params={"run": 1}).json()
    check = next(c for c in record["checks"]["items"] if c["id"] == "outputs-readable")
    assert check["status"] == "pass", check
    assert check["evidence"] == [f"output logs ({ckpt}/logs): 2 file(s), 17 B, read back from "
                                 f"s3://{BUCKET}/ppo/logs"]
    # one file, downloaded through the server; never a path outside the output
    got = server.cli("outputs", "get", "resume:1",
                     "logs/exp/checkpoints/global_step_1/actor/model.pt", "-O", "-")
    assert got.returncode == 0 and got.stdout == "weights-1\n", got.stderr
    for bad in ("logs/../ppo/x", "logs/exp/../../secret", "nope/x"):
        refused = server.cli("outputs", "get", "resume:1", bad, "-O", "-")
        assert refused.returncode != 0 and refused.stdout == "", (bad, refused.stdout)

    # run 2 resumes from step 1, and is stopped while it writes step 2
    restarted = server.cli("restart", "resume", "--resume")
    assert restarted.returncode == 0, restarted.stderr
    wait_for_line(server, "resume", "WRITING-STEP-2")
    assert server.cli("stop", "resume").returncode == 0
    job = wait_done(server, "resume")
    assert (job["phase"], job["currentRun"]["number"]) == ("Stopped", 2)
    two = server.http.get("/api/v1/jobs/resume/record", params={"run": 2}).json()
    assert two["resume"]["fromRun"] == 1 and two["resume"]["automatic"] is False
    assert two["resume"]["checkpoint"] == f"{ckpt}/logs/exp/checkpoints/global_step_1"
    assert two["configs"]["overrides"]["resume"] == [
        f"runner.resume_dir={ckpt}/logs/exp/checkpoints/global_step_1"]
    logs = server.cli("logs", "resume", "--run", "2")
    assert f"OVERRIDES=[runner.resume_dir={ckpt}/logs/exp/checkpoints/global_step_1]" in logs.stdout
    # the stop synced out what it had, half a checkpoint included; the earlier one is intact
    assert s3.get_object(Bucket=BUCKET, Key="ppo/logs/exp/checkpoints/global_step_2/actor/"
                         "model.pt")["Body"].read() == b"half\n"
    again = s3.head_object(Bucket=BUCKET, Key=step1)
    assert (again["ETag"], again["LastModified"]) == (first["ETag"], first["LastModified"])
    assert s3.get_object(Bucket=BUCKET, Key=step1)["Body"].read() == b"weights-1\n"
    listed = outputs(server, "resume:2")
    assert listed["resume"]["step"] == 1
    assert any("global_step_2: skipped" in n for n in listed["resumeNotes"]), listed["resumeNotes"]

    # run 3 resumes from run 2's outputs: the cut-off step 2 is skipped, step 1 taken
    assert server.cli("restart", "resume", "--resume").returncode == 0
    wait_for_line(server, "resume", "WRITING-STEP-2")
    events = server.http.get("/api/v1/jobs/resume/events", params={"run": 3}).json()
    said = [e["message"] for e in events if e["reason"] == "Resuming"]
    assert said == [f"run 3 resumes from {ckpt}/logs/exp/checkpoints/global_step_1 (step 1) of "
                    "run 2"], said
    assert server.cli("stop", "resume").returncode == 0
    wait_done(server, "resume")


def test_outputs_on_a_volume_and_a_host_directory_and_an_automatic_retry_resumes(
        server, tmp_path, mount_root):
    host = exchange_dir(tmp_path / "host")
    at = str(mount_root)
    mounts = [{"name": "vol", "type": "pvc", "source": "ppo-ckpt", "mountPath": f"{at}/vol"},
              {"name": "host", "type": "hostPath", "source": str(host), "mountPath": f"{at}/host"}]
    doc = job_doc("retry", mounts, trainer(f"{at}/vol/logs", fail_at=1)
                  + f"\necho done > {at}/host/run-$RLARK_RUN_ID.txt\n")
    doc["spec"]["outputs"] = [{"name": "logs", "path": f"{at}/vol/logs"},
                              {"name": "host", "path": f"{at}/host"},
                              {"name": "lost", "path": "/tmp/lost"}]
    doc["spec"]["failurePolicy"].update(maxRestarts=1, resume=True)
    r = submit(server, doc)
    assert r.status_code == 201, r.text
    # an output on no mount is said at submit
    assert ("OutputNotOnMount", "spec.outputs[2].path") in {
        (f["code"], f["path"]) for f in r.json()["findings"]}
    deadline = time.monotonic() + 300
    while (job := server.job("retry"))["currentRun"]["number"] < 2 or job["phase"] not in (
            "Succeeded", "Failed") or not all(w["finishedAt"] for w in job["currentRun"]["workers"]):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    assert job["currentRun"]["resume"] == {
        "fromRun": 1, "automatic": True, "step": 1,
        "checkpoint": f"{at}/vol/logs/exp/checkpoints/global_step_1"}
    one = server.http.get("/api/v1/jobs/retry/record", params={"run": 1}).json()
    assert one["result"]["reason"] == "RunFailed"
    two = server.http.get("/api/v1/jobs/retry/record", params={"run": 2}).json()
    assert two["resume"]["automatic"] is True and two["resume"]["step"] == 1
    # the volume, read back where the server keeps it
    listed = outputs(server, "retry:2")
    by = {o["name"]: o for o in listed["outputs"]}
    vol = by["logs"]
    assert vol["readBack"]["via"] == "pvc" and vol["readBack"]["ok"], vol["readBack"]
    assert vol["readBack"]["at"] == str(server.home / "volumes" / "default" / "ppo-ckpt" / "logs")
    assert {f["path"] for f in vol["files"]} == {
        "exp/checkpoints/global_step_1/actor/model.pt", "exp/checkpoints/global_step_2/actor/model.pt",
        "exp/metrics.txt", "exp/resumed-from-global_step_1.pt"}
    assert [c["step"] for c in vol["checkpoints"]] == [1, 2] and listed["resume"]["step"] == 2
    assert by["host"]["readBack"]["at"] == str(host) and by["host"]["fileCount"] == 1
    assert by["lost"]["readBack"]["ok"] is False
    check = next(c for c in two["checks"]["items"] if c["id"] == "outputs-readable")
    assert check["status"] == "fail" and check["evidence"] == [
        "output lost (/tmp/lost) lies on no writable mount of role head: nothing written there "
        "outlives the Workers"]
    got = server.cli("outputs", "get", "retry:2", "logs/exp/metrics.txt", "-O", "-")
    assert got.stdout == "step 1\nstep 2\n", got.stderr
    text = server.cli("outputs", "retry:2")
    assert "read back from" in text.stdout and "checkpoint step 2" in text.stdout, text.stdout
