"""What the local runtime cannot honour is reported at submit (runtimes/local/preflight.py)."""

from __future__ import annotations

import sys

import pytest

from rlark.runtimes.local.preflight import check_for_local_runtime
from rlark.services.errors import Invalid
from rlark.services.jobs import JobService
from rlark.spec import parse_job
from rlark.store import Store


def job(role_extra: dict):
    data = {
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "loc"},
        "spec": {"headRole": "head", "runScript": "true",
                 "roles": [{"name": "head", "image": "x/y:1", **role_extra}]},
    }
    j, findings = parse_job(data)
    assert j is not None, findings
    return j


@pytest.mark.parametrize("extra, code, path, severity", [
    ({"local": {"python": "/nonexistent/bin/python"}}, "PythonNotFound", "spec.roles[0].local.python", "error"),
    ({"local": {"python": "/nonexistent-venv"}}, "PythonNotFound", "spec.roles[0].local.python", "error"),
    ({"mounts": [{"name": "d", "type": "objectStorage", "source": "s3://bucket/p", "mountPath": "/data",
                  "objectStorage": {"mode": "fuse"}}]},
     "MountUnavailable", "spec.roles[0].mounts[0].objectStorage.mode", "error"),
    ({"mounts": [{"name": "d", "type": "objectStorage", "source": "gs://bucket/p", "mountPath": "/data"}]},
     "MountUnavailable", "spec.roles[0].mounts[0].type", "error"),
    ({"mounts": [{"name": "d", "type": "hostPath", "source": "/nonexistent-dir", "mountPath": "/data"}]},
     "MountSourceMissing", "spec.roles[0].mounts[0].source", "warning"),
    ({"nodeSelector": {"gpu": "h100"}}, "NodeSelectorIgnoredLocally", "spec.roles[0].nodeSelector", "warning"),
], ids=["python-missing", "venv-missing", "object-storage-fuse", "object-storage-not-s3",
        "hostpath-missing", "node-selector"])
def test_local_runtime_findings(extra, code, path, severity):
    findings = check_for_local_runtime(job(extra))
    assert [(f.code, f.path, f.severity.value) for f in findings] == [(code, path, severity)]
    assert path in findings[0].message and findings[0].hint


@pytest.mark.parametrize("extra", [
    {"local": {"python": sys.executable}},
    {"local": {"python": sys.prefix}},  # a virtualenv directory
    {"mounts": [{"name": "t", "type": "hostPath", "source": "/tmp", "mountPath": "/tmp"}]},
    {"mounts": [{"name": "d", "type": "pvc", "source": "data", "mountPath": "/data"}]},
    {},
], ids=["python-exe", "venv-dir", "hostpath-same-path", "pvc", "plain"])
def test_local_runtime_accepts(extra):
    assert check_for_local_runtime(job(extra)) == []


def test_mounts_are_bound_for_workers_with_their_own_uid_and_refused_for_the_others(tmp_path):
    from rlark.runtimes.local.runtime import LocalRuntime
    from rlark.runtimes.local.identity import DEFAULT_RANGE, Identity, UidRange

    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)
    private.mkdir(mode=0o755)
    mounts = {"mounts": [
        {"name": "s", "type": "hostPath", "source": str(shared), "mountPath": "/data"},
        {"name": "p", "type": "hostPath", "source": str(private), "mountPath": str(private)},
        {"name": "r", "type": "hostPath", "source": str(private), "mountPath": "/ro", "readOnly": True},
        {"name": "v", "type": "pvc", "source": "ckpt", "mountPath": "/ckpt"},
        {"name": "e", "type": "hostPath", "source": "/etc", "mountPath": "/host-etc", "readOnly": True}]}
    own = LocalRuntime(identity=Identity("uid", uids=UidRange(*DEFAULT_RANGE)))
    found = [(f.code, f.path) for f in own._mount_findings(0, job(mounts).spec.roles[0])]
    # bound at mountPath; the uid of a Run may not write a directory only its owner may; a
    # system directory is never a source
    assert found == [("HostPathNotWritable", "spec.roles[0].mounts[1].source"),
                     ("HostPathNotAllowed", "spec.roles[0].mounts[4].source")]
    solo = LocalRuntime(identity=Identity("server-user", why="not root", uids=UidRange(*DEFAULT_RANGE)))
    found = [(f.code, f.path, f.severity.value)
             for f in solo._mount_findings(0, job(mounts).spec.roles[0])]
    # as the server's own user nothing can be bound: what would be missing is refused, never run
    assert found == [("MountUnavailable", "spec.roles[0].mounts[0].mountPath", "error"),
                     ("MountUnavailable", "spec.roles[0].mounts[2].mountPath", "error"),
                     ("MountUnavailable", "spec.roles[0].mounts[3].type", "error"),
                     ("MountUnavailable", "spec.roles[0].mounts[4].mountPath", "error"),
                     ("HostPathNotAllowed", "spec.roles[0].mounts[4].source", "error")]


