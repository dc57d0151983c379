"""Leader election for replicated servers: one ``coordination.k8s.io`` Lease, one reconciler.

Every replica of ``rlark server --runtime kubernetes`` serves the API and the console; only the
holder of the Lease ``rlark-controller`` in the server's namespace runs the controller. The
algorithm is client-go's (``tools/leaderelection``), on the official client's
``CoordinationV1Api``:

* a candidate reads the Lease; nobody holds it (none yet, or released with an empty holder), or
  it has not changed for ``leaseDurationSeconds`` **by the candidate's own clock** since the
  candidate first saw its current ``resourceVersion``: the candidate writes itself in as the
  holder, at that ``resourceVersion`` (optimistic concurrency: of two candidates one write wins,
  the other gets ``409 Conflict``). Clocks of different machines are never compared;
* the holder renews every :data:`RENEW_PERIOD` seconds and leads only until
  :data:`RENEW_DEADLINE` seconds after the start of its last successful renewal (fail closed:
  :meth:`LeaderElector.is_leader` is computed from that deadline, so a leader whose renewals
  hang or fail stops acting on time even when no thread notices); a holder that reads another
  holder in the Lease stops at once. The deadline is :data:`LEASE_SECONDS` -
  :data:`RENEW_DEADLINE` seconds before anyone else may take over: never two reconcilers;
* a server that shuts down while leading releases the Lease (empty holder), so another replica
  takes over at once instead of after the Lease expires.

The pure part (:func:`decide`) takes a Lease, the time the candidate first saw it and now, and
says what to do; :class:`LeaseClient` is the I/O; :class:`LeaderElector` runs both in a thread;
:class:`Leadership` runs a :class:`~rlark.controller.loop.Controller` (a *term*) while this server
leads.

Why not ``kubernetes.leaderelection``: the installed client (35.x) has only a ConfigMap lock; its
``LeaderElection`` keeps "leading" for its whole renew deadline after another holder took the
lock, has no deadline of its own while a call hangs, calls ``sys.exit`` on a bad setting, runs
once per process, and writes local times as UTC.
"""

from __future__ import annotations

import copy
import enum
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from rlark.controller.loop import Controller

log = logging.getLogger("rlark.leader")

#: the Lease's name (in the server's namespace); deploy/kubernetes/rbac.yaml grants get and
#: update on this name only
LEASE_NAME = "rlark-controller"
#: leaseDurationSeconds: how long others wait, after the Lease last changed, before taking over
LEASE_SECONDS = 10
#: a leader stops acting this long after the start of its last successful renewal
RENEW_DEADLINE = 6.0
#: how often the leader renews, and how often a candidate reads the Lease
RENEW_PERIOD = 2.0
RETRY_PERIOD = 1.0
#: seconds to connect, and to wait for an answer, per Lease call (a renewal must not hang past
#: the deadline; the deadline holds whatever the calls do)
CONNECT_TIMEOUT, READ_TIMEOUT = 2.0, 2.0
#: a leader whose term could not start steps aside this long, so another replica may try
HOLD_OFF_SECONDS = 10.0


