"""objectStorage mounts on the local runtime in FUSE mode, end to end (issue 22): a real
``rlark server``, one Worker per Job, real Ray, Debian's s3fs and a real S3 server (SeaweedFS,
tests/s3_server.py). A Job reads a dataset through an s3fs mount (read-only there) and writes a
checkpoint through another; once the Worker is gone the checkpoint is read back from the bucket
and no s3fs is left. Wrong credentials fail the Run (``MountFailed``, with s3fs's own words)
before the run script starts. A server without s3fs refuses ``mode: fuse`` at submit and runs
``auto`` in copy mode, saying so in the record."""

from __future__ import annotations

import os
import shutil

import psutil
import pytest

from tests.s3_server import s3_server  # noqa: F401  (the fixture)
from tests.server import RlarkServer, assert_nothing_left, ray_tmp_dir, serve
from tests.test_local_mounts import job_doc, mount_root, submit, wait_done  # noqa: F401
from tests.test_local_objects import s3_mount, secret

pytestmark = pytest.mark.ray

#: one bucket for the module, a prefix per test: SeaweedFS gives each bucket volumes of its
#: own, and the test server has few (tests/s3_server.py)
BUCKET = "rlark-fuse"


def bucket(s3) -> str:
    """:data:`BUCKET`, made by the first test that needs it."""
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    except s3.exceptions.BucketAlreadyExists:
        pass
    return BUCKET


def _need_fuse() -> None:
    """FUSE mode needs /dev/fuse and s3fs (scripts/test installs it): fails under CI, skips
    elsewhere when they are missing."""
    why = None if os.path.exists("/dev/fuse") else "no /dev/fuse"
    why = why or (None if shutil.which("s3fs") else "no s3fs (apt-get install s3fs)")
    if why:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    _need_fuse()
    yield from serve(tmp_path_factory.mktemp("rlark-home"))


def s3fs_left(path: str) -> list[str]:
    """s3fs processes of this machine that mount something below ``path``."""
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if p.info.get("name") == "s3fs" and any(a.startswith(path) for a in cmd):
            out.append(f"{p.pid} {' '.join(cmd)[:200]}")
    return out


