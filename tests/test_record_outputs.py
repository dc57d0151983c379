"""The outputs-readable check reads outputs where they really are on this machine (issue 19,
item 7): a local Worker with a uid of its own writes below its Job's working directory into its
own overlay directory, and into a hostPath mount's source; the server looks there, never
through a symbolic link the workload made, and never at what the Workers could not reach.
``host_view`` is pure (``lstat`` given); ``probe_outputs`` looks at real directories."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rlark.record.checks import check_outputs
from rlark.runtimes.local_sandbox import worker_dirs
from rlark.services.records import HostView, host_view, look_at, probe_outputs

DIRS = worker_dirs("/home/r/.rlark", "/tmp/rr", "u1", 2)
MOUNTS = [("/srv/out", "/w/out"), ("/srv/data", "/data")]


def lstat_of(present: dict[str, int]):
    """An ``lstat`` that knows only ``present`` (path -> st_mode; a whiteout: S_IFCHR)."""
    def lstat(path: str) -> os.stat_result:
        if path not in present:
            raise FileNotFoundError(path)
        return os.stat_result((present[path], 0, 0, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": 0})
    return lstat


def view(path: str, present: dict[str, int] | None = None, sandboxed: bool = True) -> HostView:
    return host_view(path, rank=2, sandboxed=sandboxed, working_dir="/w", host_mounts=MOUNTS,
                     dirs=DIRS, lstat=lstat_of(present or {}))


def test_where_a_local_workers_view_of_a_path_lies_on_this_machine():
    upper = DIRS.upper
    # written by the run below the working directory: in the Worker's own overlay directory
    assert view("/w/results/run1", {f"{upper}/results/run1": stat.S_IFDIR}) == HostView(
        f"{upper}/results/run1", upper, "rank 2's copy of the working directory")
    # not written by the run: the working directory's own file, as the Worker saw it
    assert view("/w/results/run1").at == "/w/results/run1"
    assert view("/w").at == "/w" and view("/w", {upper: stat.S_IFDIR}).at == upper
    # removed by the run: overlayfs leaves a whiteout (a character device 0:0)
    gone = view("/w/old", {f"{upper}/old": stat.S_IFCHR})
    assert gone.at is None and "removed" in (gone.why or "")
    # a hostPath mount inside the working directory wins (the deepest place holding the path)
    assert view("/w/out/ckpt").at == "/srv/out/ckpt" and view("/data").at == "/srv/data"
    assert view("/tmp/x/y").at == f"{DIRS.tmp}/x/y" and view("/var/tmp/z").at == f"{DIRS.tmp}/z"
    assert view(f"{DIRS.home}/.cache/a").at == f"{DIRS.home}/.cache/a"
    assert view("/dev/shm/seg").at is None
    # anywhere else: this machine's file system, as other users see it
    other = view("/srv/shared/out")
    assert (other.at, other.others) == ("/srv/shared/out", True)
    # Workers that ran as the server's user saw this machine's file system as it is
    assert view("/w/results/run1", {f"{upper}/results/run1": stat.S_IFDIR},
                sandboxed=False) == HostView("/w/results/run1", "/", "this machine's file system")


def record(work: Path, *paths: str) -> dict:
    out = work.parent / "mounted"
    return {
        "runtime": "local", "runUid": "u1", "workingDir": str(work),
        "spec": {"spec": {"roles": [{"name": "head", "mounts": [
            {"name": "out", "type": "hostPath", "source": str(out), "mountPath": "/mnt/out"}]}]}},
        "workers": {"items": [{"name": "j-head-0", "role": "head", "nodeRank": 0, "log": None,
                               "facts": {"python": "3.11.7"}}]},
        "locations": [{"key": f"k{i}", "kind": "output", "path": p, "byRole": {}}
                      for i, p in enumerate(paths)],
    }


@pytest.fixture
def work(rlark_home, tmp_path) -> Path:
    work = tmp_path / "job"
    (work / "results").mkdir(parents=True)  # in the user's own directory: what the run did not touch
    (tmp_path / "mounted" / "ckpt").mkdir(parents=True)
    (tmp_path / "mounted" / "ckpt" / "step-1.pt").write_text("w")
    upper = Path(worker_dirs(str(rlark_home), "/tmp/rr", "u1", 0).upper)
    (upper / "results" / "run1").mkdir(parents=True)
    (upper / "results" / "run1" / "placement.json").write_text("{}\n")
    return work


def test_outputs_are_read_where_the_workers_wrote_them(work, rlark_home):
    upper = worker_dirs(str(rlark_home), "/tmp/rr", "u1", 0).upper
    rec = record(work, f"{work}/results/run1", "/mnt/out/ckpt", f"{work}/results/none")
    probes = probe_outputs(rec, sandboxed=True)
    outputs = probes["outputs"]
    assert outputs[f"{work}/results/run1"] == {
        "exists": True, "readable": True, "entries": 1, "at": f"{upper}/results/run1"}
    assert outputs["/mnt/out/ckpt"] == {"exists": True, "readable": True, "entries": 1,
                                        "at": f"{work.parent}/mounted/ckpt"}
    assert outputs[f"{work}/results/none"]["exists"] is False
    check = check_outputs(rec, probes)
    assert check["status"] == "fail"
    assert check["evidence"] == [f"output path {work}/results/none (k2) does not exist after the Run"]
    rec["locations"].pop()
    assert check_outputs(rec, probe_outputs(rec, sandboxed=True))["evidence"] == [
        f"output path {work}/results/run1: readable, 1 entries (on this machine: "
        f"{upper}/results/run1)",
        f"output path /mnt/out/ckpt: readable, 1 entries (on this machine: "
        f"{work.parent}/mounted/ckpt)"]
    # the same Run without a sandbox: its Workers wrote to the path itself
    assert probe_outputs(rec, sandboxed=False)["outputs"][f"{work}/results/run1"]["exists"] is False


def test_a_link_the_workload_made_does_not_lead_the_server_elsewhere(work, rlark_home, tmp_path):
    upper = Path(worker_dirs(str(rlark_home), "/tmp/rr", "u1", 0).upper)
    secret = tmp_path / "server-only"
    secret.mkdir(mode=0o700)
    (secret / "a").write_text("x")
    (upper / "results" / "escape").symlink_to(secret)
    rec = record(work, f"{work}/results/escape", str(secret))
    got = probe_outputs(rec, sandboxed=True)["outputs"]
    assert got[f"{work}/results/escape"]["readable"] is False
    assert got[f"{work}/results/escape"]["entries"] is None
    assert "is a symbolic link out of rank 0's copy of the working directory" in \
        got[f"{work}/results/escape"]["why"]
    # /tmp of a Worker is its own: not this machine's
    assert got[str(secret)]["at"].startswith(str(rlark_home / "workers" / "u1" / "0" / "tmp"))
    assert got[str(secret)]["exists"] is False
    # a path of this machine the Workers' uid could not reach (below a directory of mode 0700,
    # or in $RLARK_HOME) is not looked into
    for hidden in (secret, rlark_home / "workers"):
        got = look_at(HostView(str(hidden), "/", "this machine", others=True), str(rlark_home))
        assert got["exists"] is False and got["entries"] is None
        assert "is not where the Workers' uid could reach" in got["why"]


def test_nothing_is_looked_at_for_workers_that_reported_nothing_or_elsewhere(work):
    rec = record(work, f"{work}/results/run1")
    rec["workers"]["items"][0]["facts"] = {}
    assert probe_outputs(rec, sandboxed=True)["outputs"] == {}
    assert probe_outputs({**record(work, f"{work}/results/run1"), "runtime": "kubernetes"},
                         sandboxed=True)["outputs"] == {}