def default_identity() -> str:
    """This server's name in the Lease: the Pod's name (``$HOSTNAME``) and a random suffix, so
    a restarted container never mistakes its predecessor's Lease for its own."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{secrets.token_hex(3)}"


def micro_time(ts: float | None = None) -> str:
    """A Kubernetes MicroTime (UTC, microseconds) for ``ts`` (default: now)."""
    when = datetime.fromtimestamp(time.time() if ts is None else ts, timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- the pure part ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """What a Lease says (``spec``) and its ``resourceVersion``."""

    holder: str = ""
    duration: float = LEASE_SECONDS
    version: str = ""
    transitions: int = 0
    acquired: str | None = None

    @classmethod
    def from_object(cls, obj: dict) -> "Lease":
        spec = obj.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "",
                   # a Lease without a duration: ours (never 0, which would let anyone take it)
                   duration=float(spec.get("leaseDurationSeconds") or LEASE_SECONDS),
                   version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
                   transitions=int(spec.get("leaseTransitions") or 0),
                   acquired=spec.get("acquireTime"))


class Action(str, enum.Enum):
    create = "create"    #: no Lease yet: create it, holding it
    renew = "renew"      #: this candidate holds it: write a new renewTime
    acquire = "acquire"  #: released or expired: write this candidate in as the holder
    wait = "wait"        #: another holder's Lease is live


@dataclass(frozen=True)
class Decision:
    action: Action
    #: the holder the Lease names now ("" when none)
    holder: str = ""
    #: for ``wait``: seconds until the Lease counts as expired, unless it changes meanwhile
    expires_in: float = 0.0


def decide(lease: Lease | None, seen_at: float | None, now: float, me: str) -> Decision:
    """What candidate ``me`` does with ``lease`` (None: there is none), first seen unchanged
    (same resourceVersion) at ``seen_at`` and read again at ``now`` (both by this candidate's
    monotonic clock; ``seen_at`` None counts as ``now``)."""
    if lease is None:
        return Decision(Action.create)
    if lease.holder == me:
        return Decision(Action.renew, me)
    if not lease.holder:
        return Decision(Action.acquire)
    left = (now if seen_at is None else seen_at) + lease.duration - now
    if left <= 0:
        return Decision(Action.acquire, lease.holder)
    return Decision(Action.wait, lease.holder, left)


def lease_spec(me: str, lease: Lease | None, action: Action, ts: float | None = None) -> dict:
    """The Lease ``spec`` candidate ``me`` writes for ``action`` (``create``, ``renew``,
    ``acquire``) over ``lease``: renewTime now; acquireTime kept on a renewal; leaseTransitions
    counts changes of holder."""
    now = micro_time(ts)
    transitions = lease.transitions if lease is not None else 0
    if action is Action.acquire and lease is not None and lease.holder != me:
        transitions += 1
    return {"holderIdentity": me, "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": lease.acquired if action is Action.renew and lease and lease.acquired else now,
            "renewTime": now, "leaseTransitions": transitions}


# --- I/O ---------------------------------------------------------------------------------------


class LeaseClient:
    """Read, create and replace one Lease with the official client's ``CoordinationV1Api``
    (JSON in and out, as :mod:`rlark.runtimes.kubernetes.client` does).

    Raises (every method):
        KubeError: status 409 when the Lease was written by someone else since it was read (or
            created meanwhile), 403 naming the RBAC rule, 0 when the server was not reached.
    """

    def __init__(self, api_client, namespace: str, name: str = LEASE_NAME):
        from kubernetes import client

        # the same credentials, one try per call (urllib3 would try a dead connection 3 more
        # times): each call ends within its timeouts, and the elector's loop is the retry
        configuration = copy.copy(api_client.configuration)
        configuration.retries = 0
        self.api = client.CoordinationV1Api(client.ApiClient(configuration))
        self.namespace = namespace
        self.name = name

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def _call(self, what: str, fn, *args, **kwargs) -> dict:
        from rlark.runtimes.kubernetes.client import call

        return call(f"leader election: {what} Lease {self.where}", fn, *args,
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), **kwargs)

    def get(self) -> dict | None:
        """The Lease, or None when there is none."""
        from rlark.runtimes.kubernetes.client import KubeError

        try:
            return self._call("read", self.api.read_namespaced_lease, self.name, self.namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, spec: dict) -> dict:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "rlark"}},
                "spec": spec}
        return self._call("create", self.api.create_namespaced_lease, self.namespace, body)

    def replace(self, obj: dict, spec: dict) -> dict:
        """Write ``spec`` over ``obj`` (the Lease as read) at ``obj``'s resourceVersion."""
        body = {**obj, "spec": spec}
        return self._call("update", self.api.replace_namespaced_lease, self.name, self.namespace, body)


# --- the elector ---------------------------------------------------------------------------------


