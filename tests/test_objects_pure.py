"""objectStorage mounts in copy mode, without I/O beyond a temporary directory (issue 22): the
spec's s3:// locations and secret references, the preflight's findings, the local runtime's
copy plan, the keeper's handling of the credentials, the copier's key mapping, and the
``mount`` lifecycle line."""

from __future__ import annotations

import json
import os

import pytest

from rlark.bootstrap import objectcopy
from rlark.bootstrap import objects as keeper_objects
from rlark.bootstrap.keeper import Config
from rlark.bootstrap.lifecycle import check_report
from rlark.controller.lifecycle import check_event
from rlark.preflight.job import check_job
from rlark.runtimes.base import SecretMissing
from rlark.runtimes.local.objects import copy_mounts, object_dir
from rlark.runtimes.local.preflight import unprovided_mounts
from rlark.spec import document_secret_refs, job_to_dict, parse_job, s3_location, secret_refs

ENDPOINT = "http://127.0.0.1:8333"


def job(mounts: list[dict], env: list[dict] | None = None):
    data = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "s3"},
            "spec": {"headRole": "head", "runScript": "true",
                     "roles": [{"name": "head", "image": "x/y:1", "mounts": mounts,
                                "env": env or []}]}}
    j, findings = parse_job(data)
    assert j is not None, findings
    return j, check_job(j)


def s3_mount(**extra) -> dict:
    return {"name": "ckpt", "type": "objectStorage", "source": "s3://my-bucket/runs/a/",
            "mountPath": "/ckpt", "objectStorage": {"endpoint": ENDPOINT, "secret": "s3"},
            **extra}


@pytest.mark.parametrize("url, expected", [
    ("s3://my-bucket", ("my-bucket", "")),
    ("s3://my-bucket/", ("my-bucket", "")),
    ("s3://my.bucket-2/a/b/", ("my.bucket-2", "a/b")),
])
def test_s3_locations(url, expected):
    assert s3_location(url) == expected


@pytest.mark.parametrize("url, words", [
    ("gs://bucket/x", "not an s3:// URL"),
    ("s3://B/x", "not an S3 bucket name"),
    ("s3://my-bucket/a/../b", "'..' part"),
    ("s3://my-bucket/a//b", "empty"),
])
def test_bad_s3_locations_say_why(url, words):
    with pytest.raises(ValueError, match=words.replace(".", r"\.").replace("(", r"\(")):
        s3_location(url)


