"""Who a local Worker runs as and what it may see (pure): the uid range and its allocation, the
choice of identity, which paths may be given to a Worker, and the mount plan its keeper builds
(runtimes/local/identity.py, runtimes/local/sandbox.py). A file system is a table of modes."""

from __future__ import annotations

import os
import stat

import pytest

from rlark.runtimes.local.runtime import installed_version
from rlark.runtimes.local.identity import DEFAULT_RANGE, UidRange, candidates, choose
from rlark.runtimes.local.sandbox import (SandboxPlanError, access_problem, blocking_dir, plan,
                                          python_prefixes, readable_by_others, worker_dirs)

DIR, FILE = stat.S_IFDIR, stat.S_IFREG

#: a machine: path -> mode (0700 home of root, the server's state inside it; a world-readable
#: /work; /tmp sticky)
FS = {
    "/": DIR | 0o755, "/root": DIR | 0o700, "/root/.rlark": DIR | 0o700,
    "/root/.pyenv": DIR | 0o755, "/root/.pyenv/versions": DIR | 0o755,
    "/root/.pyenv/versions/3.11": DIR | 0o755, "/root/rlark": DIR | 0o755,
    "/root/rlark/examples": DIR | 0o755,
    "/work": DIR | 0o755, "/work/proj": DIR | 0o755, "/work/secret": DIR | 0o700,
    "/work/proj/train.py": FILE | 0o644, "/tmp": DIR | 0o1777, "/var": DIR | 0o755,
    "/var/tmp": DIR | 0o1777, "/run": DIR | 0o755, "/run/lock": DIR | 0o1777, "/opt": DIR | 0o711,
    "/opt/hidden": DIR | 0o700, "/work/venv-ok": DIR | 0o755,
}


def fake_stat(path: str) -> os.stat_result:
    path = os.path.normpath(path)
    if path not in FS:
        raise FileNotFoundError(2, "No such file or directory", path)
    return os.stat_result((FS[path], 0, 0, 1, 0, 0, 0, 0, 0, 0))


HOME = "/root/.rlark"
DIRS = worker_dirs(HOME, "/root/.rlark/ray", "abc123", 2)


def test_worker_dirs_are_the_workers_own():
    assert DIRS.home == "/root/.rlark/workers/abc123/2/home"
    assert DIRS.ray_run == "/root/.rlark/ray/abc123" and DIRS.ray_temp == "/root/.rlark/ray/abc123/2"


@pytest.mark.parametrize("path, blocked_by, readable", [
    ("/work/proj", None, True),
    ("/work/proj/train.py", None, True),
    ("/root/rlark/examples", "/root", False),
    ("/work/secret", None, False),  # every directory above may be entered; it may not be read
    ("/work/secret/x", "/work/secret", False),
    ("/opt/hidden", None, False),  # /opt: 0711 may be entered, not listed
    ("/nowhere/x", "/nowhere", False),
])
def test_what_others_may_reach(path, blocked_by, readable):
    assert blocking_dir(path, fake_stat) == blocked_by
    assert readable_by_others(path, fake_stat) is readable


#: links of the table's machine: a Job's path through one is judged where it leads
LINKS = {"/tmp/x/logs": "/root/.rlark/logs", "/work/proj/link": "/work/secret",
         "/work/locks": "/tmp/rlark-locks"}


def fake_realpath(path: str) -> str:
    path = os.path.normpath(path)
    for link, target in LINKS.items():
        if path == link or path.startswith(link + "/"):
            return target + path[len(link):]
    return path


@pytest.mark.parametrize("path, allowed, problem", [
    ("/work/proj", [], None),
    ("/root/rlark/examples", [], "/root (mode 0700"),
    ("/root/rlark/examples", ["/root/rlark"], None),
    ("/root/rlark/examples", ["/root/rl"], "/root (mode 0700"),  # a prefix of a name is no root
    ("/root/.rlark", ["/root"], "leads into one of the RLark server's own directories"),
    ("/root/.rlark/logs/default/x", ["/"], "leads into one of the RLark server's own directories"),
    ("/root", ["/root"], "leads above one of the RLark server's own directories"),
    ("/", ["/"], "leads above one of the RLark server's own directories"),
    ("/work/secret", [], "/work/secret (mode 0700"),
    # a link a member made: judged where it leads, and the message does not say where
    ("/tmp/x/logs/victim", ["/"], "leads into one of the RLark server's own directories"),
    ("/work/proj/link", [], "/work/secret (mode 0700"),
    ("/work/locks", [], "leads into one of the RLark server's own directories"),
])
def test_what_may_be_given_to_a_worker(path, allowed, problem):
    got = access_problem(path, "spec.workingDir", rlark_home=HOME, allowed=allowed, stat=fake_stat,
                         realpath=fake_realpath, own=["/tmp/rlark-locks", "/run/rlark-stage"])
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got and "spec.workingDir" in got
        assert "--worker-read-path" in got or "own directories" in got
        assert "/root/.rlark/logs" not in got or path.startswith("/root/.rlark")  # where a link leads


