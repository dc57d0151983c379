"""objectStorage mounts in copy mode on the test bed's real node, against a real S3 server
(issue 22, items 2 and 5): a real ``rlark server --runtime kubernetes``, Pods that really run,
and SeaweedFS (tests/s3_server.py) listening on the real node's address, which its Pods reach.

* a Job reads a dataset from a bucket (copied in by the Pod's init container, read-only to the
  Worker) and writes a checkpoint to another prefix (copied out by the Worker's keeper when its
  run script ended); once the Pod is gone the test reads the checkpoint back from the bucket,
  and the Worker's environment never held the keys;
* wrong keys fail the Run (``MountFailed``, the mount and the S3 code) before its run script;
* a Run stopped while it writes its second checkpoint leaves the first intact in the bucket,
  and ``rlark restart --resume`` starts from it;
* a run script that plants code in the image's Python (a ``.pth`` file that would answer for the
  copier) cannot forge the copy out: the copy out's code was loaded before the run script ran.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.k8s_real import WAIT, RealRlark, one_worker
from tests.k8s_testbed import setup_timeout
from tests.s3_server import S3ServerUnavailable, _required, start_s3_server
from tests.test_outputs_e2e import trainer

kubernetes = pytest.importorskip("kubernetes")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(setup_timeout(real_node=True) + 1500)]

BUCKET = "rlark-real-node"


@pytest.fixture(scope="module")
def real(k8s_real_node, tmp_path_factory):
    # the server reads outputs back from the bucket only on networks an administrator allowed:
    # the real node's bridge (10.250.<idx>.0/24, scripts/k8s-testbed.d/node-run.sh)
    # (and lets a role run as root: the last test's run script writes into the image's Python)
    rlark = RealRlark(k8s_real_node, tmp_path_factory.mktemp("real-objects"),
                      env={"RLARK_OBJECT_STORAGE_ALLOW_NETWORKS": "10.250.0.0/16",
                           "RLARK_K8S_ALLOW_ROOT": "1"})
    try:
        yield rlark
    finally:
        rlark.close()


@pytest.fixture(scope="module")
def s3(real):
    """A SeaweedFS server on the real node's address (the Pods' way to this machine), with one
    bucket, :data:`BUCKET`, which every test writes under a prefix of its own."""
    try:
        server = start_s3_server(real.node_ip())
    except S3ServerUnavailable as exc:
        if _required():
            pytest.fail(f"S3 server unavailable: {exc}", pytrace=False)
        pytest.skip(f"S3 server unavailable: {exc}")
    try:
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()


def secret(real: RealRlark, name: str, key: str, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rlark.cli", "secret", "set", name, key],
                          env=real.server.env, input=value + "\n", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def s3_mount(name: str, source: str, path: str, endpoint: str, secret_name: str,
             mode: str | None = None, **extra) -> dict:
    """An objectStorage mount with no CSI volume: mode auto (or ``mode``) is copy on Kubernetes."""
    return {"name": name, "type": "objectStorage", "source": source, "mountPath": path,
            "objectStorage": {"endpoint": endpoint, "secret": secret_name,
                              **({"mode": mode} if mode else {})}, **extra}


def test_a_pod_reads_a_dataset_from_a_bucket_and_its_checkpoint_is_read_back_after_it(real, s3):
    client = s3.client()
    client.put_object(Bucket=BUCKET, Key="datasets/v1/train.txt", Body=b"row-1\nrow-2\n")
    client.put_object(Bucket=BUCKET, Key="checkpoints/old.txt", Body=b"an earlier Run's\n")
    secret(real, "s3", "accessKeyId", s3.access_key)
    secret(real, "s3", "secretAccessKey", s3.secret_key)
    mounts = [s3_mount("data", f"s3://{BUCKET}/datasets/v1", "/data", s3.endpoint, "s3",
                       readOnly=True),
              s3_mount("ckpt", f"s3://{BUCKET}/checkpoints", "/ckpt", s3.endpoint, "s3",
                       mode="copy")]
    run = ("set -e; cat /data/train.txt > /ckpt/seen.txt; "
           "if echo x > /data/new.txt; then echo WROTE-READ-ONLY; exit 9; fi; "
           "test -f /ckpt/old.txt; mkdir -p /ckpt/global_step_1; "
           "echo weights > /ckpt/global_step_1/model.pt; env > /ckpt/env.txt")
    doc = one_worker("s3-copy", real.tb.image, run, mounts=mounts)
    real.submit(doc)
    job = real.wait_phase("s3-copy", "Succeeded", "Failed", timeout=WAIT)
    assert job["phase"] == "Succeeded", (job["reason"], job["message"],
                                         real.logs("s3-copy", lifecycle="true"))
    job = real.wait_ended("s3-copy")

    def read(key: str) -> bytes:
        return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    # the Pod is gone: the bucket holds what it wrote, read back with an S3 client
    assert read("checkpoints/global_step_1/model.pt") == b"weights\n"
    assert read("checkpoints/seen.txt") == b"row-1\nrow-2\n"
    keys = {o["Key"] for p in ("datasets/", "checkpoints/")
            for o in client.list_objects_v2(Bucket=BUCKET, Prefix=p)["Contents"]}
    assert keys == {"datasets/v1/train.txt", "checkpoints/old.txt", "checkpoints/seen.txt",
                    "checkpoints/env.txt", "checkpoints/global_step_1/model.pt"}
    env = read("checkpoints/env.txt").decode()
    assert s3.secret_key not in env and s3.access_key not in env and "RLARK_KEEPER" not in env

    # what was copied, per mount: the init container's copy in, the keeper's copy out
    [worker] = job["currentRun"]["workers"]
    stats = {m["name"]: m for m in worker["mounts"]}
    assert (stats["data"]["mode"], stats["data"]["inFiles"], stats["data"]["inBytes"]) == ("copy", 1, 12)
    assert "no CSI volume" in stats["data"]["why"] and "outBytes" not in stats["data"]
    assert (stats["ckpt"]["inFiles"], stats["ckpt"]["outFiles"]) == (1, 3)
    record = real.record("s3-copy")
    assert s3.secret_key not in json.dumps(record)
    described = real.server.cli("describe", "s3-copy")
    assert described.returncode == 0, described.stderr
    assert f"s3://{BUCKET}/checkpoints" in described.stdout and "(3 files)" in described.stdout


def test_wrong_keys_fail_the_pod_before_its_run_script_naming_the_mount_and_the_s3_code(real, s3):
    secret(real, "s3-wrong", "accessKeyId", "RLARKNOSUCHKEY0000")
    secret(real, "s3-wrong", "secretAccessKey", "not-the-secret")
    doc = one_worker("s3-wrong", real.tb.image, "echo THE-RUN-SCRIPT-RAN",
                     mounts=[s3_mount("data", f"s3://{BUCKET}/x", "/data", s3.endpoint,
                                      "s3-wrong")])
    real.submit(doc)
    job = real.wait_phase("s3-wrong", "Failed", "Succeeded", timeout=WAIT)
    assert (job["phase"], job["reason"]) == ("Failed", "MountFailed"), job["message"]
    assert f"mount 'data' (s3://{BUCKET}/x): copy in failed: InvalidAccessKeyId" \
        in job["message"], job["message"]
    assert "not-the-secret" not in job["message"] and job["currentRun"]["runningAt"] is None
    logs = real.server.cli("logs", "s3-wrong")
    assert "THE-RUN-SCRIPT-RAN" not in logs.stdout and "not-the-secret" not in logs.stdout
    real.wait_ended("s3-wrong")


def test_a_run_stopped_mid_checkpoint_leaves_the_first_in_the_bucket_and_resume_takes_it(real, s3):
    client = s3.client()
    secret(real, "s3r", "accessKeyId", s3.access_key)
    secret(real, "s3r", "secretAccessKey", s3.secret_key)
    doc = one_worker("resume", real.tb.image, trainer("/ckpt/logs", stop_at=2),
                     mounts=[s3_mount("ckpt", f"s3://{BUCKET}/ppo", "/ckpt", s3.endpoint,
                                      "s3r")])
    # time for the keeper's copy out after a stop, before the kubelet's SIGKILL
    doc["spec"]["terminationGracePeriodSeconds"] = 15
    doc["spec"]["outputs"] = [{"name": "logs", "path": "/ckpt/logs"}]
    real.submit(doc)
    job = real.wait_phase("resume", "Succeeded", "Failed", timeout=WAIT)
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    real.wait_ended("resume")
    step1 = "ppo/logs/exp/checkpoints/global_step_1/actor/model.pt"
    first = client.head_object(Bucket=BUCKET, Key=step1)
    listed = json.loads(real.server.cli("outputs", "resume:1", "-o", "json").stdout)
    assert listed["outputs"][0]["readBack"]["ok"] is True, listed
    assert listed["resume"]["checkpoint"] == "/ckpt/logs/exp/checkpoints/global_step_1"

    # run 2 resumes from step 1 and is stopped while it writes step 2
    assert real.server.cli("restart", "resume", "--resume").returncode == 0

    def writing() -> bool:
        lines = real.logs("resume")
        job = real.job("resume")
        assert job["phase"] in ("Pending", "Starting", "Running"), (job["reason"], job["message"])
        return any("WRITING-STEP-2" in line for ls in lines.values() for line in ls)

    from tests.k8s_real import wait_until
    wait_until("run 2 to write half of step 2", writing, timeout=WAIT)
    assert real.server.cli("stop", "resume").returncode == 0
    job = real.wait_ended("resume")
    assert (job["phase"], job["currentRun"]["number"]) == ("Stopped", 2)
    logs = real.server.cli("logs", "resume", "--run", "2").stdout
    assert "OVERRIDES=[runner.resume_dir=/ckpt/logs/exp/checkpoints/global_step_1]" in logs
    # the stop copied out what the Pod had; step 1 in the bucket is as run 1 left it
    assert client.get_object(Bucket=BUCKET, Key="ppo/logs/exp/checkpoints/global_step_2/"
                             "actor/model.pt")["Body"].read() == b"half\n"
    again = client.head_object(Bucket=BUCKET, Key=step1)
    assert (again["ETag"], again["LastModified"]) == (first["ETag"], first["LastModified"])
    listed = json.loads(real.server.cli("outputs", "resume:2", "-o", "json").stdout)
    assert listed["resume"]["step"] == 1, listed


#: a .pth file runs in every Python that starts after it is there: this one would answer for a
#: copier started after the run script (a forged success, nothing sent)
FORGED = ('import os, sys; sys.stdout.write(\'{"ok": true, "files": 99, "bytes": 99}\\n\'); '
          'sys.stdout.flush(); os._exit(0)')


def test_a_run_script_that_plants_code_in_the_images_python_cannot_forge_the_copy_out(real, s3):
    client = s3.client()
    secret(real, "s3f", "accessKeyId", s3.access_key)
    secret(real, "s3f", "secretAccessKey", s3.secret_key)
    run = ("set -e; site=$(python -c 'import site; print(site.getsitepackages()[0])'); "
           f"printf '%s\\n' {json.dumps(FORGED)} > $site/zz_forge.pth; "
           "python -c 'print(1)' | grep -q '\"files\": 99' && echo PLANTED; "
           "mkdir -p /out/step_1 && echo weights > /out/step_1/model.pt")
    doc = one_worker("forge", real.tb.image, run, kubernetes={"runAsRoot": True},
                     mounts=[s3_mount("out", f"s3://{BUCKET}/forge", "/out", s3.endpoint, "s3f",
                                      mode="copy")])
    real.submit(doc)
    job = real.wait_phase("forge", "Succeeded", "Failed", timeout=WAIT)
    logs = real.logs("forge")["forge-head-0"]
    assert any("PLANTED" in line for line in logs), logs[-20:]  # the trap was there
    assert job["phase"] == "Succeeded", (job["reason"], job["message"], logs[-20:])
    job = real.wait_ended("forge")
    # the copy out really sent the file, and says so truly
    assert client.get_object(Bucket=BUCKET, Key="forge/step_1/model.pt")["Body"].read() == b"weights\n"
    [worker] = job["currentRun"]["workers"]
    [out] = [m for m in worker["mounts"] if m["name"] == "out"]
    assert (out["outFiles"], out["outBytes"]) == (1, 8), out
