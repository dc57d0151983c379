"""Training curves from an ``objectStorage`` mount's bucket (issue 25, item 2;
services/curves_bucket.py): the in-Worker logger directory mapped to the mount's bucket and key
prefix (pure), and, against a real S3 server (SeaweedFS, tests/s3_server.py), a Kubernetes Run's
curves read from the bucket where the server cannot see the Pod's files: the Kubernetes
runtime's own profile says so, the bucket gives the points, with the same bounds as a
directory's (the name filter, the Run's time window) and a why that names the fix for a
``hostPath`` logger directory."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from rlark.services import curves
from rlark.services.curves import tensorboard_dir
from rlark.services.curves_bucket import NOT_YET, bucket_dir
from tests.curves_data import POINTS, write_events
from tests.s3_server import s3_server  # noqa: F401  (the fixture)
from tests.test_curves import expected


def mount(name: str, source: str, at: str, kind: str = "objectStorage", **extra) -> dict:
    return {"name": name, "type": kind, "source": source, "mountPath": at, **extra}


def job(mounts: list[dict], *, workers_mounts: list[dict] | None = None) -> dict:
    """A Job document (as a Run's spec snapshot holds it) with a head role and a workers role."""
    return {"spec": {"headRole": "head", "roles": [
        {"name": "head", "mounts": mounts},
        {"name": "workers", "mounts": workers_mounts or []}]}}


@pytest.mark.parametrize("mounts, path, role, want", [
    # the prefix of the source, then the path below the mountPath
    ([mount("ckpt", "s3://runs/team/ppo", "/ckpt")], "/ckpt/logs/tensorboard", None,
     ("runs", "team/ppo/logs/tensorboard")),
    # the whole bucket, and the mount point itself
    ([mount("ckpt", "s3://runs", "/ckpt")], "/ckpt/tensorboard", None, ("runs", "tensorboard")),
    ([mount("ckpt", "s3://runs/a/", "/ckpt/")], "/ckpt", None, ("runs", "a")),
    # nested mounts: the deepest that holds the path counts
    ([mount("outer", "s3://runs/outer", "/data"), mount("inner", "s3://logs/x/y", "/data/logs")],
     "/data/logs/exp/tensorboard", None, ("logs", "x/y/exp/tensorboard")),
    ([mount("outer", "s3://runs/outer", "/data"), mount("inner", "s3://logs/x", "/data/logs")],
     "/data/other/tensorboard", None, ("runs", "outer/other/tensorboard")),
    # a hostPath or pvc mount inside the bucket's mount shadows it: not in the bucket
    ([mount("outer", "s3://runs/outer", "/data"), mount("vol", "scratch", "/data/logs", "pvc")],
     "/data/logs/tensorboard", None, None),
    # outside every mount, or a prefix of a name that is no parent directory
    ([mount("ckpt", "s3://runs/p", "/ckpt")], "/results/tensorboard", None, None),
    ([mount("ckpt", "s3://runs/p", "/ckpt")], "/ckpt2/tensorboard", None, None),
    ([mount("ckpt", "s3://runs/p", "/ckpt")], "relative/tensorboard", None, None),
    # another role's mounts do not hold the head's files; a role named gets its own
    ([], "/ckpt/tensorboard", None, None),
    ([], "/w/tensorboard", "workers", ("work", "p/tensorboard")),
])
def test_a_logger_directory_maps_to_the_bucket_and_prefix_of_its_mount(mounts, path, role, want):
    spec = job(mounts, workers_mounts=[mount("w", "s3://work/p", "/w")])
    got = bucket_dir(spec, path, role)
    assert (None if got is None else (got.bucket, got.prefix)) == want
    if got is not None:
        assert got.at == f"s3://{want[0]}/{want[1]}"


def test_a_relative_log_path_starts_at_the_working_directory_before_it_is_mapped():
    spec = job([mount("work", "s3://code/users/ana", "/workspace")])
    config = {"runner": {"per_worker_log": True, "logger": {"log_path": "../out/logs"}}}
    where = tensorboard_dir(config, "/workspace/project")
    assert where.path == "/workspace/out/logs/tensorboard/all"
    got = bucket_dir(spec, where.path)
    assert (got.bucket, got.prefix) == ("code", "users/ana/out/logs/tensorboard/all")


def test_a_source_that_is_no_s3_url_is_an_error_that_says_so():
    with pytest.raises(ValueError, match="not an s3:// URL"):
        bucket_dir(job([mount("ckpt", "gs://runs/p", "/ckpt")]), "/ckpt/tensorboard")


# --- a Kubernetes Run, read from the bucket (real S3 server) -------------------------------------

BUCKET = "rlark-curves"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def k8s_record(s3_server, mounts: list[dict], *, log_path: str, live: bool = False,
               created: float) -> dict:
    """A Kubernetes Run's record as the server reads it: its spec snapshot, resolved config and
    times (no Worker of it can be read: its files are in a Pod)."""
    for m in mounts:
        if m["type"] == "objectStorage":
            m["objectStorage"] = {"endpoint": s3_server.endpoint, "secret": "s3"}
    return {"run": 1, "runUid": "k8s-run", "runtime": "kubernetes", "provisional": live,
            "spec": job(mounts), "workingDir": "/workspace",
            "configs": {"resolved": {"data": {"runner": {"logger": {"log_path": log_path}}}}},
            "times": {"created": iso(created), "finished": None if live else iso(time.time() + 60)}}


@pytest.fixture
def s3(s3_server, monkeypatch):
    # SeaweedFS listens on 127.0.0.1: a network the server reads from only where allowed
    monkeypatch.setenv("RLARK_OBJECT_STORAGE_ALLOW_NETWORKS", "127.0.0.0/8")
    client = s3_server.client()
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return client


def keys_of(s3_server):
    return lambda: {("s3", "accessKeyId"): s3_server.access_key,
                    ("s3", "secretAccessKey"): s3_server.secret_key}


def upload(s3, tmp_path, prefix: str, points=POINTS, suffix: str = "") -> str:
    """One event file written by tensorboard's own writer, put at ``prefix/<its name>``."""
    f = write_events(tmp_path / f"w{time.monotonic_ns()}", points, suffix=suffix)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{f.name}", Body=f.read_bytes())
    return f.name


def test_a_kubernetes_runs_curves_are_read_from_its_logger_mounts_bucket(s3, s3_server, tmp_path):
    created = time.time() - 30
    prefix = f"k8s-{time.monotonic_ns()}/ppo"
    name = upload(s3, tmp_path, f"{prefix}/logs/tensorboard")
    # what is no event file of the directory: another name, a deeper key, an older Run's file
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/logs/tensorboard/notes.txt", Body=b"x")
    upload(s3, tmp_path, f"{prefix}/logs/tensorboard/sub", {5: {"deeper": 1.0}})
    old = "events.out.tfevents.1000000000.pod-0.1.0"
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/logs/tensorboard/{old}", Body=b"\0" * 16)
    rec = k8s_record(s3_server, [mount("ckpt", f"s3://{BUCKET}/{prefix}", "/ckpt")],
                     log_path="/ckpt/logs", created=created)
    # the runtime's profile cannot read the Pod's files: the bucket is the only place
    from rlark.runtimes.kubernetes.profile import KubernetesProfile

    assert KubernetesProfile().worker_dir(rec, "/ckpt/logs/tensorboard", 0, False)[0] is None
    got = curves._scalars_of(rec, "Succeeded", False, "k8s", None, keys_of(s3_server))
    assert got["why"] is None, got
    assert got["scalars"] == expected() and got["files"] == [name]
    assert (got["path"], got["at"]) == ("/ckpt/logs/tensorboard",
                                        f"s3://{BUCKET}/{prefix}/logs/tensorboard")
    assert got["otherRuns"] == 1 and got["notes"] == []
    only = curves._scalars_of(rec, "Succeeded", False, "k8s", ["rollout/rewards"],
                              keys_of(s3_server))
    assert only["scalars"] == {"rollout/rewards": expected()["rollout/rewards"]}


def test_a_buckets_files_bytes_and_listing_are_bounded(s3, s3_server, tmp_path, monkeypatch):
    from rlark.services import curves_bucket

    prefix = f"k8s-{time.monotonic_ns()}"
    at = f"{prefix}/logs/tensorboard"
    s3.put_object(Bucket=BUCKET, Key=f"{at}/a-note.txt", Body=b"x")  # listed first, not read
    # the same points in both: which name sorts first (time, host, pid, a counter) is the writer's
    first = min(upload(s3, tmp_path, at), upload(s3, tmp_path, at))
    size = s3.head_object(Bucket=BUCKET, Key=f"{at}/{first}")["ContentLength"]
    rec = k8s_record(s3_server, [mount("ckpt", f"s3://{BUCKET}/{prefix}", "/ckpt")],
                     log_path="/ckpt/logs", created=time.time() - 30)
    # one file, and of it all but its last record (step 2): only that range is fetched
    monkeypatch.setattr(curves, "MAX_FILES", 1)
    monkeypatch.setattr(curves, "MAX_FILE_BYTES", size - 10)
    got = curves._scalars_of(rec, "Succeeded", False, "k8s", None, keys_of(s3_server))
    assert got["files"] == [first], got
    assert got["scalars"] == expected({k: v for k, v in POINTS.items() if k < 2})
    assert got["notes"] == [f"{first}: {size} bytes; its first {size - 10} read",
                            "more than 1 event files: the first 1 read"]
    # a directory filled with objects: only the first MAX_LISTED are looked at
    monkeypatch.setattr(curves, "MAX_FILES", 32)
    monkeypatch.setattr(curves, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(curves_bucket, "MAX_LISTED", 2)
    got = curves._scalars_of(rec, "Succeeded", False, "k8s", None, keys_of(s3_server))
    assert got["files"] == [first] and got["scalars"] == expected()
    assert got["notes"] == [f"more than 2 objects in s3://{BUCKET}/{at}: the first 2 looked at"]


def test_a_bucket_the_server_cannot_read_or_that_has_no_files_yet_says_why(
        s3, s3_server, tmp_path):
    prefix = f"k8s-{time.monotonic_ns()}"
    mounts = [mount("ckpt", f"s3://{BUCKET}/{prefix}", "/ckpt")]
    rec = k8s_record(s3_server, mounts, log_path="/ckpt/logs", live=True, created=time.time())
    # live, nothing uploaded yet: the why says when the files reach the bucket
    got = curves._scalars_of(rec, "Running", False, "k8s", None, keys_of(s3_server))
    assert got["scalars"] == {} and got["why"] == (
        f"no event files for this Run in /ckpt/logs/tensorboard (objectStorage mount ckpt, "
        f"s3://{BUCKET}/{prefix}/logs/tensorboard); {NOT_YET}")
    # the secret's values not at hand, or wrong keys: said, never a 500
    got = curves._scalars_of(rec, "Running", False, "k8s", None, lambda: None)
    assert "credentials of secret 's3' are not available" in got["why"], got
    got = curves._scalars_of(rec, "Running", False, "k8s", None,
                             lambda: {("s3", "accessKeyId"): s3_server.access_key,
                                      ("s3", "secretAccessKey"): "wrong"})
    assert "cannot be read: listing" in got["why"] and "SignatureDoesNotMatch" in got["why"], got


def test_an_endpoint_on_a_network_not_allowed_is_not_read(s3, s3_server, monkeypatch):
    monkeypatch.delenv("RLARK_OBJECT_STORAGE_ALLOW_NETWORKS")
    rec = k8s_record(s3_server, [mount("ckpt", f"s3://{BUCKET}/p", "/ckpt")],
                     log_path="/ckpt/logs", created=time.time())
    got = curves._scalars_of(rec, "Succeeded", False, "k8s", None, keys_of(s3_server))
    assert got["scalars"] == {} and "RLARK_OBJECT_STORAGE_ALLOW_NETWORKS" in got["why"], got


def test_a_kubernetes_logger_directory_on_a_pods_volume_names_the_fix(s3_server):
    rec = k8s_record(s3_server, [mount("vol", "scratch", "/ckpt", "pvc")],
                     log_path="/ckpt/logs", created=time.time())
    opened = []
    got = curves._scalars_of(rec, "Succeeded", False, "k8s", None, lambda: opened.append(1))
    assert got["why"] == ("no event files readable by the server for this Run: "
                          "/ckpt/logs/tensorboard lies in the Pod's filesystem, which the server "
                          "cannot read; put runner.logger.log_path on an objectStorage mount of "
                          "the head role to have the server read them from its bucket")
    assert opened == []  # no secret opened where no bucket is read


# --- a local Run: the Worker's copy while it runs, the bucket after ------------------------------

LATER = {7: {"rollout/rewards": 2.0}}


def test_a_local_run_is_read_from_its_workers_copy_while_it_runs_and_from_the_bucket_after(
        s3, s3_server, tmp_path, rlark_home):
    from rlark import settings
    from rlark.runtimes.local.objects import object_dir
    from rlark.runtimes.local.sandbox import worker_dirs

    prefix = f"local-{time.monotonic_ns()}"
    mounts = [mount("data", "/srv/data", "/data", "hostPath"),
              mount("ckpt", f"s3://{BUCKET}/{prefix}", "/ckpt",
                    objectStorage={"endpoint": s3_server.endpoint, "secret": "s3"})]
    rec = {"run": 1, "runUid": "local-run", "runtime": "local", "provisional": True,
           "spec": job(mounts), "workingDir": None,
           "workers": {"items": [{"nodeRank": 0, "role": "head"}]},
           "configs": {"resolved": {"data": {"runner": {"logger": {"log_path": "/ckpt/logs"}}}}},
           "times": {"created": iso(time.time() - 30), "finished": None}}
    # the keeper's copy of the mount (index 1 of the role) in the Worker's own directory
    root = worker_dirs(str(settings.rlark_home()), settings.ray_tmp_root(), "local-run", 0).root
    copy = f"{object_dir(root, 1)}/logs/tensorboard"
    write_events(copy)
    upload(s3, tmp_path, f"{prefix}/logs/tensorboard", LATER)
    live = curves._scalars_of(rec, "Running", True, "local", None, keys_of(s3_server))
    assert (live["at"], live["scalars"]) == (copy, expected()), live
    # after the Run the bucket is where the files are kept
    rec.update(provisional=False, times={**rec["times"], "finished": iso(time.time() + 60)})
    after = curves._scalars_of(rec, "Succeeded", True, "local", None, keys_of(s3_server))
    assert after["at"] == f"s3://{BUCKET}/{prefix}/logs/tensorboard"
    assert after["scalars"] == expected(LATER)
    # a bucket that has none (the copy out failed): the Worker's copy, and why not the bucket
    s3.delete_object(Bucket=BUCKET, Key=f"{prefix}/logs/tensorboard/{after['files'][0]}")
    fallback = curves._scalars_of(rec, "Failed", True, "local", None, keys_of(s3_server))
    assert (fallback["at"], fallback["scalars"]) == (copy, expected())
    assert fallback["notes"] == [f"no event files for this Run in /ckpt/logs/tensorboard "
                                 f"(objectStorage mount ckpt, s3://{BUCKET}/{prefix}/logs/"
                                 "tensorboard)"]


def test_an_endpoint_that_fails_is_not_asked_again_at_every_poll(s3, s3_server, tmp_path):
    """The console polls a live Run's curves: an endpoint that fails is remembered for a while
    (each read of one that does not answer costs the S3 client's timeouts), and asked again at
    once with new credentials."""
    from rlark.record.outputs import s3_client
    from rlark.services import curves_bucket
    from tests.server import free_port

    made = []

    def counting_client(*args):
        made.append(args)
        return s3_client(*args)

    prefix = f"down-{time.monotonic_ns()}"
    where = curves_bucket.BucketDir(
        {"name": "ckpt", "type": "objectStorage", "source": f"s3://{BUCKET}/{prefix}",
         "mountPath": "/ckpt",
         "objectStorage": {"endpoint": f"http://127.0.0.1:{free_port()}", "secret": "s3"}},
        BUCKET, prefix)
    keys = keys_of(s3_server)()
    allowed = ["127.0.0.0/8"]
    with pytest.raises(curves_bucket.ReadBackError, match="listing s3://") as first:
        curves_bucket.bucket_scalars(where, keys, allowed, None, None, counting_client)
    with pytest.raises(curves_bucket.ReadBackError) as again:
        curves_bucket.bucket_scalars(where, keys, allowed, None, None, counting_client)
    assert len(made) == 1 and str(first.value) in str(again.value)
    assert "asked again 30 s after" in str(again.value)
    # other credentials: asked at once
    with pytest.raises(curves_bucket.ReadBackError):
        curves_bucket.bucket_scalars(where, {**keys, ("s3", "secretAccessKey"): "other"}, allowed,
                                     None, None, counting_client)
    assert len(made) == 2
