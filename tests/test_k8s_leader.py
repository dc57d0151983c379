"""Two replicas of ``rlark server --runtime kubernetes``: leader election through a real
``coordination.k8s.io`` Lease on the test bed's API server, as RLark's own ServiceAccount bound by
deploy/kubernetes/rbac.yaml's ``rlark-leader-election`` Role (in a fresh namespace per test, the
server's namespace here).

Electors racing for one Lease (exactly one leads); a leader that dies is replaced once its
Lease has expired, never while it may still act; a leader whose calls hang stops before anyone
may take over (fail closed); a leader whose Lease someone else takes stops reconciling and
nothing happens until it leads a fresh term later; and two real server processes on one store:
a Job submitted to the follower runs, the leader is killed (``kill -9``), the follower takes
over once the Lease expired and the Run carries on to its end.

What these prove is the order of events (the Lease's own renewTime and acquireTime, who led
when), not how fast: each wait is bounded (named when it runs out) with room to spare.

The pure decisions: tests/test_leader.py.
"""

from __future__ import annotations

import copy
import socket
import threading
import time

import pytest

from tests.k8s_testbed import LEASE, KwokWorkers, setup_timeout, wait_for

pytest.importorskip("kubernetes")

from rlark.api.security import SecurityPolicy  # noqa: E402
from rlark.controller.leader import (  # noqa: E402
    LEASE_SECONDS,
    RENEW_PERIOD,
    Action,
    LeaderElector,
    LeaseClient,
    micro_time,
)
from rlark.spec import load_job  # noqa: E402
from tests.test_k8s_runtime import job_yaml  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

#: the bound on waiting for a takeover after the leader is killed: the Lease's duration, then
#: a candidate's next read (RENEW_PERIOD) and its write, with room to spare
TAKEOVER_BOUND = 15.0


def expired_before_taken(before, after) -> float:
    """Seconds between the last renewal in Lease ``before`` and the acquisition in Lease
    ``after`` (both as read from the API server), by the times the electors wrote in them."""
    return (after.spec.acquire_time - before.spec.renew_time).total_seconds()


@pytest.fixture
def lease_ns(k8s_testbed, k8s_namespace):
    """A fresh namespace where RLark's ServiceAccount has the leader election Role (the
    server's), and ``<it>-default``, where project default's Pods run (:func:`default_ns`)."""
    k8s_testbed.grant_leader_election(k8s_namespace)
    k8s_testbed.project_namespace(default_ns(k8s_namespace))
    try:
        yield k8s_namespace
    finally:
        k8s_testbed.delete_namespace(default_ns(k8s_namespace))


def default_ns(server_ns: str) -> str:
    """Project default's namespace on a server in ``server_ns`` (never the server's own)."""
    return f"{server_ns}-default"


def elector(tb, ns: str, identity: str, leases: LeaseClient | None = None) -> LeaderElector:
    return LeaderElector(leases or LeaseClient(tb.api_client(), ns), identity=identity)


def read_lease(tb, ns: str):
    return tb.coordination().read_namespaced_lease(LEASE, ns)


class Lockstep(LeaseClient):
    """The real Lease client whose reads wait for each other: both candidates read the same
    resourceVersion before either writes, so their writes really race."""

    def __init__(self, api_client, namespace: str, barrier: threading.Barrier):
        super().__init__(api_client, namespace)
        self.barrier = barrier

    def get(self):
        obj = super().get()
        self.barrier.wait(timeout=30)
        return obj


class Overlap:
    """Samples the electors' ``is_leader()`` every few milliseconds in a thread; ``both`` lists
    the moments at which more than one said yes."""

    def __init__(self, *electors: LeaderElector):
        self.electors = electors
        self.both: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            if sum(e.is_leader() for e in self.electors) > 1:
                self.both.append(time.monotonic())

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        return self.both


