"""Ending a local Worker ends every process it started, in each kind of isolation and with the
privileges a server really has (issue 13, item 6): as root, as root without CAP_SYS_ADMIN (a
default container: no PID namespace can be made), and as a user other than root.

The attack: a Worker whose script leaves three processes behind, one in its own session
(``setsid``), the orphan of a double fork, and one in its own session with an empty environment
(``env -i setsid``); then the Worker ends by itself (the Run ends) or is stopped (SIGTERM, then
SIGKILL). The safe outcome: none of the three survives (found by their command lines, bounded
wait), and a Worker's cgroup is removed. The runtime runs in a child process
(tests/isolation_child.py) with the privileges under test; the Worker's "interpreter" is the
attacking script, so no Ray is needed to prove the runtime's part (the end-to-end tests with
real Workers are in tests/test_leftovers.py).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from rlark.runtimes.local import isolation as iso
from rlark.runtimes.local.isolation import Mode

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534

ATTACK = """#!/bin/sh
# a Worker that leaves processes behind: one in its own session, the orphan of a double fork,
# and one in its own session with no environment at all
setsid sleep "1000.$LEFTOVER_TOKEN" </dev/null >/dev/null 2>&1 &
( sleep "1001.$LEFTOVER_TOKEN" </dev/null >/dev/null 2>&1 & )
env -i setsid sleep "1002.$LEFTOVER_TOKEN" </dev/null >/dev/null 2>&1 &
[ "$STAY" = 1 ] && exec sleep "600.$LEFTOVER_TOKEN"
# the test has seen the three (in a PID namespace they die the moment this script ends)
while [ ! -e "$GO" ]; do sleep 0.05; done
exit 0
"""

#: root outside: what a user other than root sees of this machine. /root (where this
#: interpreter lives) is closed to other users, so the child runs in a mount namespace of its
#: own in which /root is an open tmpfs holding only a bind mount of the interpreter's tree; the
#: host's mounts are untouched. $1: the interpreter's top directory below /root, $2: a cgroup to
#: delegate to the user first (or ""), then the command.
AS_USER = r"""
set -e
top="$1"; delegate="$2"; shift 2
keep=$(mktemp -d)
mount --bind "/root/$top" "$keep"
mount -t tmpfs -o mode=755 rlark-test /root
mkdir -p "/root/$top"
mount --bind "$keep" "/root/$top"
if [ -n "$delegate" ]; then
    mkdir -p "$delegate"
    chown -R "$RLARK_TEST_UID:$RLARK_TEST_UID" "$delegate"
    echo 0 > "$delegate/cgroup.procs"
