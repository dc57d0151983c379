"""objectStorage mounts on the local runtime in copy mode, end to end (issue 22): a real
``rlark server``, one Worker per Job, real Ray, and a real S3 server (SeaweedFS,
tests/s3_server.py). A Job reads a dataset from a bucket at its mountPath (read-only there) and
writes a checkpoint under another mount; once the Worker is gone the checkpoint is read back
from the bucket with an S3 client. Wrong credentials fail the Run (``MountFailed``, naming the
mount and the S3 error code) before the run script starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.s3_server import s3_server  # noqa: F401  (the fixture)
from tests.server import serve
from tests.test_local_mounts import job_doc, mount_root, submit, wait_done  # noqa: F401

pytestmark = pytest.mark.ray

BUCKET = "rlark-data"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


def secret(server, name: str, key: str, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rlark.cli", "secret", "set", name, key],
                          env=server.env, input=value + "\n", capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def s3_mount(name: str, source: str, path: str, endpoint: str, secret_name: str,
             mode: str | None = "copy", **extra) -> dict:
    """An objectStorage mount; copy mode unless ``mode`` says otherwise (None: the default,
    auto, which is FUSE on a server with s3fs: tests/test_local_fuse.py)."""
    return {"name": name, "type": "objectStorage", "source": source, "mountPath": path,
            "objectStorage": {"endpoint": endpoint, "secret": secret_name,
                              **({"mode": mode} if mode else {})}, **extra}


def test_a_job_reads_a_dataset_from_a_bucket_and_its_checkpoint_is_read_back_after_it(
        server, s3_server, mount_root):
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="datasets/v1/train.txt", Body=b"row-1\nrow-2\n")
    s3.put_object(Bucket=BUCKET, Key="datasets/v1/sub/extra.txt", Body=b"row-3\n")
    s3.put_object(Bucket=BUCKET, Key="checkpoints/old.txt", Body=b"an earlier Run's\n")
    secret(server, "s3", "accessKeyId", s3_server.access_key)
    secret(server, "s3", "secretAccessKey", s3_server.secret_key)
    data, ckpt = f"{mount_root}/data", f"{mount_root}/ckpt"
    mounts = [s3_mount("data", f"s3://{BUCKET}/datasets/v1", data, s3_server.endpoint, "s3",
                       readOnly=True),
              s3_mount("ckpt", f"s3://{BUCKET}/checkpoints", ckpt, s3_server.endpoint, "s3")]
    # reads the dataset, cannot write there (read-only), writes a checkpoint and what its
    # environment holds (the credentials must not be in it), and keeps the earlier checkpoint
    run = (f"set -e; cat {data}/train.txt {data}/sub/extra.txt > {ckpt}/seen.txt; "
           f"if echo x > {data}/new.txt; then echo WROTE-READ-ONLY; exit 9; fi; "
           f"test -f {ckpt}/old.txt; mkdir -p {ckpt}/global_step_1; "
           f"echo weights > {ckpt}/global_step_1/model.pt; env > {ckpt}/env.txt")
    r = submit(server, job_doc("s3-copy", mounts, run))
    assert r.status_code == 201, r.text
    job = wait_done(server, "s3-copy")
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])

    # the Worker is gone: the bucket holds the checkpoint, read back with the S3 client
    def read(key: str) -> bytes:
        return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    assert read("checkpoints/global_step_1/model.pt") == b"weights\n"
    assert read("checkpoints/seen.txt") == b"row-1\nrow-2\nrow-3\n"
    # copy out sends what changed: the earlier checkpoint is as it was, nothing of the
    # read-only dataset was written back
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert keys == {"datasets/v1/train.txt", "datasets/v1/sub/extra.txt", "checkpoints/old.txt",
                    "checkpoints/seen.txt", "checkpoints/env.txt",
                    "checkpoints/global_step_1/model.pt"}
    env = read("checkpoints/env.txt").decode()
    assert s3_server.secret_key not in env and s3_server.access_key not in env
    assert "RLARK_KEEPER" not in env

    # what was copied, per Worker and mount: the API and `rlark describe`
    [worker] = job["currentRun"]["workers"]
    stats = {m["name"]: m for m in worker["mounts"]}
    assert stats["data"]["inFiles"] == 2 and stats["data"]["inBytes"] == 18
    assert "outBytes" not in stats["data"]
    assert stats["ckpt"]["inFiles"] == 1 and stats["ckpt"]["outFiles"] == 3
    record = server.http.get("/api/v1/jobs/s3-copy/record")
    assert record.status_code == 200, record.text
    copies = {m["name"]: m.get("copies") for m in record.json()["mounts"]}
    assert copies["ckpt"] == [{"worker": worker["name"], **{
        k: v for k, v in stats["ckpt"].items() if k != "name"}}]
    assert s3_server.secret_key not in record.text and s3_server.access_key not in record.text
    described = server.cli("describe", "s3-copy")
    assert described.returncode == 0, described.stderr
    assert "Mounts" in described.stdout and f"s3://{BUCKET}/checkpoints" in described.stdout
    assert "copy" in described.stdout and "(3 files)" in described.stdout
    assert s3_server.secret_key not in described.stdout


def test_wrong_credentials_fail_the_run_before_its_run_script(server, s3_server, mount_root):
    s3_server.client().create_bucket(Bucket="rlark-wrong")
    secret(server, "s3-wrong", "accessKeyId", "RLARKNOSUCHKEY0000")
    secret(server, "s3-wrong", "secretAccessKey", "not-the-secret")
    mounts = [s3_mount("data", "s3://rlark-wrong/x", f"{mount_root}/data", s3_server.endpoint,
                       "s3-wrong")]
    # a secret the project does not have: refused at submit, naming the field (no Run)
    unknown = submit(server, job_doc("s3-unknown", [{**mounts[0], "objectStorage": {
        "endpoint": s3_server.endpoint, "secret": "no-such-secret", "mode": "copy"}}], "true"))
    assert unknown.status_code == 422, unknown.text
    assert [(f["code"], f["path"]) for f in unknown.json()["detail"]["findings"]] == [
        ("SecretNotFound", "spec.roles[0].mounts[0].objectStorage.secret")]
    r = submit(server, job_doc("s3-wrong", mounts, "echo THE-RUN-SCRIPT-RAN"))
    assert r.status_code == 201, r.text
    # the secret's keys say which Jobs use them
    keys = server.http.get("/api/v1/secrets/s3-wrong").json()["keys"]
    assert {k["key"]: k["usedBy"] for k in keys} == {"accessKeyId": ["s3-wrong"],
                                                    "secretAccessKey": ["s3-wrong"]}
    job = wait_done(server, "s3-wrong")
    assert (job["phase"], job["reason"]) == ("Failed", "MountFailed"), job["message"]
    assert "mount 'data' (s3://rlark-wrong/x)" in job["message"]
    assert "InvalidAccessKeyId" in job["message"], job["message"]
    assert "not-the-secret" not in job["message"]
    assert job["currentRun"]["runningAt"] is None
    logs = server.cli("logs", "s3-wrong")
    assert "THE-RUN-SCRIPT-RAN" not in logs.stdout and "not-the-secret" not in logs.stdout