def test_two_electors_racing_for_one_lease_exactly_one_leads(k8s_testbed, lease_ns):
    """Round 0 races to create the Lease, the later rounds to take a released one: both read
    the same resourceVersion, both write, one gets 409 Conflict and follows."""
    winners = []
    for round_ in range(4):
        barrier = threading.Barrier(2)
        a, b = (elector(k8s_testbed, lease_ns, f"{who}{round_}",
                        Lockstep(k8s_testbed.api_client(), lease_ns, barrier)) for who in "ab")
        threads = [threading.Thread(target=e.step) for e in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        leaders = [e for e in (a, b) if e.is_leader()]
        assert len(leaders) == 1, [(e.identity, e.last_action, e.last_error) for e in (a, b)]
        winner, loser = leaders[0], (b if leaders[0] is a else a)
        assert winner.last_action is loser.last_action is (Action.create if round_ == 0 else Action.acquire)
        assert loser.last_error is None  # a lost race is no error
        assert read_lease(k8s_testbed, lease_ns).spec.holder_identity == winner.identity
        # the next reads: the winner renews, the loser follows it
        loser.leases.barrier = winner.leases.barrier = threading.Barrier(1)
        loser.step()
        winner.step()
        assert (winner.is_leader(), winner.last_action) == (True, Action.renew)
        assert (loser.is_leader(), loser.last_action, loser.holder) == (False, Action.wait, winner.identity)
        winner.release()
        assert not winner.is_leader() and read_lease(k8s_testbed, lease_ns).spec.holder_identity in ("", None)
        winners.append(winner.identity)
    assert read_lease(k8s_testbed, lease_ns).spec.lease_transitions == 3  # three takeovers


def test_when_the_leader_dies_the_other_takes_over_within_15_s_and_never_two_lead(k8s_testbed, lease_ns):
    a = elector(k8s_testbed, lease_ns, "replica-a")
    a.start()
    wait_for("replica-a to lead", a.is_leader, timeout=10)
    b = elector(k8s_testbed, lease_ns, "replica-b")
    b.start()
    try:
        wait_for("replica-b to see replica-a lead", lambda: b.holder == "replica-a", timeout=10)
        overlap = Overlap(a, b)
        a.stop(release=False)  # as kill -9: no more renewals, the Lease is left as it is
        last = read_lease(k8s_testbed, lease_ns)  # replica-a's last renewal
        assert last.spec.holder_identity == "replica-a"
        wait_for("replica-b to take over", b.is_leader, timeout=TAKEOVER_BOUND + 5, interval=0.02)
        assert not overlap.stop(), "replica-a still led when replica-b began to"
        lease = read_lease(k8s_testbed, lease_ns)
        assert (lease.spec.holder_identity, lease.spec.lease_transitions) == (b.identity, 1)
        # replica-b took it only once it had expired: a full leaseDurationSeconds after the
        # renewal it last saw (its own clock; both write the same host's time in the Lease)
        assert expired_before_taken(last, lease) >= LEASE_SECONDS, (last.spec, lease.spec)
    finally:
        b.stop()
        a.stop()


class Silent:
    """A loopback port that takes connections and never answers: a call to it hangs until its
    own timeout, as to an API server that is unreachable or stalled."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)  # the kernel completes the handshakes; nobody reads or writes
        self.port = self.sock.getsockname()[1]

    def api(self, tb):
        """CoordinationV1Api as RLark's ServiceAccount, pointed at this port."""
        from kubernetes import client

        configuration = copy.copy(tb.api_client().configuration)
        configuration.host = f"https://127.0.0.1:{self.port}"
        configuration.refresh_api_key_hook = None  # it would set the kubeconfig's host again
        return client.CoordinationV1Api(client.ApiClient(configuration))

    def close(self) -> None:
        self.sock.close()


def test_a_leader_that_cannot_renew_stops_at_its_deadline_and_leads_again_after(k8s_testbed, lease_ns):
    """Fail closed: while every Lease call hangs (an API server gone silent) the leader stops
    leading at its deadline, whatever its calls do meanwhile, before anyone else may take the
    Lease over; once the API server answers again and the Lease still names it, it leads again."""
    a = elector(k8s_testbed, lease_ns, "replica-a")
    silent = Silent()
    a.start()
    try:
        wait_for("replica-a to lead", a.is_leader, timeout=10)
        real = a.leases.api
        a.leases.api = silent.api(k8s_testbed)
        # its last renewal began at most RENEW_PERIOD ago, so nobody else may take the Lease
        # for LEASE_SECONDS - RENEW_PERIOD from now: it must have stopped leading within that
        wait_for("replica-a to stop leading before the Lease may be taken over",
                 lambda: not a.is_leader(), timeout=LEASE_SECONDS - RENEW_PERIOD, interval=0.01)
        assert read_lease(k8s_testbed, lease_ns).spec.holder_identity == "replica-a"  # nobody took it
        wait_for("the failed renewal to be reported", lambda: a.last_error, timeout=10)
        assert a.last_error.startswith("leader election: ") and "Lease" in a.last_error, a.last_error
        a.leases.api = real
        wait_for("replica-a to lead again", a.is_leader, timeout=15)
        assert a.last_error is None
    finally:
        a.stop()
        silent.close()


@pytest.fixture
def replica(k8s_testbed, lease_ns, rlark_home, monkeypatch):
    """A replica's server as ``rlark server --runtime kubernetes`` wires it (server.build_app:
    leader election on), in-process, its controller not started yet; shut down after the test."""
    from rlark.server import build_app

    monkeypatch.setenv("KUBECONFIG", str(k8s_testbed.rlark_kubeconfig))
    monkeypatch.setenv("HOSTNAME", "replica-a")
    monkeypatch.setenv("RLARK_K8S_PENDING_TIMEOUT", "60")
    app = build_app(f"sqlite:///{rlark_home / 'rlark.db'}", runtime="kubernetes", namespace=lease_ns,
                    policy=SecurityPolicy(auth=False), stop_runs_on_exit=True)
    yield app
    app.state.controller.shutdown()
    app.state.jobs.store.dispose()


def test_a_leader_whose_lease_is_taken_stops_reconciling_at_once_and_leads_a_new_term_later(
        k8s_testbed, lease_ns, replica):
    leadership, jobs = replica.state.controller, replica.state.jobs
    leadership.start()
    wait_for("the replica to lead and reconcile", lambda: leadership.status()["reconciling"], timeout=15)
    first = leadership.term
    assert leadership.status()["leader"] == leadership.elector.identity
    # someone else writes itself into the Lease (as a replica that took over would)
    lease = read_lease(k8s_testbed, lease_ns)
    lease.spec.holder_identity, lease.spec.renew_time = "intruder", micro_time()
    k8s_testbed.coordination().replace_namespaced_lease(LEASE, lease_ns, lease)
    wait_for("the leader to stop reconciling", lambda: leadership.term is None,
             timeout=RENEW_PERIOD + 2, interval=0.02)
    wait_for("its controller's loop to end", lambda: not first.status()["reconciling"], timeout=10)
    status = leadership.status()
    assert (status["leading"], status["leader"], status["reconciling"]) == (False, "intruder", False)
    # a Job submitted now is stored but nobody here acts on it until a new term begins: the
    # intruder never renews, the Lease expires and this replica leads a fresh term
    jobs.create(job_yaml("late", pool=0))
    seen_before_the_new_term = []

    def new_term() -> bool:
        # read what happened first, then whether a new term exists: a read made while none did
        phase = jobs.get("late")["phase"]
        pods = len(k8s_testbed.admin().list_namespaced_pod(default_ns(lease_ns)).items)
        if leadership.terms == 2 and leadership.term is not None:
            return True
        seen_before_the_new_term.append((phase, pods))
        return False

    wait_for("a new term", new_term, timeout=LEASE_SECONDS + 5)
    assert seen_before_the_new_term, "the new term began before the Job was first read"
    assert set(seen_before_the_new_term) == {("Pending", 0)}, seen_before_the_new_term
    assert leadership.term is not first
    wait_for("the new term to launch the Job", lambda: jobs.get("late")["phase"] == "Starting", timeout=15)
    assert read_lease(k8s_testbed, lease_ns).spec.holder_identity == leadership.elector.identity


# --- two real servers ------------------------------------------------------------------------------


def server_state(server) -> dict:
    """The server's state as a site administrator reads it (``/healthz`` only says ok)."""
    import httpx

    try:
        r = server.http.get("/api/v1/server", timeout=2)
    except httpx.HTTPError:
        return {}
    return r.json() if r.status_code == 200 else {}


def leading(server) -> bool:
    return bool((server_state(server).get("controller") or {}).get("reconciling"))


def test_two_servers_a_job_through_the_follower_the_leader_killed_the_follower_takes_over(
        k8s_testbed, lease_ns, tmp_path):
    """Two ``rlark server --runtime kubernetes`` processes on one store (SQLite file and
    $RLARK_HOME shared, as a ReadWriteMany volume and PostgreSQL would be): a Job submitted
    through the follower is launched by the leader and runs; ``kill -9`` of the leader; the
    follower leads within 15 s and the Run carries on under it to its end (Succeeded, exit 0)."""
    from tests.server import RlarkServer

    home = tmp_path / "home"
    home.mkdir()
    env = {"RLARK_RUNTIME": "kubernetes", "RLARK_NAMESPACE": lease_ns,
           "KUBECONFIG": str(k8s_testbed.rlark_kubeconfig), "RLARK_STOP_RUNS_ON_EXIT": "0",
           "RLARK_K8S_PENDING_TIMEOUT": "60"}
    a = RlarkServer(home, {**env, "HOSTNAME": "replica-a"})
    b = RlarkServer(home, {**env, "HOSTNAME": "replica-b"})
    a.start()
    try:
        wait_for("replica-a to lead", lambda: leading(a), timeout=15)
        b.start()
        wait_for("replica-b to follow replica-a", lambda: (
            (c := server_state(b).get("controller") or {}).get("leader", "") or "").startswith("replica-a_")
            and not c["leading"], timeout=15)
        assert server_state(b)["controller"]["identity"].startswith("replica-b_")

        text = job_yaml(pool=1)
        workers = KwokWorkers(k8s_testbed, default_ns(lease_ns), load_job(text)[0], tmp_path / "kwok")
        b.submit(text)  # through the follower: the leader finds it on its next pass
        b.wait_phase("ppo", {"Starting"}, timeout=30)
        workers.wait_running()
        workers.join()
        workers.start_run_script()
        b.wait_phase("ppo", {"Running"}, timeout=30)

        a.crash()  # kill -9: no shutdown, no release of the Lease
        last = read_lease(k8s_testbed, lease_ns)  # replica-a's last renewal
        assert last.spec.holder_identity.startswith("replica-a_")
        wait_for("replica-b to take over", lambda: leading(b), timeout=TAKEOVER_BOUND + 10,
                 interval=0.05)
        assert server_state(b)["controller"]["leader"].startswith("replica-b_")
        lease = read_lease(k8s_testbed, lease_ns)
        assert lease.spec.holder_identity.startswith("replica-b_")
        assert expired_before_taken(last, lease) >= LEASE_SECONDS, (last.spec, lease.spec)

        wait_for("the Run to be adopted", lambda: any(
            e["reason"] == "Adopted" for e in b.http.get("/api/v1/jobs/ppo/events").json()), timeout=30)
        assert b.job("ppo")["phase"] == "Running"
        workers.finish_run_script(0)
        job = b.wait_phase("ppo", {"Succeeded"}, timeout=60)
        assert job["currentRun"]["exitCode"] == 0, job
        events = b.http.get("/api/v1/jobs/ppo/events").json()
        adopted = [e for e in events if e["reason"] == "Adopted"]
        assert len(adopted) == 1 and "became the leader" in adopted[0]["message"], adopted
    finally:
        b.stop()
        a.stop()