fi
exec setpriv --reuid="$RLARK_TEST_UID" --regid="$RLARK_TEST_UID" --clear-groups -- "$@"
"""


def mounts() -> list[iso.CgroupMount]:
    return iso.parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def v2_mount() -> str | None:
    return next((m.mount_point for m in mounts() if m.version == 2), None)


def freezer_mount() -> str | None:
    return next((m.mount_point for m in mounts() if m.version == 1 and "freezer" in m.controllers), None)


#: how to mount a hierarchy of each version the runtime can use (mount(8): ``-t cgroup -o
#: freezer`` is a v1 hierarchy with the freezer controller; ``-t cgroup2`` the unified one)
MOUNT_ARGS = {"v1": ["-t", "cgroup", "-o", "freezer"], "v2": ["-t", "cgroup2"]}


class Hierarchies:
    """A cgroup hierarchy of each version for the tests, whatever the host mounts: the host's
    own where it has one, else one this session mounts (and unmounts at its end).

    Hosts differ: this one mounts both (v1 controllers and ``unified``), a systemd host on a
    recent distribution mounts only v2, an older one only v1. The runtime's v1 (freezer) and v2
    paths are both tested on every host that lets root mount them, so a host without one of them
    mounted neither skips a case (under ``CI=true`` a skip fails the session) nor fails one: the
    kernel still has both. Only a kernel that refuses the mount (``cgroup_no_v1=``, no
    CAP_SYS_ADMIN) cannot run the case; the skip then says why, and under CI the session fails
    naming that reason: that machine lacks a part the suite needs."""

    def __init__(self) -> None:
        self.mounted: list[str] = []

    def get(self, version: str, *, force_own: bool = False) -> str:
        """The mount point of a ``version`` ("v1": with the freezer controller, "v2") hierarchy;
        ``force_own``: mount one even where the host has one (to test this helper)."""
        host = None if force_own else (freezer_mount() if version == "v1" else v2_mount())
        if host is not None:
            return host
        _require_root()
        point = tempfile.mkdtemp(prefix=f"rlark-cgroup-{version}-", dir="/tmp")
        done = subprocess.run(["mount", *MOUNT_ARGS[version], f"rlark-test-{version}", point],
                              capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            os.rmdir(point)
            pytest.skip(f"cgroup {version} is not mounted here and this kernel refuses to mount one "
                        f"(mount {' '.join(MOUNT_ARGS[version])}: {done.stderr.strip()}); the "
                        f"runtime's cgroup {version} path cannot be tested on this machine")
        self.mounted.append(point)
        return point

    def any(self) -> str:
        """The host's hierarchy (v2 first, as the runtime picks), else one this session mounts."""
        return v2_mount() or freezer_mount() or self.get("v2")

    def close(self) -> None:
        for point in reversed(self.mounted):
            subprocess.run(["umount", point], capture_output=True, timeout=30)
            os.rmdir(point)
        self.mounted.clear()


@pytest.fixture(scope="module")
def hierarchies():
    h = Hierarchies()
    yield h
    h.close()


def survivors(token: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        try:
            if cmd and cmd[-1].endswith("." + token) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def none_left(token: str, timeout: float = 10.0) -> list[str]:
    """Wait (bounded) until no process of the attack runs; what is left then."""
    deadline = time.monotonic() + timeout
    while (left := survivors(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [" ".join(p.info["cmdline"]) for p in left]


class Box:
    """A work directory every user may use, the attack script in it, and the child runs."""

    def __init__(self):
        self.token = secrets.randbelow(10**9)
        self.token = f"{self.token:09d}"
        self.dir = Path(tempfile.mkdtemp(prefix="rlark-iso-", dir="/tmp"))
        self.dir.chmod(0o777)
        script = self.dir / "attack.sh"
        script.write_text(ATTACK)
        script.chmod(0o755)
        self.cgroups: list[str] = []

    def parent(self, mount_point: str) -> str:
        path = os.path.join(mount_point, f"rlark-test-{self.token}")
        self.cgroups.append(path)
        return path

    def child(self, action: str, who: str, env: dict[str, str], delegate: str = "") -> dict:
        argv = [sys.executable, "-m", "tests.isolation_child", action, str(self.dir)]
        if who == "no-sys-admin":
            argv = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--", *argv]
        elif who == "user":
            top = Path(sys.executable).resolve().relative_to("/root").parts[0] \
                if Path(sys.executable).resolve().is_relative_to("/root") else ".none"
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", AS_USER, "as-user",
                    top, delegate, *argv]
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("RLARK_")}
        run_env.update({"LEFTOVER_TOKEN": self.token, "HOME": str(self.dir),
                        "PYTHONDONTWRITEBYTECODE": "1", "RLARK_TEST_UID": str(NOBODY), **env})
        done = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])

    def close(self):
        for p in survivors(self.token):  # only after a failed assertion
            p.kill()
        for path in sorted(self.cgroups, key=len, reverse=True):
            for sub in sorted(Path(path).glob("**/"), key=lambda p: len(str(p)), reverse=True):
                iso.kill_cgroup(str(sub))
                iso.remove_cgroup(str(sub))
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def box():
    b = Box()
    yield b
    b.close()


def _require_root():
    assert os.geteuid() == 0, "these tests change privileges: run them as root (CI does)"


