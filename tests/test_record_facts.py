"""Record facts the bootstrap gathers on every Worker (issue 14, item 1): the pure parsers
without I/O, then the gatherers for real in a temporary git checkout with a dirty change."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rlark.bootstrap.config import BootstrapConfig
from rlark.bootstrap.facts import (
    package_list,
    parse_nvidia_proc_version,
    parse_nvidia_smi,
    parse_torch_version_py,
    record_facts,
)
from rlark.bootstrap.facts_code import (
    Budget,
    cap_bytes,
    git_facts,
    installed_copy,
    parse_direct_url,
    parse_git_status,
    strip_credentials,
)
from rlark.bootstrap.facts_config import config_snapshot, find_hydra_outputs, hydra_output_facts
from rlark.bootstrap.ray_node import raylet_env_value

# --- pure ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url, clean", [
    ("https://x-access-token:ghp_SECRET@github.com/RLinf/RLinf.git",
     "https://github.com/RLinf/RLinf.git"),
    ("https://ghp_SECRET@github.com/o/r?token=abc#frag", "https://github.com/o/r"),
    ("http://user:pw@host:8080/p", "http://host:8080/p"),
    ("ssh://git:pw@host.example/o/r.git", "ssh://git@host.example/o/r.git"),
    ("git+https://tok@github.com/o/r@v1", "git+https://github.com/o/r@v1"),
    ("git@github.com:RLinf/RLinf.git", "git@github.com:RLinf/RLinf.git"),
    ("file:///opt/rlinf", "file:///opt/rlinf"),
    ("  https://github.com/o/r\n", "https://github.com/o/r"),
])
def test_strip_credentials(url, clean):
    assert strip_credentials(url) == clean
    assert "SECRET" not in strip_credentials(url) and ":pw@" not in strip_credentials(url)


def test_parse_direct_url_kinds():
    vcs = parse_direct_url(json.dumps({
        "url": "https://tok:x@github.com/RLinf/RLinf.git",
        "vcs_info": {"vcs": "git", "commit_id": "a3816b5", "requested_revision": "main"}}))
    assert vcs == {"url": "https://github.com/RLinf/RLinf.git", "source": "vcs", "vcs": "git",
                   "commit": "a3816b5", "requestedRevision": "main"}
    editable = parse_direct_url('{"url": "file:///src/rlinf", "dir_info": {"editable": true}}')
    assert editable == {"url": "file:///src/rlinf", "source": "dir", "editable": True}
    archive = parse_direct_url('{"url": "https://h/rlinf.whl", "archive_info": {"hash": "sha256=ab"}}')
    assert archive["source"] == "archive" and archive["hash"] == "sha256=ab"
    with pytest.raises(ValueError):
        parse_direct_url("[]")
    with pytest.raises(ValueError):
        parse_direct_url("not json")


def test_parse_git_status():
    text = textwrap.dedent("""\
        # branch.oid 1f2e3d4c5b6a
        # branch.head main
        # branch.upstream origin/main
        1 .M N... 100644 100644 100644 aaa bbb src/a.py
        2 R. N... 100644 100644 100644 aaa bbb R100 new.py\told.py
        ? notes.txt
        """)
    assert parse_git_status(text) == {"commit": "1f2e3d4c5b6a", "branch": "main", "dirty": True,
                                      "changed": 2, "untracked": 1}
    clean = parse_git_status("# branch.oid (initial)\n# branch.head (detached)\n? x\n")
    assert clean == {"commit": None, "branch": None, "dirty": False, "changed": 0, "untracked": 1}


def test_parse_nvidia_smi_and_driver():
    smi = ("GPU-5c1b7e2a-0000-1111-2222-333344445555, NVIDIA H100 80GB HBM3, 550.54.15, 81559\n"
           "GPU-aaaa, NVIDIA A10, 550.54.15, [N/A]\n\n")
    assert parse_nvidia_smi(smi) == [
        {"uuid": "GPU-5c1b7e2a-0000-1111-2222-333344445555", "model": "NVIDIA H100 80GB HBM3",
         "driver": "550.54.15", "memoryMiB": 81559},
        {"uuid": "GPU-aaaa", "model": "NVIDIA A10", "driver": "550.54.15", "memoryMiB": None}]
    proc = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert parse_nvidia_proc_version(proc) == "535.104.05"
    assert parse_nvidia_proc_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                     "550.54.15  Release Build") == "550.54.15"
    assert parse_nvidia_proc_version("") is None


def test_parse_torch_version_py():
    text = textwrap.dedent("""\
        from typing import Optional
        __all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
        __version__ = '2.13.0+cu128'
        debug = False
        cuda: Optional[str] = '12.8'
        git_version = 'deadbeef'
        hip: Optional[str] = None
        """)
    assert parse_torch_version_py(text) == {"cuda": "12.8", "git_version": "deadbeef", "hip": None}
    assert parse_torch_version_py("cuda = None\n") == {"cuda": None}
    assert parse_torch_version_py("def (") == {}


def test_package_list_is_normalised_sorted_and_hashed():
    lines, digest = package_list([("Ray", "2.60.0"), ("typing_extensions", "4.12"),
                                  ("ray", "2.60.0"), ("", "1")])
    assert lines == ["ray==2.60.0", "typing-extensions==4.12"]
    assert digest == hashlib.sha256(b"ray==2.60.0\ntyping-extensions==4.12").hexdigest()
    assert package_list([("typing-extensions", "4.12"), ("ray", "2.60.0")])[1] == digest
    assert package_list([("ray", "2.61.0"), ("typing-extensions", "4.12")])[1] != digest


def test_cap_bytes_and_installed_copy():
    assert cap_bytes(b"abcdef", 4) == ("abcd", True)
    assert cap_bytes("é".encode(), 1) == ("\ufffd", True)
    assert cap_bytes(b"ab", 4) == ("ab", False)
    assert installed_copy("/venv/lib/python3.11/site-packages/rlinf")
    assert installed_copy("/usr/lib/python3/dist-packages/rlinf")
    assert not installed_copy("/src/RLinf/rlinf")


def test_bootstrap_config_reads_the_record_settings():
    cfg = BootstrapConfig.from_env({"RLINF_NODE_RANK": "0", "RLARK_NUM_NODES": "1",
                                    "RLARK_HEAD_ADDRESS": "h:1", "RLARK_RLINF_CONFIG_DIR": "cfg",
                                    "RLARK_RLINF_CONFIG_NAME": "q", "RLARK_FACTS_BUDGET_SECONDS": "3"})
    assert (cfg.rlinf_config_dir, cfg.rlinf_config_name, cfg.facts_budget) == ("cfg", "q", 3.0)


# --- real: git, files, /proc -------------------------------------------------------------------------


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "proj"
    (repo / "config").mkdir(parents=True)
    (repo / "config" / "train.yaml").write_text("cluster: {num_nodes: 1}\nrunner: {max_steps: 3}\n")
    (repo / "config" / "sub").mkdir()
    (repo / "config" / "sub" / "model.yaml").write_text("name: tiny\n")
    (repo / "train.py").write_text("print('v1')\n")
    git(repo, "init", "-q", "-b", "exp")
    git(repo, "remote", "add", "origin", "https://x-access-token:ghp_SECRET@github.com/me/proj.git")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    (repo / "train.py").write_text("print('v2, uncommitted')\n")
    (repo / "scratch.txt").write_text("untracked\n")
    return repo


def test_git_facts_of_a_dirty_checkout(checkout):
    facts = git_facts(str(checkout), Budget(20))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True,
                          text=True).stdout.strip()
    diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=checkout,
                          capture_output=True).stdout
    assert facts["commit"] == head and facts["branch"] == "exp"
    assert facts["remote"] == "https://github.com/me/proj.git"
    assert facts["dirty"] is True and (facts["changed"], facts["untracked"]) == (1, 1)
    assert facts["diffSha256"] == hashlib.sha256(diff).hexdigest()
    assert "+print('v2, uncommitted')" in facts["diff"] and facts["diffCut"] is False
    assert "SECRET" not in json.dumps(facts)
    cut = git_facts(str(checkout), Budget(20), diff_cap=20)
    assert cut["diffCut"] is True and len(cut["diff"]) == 20
    assert cut["diffSha256"] == facts["diffSha256"]  # the hash covers the whole diff


def test_git_facts_absent_outside_a_checkout_and_out_of_time(tmp_path):
    assert git_facts(str(tmp_path), Budget(20)) == {"path": str(tmp_path),
                                                     "absent": "not in a git checkout"}
    assert git_facts(str(tmp_path), Budget(0)) == {
        "path": str(tmp_path), "absent": "no time left in the facts budget"}


def test_record_facts_on_a_head_with_a_config(checkout):
    cfg = BootstrapConfig.from_env({
        "RLINF_NODE_RANK": "0", "RLARK_NUM_NODES": "1", "RLARK_HEAD_ADDRESS": "127.0.0.1:1",
        "RLARK_WORKING_DIR": str(checkout), "RLARK_RLINF_CONFIG_DIR": "config",
        "RLARK_RLINF_CONFIG_NAME": "train"})
    facts = record_facts(cfg, Budget(20))
    # within the budget every probe ran to its end (how long they take: bench/record_facts.py)
    assert "no time left" not in json.dumps(facts) and "took longer than" not in json.dumps(facts)
    assert isinstance(facts["factsSeconds"], float) and facts["factsSeconds"] >= 0
    assert facts["code"]["workingDir"]["dirty"] is True
    rlinf = facts["code"]["rlinf"]
    assert rlinf["version"] == "0.3.0" and rlinf["directUrl"]["absent"]
    assert rlinf["git"]["absent"].startswith("installed copy")
    assert facts["packages"]["count"] > 10 and "ray==2.60.0" in facts["packages"]["list"]
    assert set(facts["versions_extra"]) == {"torchCuda", "torchHip", "nccl", "deviceLibs"}
    assert facts["devices"]["gpus"] is None or isinstance(facts["devices"]["gpus"], list)
    files = facts["config"]["files"]
    assert [f["path"] for f in files] == ["train.yaml", "sub/model.yaml"]  # the primary first
    text = (checkout / "config" / "train.yaml").read_bytes()
    assert files[0]["sha256"] == hashlib.sha256(text).hexdigest() and files[0]["text"] == text.decode()
    assert json.dumps(facts)  # one lifecycle line


def test_record_facts_with_no_time_left_runs_no_probe_and_says_why(checkout):
    """A spent budget: every fact that needs a process (git, nvidia-smi) is absent with the
    reason instead of started; what is read in this process (packages, the config files) is
    still there. This is what keeps the facts within their budget however slow git is."""
    cfg = BootstrapConfig.from_env({
        "RLINF_NODE_RANK": "0", "RLARK_NUM_NODES": "1", "RLARK_HEAD_ADDRESS": "127.0.0.1:1",
        "RLARK_WORKING_DIR": str(checkout), "RLARK_RLINF_CONFIG_DIR": "config",
        "RLARK_RLINF_CONFIG_NAME": "train"})
    facts = record_facts(cfg, Budget(0))
    assert facts["code"]["workingDir"] == {"path": str(checkout),
                                           "absent": "no time left in the facts budget"}
    devices = facts["devices"]
    assert devices["gpus"] is None
    assert devices["gpusAbsent"] in ("no time left in the facts budget", "nvidia-smi not found")
    assert facts["packages"]["count"] > 10
    assert [f["path"] for f in facts["config"]["files"]] == ["train.yaml", "sub/model.yaml"]


def test_rlinf_from_a_checkout_on_pythonpath(tmp_path):
    src = tmp_path / "RLinf"
    (src / "rlinf").mkdir(parents=True)
    (src / "rlinf" / "__init__.py").write_text("")
    git(src, "init", "-q", "-b", "fork")
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "fork")
    out = subprocess.run(
        [sys.executable, "-c", "import json; from rlark.bootstrap.facts_code import Budget, "
         "rlinf_code_facts; print(json.dumps(rlinf_code_facts(Budget(20))))"],
        env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True, check=True)
    facts = json.loads(out.stdout)
    assert facts["packageDir"] == str(src / "rlinf")
    assert facts["git"]["branch"] == "fork" and facts["git"]["dirty"] is False


def test_config_snapshot_caps_text_and_says_what_is_missing(checkout, tmp_path):
    snap = config_snapshot(str(checkout / "config"), "train", cap=30)
    assert [("text" in f) for f in snap["files"]] == [False, True]  # 44 bytes > 30; 11 fit
    assert config_snapshot(str(tmp_path / "nope"), "x")["absent"]


def test_hydra_output_found_after_the_run_started(tmp_path):
    old = tmp_path / "outputs" / "old" / ".hydra"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text("a: 1\n")
    os.utime(old / "config.yaml", (1, 1))
    since = time.time() - 1
    new = tmp_path / "outputs" / "2026-12-01" / "11-00-00" / ".hydra"
    new.mkdir(parents=True)
    (new / "config.yaml").write_text("runner: {max_steps: 5}\n")
    (new / "overrides.yaml").write_text("- runner.max_steps=5\n")
    found = find_hydra_outputs(str(tmp_path), since)
    assert found == [str(new.parent)]
    facts = hydra_output_facts(found[0])
    assert facts["files"]["overrides.yaml"]["text"] == "- runner.max_steps=5\n"
    assert set(facts["files"]) == {"config.yaml", "overrides.yaml"}


def test_raylet_env_value_reads_a_process_environment():
    # the child says it runs before its environment is read (as the bootstrap reads a raylet's
    # only once the raylet is up): a process caught between fork and exec shows its parent's
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "RLINF_NODE_RANK": "2"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert raylet_env_value(proc.pid, "RLINF_NODE_RANK") == "2"
        assert raylet_env_value(proc.pid, "RLARK_NOT_SET_ANYWHERE") is None
    finally:
        proc.communicate(b"")
    with pytest.raises(OSError):
        raylet_env_value(proc.pid, "RLINF_NODE_RANK")


# --- gathered beside `ray start`, not before it (issue 23, item 4) -------------------------------


def _cfg(tmp_path, **more: str) -> BootstrapConfig:
    return BootstrapConfig.from_env({"RLINF_NODE_RANK": "1", "RLARK_NUM_NODES": "2",
                                     "RLARK_HEAD_ADDRESS": "127.0.0.1:1",
                                     "RLARK_WORKING_DIR": str(tmp_path), **more})


def test_the_records_facts_are_gathered_by_a_child_at_idle_priority(tmp_path, monkeypatch):
    """A forked child gathers them (this process goes on at once) with the CPU only nothing else
    wants, within a budget counted from its own start; its result reaches ``report`` whole."""
    from rlark.bootstrap import facts as facts_mod

    def gather(cfg, budget):
        return {"pid": os.getpid(), "policy": os.sched_getscheduler(0),
                "budget_left": budget.left(), "packages": {"count": 1}}

    monkeypatch.setattr(facts_mod, "record_facts", gather)
    got: list[dict] = []
    started = time.monotonic()
    bg = facts_mod.FactsInBackground(_cfg(tmp_path, RLARK_FACTS_BUDGET_SECONDS="7"), got.append)
    assert time.monotonic() - started < 1.0
    assert bg.wait(30) and len(got) == 1
    assert got[0]["pid"] not in (os.getpid(), None) and got[0]["pid"] == bg.pid
    assert got[0]["policy"] == os.SCHED_IDLE
    assert 6.0 < got[0]["budget_left"] <= 7.0
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(bg.pid, os.WNOHANG)


def test_a_child_that_ends_without_its_facts_reports_each_part_absent(tmp_path, monkeypatch):
    from rlark.bootstrap import facts as facts_mod

    monkeypatch.setattr(facts_mod, "record_facts", lambda cfg, budget: os._exit(3))
    got: list[dict] = []
    assert facts_mod.FactsInBackground(_cfg(tmp_path), got.append).wait(30)
    assert set(got[0]) == set(facts_mod.RECORD_PARTS)
    assert all(part["absent"].startswith("the process gathering them ended before it sent them")
               for part in got[0].values())


def test_finish_waits_at_most_its_time_then_ends_the_child(tmp_path, monkeypatch):
    """On a Worker's way out the facts are waited for, but not past the time given: the child
    (which ignores the stop signal the whole Worker gets) is killed and they are absent."""
    import signal

    from rlark.bootstrap import facts as facts_mod

    monkeypatch.setattr(facts_mod, "record_facts", lambda cfg, budget: time.sleep(60) or {})
    got: list[dict] = []
    bg = facts_mod.FactsInBackground(_cfg(tmp_path), got.append)
    time.sleep(0.2)
    os.kill(bg.pid, signal.SIGTERM)  # ignored: a Worker being stopped still reports them
    time.sleep(0.2)
    assert not bg.wait(0) and os.waitpid(bg.pid, os.WNOHANG) == (0, 0)
    started = time.monotonic()
    bg.finish(0.3)
    assert time.monotonic() - started < 1.6
    assert bg.wait(0) and got[0]["packages"]["absent"].startswith("the process gathering")


def test_a_worker_reports_its_records_facts_after_it_started_ray(tmp_path):
    """The record's facts no longer hold up ``ray start``: a Worker (not the head) says
    ``StartingRay`` first and reports them beside it, once, whole, also when its ``ray start``
    then fails (here a stand-in that exits 1 twice while the head's port answers)."""
    import socket

    from rlark.bootstrap import archive
    from rlark.controller.lifecycle import parse_lifecycle

    fake_ray = tmp_path / "ray"
    fake_ray.write_text("#!/bin/sh\nsleep 0.3\nexit 1\n")
    fake_ray.chmod(0o755)
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path),
               "RLINF_NODE_RANK": "1", "RLARK_NUM_NODES": "2",
               "RLARK_HEAD_ADDRESS": f"127.0.0.1:{head.getsockname()[1]}",
               # no raylet of another test matches this address and port
               "RLARK_NODE_IP": "127.0.0.1", "RLARK_RAY_PORTS": '{"node-manager-port": 29871}',
               "RLARK_RAY": str(fake_ray), "RLARK_WORKING_DIR": str(tmp_path)}
        done = subprocess.run([sys.executable, archive.install(str(tmp_path)), "worker"],
                              env=env, cwd=tmp_path, capture_output=True, timeout=60)
    events, _ = parse_lifecycle(done.stdout, 0)
    kinds = [(e["event"], e.get("phase") or e.get("reason")) for e in events]
    # the facts may come after the failure (gathered at idle priority, waited for on the way out)
    assert ("failed", "RayStartFailed") in kinds, (kinds, done.stderr)
    record = [i for i, e in enumerate(events) if e["event"] == "facts" and "packages" in e]
    assert len(record) == 1, kinds
    assert kinds.index(("phase", "StartingRay")) < record[0]
    facts = events[record[0]]
    assert facts["packages"]["count"] > 10 and isinstance(facts["factsSeconds"], float)
    assert events[0]["event"] == "facts" and events[0]["python"]  # what it is: at its start
