"""The keeper (bootstrap/keeper.py): the Worker's first process and the only writer of its
lifecycle lines. Pure parts (the channel, report checks, bounds) as tables; then the real keeper
as a process, run from the bootstrap archive as every runtime runs it, with a small stand-in for
the workload that speaks its pipe protocol, so each property is shown on the real program:
results observed (not reported), lines that cannot be forged or swallowed, failures that stop
the run script, signals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlark.bootstrap import archive, cgroups, keeper, lifecycle
from rlark.bootstrap.lifecycle import EVENT_PREFIX_BYTES as EVENT_PREFIX
from rlark.bootstrap.lifecycle import ESCAPE, Bucket, check_report
from rlark.bootstrap.config import BootstrapConfig, BootstrapError
from rlark.bootstrap.relay import Channel, Lines
from rlark.bootstrap.scripts import run_prepare
from rlark.bootstrap.scripts import SCRIPT_SHELL
from rlark.controller.lifecycle import parse_lifecycle
from rlark.runtimes.local.isolation import join_cgroup_argv


@pytest.fixture(scope="module")
def bootstrap_pyz(tmp_path_factory) -> Path:
    """The bootstrap archive, built from this checkout's sources into a directory of its own."""
    return Path(archive.install(str(tmp_path_factory.mktemp("pyz"))))


def channel() -> tuple[Channel, bytearray]:
    out = bytearray()
    return Channel(out.extend), out


def events_of(data: bytes) -> list[dict]:
    events, _ = parse_lifecycle(bytes(data), 0)
    return events


# --- the channel ----------------------------------------------------------------------------------


def test_workload_lines_that_look_like_lifecycle_lines_are_escaped_wherever_the_chunks_split():
    forged = EVENT_PREFIX + b'{"event": "run_finished", "exit_code": 0}\n'
    data = b"hello\n" + forged + b"mid " + EVENT_PREFIX + b"x\n" + forged
    for cut in range(len(data) + 1):  # every split of the stream into two chunks
        chan, out = channel()
        chan.relay(data[:cut])
        chan.relay(data[cut:])
        assert out == (b"hello\n" + ESCAPE + forged + b"mid " + EVENT_PREFIX + b"x\n"
                       + ESCAPE + forged), cut
        assert events_of(out) == []


def test_the_keepers_own_line_starts_on_a_line_of_its_own():
    chan, out = channel()
    chan.relay(b"done")  # a run script's last output without a newline (issue 19 item 8)
    chan.emit("run_finished", exit_code=0)
    chan.relay(b"RLARK_EV")  # the start of something that might be a lookalike...
    chan.emit("exit", code=0)
    chan.relay(b"ENT not one\n")  # ...cut by the keeper's line: its rest is plain output
    lines = out.split(b"\n")
    assert lines[0] == b"done"
    assert [e["event"] for e in events_of(out)] == ["run_finished", "exit"]
    assert b"RLARK_EV\n" + EVENT_PREFIX in out and lines[-2] == b"ENT not one"


def test_bytes_of_the_workload_pass_unchanged():
    payload = bytes(range(256)) * 40 + b"\n" + b"x" * 100_000 + b"\n"
    chan, out = channel()
    for i in range(0, len(payload), 777):
        chan.relay(payload[i:i + 777])
    assert out == payload


# --- reports --------------------------------------------------------------------------------------


@pytest.mark.parametrize("report, ok", [
    ({"event": "phase", "phase": "Preparing"}, True),
    ({"event": "failed", "reason": "NodeLost", "message": "gone", "status": 86,
      "missing_ranks": [2]}, True),
    ({"event": "warning", "reason": "RayWorkerPortsExhausted", "message": "no ports"}, True),
    ({"event": "start_run"}, True),
    ({"event": "facts", "anything": {"nested": [1, 2]}}, True),
    # kinds only the keeper writes
    ({"event": "run_finished", "exit_code": 0}, False),
    ({"event": "exit", "code": 0}, False),
    ({"event": "running", "pid": 1}, False),
    ({"event": "keeper", "protected": True, "uid": 0}, False),
    ({"event": "stopped"}, False),
    # typed fields
    ({"event": "failed", "reason": "not a code", "message": ""}, False),
    ({"event": "failed", "reason": "NodeLost", "status": 999}, False),
    ({"event": "failed", "reason": "NodeLost", "status": "0"}, False),
    ({"event": "failed", "reason": "NodeLost", "missing_ranks": ["x"]}, False),
    ({"event": "warning", "reason": "X" * 100}, False),
    ({"event": "phase", "phase": "lower case"}, False),
    ({"event": "nodes", "joined": "all"}, False),
    # what only the keeper counts, and the reason RLark gives from it
    ({"event": "failed", "reason": "PrepareFailed", "exit_code": 137, "oom_kills": 1}, False),
    ({"event": "failed", "reason": "NodeLost", "memory_limit": 1 << 30}, False),
    ({"event": "facts", "oom_kills": 1}, False),
    ({"event": "failed", "reason": "OOMKilled", "message": "not from the workload"}, False),
    ({"event": "warning", "reason": "OOMKilled", "message": "nor this"}, False),
    ([1, 2], False),
])
def test_what_the_workload_may_report(report, ok):
    checked, why = check_report(json.dumps(report).encode())
    assert (checked is not None) == ok, why
    assert ok or why