def test_a_job_reads_and_writes_a_bucket_through_fuse_and_its_checkpoint_outlives_it(
        server, s3_server, mount_root):
    s3 = s3_server.client()
    bucket(s3)
    s3.put_object(Bucket=BUCKET, Key="datasets/v1/train.txt", Body=b"row-1\nrow-2\n")
    s3.put_object(Bucket=BUCKET, Key="datasets/v1/sub/extra.txt", Body=b"row-3\n")
    s3.put_object(Bucket=BUCKET, Key="checkpoints/old.txt", Body=b"an earlier Run's\n")
    secret(server, "s3", "accessKeyId", s3_server.access_key)
    secret(server, "s3", "secretAccessKey", s3_server.secret_key)
    data, ckpt = f"{mount_root}/data", f"{mount_root}/ckpt"
    # the dataset in the default mode (auto: FUSE on this server), the checkpoints asked for
    mounts = [s3_mount("data", f"s3://{BUCKET}/datasets/v1", data, s3_server.endpoint, "s3",
                       mode=None, readOnly=True),
              s3_mount("ckpt", f"s3://{BUCKET}/checkpoints", ckpt, s3_server.endpoint, "s3",
                       mode="fuse")]
    # reads the dataset, cannot write there (read-only), writes a checkpoint, and saves what
    # it can see: its mounts, every command line of its PID namespace (s3fs's among them), its
    # environment and its /tmp (the credentials must be in none of them)
    run = (f"set -e; cat {data}/train.txt {data}/sub/extra.txt > {ckpt}/seen.txt; "
           f"if echo x > {data}/new.txt; then echo WROTE-READ-ONLY; exit 9; fi; "
           f"test -f {ckpt}/old.txt; mkdir -p {ckpt}/global_step_1; "
           f"echo weights > {ckpt}/global_step_1/model.pt; "
           f"grep -E ' ({data}|{ckpt}) ' /proc/self/mountinfo > {ckpt}/mountinfo.txt; "
           f"cat /proc/[0-9]*/cmdline | tr '\\0' ' ' > {ckpt}/cmdlines.txt; "
           f"ls -a /tmp > {ckpt}/tmp.txt; env > {ckpt}/env.txt")
    r = submit(server, job_doc("s3-fuse", mounts, run))
    assert r.status_code == 201, r.text
    job = wait_done(server, "s3-fuse")
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    assert_nothing_left(job)
    assert s3fs_left(str(mount_root)) == []

    # the Worker is gone: the bucket holds what it wrote, read back with the S3 client
    def read(key: str) -> str:
        return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()

    assert read("checkpoints/global_step_1/model.pt") == "weights\n"
    assert read("checkpoints/seen.txt") == "row-1\nrow-2\nrow-3\n"
    assert read("checkpoints/old.txt") == "an earlier Run's\n"
    files = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]
             if not o["Key"].endswith("/")}  # s3fs keeps directories as "dir/" markers
    assert {k for k in files if k.startswith("datasets/")} == {
        "datasets/v1/train.txt", "datasets/v1/sub/extra.txt"}
    # both were s3fs mounts (over the empty directory each mountPath is bound to), the
    # dataset's read-only, inside the Worker
    seen = [line for line in read("checkpoints/mountinfo.txt").splitlines()
            if " - fuse.s3fs " in line]
    assert [line.split()[4] for line in seen] == [data, ckpt], seen
    assert [" ro," in line or " ro " in line for line in seen] == [True, False], seen
    cmdlines = read("checkpoints/cmdlines.txt")
    assert "s3fs" in cmdlines and "passwd_file=" in cmdlines
    for text in (cmdlines, read("checkpoints/env.txt"), read("checkpoints/tmp.txt")):
        assert s3_server.secret_key not in text and s3_server.access_key not in text
    assert ".rlark-s3fs-" not in read("checkpoints/tmp.txt")  # the passwd file's directory
    assert "RLARK_KEEPER" not in read("checkpoints/env.txt")

    # the mode, per Worker and mount: the API, the record and `rlark describe`
    [worker] = job["currentRun"]["workers"]
    stats = {m["name"]: m for m in worker["mounts"]}
    assert stats["data"] == {"name": "data", "mode": "fuse", "requested": "auto",
                             "mounted": True, "unmounted": True}
    assert stats["ckpt"] == {"name": "ckpt", "mode": "fuse", "requested": "fuse",
                             "mounted": True, "unmounted": True}
    record = server.http.get("/api/v1/jobs/s3-fuse/record")
    assert record.status_code == 200, record.text
    by_name = {m["name"]: m for m in record.json()["mounts"]}
    assert {n: (m["mode"], m["source"]) for n, m in by_name.items()} == {
        "data": ("fuse", f"s3://{BUCKET}/datasets/v1"),
        "ckpt": ("fuse", f"s3://{BUCKET}/checkpoints")}
    assert s3_server.secret_key not in record.text and s3_server.access_key not in record.text
    described = server.cli("describe", "s3-fuse")
    assert described.returncode == 0, described.stderr
    assert "fuse" in described.stdout and s3_server.secret_key not in described.stdout


def test_wrong_credentials_fail_the_fuse_mount_before_the_run_script(server, s3_server,
                                                                     mount_root):
    bucket(s3_server.client())
    secret(server, "s3-wrong", "accessKeyId", "RLARKNOSUCHKEY0000")
    secret(server, "s3-wrong", "secretAccessKey", "not-the-secret")
    mounts = [s3_mount("data", f"s3://{BUCKET}/x", f"{mount_root}/data", s3_server.endpoint,
                       "s3-wrong", mode="fuse")]
    r = submit(server, job_doc("s3-fuse-wrong", mounts, "echo THE-RUN-SCRIPT-RAN"))
    assert r.status_code == 201, r.text
    job = wait_done(server, "s3-fuse-wrong")
    assert (job["phase"], job["reason"]) == ("Failed", "MountFailed"), job["message"]
    assert f"mount 'data' (s3://{BUCKET}/x): s3fs could not mount it" in job["message"]
    assert "invalid credentials" in job["message"], job["message"]  # s3fs's own words
    assert "not-the-secret" not in job["message"]
    assert job["currentRun"]["runningAt"] is None
    logs = server.cli("logs", "s3-fuse-wrong")
    assert "THE-RUN-SCRIPT-RAN" not in logs.stdout and "not-the-secret" not in logs.stdout
    assert_nothing_left(job)
    assert s3fs_left(str(mount_root)) == []


