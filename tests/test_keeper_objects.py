"""The keeper's copy-mode object-storage mounts (bootstrap/objects.py), as a real process with the
stand-in workload of tests/test_keeper.py and a real S3 server (tests/s3_server.py), without Ray:
copy in before the workload, the head's ``run_finished`` held until its copy out is done, a
failed copy out that fails the head, and the copy out on a stop. (As root, without a sandbox:
the copier runs as the keeper's own user here; under the Run's uid in a Worker's view on the
local runtime: tests/test_local_objects.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlark.bootstrap import archive, keeper
from rlark.bootstrap import objects as keeper_objects
from tests.s3_server import s3_server  # noqa: F401  (the fixture)
from tests.test_keeper import STANDIN, events_of, kinds

BUCKET = "keeper-objects"


@pytest.fixture(scope="module")
def bootstrap_pyz(tmp_path_factory) -> Path:
    return Path(archive.install(str(tmp_path_factory.mktemp("pyz"))))


@pytest.fixture(scope="module")
def bucket(s3_server):
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="in/data.txt", Body=b"dataset\n")
    return s3


def mount(s3_server, mount_path: Path, prefix: str, bucket: str = BUCKET) -> dict:
    return {"name": "ckpt", "source": f"s3://{bucket}/{prefix}", "bucket": bucket,
            "prefix": prefix, "path": str(mount_path), "read_only": False,
            "endpoint": s3_server.endpoint, "region": None,
            "access_key_id": s3_server.access_key, "secret_access_key": s3_server.secret_key}


def start_keeper(tmp_path: Path, pyz: Path, mounts: list[dict], run_script: str) -> subprocess.Popen:
    """The keeper as the local runtime starts it: its own environment fixed, the workload's
    (with the mounts and their credentials) through the pipe ``RLARK_KEEPER_ENV_FD``. The
    workload's program is the stand-in, which also answers ``objcopy`` as the archive does."""
    standin = tmp_path / "standin.py"
    standin.write_text(
        "import sys\n"
        "if sys.argv[1:] == ['objcopy']:\n"
        f"    sys.path.insert(0, {str(pyz)!r})\n"
        "    from rlark.bootstrap import objectcopy\n"
        "    sys.exit(objectcopy.main())\n" + STANDIN)
    workload = {"PATH": os.environ["PATH"], "STANDIN": "ok", "RLINF_NODE_RANK": "0",
                "RLARK_RUN_SCRIPT": run_script, "RLARK_HEAD_ADDRESS": "127.0.0.9:6379",
                "RLARK_STOP_GRACE_SECONDS": "3", "RLARK_FACTS_BUDGET_SECONDS": "2",
                keeper_objects.OBJECTS_VAR: json.dumps(mounts)}
    read_end, write_end = os.pipe()
    own = {"PATH": os.environ["PATH"], "RLARK_KEEPER_BOOTSTRAP": str(standin),
           "RLARK_KEEPER_ENV_FD": str(read_end), keeper_objects.COPY_PYTHON_VAR: sys.executable}
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(pyz), "keeper"], env=own,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path,
                            pass_fds=(read_end,))
    os.close(read_end)
    os.write(write_end, json.dumps(workload).encode())
    os.close(write_end)
    return proc


def test_the_heads_result_waits_for_its_copy_out(tmp_path, bootstrap_pyz, s3_server, bucket):
    mnt = tmp_path / "mnt"
    # the run script sees the copy in, writes a checkpoint, and never sees the credentials
    run = (f"set -e; cat {mnt}/data.txt > {mnt}/seen.txt; mkdir {mnt}/step_1; "
           f"echo weights > {mnt}/step_1/model.pt; env > {mnt}/env.txt")
    proc = start_keeper(tmp_path, bootstrap_pyz, [mount(s3_server, mnt, "in")], run)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out.decode(errors="replace")
    events = events_of(out)
    order = kinds(out)
    assert order.index("mount") < order.index("phase") < order.index("running")
    assert order[-3:] == ["mount", "run_finished", "exit"]
    copied = [e for e in events if e["event"] == "mount"]
    assert [(c["direction"], c["files"]) for c in copied] == [("in", 1), ("out", 3)]
    finished = next(e for e in events if e["event"] == "run_finished")
    # the result keeps the moment the run script ended, before the copy out
    assert finished["exit_code"] == 0 and finished["ts"] <= copied[1]["ts"]
    # said at once, before the copy out: the controller waits for the head's result instead of
    # failing the Run for the Ray nodes the head's end took with it (issue 22)
    said = next(e for e in events if e["event"] == "copying_out")
    assert said["run_ended"] == finished["ts"] and order.index("copying_out") < len(order) - 3
    got = bucket.get_object(Bucket=BUCKET, Key="in/step_1/model.pt")["Body"].read()
    assert got == b"weights\n"
    env = bucket.get_object(Bucket=BUCKET, Key="in/env.txt")["Body"].read().decode()
    assert s3_server.secret_key not in env and keeper_objects.OBJECTS_VAR not in env
    assert s3_server.secret_key.encode() not in out


def test_a_failed_copy_out_fails_the_head_and_names_the_mount(tmp_path, bootstrap_pyz, s3_server,
                                                             bucket):
    s3_server.client().create_bucket(Bucket="keeper-gone")
    mnt, go = tmp_path / "mnt", tmp_path / "go"
    mnt.mkdir()
    # the bucket goes away while the run script runs: its checkpoint has nowhere to go
    run = f"echo run-up; while [ ! -e {go} ]; do sleep 0.1; done; echo w > {mnt}/model.pt"
    proc = start_keeper(tmp_path, bootstrap_pyz, [mount(s3_server, mnt, "x", "keeper-gone")], run)
    assert proc.stdout is not None
    seen = b""
    while b"run-up" not in seen:
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    s3_server.client().delete_bucket(Bucket="keeper-gone")
    go.touch()
    out, _ = proc.communicate(timeout=120)
    out = seen + out
    assert proc.returncode == keeper.EXIT_MOUNT_FAILED, out.decode(errors="replace")
    assert "run_finished" not in kinds(out)  # no result: the failure is the head's result
    [failed] = [e for e in events_of(out) if e["event"] == "failed"]
    assert failed["reason"] == "MountFailed" and failed["status"] == keeper.EXIT_MOUNT_FAILED
    assert "mount 'ckpt' (s3://keeper-gone/x): copy out failed: NoSuchBucket" in failed["message"]


def test_a_stop_copies_out_what_the_worker_wrote(tmp_path, bootstrap_pyz, s3_server, bucket):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    run = f"echo partial > {mnt}/partial.pt; echo run-up; sleep 120"
    proc = start_keeper(tmp_path, bootstrap_pyz, [mount(s3_server, mnt, "stopped")], run)
    assert proc.stdout is not None
    seen = b""
    while b"run-up" not in seen:
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    out = seen + out
    assert proc.returncode == keeper.EXIT_STOPPED, out.decode(errors="replace")
    assert kinds(out)[-3:] == ["stopped", "mount", "exit"]
    got = bucket.get_object(Bucket=BUCKET, Key="stopped/partial.pt")["Body"].read()
    assert got == b"partial\n"