# --- the probe picks what the server may really do ----------------------------------------------


def test_root_without_cap_sys_admin_cannot_make_a_pid_namespace_and_gets_a_cgroup(box, hierarchies):
    """Being root does not mean a PID namespace can be made: the probe finds out, auto falls back
    to a cgroup per Worker, and the Worker still starts (it did not before: every one died)."""
    _require_root()
    parent = box.parent(hierarchies.any())
    out = box.child("launch", "no-sys-admin", {"ENDING": "exit", "RLARK_CGROUP_PARENT": parent})
    assert out["uid"] == 0 and out["capSysAdmin"] is False
    probes = out["isolation"]["probes"]
    assert probes["pid-namespace"] != "ok" and "not permitted" in probes["pid-namespace"]
    assert out["isolation"]["mode"] == "cgroup" and out["isolation"]["strong"] is True
    assert out["handle"].startswith("cgroup:" + parent + "/")
    assert len(out["leftovers"]) == 3
    assert none_left(box.token) == []
    assert out["cgroupLeft"] is False


def test_a_user_other_than_root_gets_a_pid_namespace_in_a_user_namespace(box):
    _require_root()
    out = box.child("launch", "user", {"ENDING": "exit"})
    assert out["uid"] == NOBODY and out["capSysAdmin"] is False
    probes = out["isolation"]["probes"]
    assert probes["pid-namespace"] != "ok"
    assert probes["cgroup"] != "ok"  # nobody may not write the cgroup hierarchy
    assert out["isolation"]["mode"] == "user-namespace"
    assert len(out["leftovers"]) == 3
    assert none_left(box.token) == []


def test_a_user_with_a_delegated_cgroup_gets_a_cgroup_per_worker(box, hierarchies):
    """A cgroup delegated to the server's user (as ``systemd-run --user -p Delegate=yes`` gives
    one): the server starts in it and puts each Worker in a cgroup below it (v2 only: a v1
    hierarchy cannot be delegated safely)."""
    _require_root()
    delegate = box.parent(hierarchies.get("v2"))
    out = box.child("launch", "user", {"ENDING": "exit", "RLARK_WORKER_ISOLATION": "cgroup"},
                    delegate=delegate)
    assert out["uid"] == NOBODY and out["isolation"]["mode"] == "cgroup"
    assert out["isolation"]["cgroupParent"] == os.path.join(delegate, iso.CGROUP_PARENT_NAME)
    assert none_left(box.token) == []
    assert out["cgroupLeft"] is False


def test_a_mode_that_cannot_be_given_stops_the_server_with_the_reason(box):
    _require_root()
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--",
         sys.executable, "-c", "from rlark.runtimes.local.runtime import LocalRuntime; LocalRuntime()"],
        cwd=REPO, env={**os.environ, "RLARK_WORKER_ISOLATION": "pid-namespace"},
        capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--worker-isolation pid-namespace is not available here" in done.stderr
    assert "not permitted" in done.stderr


# --- every kind ends every descendant, whether the Worker ends or is stopped -----------------------


def _cases():
    cases = [("root", "pid-namespace", None), ("no-sys-admin", "user-namespace", None),
             ("user", "user-namespace", None)]
    cases += [("root", "cgroup", "v2"), ("no-sys-admin", "cgroup", "v2"), ("root", "cgroup", "v1")]
    return [pytest.param(*c, ending, id=f"{c[0]}-{c[1]}{'-' + c[2] if c[2] else ''}-{ending}")
            for c in cases for ending in ("exit", "stop")]


