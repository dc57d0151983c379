"""The object-storage copier (bootstrap/objectcopy.py) against a real S3 server (SeaweedFS,
tests/s3_server.py), in this process: copy in, copy out of what changed, and the S3 error codes
a failure names. The copies inside a Worker, under its uid: tests/test_local_objects.py."""

from __future__ import annotations

from tests.s3_server import s3_server  # noqa: F401  (the fixture)

from rlark.bootstrap import objectcopy


def request(s3_server, direction: str, path, bucket: str = "copier", prefix: str = "runs/a",
            **extra) -> dict:
    return {"direction": direction, "bucket": bucket, "prefix": prefix, "path": str(path),
            "endpoint": s3_server.endpoint, "region": None,
            "access_key_id": s3_server.access_key, "secret_access_key": s3_server.secret_key,
            **extra}


def test_copy_in_then_out_sends_only_what_changed(s3_server, tmp_path):
    s3 = s3_server.client()
    s3.create_bucket(Bucket="copier")
    s3.put_object(Bucket="copier", Key="runs/a/data.txt", Body=b"dataset")
    s3.put_object(Bucket="copier", Key="runs/a/deep/x.bin", Body=b"\x00" * 10)
    s3.put_object(Bucket="copier", Key="runs/ab/not-mine.txt", Body=b"other prefix")
    s3.put_object(Bucket="copier", Key="runs/a/dir/", Body=b"")  # a "directory" marker
    got = objectcopy.run(request(s3_server, "in", tmp_path))
    assert got["ok"], got
    assert (got["files"], got["bytes"]) == (2, 17)
    assert sorted(got["manifest"]) == ["data.txt", "deep/x.bin"]
    assert (tmp_path / "data.txt").read_bytes() == b"dataset"
    assert not (tmp_path / "not-mine.txt").exists() and not (tmp_path / "dir").exists()

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.pt").write_bytes(b"weights")
    sent = objectcopy.run(request(s3_server, "out", tmp_path, manifest=got["manifest"]))
    assert sent == {"ok": True, "files": 1, "bytes": 7, "skipped": 0}
    assert s3.get_object(Bucket="copier", Key="runs/a/ckpt/model.pt")["Body"].read() == b"weights"


def test_failures_name_the_s3_error_code(s3_server, tmp_path):
    s3_server.client().create_bucket(Bucket="copier-codes")
    wrong = objectcopy.run(request(s3_server, "in", tmp_path, bucket="copier-codes",
                                   access_key_id="RLARKNOSUCHKEY0000"))
    assert (wrong["ok"], wrong["code"]) == (False, "InvalidAccessKeyId"), wrong
    assert s3_server.secret_key not in str(wrong)
    missing = objectcopy.run(request(s3_server, "in", tmp_path, bucket="no-such-bucket"))
    assert (missing["ok"], missing["code"]) == (False, "NoSuchBucket"), missing
    (tmp_path / "out.txt").write_text("x")
    gone = objectcopy.run(request(s3_server, "out", tmp_path, bucket="no-such-bucket"))
    assert (gone["ok"], gone["code"]) == (False, "NoSuchBucket"), gone
    nobody = objectcopy.run({**request(s3_server, "in", tmp_path, bucket="copier-codes"),
                             "endpoint": "http://127.0.0.1:9"})
    assert (nobody["ok"], nobody["code"]) == (False, "EndpointConnectionError"), nobody