@pytest.mark.parametrize("target, problem", [
    ("/data", None), ("/data/models", None), ("/home/me/out", None), ("/tmp/scratch", None),
    ("/etc/rlark-attack", "system's own directory /etc"), ("/", "system's own directory /"),
    ("/var", "touches the system's own directory /var/run"), ("/proc/x", "/proc"),
    ("/run/rlark-stage/b5/x", "system's own directory /run"),
    ("/root/.rlark/logs/x", "system's own directory /root"), ("/srv/locks/x", "RLark server's own"),
    ("/data/../etc", "'..'"), ("data", "not an absolute path"),
])
def test_where_a_worker_may_mount(target, problem):
    from rlark.runtimes.local.sandbox import mount_target_problem

    got = mount_target_problem(target, "mountPath", rlark_home="/srv/rlark", own=["/srv/locks"])
    assert (got is None) if problem is None else (got is not None and problem in got), got


def test_the_plan_hides_the_servers_state_and_binds_back_what_the_worker_needs():
    p = plan(DIRS, rlark_home=HOME, read_only=["/root/.pyenv/versions/3.11", "/work/venv-ok"],
             working_dir="/root/rlark/examples", shm_bytes=100, stat=fake_stat)
    # /root may not be entered by others: covered, with the needed paths bound back into it;
    # $RLARK_HOME lies inside, so one cover does
    assert p["hide"] == ["/root"]
    targets = {b["target"]: b for b in p["binds"]}
    assert targets[DIRS.home]["readonly"] is False and targets[DIRS.ray_run]["readonly"] is False
    assert targets["/tmp"]["source"] == DIRS.tmp and targets["/var/tmp"]["source"] == DIRS.tmp
    assert targets["/root/.pyenv/versions/3.11"]["readonly"] is True
    assert "/work/venv-ok" not in targets  # readable by others anyway: nothing to bind
    assert p["overlays"] == [{"lower": "/root/rlark/examples", "upper": DIRS.upper,
                              "work": DIRS.work, "target": "/root/rlark/examples"}]
    assert p["tmpfs"][0]["target"] == "/dev/shm" and p["tmpfs"][0]["size"] > 100
    # the machine's other shared writable directories are the Worker's own, empty
    assert [t["target"] for t in p["tmpfs"][1:]] == [d for d in ("/run/lock",) if d in FS]
    assert p["stage"] == "/run/rlark-stage"


def test_the_state_directory_is_hidden_whatever_its_mode():
    open_fs = {**FS, "/srv": DIR | 0o755, "/srv/rlark": DIR | 0o755}

    def st(path):
        path = os.path.normpath(path)
        if path not in open_fs:
            raise FileNotFoundError(2, "missing", path)
        return os.stat_result((open_fs[path], 0, 0, 1, 0, 0, 0, 0, 0, 0))

    d = worker_dirs("/srv/rlark", "/tmp/ray", "r1", 0)
    p = plan(d, rlark_home="/srv/rlark", working_dir="/work/proj", shm_bytes=0, stat=st)
    assert p["hide"] == ["/srv/rlark"]


def test_a_plan_that_would_hide_everything_or_the_stage_is_refused():
    closed = {**FS, "/": DIR | 0o700}

    def st(path):
        path = os.path.normpath(path)
        if path not in closed:
            raise FileNotFoundError(2, "missing", path)
        return os.stat_result((closed[path], 0, 0, 1, 0, 0, 0, 0, 0, 0))

    with pytest.raises(SandboxPlanError, match="others may not enter /"):
        plan(DIRS, rlark_home=HOME, shm_bytes=0, stat=st)
    with pytest.raises(SandboxPlanError, match="stage"):
        plan(worker_dirs("/run/x", "/run/x/ray", "r", 0), rlark_home="/run", shm_bytes=0,
             stat=fake_stat)
    with pytest.raises(SandboxPlanError, match="overlay"):
        plan(DIRS, rlark_home=HOME, working_dir="/work/a,b", shm_bytes=0, stat=fake_stat)


def test_python_prefixes_of_a_virtualenv_and_its_base():
    files = {"/venv/pyvenv.cfg": "home = /opt/py/3.10/bin\ninclude-system-site-packages = false\n"}

    def read(path):
        if path not in files:
            raise FileNotFoundError(path)
        return files[path]

    got = python_prefixes("/venv/bin/python", realpath=lambda p: "/opt/py/3.10/bin/python3.10",
                          read_text=read)
    assert got == ["/venv", "/opt/py/3.10"]
    assert python_prefixes("/usr/bin/python3", realpath=lambda p: "/usr/bin/python3.11",
                           read_text=read) == ["/usr"]


