"""objectStorage in FUSE mode on the local runtime, the pure parts (issue 22): the mode a mount
gets, s3fs's command line, what the keeper reads of mountinfo and of s3fs's words, the probe of
what this machine offers, the preflight's refusal, the lifecycle line and the record's mode.
End to end against a real S3 server: tests/test_local_fuse.py."""

from __future__ import annotations

import os

import pytest

from rlark.bootstrap.fuse import mountinfo_has, s3fs_argv, s3fs_message
from rlark.controller.lifecycle import check_event
from rlark.record.build import _copies
from rlark.runtimes.local.objects import copy_mounts, fuse_problem, mount_mode
from rlark.runtimes.local.preflight import check_for_local_runtime
from rlark.spec import parse_job

MOUNT = {"name": "ckpt", "source": "s3://bkt/runs/a", "bucket": "bkt", "prefix": "runs/a",
         "path": "/ckpt", "read_only": False, "endpoint": "http://127.0.0.1:9000/",
         "region": None, "access_key_id": "AKIA-SECRET-ID", "secret_access_key": "SK-SECRET"}


def job(mode: str | None):
    store = {"endpoint": "http://s3.local:9000", "secret": "s3", **({"mode": mode} if mode else {})}
    j, findings = parse_job({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "f"},
        "spec": {"headRole": "head", "runScript": "true", "roles": [{
            "name": "head", "image": "x/y:1", "mounts": [{
                "name": "ckpt", "type": "objectStorage", "source": "s3://bkt/runs/a",
                "mountPath": "/ckpt", "objectStorage": store}]}]}})
    assert j is not None, findings
    return j


@pytest.mark.parametrize("requested, problem, want", [
    ("copy", None, ("copy", None)),
    ("fuse", None, ("fuse", None)),
    ("auto", None, ("fuse", None)),
    (None, None, ("fuse", None)),
    ("auto", "no s3fs", ("copy", "auto: copy, because FUSE is not available here: no s3fs")),
    ("copy", "no s3fs", ("copy", None)),
])
def test_auto_is_fuse_where_the_server_can_and_copy_with_the_reason_elsewhere(
        requested, problem, want):
    assert mount_mode(requested, problem) == want


def test_the_keepers_entries_carry_the_mode_asked_and_the_mode_given():
    secrets = {("s3", "accessKeyId"): "AK", ("s3", "secretAccessKey"): "SK"}
    [fuse] = copy_mounts(job("fuse").spec.roles[0], secrets, None)
    assert (fuse["mode"], fuse["requested"], "why" in fuse) == ("fuse", "fuse", False)
    [auto] = copy_mounts(job(None).spec.roles[0], secrets, None)
    assert (auto["mode"], auto["requested"]) == ("fuse", "auto")
    [fallback] = copy_mounts(job("auto").spec.roles[0], secrets, "no /dev/fuse")
    assert (fallback["mode"], fallback["why"]) == (
        "copy", "auto: copy, because FUSE is not available here: no /dev/fuse")


def test_fuse_is_refused_at_preflight_where_the_server_cannot_mount_it():
    [finding] = check_for_local_runtime(job("fuse"), fuse="s3fs is not installed here: no "
                                                          "executable '/opt/none/s3fs'")
    assert (finding.code, finding.path, finding.severity.value) == (
        "MountUnavailable", "spec.roles[0].mounts[0].objectStorage.mode", "error")
    assert "objectStorage.mode = 'fuse'" in finding.message
    assert "/opt/none/s3fs" in finding.message and "s3://bkt/runs/a" in finding.message
    assert "apt-get install s3fs" in finding.hint and "mode: copy" in finding.hint
    # where it can, and for auto and copy wherever: nothing to say
    assert check_for_local_runtime(job("fuse"), fuse=None) == []
    assert check_for_local_runtime(job("auto"), fuse="no s3fs") == []
    assert check_for_local_runtime(job("copy"), fuse="no s3fs") == []


def test_the_probe_names_what_is_missing(tmp_path):
    filesystems = tmp_path / "filesystems"
    filesystems.write_text("nodev\tsysfs\nnodev\ttmpfs\n\text4\n")
    s3fs = tmp_path / "s3fs"
    s3fs.write_text("#!/bin/sh\n")
    s3fs.chmod(0o755)
    assert "is missing" in fuse_problem(str(s3fs), dev=str(tmp_path / "no-fuse"),
                                        filesystems=str(filesystems))
    assert "not a FUSE device" in fuse_problem(str(s3fs), dev=str(filesystems),
                                               filesystems=str(filesystems))
    if os.path.exists("/dev/fuse"):
        assert "no fuse file system" in fuse_problem(str(s3fs), filesystems=str(filesystems))
        filesystems.write_text("nodev\tfuse\n")
        assert fuse_problem(str(s3fs), filesystems=str(filesystems)) is None
        assert "no executable" in fuse_problem(str(tmp_path / "none"),
                                               filesystems=str(filesystems))
        s3fs.chmod(0o644)
        assert "no executable" in fuse_problem(str(s3fs), filesystems=str(filesystems))


