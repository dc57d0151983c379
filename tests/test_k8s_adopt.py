"""Adoption on Kubernetes: a server process that stops without deleting anything (as one that
crashed) leaves its Runs' Pods going; a fresh :class:`KubernetesRuntime` (the next server
process) finds them by their Run labels (``find``), watches them again (``adopt``) and follows
their logs on from where the log files end, on the test bed (tests/k8s_testbed.py).

No container runs (kwok): the tests write each Pod's log into the file kwok serves for it
(:class:`tests.k8s_testbed.KwokWorkers`) and end containers with kwok Stages.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.k8s_testbed import KwokWorkers, setup_timeout, wait_for
from tests.test_k8s_runtime import job_yaml

pytest.importorskip("kubernetes")

from rlark.ranks import plan_workers  # noqa: E402
from rlark.runtimes.base import AdoptSpec, LaunchSpec, WorkerPlace, WorkerRef  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.namespaces import ProjectNamespaces  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime, cursor_path  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

JOB = load_job(job_yaml(pool=1))[0]
WORKERS = {w.name: w for w in plan_workers(JOB)}
HEAD, POOL = "ppo-head-0", "ppo-pool-0"
RUN = "r1"


@pytest.fixture
def bed(k8s_testbed, k8s_namespace, tmp_path):
    """The Job's Pod logs (kwok) and a way to make runtimes in the test's namespace; every
    runtime made is shut down after the test (without deleting anything)."""
    made: list = []

    def runtime(namespace: str = k8s_namespace, **kw) -> KubernetesRuntime:
        made.append(KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), namespace), **kw))
        return made[-1]

    workers = KwokWorkers(k8s_testbed, k8s_namespace, JOB, tmp_path / "kwok")
    yield workers, runtime, tmp_path / "logs"
    for rt in made:
        rt.shutdown()


def log_of(logs: Path, worker: str) -> str:
    return str(logs / f"{worker}.log")


def lines(path: str) -> list[str]:
    p = Path(path)
    return p.read_text().splitlines() if p.exists() else []


def ref(ns: str, worker: str) -> WorkerRef:
    return WorkerRef(name=worker, handle=f"{ns}/{worker}", run_uid=RUN)


def first_server(bed, running: bool = True) -> tuple[KubernetesRuntime, float]:
    """A runtime (the first server process) that launched every Worker of :data:`JOB` as Run
    :data:`RUN`, and when (the launch time a controller would store); with ``running``, once
    kwok runs their Pods."""
    workers, runtime, logs = bed
    rt = runtime()
    launched_at = time.time()
    rt.place(JOB, RUN, list(WORKERS.values()), None)
    for w in WORKERS.values():
        rt.launch(LaunchSpec(job=JOB, run_uid=RUN, worker=w, env={"RLINF_NODE_RANK": str(w.node_rank)},
                             log_path=log_of(logs, w.name), place=WorkerPlace()))
    if running:
        workers.wait_running()
    return rt, launched_at


def crash(rt: KubernetesRuntime) -> None:
    """The server process goes away: watches and log followers stop, nothing is deleted."""
    rt.shutdown()  # from here its followers write nothing more


def adopt(rt, ns: str, worker: str, logs: Path, launched_at: float) -> WorkerRef:
    r = ref(ns, worker)
    rt.adopt(AdoptSpec(ref=r, job=JOB, is_head=WORKERS[worker].is_head, log_path=log_of(logs, worker),
                       namespace=ns, launched_at=launched_at))
    return r


def ended(rt, *refs: WorkerRef, timeout: float = 30.0) -> list:
    """The Workers' Observed once none is alive (their logs written out)."""
    def check():
        seen = [rt.observe(r) for r in refs]
        return not any(o.alive for o in seen) and seen
    return wait_for(f"{', '.join(r.name for r in refs)} to be seen ended", check, timeout)


def test_an_adopted_worker_carries_on_and_its_log_gets_every_line_once(bed, k8s_namespace):
    workers, runtime, logs = bed
    head, path = workers.logs[HEAD], log_of(logs, HEAD)
    a, launched_at = first_server(bed)
    t = time.time()
    head.write("one", "two", "three", at=t)  # one timestamp: the cursor counts lines at it
    wait_for("the first server to write the first lines", lambda: lines(path) == ["one", "two", "three"])
    crash(a)
    head.write("four", "five", at=t)  # while no server follows, still at that timestamp
    head.write("six")
    b = runtime()
    r = adopt(b, k8s_namespace, HEAD, logs, launched_at)
    pool = adopt(b, k8s_namespace, POOL, logs, launched_at)
    seen = b.observe(r)
    assert seen.alive and seen.failure is None, seen
    assert b.observe(pool).alive
    expected = ["one", "two", "three", "four", "five", "six"]
    wait_for("the next server to write the lines written while none followed",
             lambda: lines(path)[:len(expected)] == expected and lines(path))
    head.write("seven")
    wait_for("the next server to follow on", lambda: len(lines(path)) > len(expected))
    assert lines(path) == expected + ["seven"]  # no gap, no line twice
    seen = b.observe(r)
    assert seen.alive and seen.failure is None, seen


