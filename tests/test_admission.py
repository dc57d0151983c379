"""Admission of Runs by free capacity on the local runtime.

The decision (``admission.admit``) is table-tested; then a real server on this machine gets more
1-Worker Jobs than its cores carry and must run every one to Succeeded, never more at once than
fit, in the order they came, a Job asking more than the whole machine alone.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

import pytest

from rlark import settings
from rlark.controller.admission import Amounts, Candidate, Capacity, Usage, admit

GiB = 1024**3
HOST = Capacity(total=Amounts(cpu=2, memory=8 * GiB, gpu=1, devices={"rdma/hca": 2}),
                max_starting_nodes=2)


def one(cpu=1.0, memory=GiB, gpu=0, devices=None, nodes=1, key=None) -> Candidate:
    return Candidate(key, Amounts(cpu, memory, gpu, devices or {}), nodes)


def decide(queue: list[Candidate], usage: Usage = Usage(), capacity: Capacity = HOST):
    queue = [Candidate(c.key or f"r{i}", c.demand, c.nodes) for i, c in enumerate(queue, 1)]
    out = admit(queue, usage, capacity)
    assert list(out) == [c.key for c in queue]  # every Run gets a decision, in queue order
    return out


def admitted(out) -> list[str]:
    return [k for k, d in out.items() if d.admit]


def test_runs_start_while_they_fit_and_the_rest_wait_with_their_place():
    out = decide([one(), one(), one(), one()])
    assert admitted(out) == ["r1", "r2"]
    assert [(out[k].position) for k in ("r3", "r4")] == [1, 2]
    assert out["r3"].message == ("queued in this machine's queue, 1st in line: needs 1 CPU, 1.0 GiB "
                                 "memory; free now: 0 CPUs, 6.0 GiB memory, 1 GPU, 2 rdma/hca of "
                                 "2 CPUs, 8.0 GiB memory, 1 GPU, 2 rdma/hca")
    assert out["r4"].message.startswith("queued in this machine's queue, 2nd in line: ")


def test_what_running_workers_hold_is_not_free():
    held = Usage(held=Amounts(cpu=1, memory=7 * GiB), busy=True)
    out = decide([one(cpu=1, memory=GiB), one(cpu=1, memory=GiB)], held)
    assert admitted(out) == ["r1"]
    assert "memory" in out["r2"].message


@pytest.mark.parametrize("short, wait_for", [
    (dict(gpu=2), "gpu 2 > 1"),
    (dict(devices={"rdma/hca": 3}), "rdma/hca 3 > 2"),
    (dict(cpu=3), "cpu 3 > 2"),
    (dict(memory=9 * GiB), "memory 9.0 GiB > 8.0 GiB"),
])
def test_a_run_larger_than_the_machine_waits_for_an_idle_machine_then_starts_alone(short, wait_for):
    big = one(**short)
    busy = Usage(held=Amounts(cpu=1, memory=GiB), busy=True)
    out = decide([big, one()], busy)
    assert admitted(out) == []  # it waits, and holds back the Run behind it
    assert wait_for in out["r1"].message and "starts alone" in out["r1"].message
    assert out["r2"].position == 2
    out = decide([big, one(**short)])  # nothing else runs: it starts; what it overfills waits
    assert admitted(out) == ["r1"]
    assert out["r1"].oversized == (wait_for,)
    assert out["r2"].position == 1


def test_devices_the_machine_does_not_list_are_not_limited():
    out = decide([one(devices={"fpga": 64})])
    assert admitted(out) == ["r1"] and out["r1"].oversized == ()


def test_strictly_in_order_a_small_run_does_not_pass_a_waiting_one():
    busy = Usage(held=Amounts(cpu=1), busy=True)
    out = decide([one(cpu=2), one(cpu=1)], busy)
    assert admitted(out) == []
    assert [out["r1"].position, out["r2"].position] == [1, 2]


def test_higher_priority_goes_first_then_the_oldest():
    queue = [Candidate("old", Amounts(2, GiB, 0), 1), Candidate("low", Amounts(2, GiB, 0), 1, -1),
             Candidate("urgent", Amounts(2, GiB, 0), 1, 10), Candidate("young", Amounts(2, GiB, 0), 1)]
    out = admit(queue, Usage(), HOST)
    assert [k for k, d in out.items() if d.admit] == ["urgent"]
    assert {k: out[k].position for k in ("old", "young", "low")} == {"old": 1, "young": 2, "low": 3}
    assert out["young"].message == ("queued in this machine's queue, 2nd in line: Runs start in "
                                    "order as the Workers of earlier Runs end")


def test_ray_nodes_starting_at_once_are_bounded():
    starting = Usage(held=Amounts(cpu=0.0), starting_nodes=2, busy=True)
    out = decide([one(cpu=0, memory=0)], starting)
    assert admitted(out) == []
    assert "2 Ray nodes starting; at most 2 start at once (RLARK_MAX_STARTING_NODES)" in out["r1"].message
    # the queue counts the nodes of the Runs it admits in the same pass
    out = decide([one(cpu=0, memory=0, nodes=2), one(cpu=0, memory=0)])
    assert admitted(out) == ["r1"]
    # a Run with more nodes than the bound starts when no node is starting
    out = decide([one(cpu=0, memory=0, nodes=5)])
    assert admitted(out) == ["r1"]


def test_settings_for_the_machines_capacity(monkeypatch):
    monkeypatch.delenv("RLARK_MAX_STARTING_NODES", raising=False)
    assert settings.max_starting_nodes() == max(2, os.cpu_count() or 1)
    monkeypatch.setenv("RLARK_MAX_STARTING_NODES", "5")
    assert settings.max_starting_nodes() == 5
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("RLARK_MAX_STARTING_NODES", bad)
        with pytest.raises(ValueError, match=f"RLARK_MAX_STARTING_NODES='{bad}'"):
            settings.max_starting_nodes()
    monkeypatch.delenv("RLARK_MAX_STARTING_NODES")
    monkeypatch.setenv("RLARK_LOCAL_DEVICES", '{"rdma/hca": 2}')
    assert settings.local_devices() == {"rdma/hca": 2.0}
    for bad in ('["rdma/hca"]', '{"x": -1}', "{", '{"x": "2"}'):
        monkeypatch.setenv("RLARK_LOCAL_DEVICES", bad)
        with pytest.raises(ValueError, match="RLARK_LOCAL_DEVICES="):
            settings.local_devices()


# --- a real server ---------------------------------------------------------------------------------


def _job(name: str, cpu: int, run: str) -> str:
    from tests.test_local_runtime import job_yaml

    return job_yaml(name, pool_workers=0, cpu=cpu, run=run)


def _t(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.mark.ray
def test_more_jobs_than_the_machine_carries_queue_and_all_succeed(tmp_path):
    """On this machine's cores: Jobs a and b (1 CPU each) fill it; big (more CPUs than the
    machine has) and then c (1 CPU) wait in that order with their places; big starts alone
    once a's and b's Workers are gone; c after big. Every Job Succeeds; Workers never hold more
    CPUs at once than the machine has (big aside, alone)."""
    from tests.server import RlarkServer, assert_nothing_left, ray_tmp_dir

    cores = os.cpu_count() or 1
    (tmp_path / "home").mkdir()
    server = RlarkServer(tmp_path / "home", {"RLARK_RAY_TMP": ray_tmp_dir()}).start()
    try:
        fill = [f"fill-{i}" for i in range(cores)]
        for name in fill:  # long enough to be seen holding the machine
            server.submit(_job(name, 1, "sleep 3; echo done"))
        server.submit(_job("big", cores + 1, "echo done"))
        server.submit(_job("after", 1, "echo done"))
        deadline = time.monotonic() + 60
        while True:
            big, after = server.job("big"), server.job("after")
            if big["reason"] == after["reason"] == "Queued":
                break
            assert time.monotonic() < deadline, (big, after)
            time.sleep(0.2)
        assert big["phase"] == after["phase"] == "Pending"
        assert big["message"].startswith("queued in this machine's queue, 1st in line: it asks for "
                                         f"more than this machine has (cpu {cores + 1} > {cores})")
        assert after["message"].startswith("queued in this machine's queue, 2nd in line")
        names = fill + ["big", "after"]
        jobs = {n: server.wait_phase(n, {"Succeeded"}, timeout=300) for n in names}
        jobs = {n: server.wait_released(n) for n in names}
        spans = {n: [(_t(w["startedAt"]), _t(w["finishedAt"])) for w in j["currentRun"]["workers"]]
                 for n, j in jobs.items()}
        starts = {n: min(s for s, _ in v) for n, v in spans.items()}
        ends = {n: max(e for _, e in v) for n, v in spans.items()}
        # in order: the fill Jobs together, then big alone, then the one behind it
        assert max(starts[n] for n in fill) < min(ends[n] for n in fill)  # they overlapped
        assert max(ends[n] for n in fill) <= starts["big"]
        assert ends["big"] <= starts["after"]
        # never more CPUs held at once than the machine has
        cpus = {n: (cores + 1 if n == "big" else 1) for n in names}
        for n in names:
            t = starts[n]
            held = sum(cpus[m] for m in names if starts[m] <= t < ends[m])
            assert held <= max(cores, cpus[n]), (n, held)
        events = server.http.get("/api/v1/jobs/big/events").json()
        assert [e["reason"] for e in events].count("Queued") == 1
        assert any(e["reason"] == "ExceedsHostCpu" for e in events)  # the warning at submit
        assert any(e["reason"] == "ExceedsHostCapacity" and e["type"] == "Warning" for e in events)
        for j in jobs.values():
            assert_nothing_left(j)
    finally:
        server.stop()