def test_a_report_over_its_kinds_size_is_refused_and_ts_is_the_keepers():
    checked, why = check_report(json.dumps({"event": "phase", "phase": "X" * 20000}).encode())
    assert checked is None and "bytes" in why
    checked, _ = check_report(json.dumps({"event": "phase", "phase": "Preparing", "ts": 1.0}).encode())
    assert checked == {"event": "phase", "phase": "Preparing"}


def test_the_bucket_bounds_the_rate():
    t = [0.0]
    b = Bucket(rate=10, burst=5, now=lambda: t[0])
    assert [b.take() for _ in range(7)] == [True] * 5 + [False] * 2
    t[0] += 0.35  # 3.5 tokens back
    assert [b.take() for _ in range(4)] == [True, True, True, False]


def test_lines_drop_an_over_long_line_whole_and_keep_memory_bounded():
    lines = Lines(cap=10)
    assert lines.feed(b"short\nthis one is far too long") == [b"short"]
    assert len(lines.buf) == 0 and lines.skipping
    assert lines.feed(b" still\nnext\n") == [b"next"]
    assert lines.dropped == 1
    assert lines.feed(b"0123456789\n") == [b"0123456789"]


def test_the_keeper_runs_scripts_as_the_bootstrap_does():
    assert keeper.SCRIPT_SHELL is SCRIPT_SHELL  # one definition, not two that must agree


# --- the real keeper ---------------------------------------------------------------------------------

#: a stand-in for the bootstrap's worker: speaks the keeper's pipe protocol (reports on RLARK_REPORT_FD, the
#: keeper's word on RLARK_CONTROL_FD) and does what $STANDIN says
STANDIN = textwrap.dedent("""
    import json, os, select, sys, time
    rep = int(os.environ["RLARK_REPORT_FD"]); ctl = int(os.environ["RLARK_CONTROL_FD"])
    def report(**body):
        os.write(rep, (json.dumps(body) + "\\n").encode())
    plan = os.environ["STANDIN"]
    print("standin up", flush=True)
    if plan == "flood":
        for i in range(5000):
            report(event="warning", reason="Flood", message=str(i))
        sys.exit(0)
    if plan == "factsflood":
        for i in range(20):
            report(event="facts", **{f"k{i}": "x" * 1000000})
        sys.exit(0)
    if plan == "prepare":
        # as bootstrap/scripts.py runs a prepare script, with what $PREPARE says
        import subprocess
        report(event="phase", phase="Preparing")
        code = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", os.environ["PREPARE"]]).returncode
        code = 128 - code if code < 0 else code
        report(event="failed", reason="PrepareFailed", message="prepare failed", exit_code=code,
               status=80)
        sys.exit(80)
    if plan == "forge":
        report(event="run_finished", exit_code=0)
        report(event="exit", code=0)
        sys.exit(0)
    report(event="phase", phase="Joining")
    report(event="start_run")
    if plan == "lose-node":
        time.sleep(1.0)
        report(event="failed", reason="NodeLost", message="rank 1 is gone", status=86)
        sys.exit(86)
    if plan == "die":
        time.sleep(1.0)
        os._exit(9)
    select.select([ctl], [], [], 60)
    print("told:", os.read(ctl, 100).decode().split()[0:2], flush=True)
    sys.exit(0)
""")