def test_lines_written_after_the_last_cursor_save_are_cut_and_fetched_once(bed, k8s_namespace):
    """A server died between appending lines to the log file and saving its cursor: the file is
    longer than its cursor says. The next server cuts it back and fetches those lines again."""
    workers, runtime, logs = bed
    pool, path = workers.logs[POOL], log_of(logs, POOL)
    a, launched_at = first_server(bed)

    def saved(n: int):
        """The cursor file's bytes once it accounts for ``n`` lines."""
        def check():
            try:
                data = Path(cursor_path(path)).read_bytes()
            except FileNotFoundError:
                return None
            state = json.loads(data)
            return state["lines"] == n and state["size"] == Path(path).stat().st_size and data
        return wait_for(f"the cursor to account for {n} lines", check)

    pool.write("a", "b")
    early = saved(2)
    pool.write("c", "d")
    saved(4)
    crash(a)
    Path(cursor_path(path)).write_bytes(early)  # as if it died before saving after "c", "d"
    pool.write("e")
    b = runtime()
    adopt(b, k8s_namespace, POOL, logs, launched_at)
    wait_for("the next server to write e", lambda: "e" in lines(path))
    assert lines(path) == ["a", "b", "c", "d", "e"]
    assert json.loads(Path(cursor_path(path)).read_text())["size"] == Path(path).stat().st_size


def test_a_log_without_a_cursor_is_resumed_after_the_lines_it_holds(bed, k8s_namespace):
    """A log file written by a server without cursors (an earlier release) or before its first
    save: its own lines tell where to carry on."""
    workers, runtime, logs = bed
    head, path = workers.logs[HEAD], log_of(logs, HEAD)
    a, launched_at = first_server(bed)
    head.write("x", "y")
    wait_for("the first server to write x, y", lambda: lines(path) == ["x", "y"])
    crash(a)
    Path(cursor_path(path)).unlink()
    head.write("z")
    b = runtime()
    adopt(b, k8s_namespace, HEAD, logs, launched_at)
    wait_for("the next server to write z", lambda: "z" in lines(path))
    assert lines(path) == ["x", "y", "z"]


def test_a_pod_deleted_while_no_server_watched_is_gone_once_the_next_server_has_listed(
        bed, k8s_testbed, k8s_namespace):
    workers, runtime, logs = bed
    a, launched_at = first_server(bed)
    crash(a)
    admin = k8s_testbed.admin()
    admin.delete_namespaced_pod(POOL, k8s_namespace, grace_period_seconds=0)
    wait_for(f"{POOL} to be deleted", lambda: POOL not in {
        p.metadata.name for p in admin.list_namespaced_pod(k8s_namespace).items})
    # the next server through ProjectNamespaces (its own namespace elsewhere), adopting before
    # its watch of the Pods' namespace has listed: a Pod missing from no list is not gone yet
    b = ProjectNamespaces(runtime("rlark-server-ns", start=False), lambda ns: runtime(ns, start=False))
    pool = adopt(b, k8s_namespace, POOL, logs, launched_at)
    head = adopt(b, k8s_namespace, HEAD, logs, launched_at)
    before = b.observe(pool)
    assert before.alive and before.failure is None, before
    b.runtime_for(k8s_namespace).start()
    [gone] = ended(b, pool, timeout=5)  # promptly: as soon as the list shows it missing
    assert gone.failure is not None and gone.failure[0] == "WorkerLost", gone
    assert f"Pod {POOL} was deleted while no RLark server watched it" in gone.failure[1], gone
    assert b.observe(head).alive


def test_containers_that_ended_while_no_server_watched_give_their_exit_codes(
        bed, k8s_testbed, k8s_namespace):
    workers, runtime, logs = bed
    a, launched_at = first_server(bed)
    crash(a)
    workers.logs[HEAD].write("run script done")
    workers.logs[POOL].write("pool done")
    k8s_testbed.terminate(k8s_namespace, HEAD, 0)
    k8s_testbed.terminate(k8s_namespace, POOL, 2)
    phases = {HEAD: "Succeeded", POOL: "Failed"}
    wait_for("the containers to end", lambda: all(
        workers.pod(name).status.phase == phase for name, phase in phases.items()))
    b = runtime()
    got_head, got_pool = ended(b, *(adopt(b, k8s_namespace, name, logs, launched_at) for name in (HEAD, POOL)))
    assert (got_head.exit_code, got_head.failure) == (0, None), got_head
    assert (got_pool.exit_code, got_pool.failure) == (2, None), got_pool
    # written out before the end is told
    assert (lines(log_of(logs, HEAD)), lines(log_of(logs, POOL))) == (["run script done"], ["pool done"])


def test_find_returns_a_workers_pod_by_its_run_labels(bed, k8s_namespace):
    """A Worker whose handle never reached the store (the server died between launching it and
    committing) is found; one never created is not."""
    workers, runtime, logs = bed
    crash(first_server(bed, running=False)[0])
    listed = runtime()  # answers from its watch cache
    unlisted = ProjectNamespaces(runtime("rlark-server-ns", start=False),
                                 lambda ns: runtime(ns, start=False))  # one API list call
    for rt in (listed, unlisted):
        found = rt.find(RUN, POOL, k8s_namespace)
        assert found is not None and found.handle == f"{k8s_namespace}/{POOL}", rt
        assert rt.find(RUN, "ppo-pool-9", k8s_namespace) is None
        assert rt.find("r2", POOL, k8s_namespace) is None  # the name, but another Run's Pod