def test_a_mounts_secret_is_a_reference_of_the_job_like_an_env_secret():
    j, findings = job([s3_mount()], env=[{"name": "TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "wandb", "key": "api_key"}}}])
    assert j is not None and not [f for f in findings if f.severity.value == "error"], findings
    expected = [("wandb", "api_key"), ("s3", "accessKeyId"), ("s3", "secretAccessKey")]
    assert secret_refs(j) == expected
    # the stored mapping (camelCase) gives the same, so `rlark secret list` says who uses them
    assert document_secret_refs(job_to_dict(j)) == expected


@pytest.mark.parametrize("change, code, path", [
    ({"source": "s3://Bad_Bucket/x"}, "InvalidMountSource", "spec.roles[0].mounts[0].source"),
    ({"objectStorage": {"endpoint": "127.0.0.1:8333"}}, "InvalidEndpoint",
     "spec.roles[0].mounts[0].objectStorage.endpoint"),
    ({"objectStorage": {"secret": "S3 keys"}}, "InvalidSecretName",
     "spec.roles[0].mounts[0].objectStorage.secret"),
    ({"type": "pvc", "source": "ckpt"}, "InvalidMount", "spec.roles[0].mounts[0].objectStorage"),
])
def test_bad_object_storage_settings_are_named(change, code, path):
    _, findings = job([{**s3_mount(), **change}])
    assert [(f.code, f.path) for f in findings if f.severity.value == "error"] == [(code, path)]


def test_the_local_runtime_refuses_fuse_and_non_s3_and_a_worker_without_a_namespace():
    ok = job([s3_mount()])[0].spec.roles[0]
    assert unprovided_mounts(ok, 0, own_namespace=True) == []
    assert unprovided_mounts(ok, 0, own_namespace=None) == []
    no_ns = unprovided_mounts(ok, 0, own_namespace=False)
    assert [f.code for f in no_ns] == ["MountUnavailable"] and "own mount namespace" in no_ns[0].message
    fuse = job([s3_mount(objectStorage={"mode": "fuse", "secret": "s3"})])[0].spec.roles[0]
    [f] = unprovided_mounts(fuse, 0, own_namespace=True, fuse="no s3fs here")
    assert f.code == "MountUnavailable" and "FUSE" in f.message and "mode: copy" in f.hint
    assert "no s3fs here" in f.message
    assert unprovided_mounts(fuse, 0, own_namespace=True, fuse=None) == []


def test_the_copy_plan_carries_the_secret_values_to_the_keeper_only():
    role = job([s3_mount(readOnly=True),
                {"name": "pub", "type": "objectStorage", "source": "s3://public-data",
                 "mountPath": "/pub"}])[0].spec.roles[0]
    plan = copy_mounts(role, {("s3", "accessKeyId"): "AK", ("s3", "secretAccessKey"): "SK"},
                       "no s3fs")
    why = "auto: copy, because FUSE is not available here: no s3fs"
    assert plan == [
        {"name": "ckpt", "source": "s3://my-bucket/runs/a/", "bucket": "my-bucket",
         "prefix": "runs/a", "path": "/ckpt", "read_only": True, "endpoint": ENDPOINT,
         "region": None, "mode": "copy", "requested": "auto", "why": why,
         "access_key_id": "AK", "secret_access_key": "SK"},
        {"name": "pub", "source": "s3://public-data", "bucket": "public-data", "prefix": "",
         "path": "/pub", "read_only": False, "endpoint": None, "region": None, "mode": "copy",
         "requested": "auto", "why": why}]
    with pytest.raises(SecretMissing, match="key 'secretAccessKey' of secret 's3'") as info:
        copy_mounts(role, {("s3", "accessKeyId"): "AK"}, None)
    assert "AK" not in str(info.value)
    assert object_dir("/home/w/r/0", 1) == "/home/w/r/0/objects/1"


def test_the_keeper_takes_the_credentials_out_of_the_workloads_environment():
    mounts = [{"name": "ckpt", "source": "s3://b/x", "bucket": "bkt", "prefix": "x",
               "path": "/ckpt", "access_key_id": "AK", "secret_access_key": "SECRET"}]
    own = {"RLARK_KEEPER_BOOTSTRAP": "/b.pyz", keeper_objects.COPY_PYTHON_VAR: "/srv/python"}
    workload = {"PATH": "/usr/bin", keeper_objects.OBJECTS_VAR: json.dumps(mounts)}
    cfg = Config(own, workload)
    assert cfg.objects == mounts and cfg.copy_python == "/srv/python"
    assert "SECRET" not in json.dumps(cfg.env) and keeper_objects.OBJECTS_VAR not in cfg.env
    # without the pipe (one environment, a Pod) the plan leaves the environment, and keys come
    # only from the Run's Secret's variables (tests/test_k8s_copymounts.py), never the plan
    alone = Config({"RLARK_KEEPER_BOOTSTRAP": "/b.pyz", keeper_objects.OBJECTS_VAR: json.dumps(mounts)})
    assert alone.objects == [{k: v for k, v in mounts[0].items()
                              if k not in ("access_key_id", "secret_access_key")}]
    assert keeper_objects.OBJECTS_VAR not in alone.env
    with pytest.raises(ValueError, match="absolute path"):
        keeper_objects.parse_mounts(json.dumps([{**mounts[0], "path": "ckpt"}]))


@pytest.mark.parametrize("prefix, key, rel", [
    ("runs/a", "runs/a/model.pt", "model.pt"),
    ("runs/a", "runs/a/step_1/model.pt", "step_1/model.pt"),
    ("", "top.txt", "top.txt"),
    ("runs/a", "runs/a/", None),          # the prefix's own "directory" marker
    ("runs/a", "runs/a/sub/", None),
    ("runs/a", "runs/ab/x", None),        # another prefix that starts the same
    ("runs/a", "runs/a/../../etc/x", None),  # would leave the mount
    ("runs/a", "runs/a/x//y", None),
])
def test_object_keys_map_below_the_mount_and_never_outside_it(prefix, key, rel):
    assert objectcopy.key_path(prefix, key) == rel
    if rel is not None:
        assert objectcopy.object_key(prefix, rel) == key


def test_copy_out_sends_what_is_new_or_changed_and_no_link(tmp_path):
    (tmp_path / "data.txt").write_text("dataset")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.pt").write_text("weights")
    os.symlink("/etc/hostname", tmp_path / "link")
    st = os.lstat(tmp_path / "data.txt")
    manifest = {"data.txt": [st.st_size, st.st_mtime_ns]}  # as copy in left it
    assert objectcopy.changed_files(str(tmp_path), manifest) == ([("ckpt/model.pt", 7)], 1)
    (tmp_path / "data.txt").write_text("dataset, changed")
    assert objectcopy.changed_files(str(tmp_path), manifest)[0] == [
        ("ckpt/model.pt", 7), ("data.txt", 16)]


def test_the_mount_line_is_the_keepers_alone():
    line = {"ts": 1.0, "event": "mount", "name": "ckpt", "mode": "copy", "direction": "out",
            "files": 2, "bytes": 10, "seconds": 0.5}
    assert check_event(line) == line
    assert check_event({**line, "direction": "sideways"}) is None
    assert check_event({**line, "bytes": -1}) is None
    report, why = check_report(json.dumps(line).encode())
    assert report is None and "may not be reported" in why
    failed = {"event": "failed", "reason": "MountFailed", "message": "forged"}
    assert check_report(json.dumps(failed).encode())[0] is None


def test_the_keeper_bounds_a_copy_and_names_what_went_wrong(tmp_path):
    import sys

    ticks = []
    echo = [sys.executable, "-c", "import json, sys; r = json.load(sys.stdin); "
            "print(json.dumps({'ok': True, 'files': 1, 'bytes': len(r['bucket'])}))"]
    assert keeper_objects.run_copier(echo, {"bucket": "abc"}, {}, 60) == {
        "ok": True, "files": 1, "bytes": 3}
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]
    result = keeper_objects.run_copier(slow, {}, {}, 1.0, tick=lambda: ticks.append(1))
    assert result == {"ok": False, "code": "Timeout", "message": "the copy did not finish within 1 s"}
    assert ticks  # the keeper's heartbeat went on meanwhile
    stopped = keeper_objects.run_copier(slow, {}, {}, 60, stopping=lambda: True)
    assert stopped["code"] == "CopyStopped"
    garbled = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]
    failed = keeper_objects.run_copier(garbled, {}, {}, 60)
    assert failed["code"] == "CopierFailed" and "status 3" in failed["message"] and "boom" in failed["message"]
    missing = keeper_objects.run_copier([str(tmp_path / "nothing")], {}, {}, 60)
    assert missing["code"] == "CopierNotStarted"


def test_a_copy_started_before_the_workload_and_gone_since_fails_the_copy_out():
    """The Worker's code (its uid) may kill the copy a Pod's keeper started before it: the copy
    out then fails, named, rather than reading a result from nowhere."""
    import sys

    ready = keeper_objects.start_copier([sys.executable, "-c", "pass"], {})
    assert not isinstance(ready, dict)
    ready.wait(timeout=60)
    got = keeper_objects.run_copier([], {"direction": "out"}, {}, 30, started=ready)
    assert (got["ok"], got["code"]) == (False, "CopierGone") and "exit status 0" in got["message"]