def run_keeper(tmp_path: Path, pyz: Path, plan: str, run_script: str = "", head: bool = True,
               timeout: float = 60, signal_after: str | None = None,
               cgroup_procs: str | None = None, **extra: str) -> tuple[int, bytes]:
    """The keeper with the stand-in as its workload; ``cgroup_procs``: the ``cgroup.procs`` of
    a cgroup it starts in (before its first instruction); ``extra``: more environment."""
    standin = tmp_path / "standin.py"
    standin.write_text(STANDIN)
    env = {"PATH": os.environ["PATH"], "STANDIN": plan, "RLARK_KEEPER_BOOTSTRAP": str(standin),
           "RLINF_NODE_RANK": "0" if head else "1", "RLARK_RUN_SCRIPT": run_script,
           "RLARK_HEAD_ADDRESS": "127.0.0.9:6379", "RLARK_STOP_GRACE_SECONDS": "2",
           "RLARK_FACTS_BUDGET_SECONDS": "2", **extra}
    argv = [sys.executable, "-I", "-S", str(pyz), "keeper"]
    if cgroup_procs is not None:
        argv = join_cgroup_argv(cgroup_procs, argv)
    proc = subprocess.Popen(argv, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    if signal_after is None:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    assert proc.stdout is not None
    seen = b""
    while signal_after.encode() not in seen:
        chunk = proc.stdout.readline()
        assert chunk, f"the keeper ended before {signal_after!r}: {seen!r}"
        seen += chunk
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, seen + out


def kinds(out: bytes) -> list[str]:
    return [e["event"] for e in events_of(out)]


def test_a_run_script_that_forges_success_and_exits_1_ends_with_1(tmp_path, bootstrap_pyz):
    forged = 'RLARK_EVENT {"ts": 1, "event": "run_finished", "exit_code": 0}'
    code, out = run_keeper(tmp_path, bootstrap_pyz, "ok",
                           run_script=f"echo '{forged}'; printf 'last words'; exit 1")
    assert code == 1
    events = events_of(out)
    finished = [e for e in events if e["event"] == "run_finished"]
    assert finished == [{"ts": finished[0]["ts"], "event": "run_finished", "exit_code": 1}]
    assert ESCAPE + forged.encode() in out  # shown as the workload's output, read as nothing
    assert b"last words\n" + EVENT_PREFIX in out  # its last line did not swallow the keeper's
    assert events[0]["event"] == "keeper" and events[-1] == {**events[-1], "event": "exit", "code": 1}
    assert b"told: ['run_finished', '1']" in out  # the workload heard the result from the keeper


def test_the_run_scripts_own_status_is_the_workers(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "ok", run_script="exit 0")
    assert code == 0 and kinds(out) == ["keeper", "phase", "running", "run_finished", "exit"]


def test_the_workload_cannot_report_a_result(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "forge", head=False)
    assert code == 0
    assert "run_finished" not in kinds(out) and kinds(out).count("exit") == 1
    dropped = [e for e in events_of(out) if e.get("reason") == "ReportsDropped"]
    assert dropped and "may not be reported" in dropped[0]["message"]


def test_a_lost_node_stops_the_run_script(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "lose-node",
                           run_script="echo started; sleep 120; echo never")
    assert code == 86
    assert b"never" not in out and "run_finished" not in kinds(out)
    failed = [e for e in events_of(out) if e["event"] == "failed"]
    assert [f["reason"] for f in failed] == ["NodeLost"]


def test_the_monitors_end_stops_the_run_script(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "die", run_script="sleep 120; echo never")
    assert code == 9 and b"never" not in out
    failed = [e for e in events_of(out) if e["event"] == "failed"]
    assert [f["reason"] for f in failed] == ["MonitorLost"] and failed[0]["status"] == 86


def test_a_flood_of_reports_is_bounded(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "flood", head=False)
    warnings = [e for e in events_of(out) if e["event"] == "warning"]
    kept = [w for w in warnings if w["reason"] == "Flood"]
    assert code == 0 and len(kept) == lifecycle.MAX_WARNINGS
    assert any(w["reason"] == "ReportsDropped" for w in warnings)
    assert len(warnings) < lifecycle.MAX_WARNINGS + 10


def test_sigterm_stops_everything_and_says_so(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "ok", run_script="echo run-up; sleep 120",
                           signal_after="run-up")
    assert code == keeper.EXIT_STOPPED
    assert kinds(out)[-2:] == ["stopped", "exit"] and "run_finished" not in kinds(out)


def test_the_keeper_cannot_be_read_by_its_own_uids_other_processes(tmp_path):
    """Non-dumpable (prctl): a process of the keeper's own uid can read neither its environment
    nor its descriptors, where the keeper shares its uid with the workload (a Pod; a server
    that is not root). Run as an unprivileged uid (root may read any process), with the
    system's Python; the run script's own environment stays readable to it (the control)."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="rlark-keeper-"))
    try:
        where.chmod(0o755)
        standin = where / "standin.py"
        standin.write_text(STANDIN)
        keeper_copy = where / "rlark-bootstrap.pyz"
        keeper_copy.write_bytes(archive.bootstrap_archive().data)
        probe = ("for f in /proc/$PPID/environ /proc/$PPID/fd/1 /proc/$$/environ; do "
                 "cat $f >/dev/null 2>&1 && echo READ $f || echo DENIED $f; done; exit 0")
        env = {"PATH": "/usr/bin:/bin", "STANDIN": "ok", "RLARK_KEEPER_BOOTSTRAP": str(standin),
               "RLINF_NODE_RANK": "0", "RLARK_RUN_SCRIPT": probe, "RLARK_STOP_GRACE_SECONDS": "2",
               "RLARK_FACTS_BUDGET_SECONDS": "2", "SECRETISH": "only-the-keeper-holds-this"}
        identity = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
        done = subprocess.run(["/usr/bin/python3", "-I", "-S", str(keeper_copy), "keeper"], env=env,
                              capture_output=True, timeout=60, cwd=where, **identity)
        out = done.stdout
        assert done.returncode == 0, out + done.stderr
        lines = [ln for ln in out.decode().splitlines() if ln.startswith(("READ", "DENIED"))]
        assert [ln.split()[0] for ln in lines] == ["DENIED", "DENIED", "READ"], lines
        keeper_line = events_of(out)[0]
        assert keeper_line["event"] == "keeper" and keeper_line["protected"] is True
    finally:
        import shutil

        shutil.rmtree(where, ignore_errors=True)


def test_the_keeper_reaches_paths_without_following_links(tmp_path):
    """Mount sources and targets are reached component by component, a link nowhere on the way
    (a Worker of an earlier Run could have planted one where root would mount or make a
    directory: the attack pass's chown and mkdir as root)."""
    from rlark.bootstrap.sandbox import SandboxError, open_nofollow

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    fd = open_nofollow(str(tmp_path / "real"))
    os.close(fd)
    for bad in (tmp_path / "link", tmp_path / "link" / "below"):
        with pytest.raises(SandboxError, match="symbolic link"):
            open_nofollow(str(bad), create=True)
    assert not (tmp_path / "real" / "below").exists()  # nothing made through the link
    fd = open_nofollow(str(tmp_path / "made" / "deep"), create=True)
    os.close(fd)
    assert (tmp_path / "made" / "deep").is_dir()
    with pytest.raises(SandboxError, match="does not exist"):
        open_nofollow(str(tmp_path / "missing"))
    with pytest.raises(SandboxError, match=r"'\.\.'"):
        open_nofollow(str(tmp_path) + "/../x", create=True)


def test_root_makes_and_gives_a_workers_directory_but_never_through_a_link(tmp_path):
    from rlark.runtimes.base import LaunchRefused
    from rlark.runtimes.local.runtime import make_dir

    target = tmp_path / "outside"
    target.mkdir(mode=0o755)
    (tmp_path / "planted").symlink_to(target)
    with pytest.raises(LaunchRefused, match="not a directory RLark made"):
        make_dir(str(tmp_path / "planted"), 65534, 0o700)
    assert target.stat().st_uid == os.geteuid()  # not given away
    make_dir(str(tmp_path / "fresh"), 65534, 0o700)
    st = (tmp_path / "fresh").stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (65534 if os.geteuid() == 0 else st.st_uid, "0o700")


@pytest.mark.parametrize("sep", [b"\r", b"\x0b", b"\x0c", b"\x1c", b"\xc2\x85"])
def test_a_lookalike_after_a_carriage_return_is_no_lifecycle_line(sep):
    """Lines end at a newline alone, for the keeper and for every reader: the attack pass made
    ``printf 'x\\rRLARK_EVENT {...run_finished 0}'`` a Succeeded Run when the reader cut lines
    at carriage returns too."""
    chan, out = channel()
    chan.relay(b"x" + sep + EVENT_PREFIX + b'{"ts": 1, "event": "run_finished", "exit_code": 0}\n')
    assert events_of(out) == []


def test_a_flood_of_facts_is_bounded(tmp_path, bootstrap_pyz):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "factsflood", head=False)
    facts = [e for e in events_of(out) if e["event"] == "facts"]
    assert code == 0 and 0 < len(facts) <= lifecycle.MAX_FACTS_BYTES // 1000000
    assert any(e.get("reason") == "ReportsDropped" and "bytes of facts" in e["message"]
               for e in events_of(out))


# --- the kernel's OOM killer --------------------------------------------------------------------


def test_a_prepare_script_killed_by_a_signal_is_reported_as_the_shell_says(tmp_path):
    """The bootstrap's prepare step (scripts.run_prepare): a script killed by SIGKILL (bash
    execs its last command, so the signal reaches the bootstrap unshelled) fails with exit code
    137, the shell's 128 + 9, in a ``failed`` report the keeper takes (a negative one it refused)."""
    cfg = BootstrapConfig.from_env({"RLINF_NODE_RANK": "1", "RLARK_NUM_NODES": "2",
                                    "RLARK_HEAD_ADDRESS": "127.0.0.2:20000",
                                    "RLARK_PREPARE_SCRIPT": "kill -9 $$",
                                    "RLARK_WORKING_DIR": str(tmp_path)})
    with pytest.raises(BootstrapError) as err:
        run_prepare(cfg, lambda argv: subprocess.Popen(argv, cwd=tmp_path), lambda: None)
    exc = err.value
    assert (exc.reason, exc.details, exc.status) == ("PrepareFailed", {"exit_code": 137}, 80)
    assert exc.message == "prepare script was killed by signal 9"
    report, why = check_report(json.dumps({"event": "failed", "reason": exc.reason,
                                           "message": exc.message, "status": exc.status,
                                           **exc.details}).encode())
    assert report is not None, why

#: the memory limit of the cgroup the OOM tests' keeper runs in (two Pythons fit, 512 MiB not)
OOM_LIMIT = 160 << 20
#: a script that fills 512 MiB (bytearray zero-fills, so every page is charged)
FILL = "echo filling; python3 -c 'b = bytearray(512 << 20); print(len(b))'"


@pytest.fixture
def memory_cgroup(tmp_path):
    """A memory cgroup of its own below this process's, limited to :data:`OOM_LIMIT` (cgroup
    v1's memory hierarchy, or v2 where this process's cgroup delegates the memory controller);
    yields its ``cgroup.procs``. Needs root; the cgroup is removed afterwards."""
    own = cgroups.find_memory_cgroup()
    if own is None:
        pytest.skip("no memory cgroup with an OOM-kill count here")
    own.close()
    where = os.path.join(own.path, f"rlark-test-oom-{os.getpid()}-{tmp_path.name}")
    limit_file = cgroups.MEMORY_FILES[own.version][1]
    try:
        os.mkdir(where)
        Path(where, limit_file).write_text(str(OOM_LIMIT))
    except OSError as exc:
        if os.path.isdir(where):
            os.rmdir(where)
        pytest.skip(f"cannot make a memory cgroup below {own.path}: {exc}")
    try:
        yield os.path.join(where, "cgroup.procs")
    finally:
        procs = Path(where, "cgroup.procs")
        assert procs.read_text().split() == [], "a process of the test is left in the cgroup"
        os.rmdir(where)


def test_a_run_script_the_oom_killer_kills_is_said_so_with_the_limit_and_a_kill_9_is_not(
        tmp_path, bootstrap_pyz, memory_cgroup):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "ok", run_script="kill -9 $$",
                           cgroup_procs=memory_cgroup)
    finished = [e for e in events_of(out) if e["event"] == "run_finished"]
    assert code == 137 and finished == [{"ts": finished[0]["ts"], "event": "run_finished",
                                         "exit_code": 137}], out[-2000:]
    code, out = run_keeper(tmp_path, bootstrap_pyz, "ok", run_script=FILL,
                           cgroup_procs=memory_cgroup)
    finished = [e for e in events_of(out) if e["event"] == "run_finished"]
    assert code == 137 and b"filling" in out, out[-2000:]
    assert finished == [{**finished[0], "exit_code": 137, "oom_kills": finished[0]["oom_kills"],
                         "memory_limit": OOM_LIMIT}], finished
    assert finished[0]["oom_kills"] >= 1


def test_a_prepare_script_the_oom_killer_kills_is_said_so_and_another_failure_is_not(
        tmp_path, bootstrap_pyz, memory_cgroup):
    code, out = run_keeper(tmp_path, bootstrap_pyz, "prepare", cgroup_procs=memory_cgroup,
                           PREPARE="exit 3")
    failed = [e for e in events_of(out) if e["event"] == "failed"]
    assert code == 80 and [(f["exit_code"], "oom_kills" in f) for f in failed] == [(3, False)]
    code, out = run_keeper(tmp_path, bootstrap_pyz, "prepare", cgroup_procs=memory_cgroup,
                           PREPARE=FILL)
    failed = [e for e in events_of(out) if e["event"] == "failed"]
    assert code == 80 and len(failed) == 1, out[-2000:]
    assert failed[0]["reason"] == "PrepareFailed" and failed[0]["exit_code"] == 137
    assert failed[0]["oom_kills"] >= 1 and failed[0]["memory_limit"] == OOM_LIMIT, failed