@pytest.mark.parametrize("who, mode, version, ending", _cases())
def test_no_descendant_of_a_worker_survives_its_end(box, hierarchies, who, mode, version, ending):
    _require_root()
    env = {"RLARK_WORKER_ISOLATION": mode, "ENDING": ending}
    if mode == "cgroup":
        env["RLARK_CGROUP_PARENT"] = box.parent(hierarchies.get(version))
    out = box.child("launch", who, env)
    assert out["isolation"]["mode"] == mode
    assert out["isolation"]["cgroupVersion"] == (int(version[1]) if version else None)
    assert len(out["leftovers"]) == 3  # the attack worked: three processes outside the group
    assert none_left(box.token) == [], out
    if mode == "cgroup":
        assert out["cgroupLeft"] is False
    if ending == "exit":
        assert out["exitCode"] == 0


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_hierarchy_the_session_mounts_serves_where_the_host_mounts_none(box, version):
    """A host that mounts no hierarchy of a version (a systemd host mounts only v2) still runs
    that version's cases, in a hierarchy the tests mount themselves: here one is mounted even
    though the host has its own, and a cgroup Worker in it ends whole."""
    _require_root()
    own = Hierarchies()
    try:
        point = own.get(version, force_own=True)
        assert point.startswith("/tmp/rlark-cgroup-")  # its own, not the host's
        assert any(m.mount_point == point and m.version == int(version[1]) for m in mounts())
        env = {"RLARK_WORKER_ISOLATION": "cgroup", "ENDING": "stop",
               "RLARK_CGROUP_PARENT": box.parent(point)}
        out = box.child("launch", "root", env)
        assert (out["isolation"]["mode"], out["isolation"]["cgroupVersion"]) == ("cgroup", int(version[1]))
        assert out["handle"].startswith(f"cgroup:{point}/")
        assert len(out["leftovers"]) == 3 and none_left(box.token) == []
        assert out["cgroupLeft"] is False
    finally:
        box.close()  # its cgroups go before the hierarchy is unmounted
        own.close()
    assert not any(m.mount_point == point for m in mounts())


def test_weak_isolation_is_as_weak_as_documented(box):
    """``process-group`` (only on request): what keeps the Worker's environment is killed when
    it ends, a process that made its own session *and* dropped its environment survives. This is
    why ``auto`` never picks it."""
    _require_root()
    out = box.child("launch", "root", {"RLARK_WORKER_ISOLATION": "process-group", "ENDING": "exit"})
    assert out["isolation"]["mode"] == "process-group" and out["isolation"]["strong"] is False
    left = none_left(box.token, timeout=3.0)
    assert left == [f"sleep 1002.{box.token}"]


# --- a later server (adoption) ends a Worker whole, whatever it may do itself ----------------------


@pytest.mark.parametrize("first, later", [("cgroup", "no-sys-admin"), ("pid-namespace", "no-sys-admin")])
def test_a_later_server_kills_an_adopted_worker_whole(box, hierarchies, first, later):
    """The first server goes away and leaves its Worker running; the next one (here without
    CAP_SYS_ADMIN, so it could not make that namespace itself) ends it from the stored handle:
    the process group and start time, and the cgroup path for a cgroup Worker."""
    _require_root()
    parent = box.parent(hierarchies.any())
    env = {"RLARK_WORKER_ISOLATION": first, "RLARK_CGROUP_PARENT": parent}
    out = box.child("launch", "root", {**env, "ENDING": "leave"})
    assert len(out["leftovers"]) == 3 and len(survivors(box.token)) == 4  # + the Worker itself
    again = box.child("adopt", later, {"RLARK_CGROUP_PARENT": parent})
    assert again["aliveBefore"] is True and again["capSysAdmin"] is False
    assert none_left(box.token) == []
    assert again["cgroupLeft"] is False


# --- pure parts -----------------------------------------------------------------------------------


MOUNTINFO = """\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 30 0:31 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,freezer
36 30 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids
37 30 0:33 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
"""