def test_s3fs_gets_no_secret_on_its_command_line_and_no_option_from_the_job():
    argv = s3fs_argv("/usr/bin/s3fs", MOUNT, "/tmp/.rlark-s3fs-x/passwd", 20001, 20001)
    assert argv[:5] == ["/usr/bin/s3fs", "bkt:/runs/a", "/ckpt", "-f", "-o"]
    assert argv[5].split(",") == [
        "url=http://127.0.0.1:9000", "use_path_request_style", "endpoint=us-east-1",
        "passwd_file=/tmp/.rlark-s3fs-x/passwd", "allow_other", "uid=20001", "gid=20001",
        "umask=0077", "mp_umask=0077", "retries=3", "connect_timeout=10"]
    assert not any("SECRET" in a for a in argv)
    ro = s3fs_argv("s3fs", {**MOUNT, "read_only": True, "prefix": "", "endpoint": None,
                            "region": "eu-west-1"}, None, 5, 6)
    assert ro[1] == "bkt" and ro[5].split(",") == [
        "endpoint=eu-west-1", "public_bucket=1", "allow_other", "uid=5", "gid=6", "umask=0077",
        "mp_umask=0077", "retries=3", "connect_timeout=10", "ro"]
    # an endpoint that would add options to a process of root's is refused
    with pytest.raises(ValueError, match="objectStorage.endpoint"):
        s3fs_argv("s3fs", {**MOUNT, "endpoint": "http://h,passwd_file=/etc/shadow"}, None, 5, 5)
    with pytest.raises(ValueError, match="objectStorage.region"):
        s3fs_argv("s3fs", {**MOUNT, "region": "us-east-1 -o x"}, None, 5, 5)


def test_the_keeper_finds_the_mount_at_exactly_its_path():
    info = ("36 35 98:0 / /mnt rw - ext4 /dev/root rw\n"
            "174 36 0:46 / /mnt/my\\040data rw,nosuid,nodev - fuse.s3fs s3fs rw,allow_other\n"
            "175 36 0:47 / /ckpt rw - tmpfs tmpfs rw\n")
    assert mountinfo_has(info, "/mnt/my data")
    assert not mountinfo_has(info, "/mnt")  # ext4, not FUSE
    assert not mountinfo_has(info, "/ckpt")  # a mount, not FUSE
    assert not mountinfo_has(info, "/mnt/my")


def test_s3fs_own_words_make_the_failures_message():
    lines = ["2026-12-02T10:25:35.224Z [INF] s3fs version 1.90(unknown) : s3fs -f ...",
             "2026-12-02T10:25:35.237Z [CRT] s3fs.cpp:s3fs_check_service(3575): Failed to "
             "connect by sigv4, so retry to connect by signature version 2.",
             "2026-12-02T10:25:35.238Z [CRT] s3fs.cpp:s3fs_check_service(3590): invalid "
             "credentials(host=http://127.0.0.1:15390) - result of checking service."]
    said = s3fs_message(lines)
    assert said.endswith("[CRT] s3fs.cpp:s3fs_check_service(3590): invalid credentials(host="
                         "http://127.0.0.1:15390) - result of checking service.")
    assert "2026-12-02" not in said and "[INF]" not in said
    assert s3fs_message(["s3fs: credentials file /x should not have others permissions."]) == \
        "s3fs: credentials file /x should not have others permissions."
    assert s3fs_message([]) == ""


def test_the_fuse_mount_lines_are_read_and_bad_ones_are_not():
    up = {"ts": 1.0, "event": "mount", "name": "ckpt", "mode": "fuse", "direction": "mount",
          "seconds": 0.4, "requested": "auto"}
    assert check_event(up) == up
    down = {"ts": 2.0, "event": "mount", "name": "ckpt", "mode": "fuse", "direction": "unmount"}
    assert check_event(down) == down
    assert check_event({**up, "direction": "in"}) is None  # copy's directions are copy's
    assert check_event({**up, "mode": "nfs"}) is None
    assert check_event({**up, "requested": "sometimes"}) is None
    copied = {"ts": 1.0, "event": "mount", "name": "ckpt", "mode": "copy", "direction": "in",
              "files": 1, "bytes": 3, "requested": "auto", "why": "auto: copy, because ..."}
    assert check_event(copied) == copied
    assert check_event({**copied, "direction": "mount"}) is None


def test_the_record_says_which_mode_each_mount_had():
    class W:
        def __init__(self, name, mounts):
            self.name, self.role, self.lifecycle = name, "head", {"mounts": mounts}

    fuse = {"mode": "fuse", "requested": "auto", "mounted": True, "unmounted": True}
    workers = [W("w-0", {"ckpt": fuse}), W("w-1", {"ckpt": fuse})]
    assert _copies(workers, "head", {"name": "ckpt"}) == {
        "mode": "fuse", "copies": [{"worker": "w-0", **fuse}, {"worker": "w-1", **fuse}]}
    workers[1].lifecycle["mounts"]["ckpt"] = {"mode": "copy", "inFiles": 0, "inBytes": 0}
    assert _copies(workers, "head", {"name": "ckpt"})["mode"] == "mixed"
    assert _copies(workers, "head", {"name": "data"}) == {}