def test_submit_refuses_a_missing_interpreter_and_keeps_warnings(rlark_home):
    svc = JobService(Store(f"sqlite:///{rlark_home / 'db.sqlite'}"), runtime="local")
    base = "apiVersion: rlark.io/v1\nkind: Job\nmetadata: {name: %s}\nspec:\n  headRole: head\n  runScript: 'true'\n  roles:\n  - {name: head, image: 'x/y:1', %s}\n"
    with pytest.raises(Invalid) as exc:
        svc.create(base % ("nopy", "local: {python: /nonexistent/python}"))
    assert [f.code for f in exc.value.findings] == ["PythonNotFound"]
    assert svc.list()["total"] == 0
    created = svc.create(base % ("sel", "nodeSelector: {gpu: h100}"))
    assert [f["code"] for f in created["findings"]] == ["NodeSelectorIgnoredLocally"]


def test_a_path_workers_may_not_see_is_never_said_to_exist_or_not(rlark_home, tmp_path):
    """Preflight runs as the server (root): whether a path below a directory others may not
    enter exists must not show in its answer, or a member maps other projects' Jobs (their log
    directories) and /root through submit (found by an attack pass). The Workers' own rule says
    why the path cannot be given instead."""
    from rlark.runtimes.local.runtime import LocalRuntime
    from rlark.runtimes.local.identity import DEFAULT_RANGE, Identity, UidRange

    rt = LocalRuntime(identity=Identity("uid", uids=UidRange(*DEFAULT_RANGE)), read_paths=[])
    (rlark_home / "logs" / "other-project" / "their-job").mkdir(parents=True)
    answers = []
    for name in ("their-job", "no-such-job"):
        source = str(rlark_home / "logs" / "other-project" / name)
        j = job({"mounts": [{"name": "m", "type": "hostPath", "source": source,
                             "mountPath": "/data"}]})
        found = check_for_local_runtime(j, reachable=rt.path_reachable) + rt.preflight(j)
        codes = sorted(f.code for f in found)
        answers.append((codes, [f.message.replace(name, "NAME") for f in found]))
        assert "MountSourceMissing" not in codes and "NotReadableByWorkers" in codes
    assert answers[0] == answers[1]  # the same answer, whether it exists or not


def test_a_launch_refuses_a_mount_it_cannot_provide_before_anything_starts(tmp_path):
    """A Job stored before these checks (or whose server changed since) reaches a launch: the
    runtime refuses there too, naming the mount, and starts nothing (no log file is made)."""
    from rlark.ranks import PlannedWorker
    from rlark.runtimes.base import LaunchRefused, LaunchSpec, WorkerPlace
    from rlark.runtimes.local.identity import DEFAULT_RANGE, Identity, UidRange
    from rlark.runtimes.local.runtime import LocalRuntime

    solo = LocalRuntime(identity=Identity("server-user", why="not root", uids=UidRange(*DEFAULT_RANGE)))
    head = PlannedWorker(name="loc-head-0", role="head", index=0, node_rank=0, is_head=True)
    log = tmp_path / "logs" / "head.log"
    for mount, words in (
            ({"name": "s", "type": "objectStorage", "source": "s3://bucket/p", "mountPath": "/d"},
             "an object-storage copy is bound in a Worker's own mount namespace"),
            ({"name": "v", "type": "pvc", "source": "ckpt", "mountPath": "/ckpt"},
             "Workers that run as this server's own user have none")):
        spec = LaunchSpec(job=job({"mounts": [mount]}), run_uid="r1", worker=head, env={},
                          log_path=str(log), place=WorkerPlace(), project="default")
        with pytest.raises(LaunchRefused, match=words):
            solo.launch(spec)
        assert not log.parent.exists()