def test_mountinfo_gives_the_cgroup_hierarchies():
    found = iso.parse_mountinfo(MOUNTINFO)
    assert [(m.version, m.mount_point, m.controllers) for m in found] == [
        (2, "/sys/fs/cgroup/unified", ()),
        (1, "/sys/fs/cgroup/freezer", ("freezer",)),
        (1, "/sys/fs/cgroup/pids", ("pids",)),
        (1, "/sys/fs/cgroup/systemd", ("xattr",)),
    ]
    assert iso.pick_hierarchy(found).mount_point == "/sys/fs/cgroup/unified"
    assert iso.pick_hierarchy(found[1:]).mount_point == "/sys/fs/cgroup/freezer"
    assert iso.pick_hierarchy(found[2:]) is None  # pids alone cannot freeze: not used


def test_the_default_parent_is_below_the_servers_own_cgroup():
    own = iso.parse_proc_cgroup("6:freezer:/srv\n1:name=systemd:/system.slice/rlark.service\n"
                                "0::/system.slice/rlark.service\n")
    assert own == {"freezer": "/srv", "name=systemd": "/system.slice/rlark.service",
                   "2": "/system.slice/rlark.service"}
    v2 = iso.CgroupMount(2, "/sys/fs/cgroup")
    assert iso.default_parent(v2, own) == "/sys/fs/cgroup/system.slice/rlark.service/rlark-workers"
    v1 = iso.CgroupMount(1, "/sys/fs/cgroup/freezer", controllers=("freezer",))
    assert iso.default_parent(v1, own) == "/sys/fs/cgroup/freezer/srv/rlark-workers"
    # a container whose mount shows only a subtree of the hierarchy
    sub = iso.CgroupMount(2, "/sys/fs/cgroup", root="/docker/abc")
    assert iso.cgroup_dir(sub, "/docker/abc/app") == "/sys/fs/cgroup/app"
    assert iso.cgroup_dir(sub, "/elsewhere") is None
    assert iso.default_parent(sub, {"2": "/elsewhere"}) == "/sys/fs/cgroup/rlark-workers"


def test_command_lines_of_each_kind():
    assert iso.namespace_argv(Mode.pid_namespace) == [
        iso.unshare_path(), "--pid", "--fork", "--mount-proc", "--ipc", "--kill-child=SIGTERM"]
    assert iso.namespace_argv(Mode.user_namespace)[:2] == [iso.unshare_path(), "--map-current-user"]
    argv = iso.join_cgroup_argv("/cg/x/cgroup.procs", ["/venv/bin/python", "worker.py"])
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3:] == ["/cg/x/cgroup.procs", "/venv/bin/python", "worker.py"]
    assert iso.cgroup_of_handle(iso.handle_of("/cg/x")) == "/cg/x"
    assert iso.cgroup_of_handle("pod-name") is None and iso.cgroup_of_handle(None) is None


def test_choose_takes_the_strongest_that_works_and_refuses_the_impossible():
    nope = "unshare failed: Operation not permitted"
    assert iso.choose("auto", {"pid-namespace": "ok"}) == Mode.pid_namespace
    assert iso.choose("auto", {"pid-namespace": nope, "cgroup": "ok"}) == Mode.cgroup
    assert iso.choose("auto", {"pid-namespace": nope, "cgroup": "EACCES",
                               "user-namespace": "ok"}) == Mode.user_namespace
    assert iso.choose("auto", {"pid-namespace": nope, "cgroup": "x", "user-namespace": "y"}) is None
    assert iso.choose("process-group", {}) == Mode.process_group
    with pytest.raises(ValueError, match="pid-namespace is not available here: unshare failed"):
        iso.choose("pid-namespace", {"pid-namespace": nope})
    with pytest.raises(ValueError, match="not one of"):
        iso.probe("containers")


def test_no_isolation_at_all_refuses_local_workers_and_names_the_ways_out():
    from rlark.runtimes.local.runtime import LocalRuntime

    none = iso.Isolation(mode=None, probes={"pid-namespace": "no", "cgroup": "no", "user-namespace": "no"})
    with pytest.raises(ValueError) as exc:
        LocalRuntime(isolation=none)
    text = str(exc.value)
    assert "--worker-isolation process-group" in text and "Delegate=yes" in text
    assert "pid-namespace: no" in text
