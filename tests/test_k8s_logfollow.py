"""Pod logs followed at scale on the test bed (tests/k8s_testbed.py): one thread for every Pod's
log, streams that end early reopened with backoff (not at once), and every line still reaching
the Worker's log file once and in order (rlark.runtimes.kubernetes.logfollow), each write said
to the controller (``take_changes``).

kwok serves a Pod's log from a file only when a ``Logs`` object names it; without one, every
log stream of the Pod ends at once: the case that made 100 Workers cost 7-10 log requests per
Pod (issue 23). The API server's own request counter (``apiserver_request_total``, read from
``/metrics`` as the admin) counts the log requests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from tests.k8s_testbed import KwokWorkers, setup_timeout, wait_for
from tests.test_k8s_runtime import job_yaml

pytest.importorskip("kubernetes")

from rlark.ranks import plan_workers  # noqa: E402
from rlark.runtimes.base import LaunchSpec, WorkerPlace, WorkerRef  # noqa: E402
from rlark.runtimes.kubernetes import render  # noqa: E402
from rlark.runtimes.kubernetes.client import KubeClient  # noqa: E402
from rlark.runtimes.kubernetes.runtime import KubernetesRuntime  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

RUN = "r1"
PODS = 50
#: how long the log requests of Running Pods whose streams end at once are counted
WINDOW_SECONDS = 15.0


def log_requests(tb) -> int:
    """``get pods/log`` requests the API server has answered since it started (all users)."""
    total = 0
    for line in tb.kubectl("get", "--raw", "/metrics", timeout=60).splitlines():
        if (line.startswith("apiserver_request_total{") and 'resource="pods"' in line
                and 'subresource="log"' in line):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def launch_all(rt: KubernetesRuntime, job, logs) -> list:
    workers = plan_workers(job)
    rt.place(job, RUN, workers, None)
    for w in workers:
        rt.launch(LaunchSpec(job=job, run_uid=RUN, worker=w, env={"RLINF_NODE_RANK": str(w.node_rank)},
                             log_path=str(logs / f"{w.name}.log"), place=WorkerPlace()))
    return workers


def running(tb, namespace: str, names: list[str]):
    def check():
        pods = tb.admin().list_namespaced_pod(namespace).items
        phases = {p.metadata.name: p.status.phase for p in pods}
        return all(phases.get(n) == "Running" for n in names) and phases
    return check


def test_fifty_pods_logs_take_one_thread_and_streams_that_end_at_once_are_not_reopened_at_once(
        k8s_testbed, k8s_namespace, tmp_path):
    job = load_job(job_yaml("many", pool=PODS - 1))[0]
    threads_before = threading.active_count()
    rt = KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), k8s_namespace))
    try:
        workers = launch_all(rt, job, tmp_path / "logs")
        names = [w.name for w in workers]
        wait_for(f"the {PODS} Pods to run", running(k8s_testbed, k8s_namespace, names))
        base = log_requests(k8s_testbed)
        wait_for("every Pod's log to be asked for",
                 lambda: log_requests(k8s_testbed) - base >= PODS, timeout=60, interval=1.0)
        counted_from = log_requests(k8s_testbed)
        time.sleep(WINDOW_SECONDS)  # a measuring window (requests per Pod per window), no wait for a state
        made = log_requests(k8s_testbed) - counted_from
        threads = threading.active_count() - threads_before
    finally:
        rt.shutdown()
    # the runtime's own threads: two watches and one for every log (the code before: +52)
    assert threads <= 4, f"{threads} more threads following {PODS} Pods"
    # backoff from 0.5-1 s doubling: at most 5 reopens per Pod in 15 s (the code before: 758, a
    # reopen about every second per Pod)
    assert made <= PODS * 5, f"{made} log requests for {PODS} Pods in {WINDOW_SECONDS:.0f} s"


def test_a_log_whose_stream_keeps_ending_gets_every_line_once_in_order_and_its_last_lines_at_its_end(
        k8s_testbed, k8s_namespace, tmp_path):
    """kwok ends each stream of this Pod once it has sent what the file holds (``follow:
    false``): each line comes through a later stream (resumed by ``sinceSeconds``, repeats
    dropped by the cursor), and the lines written just before the container ends are read at
    its end, not after a backoff."""
    job = load_job(job_yaml("cut", pool=0))[0]
    head = plan_workers(job)[0]
    kwok_log = k8s_testbed.pod_log(k8s_namespace, head.name, tmp_path / "kwok", follow=False)
    rt = KubernetesRuntime(kube=KubeClient(k8s_testbed.core_v1(), k8s_namespace))
    path = tmp_path / "logs" / f"{head.name}.log"

    def lines() -> list[str]:
        return path.read_text().splitlines() if path.exists() else []

    try:
        launch_all(rt, job, tmp_path / "logs")
        wait_for("the Pod to run", running(k8s_testbed, k8s_namespace, [head.name]))
        t = time.time()
        kwok_log.write("one", "two", at=t)
        wait_for("the first lines", lambda: lines() == ["one", "two"])
        kwok_log.write("three", at=t)  # the same timestamp: counted, not repeated
        handle = f"{k8s_namespace}/{head.name}"
        for i in range(4, 9):
            rt.take_changes()  # what came before this line
            kwok_log.write(str(i))
            wait_for(f"line {i}", lambda i=i: str(i) in lines())
            # the controller learns of the line from the runtime, not by a stat of the file
            wait_for(f"the runtime to say line {i} came", lambda: handle in rt.take_changes())
        kwok_log.write("last words")
        k8s_testbed.terminate(k8s_namespace, head.name, 3)
        ref = WorkerRef(name=head.name, handle=f"{k8s_namespace}/{head.name}", run_uid=RUN)

        def ended():
            seen = rt.observe(ref)
            return not seen.alive and seen
        seen = wait_for("the Worker to be seen ended", ended, timeout=60)
        assert seen.exit_code == 3, seen
        assert lines() == ["one", "two", "three", "4", "5", "6", "7", "8", "last words"]
    finally:
        rt.shutdown()


def test_every_request_and_log_stream_of_the_runtime_passes_the_shared_rate_limit(
        k8s_testbed, k8s_namespace, tmp_path):
    """One token bucket for the runtime's calls, its watches and its log streams (the
    ``--k8s-qps``/``--k8s-burst`` of ``rlark server``)."""
    from rlark.runtimes.kubernetes.client import RateLimit

    limit = RateLimit(qps=1000, burst=1000)
    kube = KubeClient(k8s_testbed.core_v1(), k8s_namespace, limit)
    rt = KubernetesRuntime(kube=kube)
    try:
        assert limit.taken >= 4  # the Pod and Event lists and watches
        job = load_job(job_yaml("paced", pool=0))[0]
        head = plan_workers(job)[0]
        k8s_testbed.pod_log(k8s_namespace, head.name, tmp_path / "kwok").write("hello")
        before = limit.taken
        launch_all(rt, job, tmp_path / "logs")
        assert limit.taken > before  # the creates
        wait_for("the Pod to run", running(k8s_testbed, k8s_namespace, [head.name]))
        wait_for("the log line", lambda: (tmp_path / "logs" / f"{head.name}.log").exists()
                 and (tmp_path / "logs" / f"{head.name}.log").read_text() == "hello\n")

        async def one_stream() -> bytes:
            reader = kube.log_reader()
            try:
                async with reader.stream(head.name, render.CONTAINER) as chunks:
                    async for chunk in chunks:
                        return chunk
            finally:
                await reader.aclose()
            return b""

        taken = limit.taken
        # in a thread of its own, as the runtime's follower loop runs: this test's thread may
        # hold a running loop already (Playwright's sync API, in the same pytest worker)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            said = pool.submit(asyncio.run, one_stream()).result(timeout=60)
        assert said.endswith(b" hello\n")
        assert limit.taken == taken + 1  # the log stream
        other = kube.in_namespace(k8s_namespace)
        taken = limit.taken
        other.list("Pod")
        assert limit.taken == taken + 1  # another client of the server: the same bucket
    finally:
        rt.shutdown()
