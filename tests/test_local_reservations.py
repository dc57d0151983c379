"""Two RLark servers on one machine never place Workers on the same address or ports."""

from __future__ import annotations

import subprocess
import sys

from rlark.ranks import plan_workers
from rlark.runtimes.base import Taken, WorkerRef
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.runtimes.local.ports import UNIT
from rlark.runtimes.local.reservations import Reservations
from rlark.spec import parse_job


def _job(workers: int = 2):
    job, findings = parse_job({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "res"},
        "spec": {"headRole": "h", "runScript": "true",
                 "roles": [{"name": "h", "image": "x/y:1", "workers": workers}]}})
    assert job is not None, findings
    return job


def test_two_runtimes_sharing_a_lock_dir_get_disjoint_places(tmp_path, rlark_home):
    a = LocalRuntime(Reservations(str(tmp_path)))
    b = LocalRuntime(Reservations(str(tmp_path)))
    job = _job(2)
    pa = a.place(job, "runa", plan_workers(job), Taken())
    pb = b.place(job, "runb", plan_workers(job), Taken())  # b's store knows nothing of a's Run
    ips_a = {p.node_ip for p in pa.workers.values()}
    ips_b = {p.node_ip for p in pb.workers.values()}
    bases_a = {p.port_base for p in pa.workers.values()}
    bases_b = {p.port_base for p in pb.workers.values()}
    assert len(ips_a) == len(bases_a) == 2 and len(ips_b) == len(bases_b) == 2
    assert not ips_a & ips_b and not bases_a & bases_b
    assert pa.head_address != pb.head_address

    # once a's Workers are forgotten (and its Run ended), their places are free again
    for rank, place in pa.workers.items():
        a.forget(WorkerRef(name=f"w{rank}", run_uid="runa", node_ip=place.node_ip,
                           port_base=place.port_base))
    a.end_run("runa")
    # (not placed again: another test's Ray may bind those ports meanwhile, and place() skips a
    # port in use whoever holds it; what is checked is that RLark no longer holds them)
    other = Reservations(str(tmp_path))
    assert all(other.try_reserve("ports", base) for base in bases_a)
    assert not any(other.try_reserve("ports", base) for base in bases_b)  # b's Run still holds its


def test_a_reservation_held_by_another_process_is_respected(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from rlark.runtimes.local.reservations import Reservations; "
         f"r = Reservations({str(tmp_path)!r}); assert r.try_reserve('ports', 20000); "
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        mine = Reservations(str(tmp_path))
        assert not mine.try_reserve("ports", 20000)
        assert mine.try_reserve("ports", 20064)
    finally:
        holder.kill()
        holder.wait()
    # the operating system dropped the dead holder's lock
    assert Reservations(str(tmp_path)).try_reserve("ports", 20000)


def test_end_run_frees_places_of_workers_that_never_launched(tmp_path, rlark_home):
    rt = LocalRuntime(Reservations(str(tmp_path)))
    job = _job(3)
    first = rt.place(job, "r1", plan_workers(job), Taken())
    rt.end_run("r1")
    second = rt.place(job, "r2", plan_workers(job), Taken())
    assert ({p.port_base for p in first.workers.values()}
            == {p.port_base for p in second.workers.values()})


def _sized_job(name: str, cpu: int, workers: int, worker_ports: int | None = None):
    role = {"name": "h", "image": "x/y:1", "workers": workers, "resources": {"cpu": cpu}}
    if worker_ports is not None:
        role["ray"] = {"workerPorts": worker_ports}
    job, findings = parse_job({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"headRole": "h", "runScript": "true", "roles": [role]}})
    assert job is not None, findings
    return job


def _ranges(placement):
    """Each Worker's block: from its base to the end of the unit its last worker port is in."""
    return {(p.port_base, p.port_base + -(-(p.ray_ports["max-worker-port"] + 1 - p.port_base) // UNIT) * UNIT)
            for p in placement.workers.values()}


def _overlap(a, b):
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


def test_blocks_of_different_sizes_never_overlap_across_servers(tmp_path, rlark_home):
    """Blocks follow the role (cpu 8: 3 units of 64 ports; workerPorts 500: 9 units), and are
    reserved unit by unit, so another server's smaller block cannot land inside a larger one."""
    a = LocalRuntime(Reservations(str(tmp_path)))
    b = LocalRuntime(Reservations(str(tmp_path)))
    big, ports = _sized_job("big", cpu=8, workers=2), _sized_job("ports", cpu=1, workers=1, worker_ports=500)
    small = _sized_job("small", cpu=1, workers=3)
    pa = a.place(big, "runa", plan_workers(big), Taken())
    pb = b.place(small, "runb", plan_workers(small), Taken())  # b's store knows nothing of a's
    pc = a.place(ports, "runc", plan_workers(ports), Taken())
    ra, rb, rc = _ranges(pa), _ranges(pb), _ranges(pc)
    assert sorted(e - s for s, e in ra) == [192, 192]  # 16 own ports + 176 worker ports
    assert [e - s for s, e in rb] == [64] * 3 and [e - s for s, e in rc] == [576]
    assert not _overlap(ra, rb) and not _overlap(ra, rc) and not _overlap(rb, rc)
    for place in pa.workers.values():  # the default worker range is the rest of the block
        assert place.ray_ports["min-worker-port"] == place.port_base + 16
        assert place.ray_ports["max-worker-port"] == place.port_base + 191
    (only,) = pc.workers.values()  # a set value is the range's exact size
    assert only.ray_ports["max-worker-port"] - only.ray_ports["min-worker-port"] + 1 == 500

    # a's first Run ends: all three units of each block are free again (for b, too)
    for rank, place in pa.workers.items():
        a.forget(WorkerRef(name=f"w{rank}", run_uid="runa", node_ip=place.node_ip,
                           port_base=place.port_base))
    a.end_run("runa")
    again = b.place(big, "rund", plan_workers(big), Taken())
    assert _ranges(again) == ra


def test_ranges_live_workers_hold_in_the_store_are_skipped(tmp_path, rlark_home):
    """The store's view (Workers of this server's earlier life, whose reservations died with
    it): a new block overlaps none of those ranges, whatever their size."""
    rt = LocalRuntime(Reservations(str(tmp_path)))
    job = _sized_job("one", cpu=1, workers=2)
    held = frozenset({(20000, 20192), (20256, 20320)})
    placed = rt.place(job, "r1", plan_workers(job), Taken(port_ranges=held))
    assert len(_ranges(placed)) == 2 and not _overlap(_ranges(placed), held)
    # the lowest free places (unless another test's Ray node binds them right now)
    assert min(p.port_base for p in placed.workers.values()) >= 20192