class LeaderElector:
    """Campaign for the Lease and hold it: :meth:`start` a thread, or :meth:`step` by hand.

    :meth:`is_leader` is what the controller consults before every action: true only until
    :data:`RENEW_DEADLINE` seconds after the start of the last successful write (fail closed).
    ``changed`` is set whenever leadership or the known holder changes.
    """

    def __init__(self, leases: LeaseClient, identity: str | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.leases = leases
        self.identity = identity or default_identity()
        self.clock = clock
        self.changed = threading.Event()
        self._lock = threading.Lock()
        self._leading_until = 0.0
        self._seen: tuple[str, float] | None = None  # (resourceVersion, first seen at)
        self._holder = ""
        self._hold_off_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._logged: dict[str, float] = {}
        #: the last failed Lease call (None after a success)
        self.last_error: str | None = None
        #: the last decision made (for status and tests)
        self.last_action: Action | None = None

    # --- what others read ------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.clock() < self._leading_until

    def time_left(self) -> float:
        """Seconds until this leader's deadline (0 when not leading)."""
        return max(0.0, self._leading_until - self.clock())

    @property
    def holder(self) -> str:
        """Who holds the Lease as last read ("" when nobody or not known)."""
        return self.identity if self.is_leader() else self._holder

    def status(self) -> dict[str, Any]:
        return {"leaderElection": True, "identity": self.identity, "leading": self.is_leader(),
                "leader": self.holder or None, "lease": self.leases.where, "error": self.last_error}

    # --- one attempt -------------------------------------------------------------------------------

    def check_access(self) -> None:
        """Read the Lease once (a server refuses to start when RBAC forbids it).

        Raises:
            KubeError: the read failed (403: RBAC; 0: the API server was not reached).
        """
        self.leases.get()

    def step(self) -> Decision | None:
        """Read the Lease and act on it once; returns the decision (None when the read failed).
        A failed write leaves the deadline as it was: a leader keeps leading only until it."""
        from rlark.runtimes.kubernetes.client import KubeError

        started = self.clock()
        if self._leading_until and not self.is_leader():
            self._lose(f"no renewal of the Lease succeeded within {RENEW_DEADLINE:.0f} s")
        if started < self._hold_off_until:
            return None
        try:
            obj = self.leases.get()
        except KubeError as exc:
            self._failed(exc)
            return None
        lease = Lease.from_object(obj) if obj is not None else None
        now = self.clock()
        if lease is not None and (self._seen is None or self._seen[0] != lease.version):
            self._seen = (lease.version, now)
        d = decide(lease, self._seen[1] if self._seen and lease else None, now, self.identity)
        self.last_action = d.action
        if d.action is Action.wait:
            if self._leading_until:
                self._lose(f"the Lease {self.leases.where} names {d.holder} now")
            self._set_holder(d.holder)
            self.last_error = None
            return d
        spec = lease_spec(self.identity, lease, d.action)
        try:
            written = (self.leases.create(spec) if obj is None else self.leases.replace(obj, spec))
        except KubeError as exc:
            if exc.status == 409:  # someone wrote the Lease since it was read
                self.last_error = None
                if d.action is Action.renew:  # fail closed: the next read tells who holds it
                    self._lose(f"the Lease {self.leases.where} was written by someone else")
                return d
            self._failed(exc)
            return d
        self.last_error = None
        self._seen = (Lease.from_object(written).version, self.clock())
        if self.clock() < self._hold_off_until:  # stepped aside while this write was in flight
            return d
        newly = not self.is_leader()
        with self._lock:
            self._leading_until = started + RENEW_DEADLINE
        if newly:
            log.warning("leader election: %s leads now (Lease %s, %s)", self.identity,
                        self.leases.where, "created" if d.action is Action.create else
                        f"taken over from {d.holder}" if d.holder else "acquired")
            self._set_holder(self.identity)
            self.changed.set()
        return d

    def _set_holder(self, holder: str) -> None:
        if holder != self._holder:
            if holder and holder != self.identity:
                log.info("leader election: %s leads; this server (%s) follows", holder, self.identity)
            self._holder = holder
            self.changed.set()

    def _lose(self, why: str) -> None:
        with self._lock:
            was = self._leading_until
            self._leading_until = 0.0
        if was:
            log.warning("leader election: %s stopped leading: %s", self.identity, why)
            self._holder = ""
            self.changed.set()

    def _failed(self, exc: Exception) -> None:
        """Remember and log a failed call (each distinct message once a minute)."""
        text = str(exc)
        self.last_error = text
        now = self.clock()
        if now - self._logged.get(text, -1e9) >= 60:
            self._logged[text] = now
            log.error("%s", text)

    def release(self) -> None:
        """Stop leading at once and give the Lease up (empty holder, so another replica takes
        over without waiting for it to expire). Written only while still the holder."""
        from rlark.runtimes.kubernetes.client import KubeError

        if not self.is_leader():
            return
        self._lose("it released the Lease")
        try:
            obj = self.leases.get()
            if obj is not None and Lease.from_object(obj).holder == self.identity:
                spec = {**(obj.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                        "renewTime": micro_time()}
                self.leases.replace(obj, spec)
                log.info("leader election: %s released the Lease %s", self.identity, self.leases.where)
        except KubeError as exc:  # it expires by itself
            log.warning("leader election: could not release the Lease: %s", exc)

    def step_aside(self, seconds: float = HOLD_OFF_SECONDS) -> None:
        """Release the Lease and do not campaign for ``seconds`` (a renewal in flight meanwhile
        does not make this server lead again)."""
        self._hold_off_until = self.clock() + seconds
        self.release()

    # --- the thread --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="rlark-leader-election", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self.clock()
            d = self.step()
            if self._stop.is_set():
                break
            if self.is_leader():  # a failed renewal is tried again sooner
                period = RETRY_PERIOD if self.last_error else RENEW_PERIOD
            elif d is not None and d.action is Action.wait:
                period = min(RETRY_PERIOD, d.expires_in)
            else:
                period = RETRY_PERIOD
            self._stop.wait(max(0.0, began + period - self.clock()))

    def stop(self, release: bool = True) -> None:
        """Stop campaigning, and give the Lease up when ``release`` and still leading. Without
        ``release`` the Lease is left to expire, and this server's leadership to its deadline,
        as when the process is killed."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=CONNECT_TIMEOUT + 2 * READ_TIMEOUT + 1)
        if release:
            self.release()


# --- terms of a controller ---------------------------------------------------------------------


class Leadership:
    """Run a controller while this server leads: the elector campaigns; when it gains the Lease
    a new *term* starts (``make_term()``: a fresh runtime and Controller, whose first pass adopts
    every active Run); when it loses it, the term ends at once: the Controller's loop stops
    (it also checks :meth:`LeaderElector.is_leader` before each action), its runtime's watches
    and log followers stop, no Run is touched and nothing is written (the new leader adopts
    them); a pass still at work then commits nothing once the new leader has claimed its term
    (:mod:`rlark.controller.fencing`). A term that cannot start makes this server step aside for a while.

    Stands in for the Controller in :func:`rlark.server.create_app`: :meth:`start`,
    :meth:`shutdown`, :meth:`wake`, :meth:`status`. On shutdown a leading server ends its term
    as a single server would (the Controller's own shutdown) and then releases the Lease.
    """

    def __init__(self, elector: LeaderElector, make_term: Callable[[], Controller],
                 on_shutdown: Callable[[], None] | None = None):
        self.elector = elector
        self.make_term = make_term
        self._on_shutdown = on_shutdown
        self.term: Controller | None = None
        #: how many terms this server has led (for status and tests)
        self.terms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._term_lock = threading.Lock()

    def start(self) -> None:
        self.elector.start()
        if self._thread is None:
            self._thread = threading.Thread(target=self._supervise, name="rlark-leadership", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        term = self.term
        if term is not None:
            term.wake()

    def status(self) -> dict[str, Any]:
        return {**self.elector.status(), "reconciling": self.term is not None}

    def _supervise(self) -> None:
        while not self._stop.is_set():
            self.elector.changed.clear()
            leading = self.elector.is_leader()
            if leading and self.term is None:
                self._begin()
            elif not leading and self.term is not None:
                self._end()
            if self._stop.is_set():
                break
            # wake when the elector reports a change, or right when the deadline passes
            wait = self.elector.time_left() if self.term is not None else 1.0
            self.elector.changed.wait(max(0.01, min(1.0, wait)))

    def _begin(self) -> None:
        try:
            term = self.make_term()
        except Exception as exc:  # e.g. the watches were refused: let another replica try
            log.error("leader election: %s leads but cannot start its controller (%s: %s); it "
                      "steps aside for %.0f s", self.elector.identity, type(exc).__name__, exc,
                      HOLD_OFF_SECONDS)
            self.elector.step_aside()
            return
        with self._term_lock:
            self.term = term
            self.terms += 1
        term.start()
        log.warning("leader election: %s reconciles now (term %d); active Runs are adopted on its "
                    "first pass", self.elector.identity, self.terms)

    def _end(self) -> None:
        with self._term_lock:
            term, self.term = self.term, None
        if term is None:
            return
        term.stop_loop(wait=False)  # its passes stop now; the runtime's threads next
        shutdown = getattr(term.runtime, "shutdown", None)
        if shutdown is not None:
            shutdown()
        term.stop_loop()
        log.warning("leader election: %s stopped reconciling; the Runs carry on under the next "
                    "leader", self.elector.identity)

    def shutdown(self) -> None:
        """End the term (as a single server's shutdown would, while still leading), give the
        Lease up, stop campaigning."""
        self._stop.set()
        self.elector.changed.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._term_lock:
            term, self.term = self.term, None
        if term is not None:  # the elector keeps renewing meanwhile
            if self.elector.is_leader():
                term.shutdown()
            else:
                term.stop_loop()
            shutdown = getattr(term.runtime, "shutdown", None)
            if shutdown is not None:
                shutdown()
        self.elector.stop(release=True)
        if self._on_shutdown is not None:
            self._on_shutdown()