def test_a_stopped_worker_unmounts_and_what_it_closed_is_in_the_bucket(server, s3_server,
                                                                       mount_root):
    import time

    s3 = s3_server.client()
    bucket(s3)
    secret(server, "s3", "accessKeyId", s3_server.access_key)
    secret(server, "s3", "secretAccessKey", s3_server.secret_key)
    ckpt = f"{mount_root}/ckpt"
    mounts = [s3_mount("ckpt", f"s3://{BUCKET}/stopped", ckpt, s3_server.endpoint, "s3",
                       mode="fuse")]
    r = submit(server, job_doc("s3-fuse-stop", mounts,
                               f"echo step-1 > {ckpt}/step-1.txt; exec sleep 600"))
    assert r.status_code == 201, r.text
    # the file is in the bucket once closed, while the Worker still runs (bounded wait)
    deadline = time.monotonic() + 240
    while "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="stopped/step-1.txt"):
        job = server.http.get("/api/v1/jobs/s3-fuse-stop").json()
        assert job["phase"] in ("Pending", "Starting", "Running"), (job["phase"], job["message"])
        assert time.monotonic() < deadline, "step-1.txt did not reach the bucket in 240 s"
        time.sleep(0.5)  # polling interval of the bounded wait above
    # the mount is the Worker's alone: nothing of it propagated to this machine's namespace
    with open("/proc/self/mountinfo") as f:
        assert ckpt not in f.read()
    assert server.cli("stop", "s3-fuse-stop").returncode == 0
    job = wait_done(server, "s3-fuse-stop")
    assert job["phase"] == "Stopped", (job["reason"], job["message"])
    assert_nothing_left(job)
    assert s3fs_left(str(mount_root)) == []
    [worker] = job["currentRun"]["workers"]
    assert worker["mounts"] == [{"name": "ckpt", "mode": "fuse", "requested": "fuse",
                                 "mounted": True, "unmounted": True}]
    body = s3.get_object(Bucket=BUCKET, Key="stopped/step-1.txt")["Body"].read()
    assert body == b"step-1\n"


@pytest.fixture(scope="module")
def server_without_s3fs(tmp_path_factory):
    """A server whose s3fs setting names no file (as on a machine without the package)."""
    home = tmp_path_factory.mktemp("rlark-home-no-s3fs")
    srv = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir(),
                             "RLARK_S3FS": str(home / "no-such-s3fs")}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_a_server_without_s3fs_refuses_fuse_and_copies_for_auto(server_without_s3fs, s3_server,
                                                                 mount_root):
    server = server_without_s3fs
    s3 = s3_server.client()
    bucket(s3)
    s3.put_object(Bucket=BUCKET, Key="auto/in/a.txt", Body=b"a\n")
    secret(server, "s3", "accessKeyId", s3_server.access_key)
    secret(server, "s3", "secretAccessKey", s3_server.secret_key)
    path = f"{mount_root}/data"
    auto = s3_mount("data", f"s3://{BUCKET}/auto/in", path, s3_server.endpoint, "s3", mode=None)
    fuse = s3_mount("data", f"s3://{BUCKET}/auto/in", path, s3_server.endpoint, "s3", mode="fuse")
    refused = submit(server, job_doc("s3-no-fuse", [fuse], "true"))
    assert refused.status_code == 422, refused.text
    [finding] = refused.json()["detail"]["findings"]
    assert (finding["code"], finding["path"]) == ("MountUnavailable",
                                                  "spec.roles[0].mounts[0].objectStorage.mode")
    assert "'fuse'" in finding["message"] and "no-such-s3fs" in finding["message"]
    assert "mode: copy" in finding["hint"]
    assert server.http.get("/api/v1/jobs/s3-no-fuse").status_code == 404

    r = submit(server, job_doc("s3-auto", [auto], f"cat {path}/a.txt > {path}/b.txt"))
    assert r.status_code == 201, r.text
    job = wait_done(server, "s3-auto")
    assert job["phase"] == "Succeeded", (job["reason"], job["message"])
    assert s3.get_object(Bucket=BUCKET, Key="auto/in/b.txt")["Body"].read() == b"a\n"
    record = server.http.get("/api/v1/jobs/s3-auto/record").json()
    [mount] = record["mounts"]
    assert mount["mode"] == "copy"
    [copy] = mount["copies"]
    assert (copy["mode"], copy["requested"]) == ("copy", "auto")
    assert copy["why"].startswith("auto: copy, because FUSE is not available here: s3fs is "
                                  "not installed here"), copy["why"]