def test_a_pods_init_container_copies_every_mount_in_and_stops_at_the_first_failure(s3_server, tmp_path):
    """``objcopy-in`` as a Pod's init container runs it (rlark.runtimes.kubernetes.copymounts):
    the bootstrap archive under ``python -I``, its mounts and keys in its environment; each
    result left in the state directory for the keeper, the first failure as its last line."""
    import json
    import os
    import subprocess
    import sys

    from rlark.bootstrap.archive import bootstrap_archive
    from rlark.bootstrap.objects import state_file

    s3 = s3_server.client()
    s3.create_bucket(Bucket="init-copy")
    s3.put_object(Bucket="init-copy", Key="data/train.txt", Body=b"rows\n")
    archive = tmp_path / "rlark-bootstrap.pyz"
    archive.write_bytes(bootstrap_archive().data)
    state, data, ckpt = (tmp_path / d for d in ("state", "data", "ckpt"))
    for d in (state, data, ckpt):
        d.mkdir()
    plan = [{"name": "data", "source": "s3://init-copy/data", "bucket": "init-copy",
             "prefix": "data", "path": str(data), "endpoint": s3_server.endpoint, "index": 0},
            {"name": "ckpt", "source": "s3://init-copy/ckpt", "bucket": "init-copy",
             "prefix": "ckpt", "path": str(ckpt), "endpoint": s3_server.endpoint, "index": 3}]
    # the image's own ENV lines must not steer the copy (a proxy that goes nowhere)
    base = {"PATH": os.environ["PATH"], objectcopy.INIT_STATE_VAR: str(state),
            objectcopy.INIT_MOUNTS_VAR: json.dumps(plan), "HTTP_PROXY": "http://127.0.0.1:9",
            "http_proxy": "http://127.0.0.1:9", "AWS_CONFIG_FILE": str(tmp_path / "nope")}
    keys = {"RLARK_S3_0_ACCESS_KEY_ID": s3_server.access_key,
            "RLARK_S3_0_SECRET_ACCESS_KEY": s3_server.secret_key}

    def init(env: dict) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-I", str(archive), "objcopy-in"], env=env,
                              capture_output=True, text=True, timeout=120)

    # the second mount's keys are wrong (another index's are not its own)
    done = init({**base, **keys, "RLARK_S3_3_ACCESS_KEY_ID": "RLARKNOSUCHKEY0000",
                 "RLARK_S3_3_SECRET_ACCESS_KEY": "wrong"})
    assert done.returncode == 1, done.stderr
    first, last = [json.loads(line) for line in done.stdout.splitlines()]
    assert first == {"mount": "data", "ok": True, "files": 1, "bytes": 5, "skipped": 0,
                     "seconds": first["seconds"]}
    assert (last["mount"], last["source"], last["ok"], last["code"]) == (
        "ckpt", "s3://init-copy/ckpt", False, "InvalidAccessKeyId")
    assert s3_server.secret_key not in done.stdout + done.stderr
    left = json.loads((state / state_file(0)).read_text())
    assert (left["files"], left["bytes"], sorted(left["manifest"])) == (1, 5, ["train.txt"])
    assert not (state / state_file(3)).exists()
    assert (data / "train.txt").read_bytes() == b"rows\n"
    # both mounts with the right keys: both results
    keys.update({"RLARK_S3_3_ACCESS_KEY_ID": s3_server.access_key,
                 "RLARK_S3_3_SECRET_ACCESS_KEY": s3_server.secret_key})
    done = init({**base, **keys})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((state / state_file(3)).read_text())["files"] == 0


def test_a_copy_started_before_the_workload_cannot_be_forged_by_code_planted_after(s3_server, tmp_path):
    """A Pod's copy out runs the image's Python, whose site-packages the Worker's code may
    write. ``objcopy-ready`` (started by the keeper before the workload) has its code loaded
    already: a ``.pth`` file planted afterwards answers for a copier started later (the attack
    is real), never for it."""
    import json
    import os
    import subprocess
    import sys

    from rlark.bootstrap.archive import bootstrap_archive
    from rlark.bootstrap.objects import COPIER_ENV, run_copier, start_copier

    s3 = s3_server.client()
    s3.create_bucket(Bucket="ready-copy")
    archive = tmp_path / "rlark-bootstrap.pyz"
    archive.write_bytes(bootstrap_archive().data)
    # an image's Python whose site-packages its user may write: a venv seeing this one's boto3
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    import boto3

    # where this interpreter finds boto3 (its site-packages, or a directory a .pth adds)
    (tmp_path / "site.pth").write_text(os.path.dirname(os.path.dirname(boto3.__file__)) + "\n")
    (tmp_path / "site.pth").rename(f"{site}/deps.pth")
    out = tmp_path / "out"
    (out / "step_1").mkdir(parents=True)
    (out / "step_1" / "model.pt").write_bytes(b"weights")
    request = {"direction": "out", "bucket": "ready-copy", "prefix": "run", "path": str(out),
               "endpoint": s3_server.endpoint, "access_key_id": s3_server.access_key,
               "secret_access_key": s3_server.secret_key, "manifest": {}}
    ready = start_copier([python, "-I", str(archive), "objcopy-ready"], {})
    assert not isinstance(ready, dict), ready
    # planted only once the ready copier has loaded its code (bounded wait for its line)
    import select

    assert select.select([ready.stderr], [], [], 120)[0], "objcopy-ready did not warm up in 120 s"
    assert ready.stderr.readline().decode() == objectcopy.READY_LINE
    forged = '{"ok": true, "files": 99, "bytes": 99}'
    (tmp_path / "zz.pth").write_text(
        f"import os, sys; sys.stdout.write({forged!r} + '\\n'); sys.stdout.flush(); os._exit(0)\n")
    (tmp_path / "zz.pth").rename(f"{site}/zz_forge.pth")
    # a copier started now runs the planted code: the forgery it would be
    late = run_copier([python, "-I", str(archive), "objcopy"], request, {}, 60)
    assert late == json.loads(forged)
    # the one started before: the real copy
    got = run_copier([], request, {}, 60, started=ready)
    assert got == {"ok": True, "files": 1, "bytes": 7, "skipped": 0}, got
    assert s3.get_object(Bucket="ready-copy", Key="run/step_1/model.pt")["Body"].read() == b"weights"
    assert "AWS_CONFIG_FILE" in COPIER_ENV