def test_the_ray_version_of_an_environment_is_read_from_its_metadata_not_run():
    tree = {"/env/lib": ["python3.10"], "/env/lib/python3.10/site-packages": [
        "numpy-1.26.4.dist-info", "ray-2.47.1.dist-info", "ray"]}

    def listdir(path):
        if path not in tree:
            raise FileNotFoundError(path)
        return tree[path]

    assert installed_version("/env", "ray", listdir) == (2, 47)
    assert installed_version("/env", "torch", listdir) is None
    assert installed_version("/nothing", "ray", listdir) is None


# --- identity ------------------------------------------------------------------------------------------


def test_the_uid_range():
    assert UidRange.parse("200000-200009") == UidRange(200000, 200009)
    assert UidRange(*DEFAULT_RANGE).first == 0x70000000 and UidRange(*DEFAULT_RANGE).size == 65536
    for bad in ("1-5", "5000-4000", "abc", "70000", "1000-2147483648"):
        with pytest.raises(ValueError, match="RLARK_WORKER_UIDS"):
            UidRange.parse(bad)


def test_a_runs_uid_is_one_no_live_run_holds_spread_over_the_range():
    rng = UidRange(5000, 5009)
    first = next(candidates("000000000003", rng, set()))
    assert first == 5003
    assert list(candidates("000000000003", rng, {5003, 5004}))[:2] == [5005, 5006]
    assert sorted(candidates("ab", rng, set())) == list(range(5000, 5010))
    assert list(candidates("ab", rng, set(range(5000, 5010)))) == []
    assert next(candidates("zz-not-hex", rng, set())) in rng


@pytest.mark.parametrize("requested, root, pidns, mode", [
    ("auto", True, True, "uid"),
    ("auto", False, True, "server-user"),
    ("auto", True, False, "server-user"),
    ("server-user", True, True, "server-user"),
    ("uid", True, True, "uid"),
])
def test_the_identity_chosen(requested, root, pidns, mode):
    got = choose(requested, root=root, pid_namespace=pidns, rng=UidRange(*DEFAULT_RANGE))
    assert got.mode == mode and got.own_uid == (mode == "uid")
    assert bool(got.why) == (mode != "uid")


def test_an_identity_that_cannot_be_given_is_refused_at_start():
    with pytest.raises(ValueError, match="not root"):
        choose("uid", root=False, pid_namespace=True, rng=UidRange(*DEFAULT_RANGE))
    with pytest.raises(ValueError, match="not one of"):
        choose("nobody", root=True, pid_namespace=True, rng=UidRange(*DEFAULT_RANGE))


# --- the Job's mounts (issue 22): hostPath and pvc bound at mountPath, read-only where asked ----


@pytest.mark.parametrize("source, problem", [
    ("/work/proj", None), ("/data/models", None), ("/tmp/x/y", None),
    ("/etc", "is the node's system directory /etc"),
    ("/etc/ssl", "lies under the node's system directory /etc"),
    ("/var", "contains the node's system directory /var/run"),
    ("/", "is the node's system directory /"),
    ("/root/rlark/data", "lies under the node's system directory /root"),
    ("/work/etc-link/ssl", "lies under the node's system directory /etc"),  # judged where it leads
])
def test_a_host_path_source_is_never_a_system_directory(source, problem):
    from rlark.runtimes.local.sandbox import host_source_problem

    def realpath(path):
        return fake_realpath(path).replace("/work/etc-link", "/etc")

    got = host_source_problem(source, "spec.roles[0].mounts[0].source", realpath=realpath)
    if problem is None:
        assert got is None
    else:
        assert got is not None and problem in got and "spec.roles[0].mounts[0].source" in got


@pytest.mark.parametrize("project, name, ok", [
    ("default", "ckpt", True), ("vision", "data.v2", True), ("default", "a" * 253, True),
    ("default", "Ckpt", False), ("default", "..", False), ("default", "a/b", False),
    ("default", "-x", False), ("default", "", False), ("default", "a" * 254, False),
    ("..", "ckpt", False), ("a/b", "ckpt", False), ("", "ckpt", False),
])
def test_a_volume_is_a_directory_of_its_project_and_its_name_is_a_claims(project, name, ok):
    from rlark.runtimes.local.volumes import volume_dir

    if ok:
        assert volume_dir("/srv/rlark", project, name) == f"/srv/rlark/volumes/{project}/{name}"
    else:
        with pytest.raises(ValueError):
            volume_dir("/srv/rlark", project, name)
