"""Two RLark servers on one machine never place Workers on the same address or ports."""

from __future__ import annotations

import subprocess
import sys

from rlark.ranks import plan_workers
from rlark.runtimes.base import Taken, WorkerRef
from rlark.runtimes.local import LocalRuntime
from rlark.runtimes.local_reservations import Reservations
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
    pc = a.place(job, "runc", plan_workers(job), Taken())
    assert {p.port_base for p in pc.workers.values()} == bases_a


def test_a_reservation_held_by_another_process_is_respected(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from rlark.runtimes.local_reservations import Reservations; "
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
