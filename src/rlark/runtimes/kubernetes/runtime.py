"""``KubernetesRuntime``: the Runtime protocol on Pods (one Pod per Worker, a Ray cluster per Run).

* ``place``: the head is the headless Service ``<job>-head.<ns>.svc:6379`` (Ray's default GCS
  port); every Worker keeps Ray's default ports and its Pod IP (nothing to allocate). Before a Run
  starts, the names it needs must be free: Pods and the Service an earlier Run of the same Job
  left are deleted, and while such an object is still there (a finalizer of another controller
  holds it) :class:`NamesBusy` keeps the Run Pending (the controller tries again).
* ``launch``: first the Job is held against the server's Pod policy (:func:`.podpolicy.enforce`)
  and, on a Run's first Worker, every Kubernetes Secret its env names must be one an
  administrator allowed for the namespace's project (:func:`.podpolicy.check_secret_refs`): a
  Job beyond either raises :class:`.podpolicy.PolicyDenied` before anything is created (the
  controller fails the Run with that message), whichever path launched it (submit, start,
  restart, an automatic retry). Then, on a Run's first Worker, create its ConfigMap (the owner),
  then the Secret with the values of the RLark-managed secrets its env refers to (when it
  refers to any), the Secret with the Run's Ray token (when it has one:
  ``LaunchSpec.ray_token``), the Service, the NetworkPolicy and PVCs (owned by it); then the
  Worker's Pod (owned by it), and follow the Pod's log into ``LaunchSpec.log_path`` (the
  controller reads lifecycle lines there; the file outlives the Pod): every Pod's log from one
  thread, with a bounded number of streams and backoff (:mod:`.logfollow`, :mod:`.logplan`).
  A name held by another Job's object or by something RLark did not create is never deleted or
  adopted: the launch fails and names the holder.
* ``observe``: answered from watch-fed caches (one watch on the RLark Pods of the namespace,
  one on its Pod Events) through :func:`.status.interpret`; no API call per observation. The
  watches resume from the last resourceVersion (BOOKMARK events keep it current), list again on
  ``410 Gone``, and reconnect after the API server went away.
* ``signal_stop`` / ``kill``: delete the Pod (grace period of the Pod / 0), only when it is
  the Worker's own (labelled with its Run). They return at once: a thread of the runtime sends
  the deletes, so the controller never waits on the API inside a pass, and the Pods of one Run
  asked to stop together go in one collection delete by the Run's label (:mod:`.stopplan`);
  a Pod deleted on its own is deleted by name with its uid as a precondition, so a Pod of
  another Job, or one made meanwhile under the same name, is never deleted.
* ``end_run``: delete the Run's Pods, Service, NetworkPolicy, PVCs, Secret and ConfigMap by the
  ``rlark.io/run`` label.
* queues (:class:`rlark.runtimes.base.HasQueues`, Kueue: :mod:`.kueue`): a Run whose project (or
  the server, ``--k8s-queue``) names a LocalQueue gets its Pods as one Kueue pod group; before the
  first, the LocalQueue must exist and the namespace's Workloads must be watchable (a third
  watch, started on first use), and a Pod Kueue's webhook did not gate is deleted at once and
  fails the launch. ``queue_state`` answers from the Workload cache whether the group is
  admitted and why not, and its place in line from the last read of Kueue's visibility API (a
  thread reads each LocalQueue queued Runs wait in every few seconds; none where it is not
  served); ``observe`` reads a Pod Kueue preempted as ``Preempted``.

A Pod that holds a Worker's name but not its Run's label is not the Worker's: ``observe`` reads
it as absent, its log is never followed, and no delete touches it.

What RLark's ServiceAccount may not do is a named failure, never a traceback: a refused watch
stops the runtime from starting (:meth:`KubernetesRuntime.start`), a refused create fails the
launch, a refused log read fails the Run (``Forbidden``), a refused delete is ``StopFailed``,
a refused clean-up is raised by ``end_run``.

All API calls go through :class:`.client.KubeClient`.

Long because: the Runtime protocol's methods on Pods, with the watches and the name-busy
handling they share; the pure parts are already modules of their own (render, status, podpolicy,
capacity, namespaces, logcursor, logplan, preflight), the log followers too (logfollow).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from rlark.ranks import PlannedWorker
from rlark.runtimes.base import (
    AdoptSpec,
    LaunchRefused,
    LaunchSpec,
    Launched,
    Observed,
    Placement,
    QueueState,
    Taken,
    WorkerPlace,
    WorkerRef,
)
from rlark.runtimes.kubernetes import kueue, render
from rlark.runtimes.kubernetes.capacity import NodeInfo, parse_nodes
from rlark.runtimes.kubernetes.client import KubeClient, KubeError, WatchStream
from rlark.runtimes.kubernetes.logfollow import Follow, LogFollowers, cursor_path  # noqa: F401 - tests read it here
from rlark.runtimes.kubernetes.logplan import FollowPolicy
from rlark.runtimes.kubernetes.podpolicy import (PodPolicy, PolicyDenied, SecretInfo,
                                                 check_secret_refs, enforce)
from rlark.runtimes.kubernetes.stopplan import PodDelete, plan_deletes
from rlark.runtimes.kubernetes.status import (PodPhase, PodState, PodStatus, StatusPolicy, interpret,
                                             parse_time)
from rlark.spec import Job, head_service_name
from rlark.status import Reason

log = logging.getLogger("rlark.kubernetes")

MANAGED = f"{render.LABEL_MANAGED_BY}={render.MANAGED_BY}"
#: a Pod this process created may be missing from the watch cache this long (watch lag)
CREATE_LAG_SECONDS = 30.0
#: after a Pod's container ended, how long ``observe`` waits for its log to be written out
LOG_DRAIN_SECONDS = 10.0
#: a finished container's log stream that stays open but brings nothing for this long is closed
#: (a kubelet ends the stream itself when the container exits; a stuck connection or kwok does not)
LOG_QUIET_SECONDS = 2.0
MAX_EVENTS_PER_POD = 50
#: how long :meth:`KubernetesRuntime.start` waits for the first list and watch of each kind
START_TIMEOUT = 10.0
#: the server ends each watch after this many seconds; it is resumed from its resourceVersion
WATCH_TIMEOUT_SECONDS = 300
#: a watch that failed is opened again after 1, 2, 4... seconds, at most this
WATCH_BACKOFF_MAX = 10.0
#: a Pod delete is sent again (``kill`` is called every controller pass) at most this often
DELETE_RETRY_SECONDS = 5.0
#: Pods of one Run created at once (:attr:`KubernetesRuntime.launch_concurrency`): enough to
#: keep the API server's admission and storage busy while each create waits on its answer,
#: well under its ``--max-mutating-requests-inflight`` (200 by default) and the client's
#: connection pool (:data:`.client.POOL_SIZE`)
LAUNCH_CONCURRENCY = 16
#: a Run whose names are still held is tried again after this many seconds
NAMES_RETRY_SECONDS = 1.0
#: HTTP statuses that mean "RLark may not": RBAC (403), credentials (401)
DENIED = (401, 403)
#: Kueue's visibility API (places in line): each LocalQueue a queued Run waits in is read at most
#: once per POSITIONS_INTERVAL seconds, each read bounded by POSITIONS_TIMEOUT seconds; a place
#: older than POSITIONS_STALE seconds is not shown; a LocalQueue no Run asked about for
#: POSITIONS_IDLE seconds is not read any more
POSITIONS_INTERVAL = 5.0
POSITIONS_TIMEOUT = 5.0
POSITIONS_STALE = 30.0
POSITIONS_IDLE = 60.0


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class NamesBusy(KubeError):
    """The names a new Run needs are still held by objects of an earlier Run of the same Job that
    are being deleted (e.g. a finalizer of another controller keeps a Pod): not a failure.

    The controller keeps the Run ``Pending`` with :attr:`reason` and this message and tries again
    after :attr:`retry_after` seconds (``controller/launch.py``: a launch error that carries
    ``retry_after``)."""

    reason = Reason.WaitingForNames

    def __init__(self, message: str, retry_after: float = NAMES_RETRY_SECONDS):
        super().__init__(message, 409)
        self.retry_after = retry_after


def read_secret_info(kube: KubeClient, name: str) -> SecretInfo | None:
    """The labels and key names of Kubernetes Secret ``name`` in ``kube``'s namespace (None: it
    does not exist). The values come with the API's answer and are dropped here.

    Raises:
        KubeError: the API refused (RBAC: get secrets) or failed the read.
    """
    found = kube.get("Secret", name)
    if found is None:
        return None
    meta = found.get("metadata") or {}
    return SecretInfo(labels=dict(meta.get("labels") or {}),
                      keys=frozenset(found.get("data") or {}) | frozenset(found.get("stringData") or {}))


class KubernetesRuntime:
    """Workers as Pods in one namespace. See the module docstring for each protocol method.

    Args:
        kube: the API layer (default: :meth:`KubeClient.connect` with ``namespace``).
        policy: graces and pending timeout of :func:`.status.interpret`.
        ray_dashboard: start Ray's dashboard on each head (``ray[default]`` in the image).
        pod_policy: the server's policy for Worker Pods (:class:`.podpolicy.PodPolicy`),
            enforced at every launch and in every render.
        secret_projects: the projects whose Runs go to this namespace (read at each Run's
            launch): a Kubernetes Secret a Job names must be labelled for one of them
            (:func:`.podpolicy.secret_allowed`). None: no Kubernetes Secret is allowed (the
            Run's own, RLark-managed ones always are).
        start: start the watches now (:meth:`start`).
        queue: the server's Kueue LocalQueue (``--k8s-queue``) for projects that name none
            (:func:`.kueue.effective_queue`); None or ``none``: no queue.
        priority_classes: WorkloadPriorityClass name -> value (``--k8s-priority-class``): a
            queued Run of ``spec.priority`` P names the class of value P.
        log_policy: how many Pod logs are streamed at once and how a stream that ended early
            is reopened (:class:`.logplan.FollowPolicy`).

    Raises:
        KubeError: with ``start``, the API server refused to let RLark list or watch Pods or
            Events in the namespace (RBAC), or no configuration was found.
    """

    name = "kubernetes"
    #: a reference to a secret RLark does not manage names a Kubernetes Secret (the Pod's)
    own_secrets = True
    #: Pods created at once for one Run (each a create request; the client's rate limit,
    #: ``--k8s-qps``/``--k8s-burst``, still paces them all)
    launch_concurrency = LAUNCH_CONCURRENCY

    def __init__(self, namespace: str | None = None, kube: KubeClient | None = None,
                 policy: StatusPolicy = StatusPolicy(), ray_dashboard: bool = False,
                 start: bool = True, pod_policy: PodPolicy = PodPolicy(),
                 secret_projects: Callable[[], Iterable[str]] | None = None,
                 queue: str | None = None, priority_classes: dict[str, int] | None = None,
                 log_policy: FollowPolicy = FollowPolicy()):
        self.kube = kube or KubeClient.connect(namespace)
        self.queue = queue
        self.priority_classes = dict(priority_classes or {})
        self.secret_projects = secret_projects
        self.namespace = self.kube.namespace
        self.policy = policy
        self.ray_dashboard = ray_dashboard
        self.pod_policy = pod_policy
        #: Pod name -> the run uid of the Worker this runtime tracks under it: a Pod of that
        #: name without that Run's label is not the Worker's (:meth:`_mine`)
        self._owners: dict[str, str] = {}
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pods: dict[str, dict] = {}
        self._gone: dict[str, dict | None] = {}
        self._events: dict[str, dict[str, dict]] = {}
        self._created: dict[str, float] = {}
        self._deleting: set[str] = set()
        self._delete_sent: dict[str, tuple[int | None, float]] = {}
        self._delete_errors: dict[str, str] = {}
        #: Pod name -> (its Run's uid, grace): deletes asked and not sent yet (:meth:`_stop_loop`)
        self._stops_asked: dict[str, tuple[str | None, int | None]] = {}
        self._stops_wake = threading.Event()
        #: set while every delete asked has been sent (:meth:`wait_stops_sent`)
        self._stops_idle = threading.Event()
        self._stops_idle.set()
        self._stopper: threading.Thread | None = None
        #: Pod name -> its node rank (as launched): a collection delete can leave it out
        self._ranks: dict[str, str] = {}
        #: Workers whose name a Pod not theirs holds (a delete of it was refused: logged once)
        self._foreign: set[str] = set()
        self._log_errors: dict[str, str] = {}
        self._heads: set[str] = set()
        self._policies: dict[str, StatusPolicy] = {}
        self._followers: dict[str, Follow] = {}
        #: every Pod log followed from one thread (:mod:`.logfollow`)
        self.logs = LogFollowers(self.kube.log_reader, render.CONTAINER, self.container_state,
                                 self.held_by_another, self.note_log_denied, log_policy,
                                 on_change=self._note_change)
        #: Pods whose log grew or which changed since :meth:`take_changes` was last called
        self._changes: set[str] = set()
        self._changes_lock = threading.Lock()
        #: Pods taken over from an earlier server process: when (time.time())
        self._adopted: dict[str, float] = {}
        self._drain_since: dict[str, float] = {}
        self._runs: dict[str, render.RenderOptions] = {}
        self._inventory: tuple[float, Any] | None = None
        #: Kueue's Workloads of the namespace by name (:func:`.kueue.workload_summary`), watched
        #: once a Run here uses a queue (:meth:`watch_workloads`)
        self._workloads: dict[str, dict] = {}
        #: the same Workloads' names by uid, read without the lock (:meth:`workload_of_uid`)
        self._workload_uids: dict[str, str] = {}
        #: ``uid -> "namespace/name"`` of a Workload another namespace's runtime of this server
        #: caches (set by :class:`.namespaces.ProjectNamespaces`): a preemptor in another
        #: project's namespace, as under a cohort's fair sharing
        self.find_workload: Callable[[str], str | None] | None = None
        self._workload_watch = False
        #: LocalQueue name -> its ClusterQueue (None: not known), read once per queue
        self._local_queues: dict[str, str | None] = {}
        #: LocalQueue -> (time.monotonic() of the read, Workload name -> place in line), from
        #: Kueue's visibility API (:meth:`_positions_loop`)
        self._positions: dict[str, tuple[float, dict[str, int]]] = {}
        #: LocalQueue -> time.monotonic() a queued Run last asked about it: the queues read
        self._positions_wanted: dict[str, float] = {}
        self._positions_reader = False
        #: why the visibility API gave no places (HTTP status -> logged), each logged once
        self._positions_noted: set[int] = set()
        self._stop = threading.Event()
        self._kinds = ("Pod", "Event", "Workload")
        #: per watched kind: set once it listed and opened its watch, or was refused
        self._ready = {k: threading.Event() for k in self._kinds}
        #: per watched kind: its cache holds a list (until then a missing Pod proves nothing)
        self._listed = {k: False for k in self._kinds}
        self._watch_error: dict[str, KubeError | None] = {k: None for k in self._kinds}
        self._streams: dict[str, WatchStream] = {}
        self._warned: dict[str, str] = {}
        #: per watched kind: ``lists`` made, ``watches`` opened, watches ``expired`` (410 Gone:
        #: listed again), other ``errors`` (reconnected), the ``resourceVersion`` it would
        #: resume from
        self.watch_state: dict[str, dict[str, Any]] = {
            k: {"lists": 0, "watches": 0, "expired": 0, "errors": 0, "resourceVersion": ""}
            for k in self._kinds}
        if start:
            self.start()

    # --- watches --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the Pod and Event watches and wait (up to :data:`START_TIMEOUT` seconds) until
        each has listed and opened its watch.

        Raises:
            KubeError: the API server refused a list or watch (401/403: RBAC or credentials);
                the runtime is shut down. An API server that does not answer is only logged
                (the watches keep trying).
        """
        for kind, kwargs in (("Pod", {"label_selector": MANAGED}),
                             ("Event", {"field_selector": "involvedObject.kind=Pod"})):
            threading.Thread(target=self._watch_loop, args=(kind, kwargs), daemon=True,
                             name=f"rlark-watch-{kind.lower()}-{self.namespace}").start()
        kinds = ("Pod", "Event")
        deadline = time.monotonic() + START_TIMEOUT
        for kind in kinds:
            self._ready[kind].wait(max(0.0, deadline - time.monotonic()))
        refused = [e for e in (self._watch_error[k] for k in kinds)
                   if e is not None and e.status in DENIED]
        if refused:
            self.shutdown()
            raise KubeError(f"RLark cannot watch the Pods and Events of namespace {self.namespace}: "
                            + "; ".join(str(e) for e in refused), refused[0].status)
        if not all(self._ready[k].is_set() for k in kinds):
            log.warning("no Pod and Event watch in namespace %s after %.0f s (%s); still trying",
                        self.namespace, START_TIMEOUT,
                        "; ".join(str(e) for e in self._watch_error.values() if e) or "no answer")

    def watch_workloads(self, wait: bool = True) -> None:
        """Start watching Kueue's Workloads of the namespace (once: later calls return at
        once); ``wait``: until the first list came (at most :data:`START_TIMEOUT` seconds). A
        watch that fails (Kueue not installed: 404; RBAC: 403) keeps trying and is logged;
        :meth:`queue_state` then says it cannot read them."""
        with self._lock:
            started, self._workload_watch = self._workload_watch, True
        if not started:
            threading.Thread(target=self._watch_loop, args=("Workload", {}), daemon=True,
                             name=f"rlark-watch-workload-{self.namespace}").start()
        if wait:
            self._ready["Workload"].wait(START_TIMEOUT)

    def shutdown(self) -> None:
        """Stop the watches (their connections are closed) and every log follower, leaving the
        Pods as they are (a later server adopts them: :meth:`adopt`). Once this returns, no
        follower of this runtime writes to a log file or its cursor again."""
        self._stop.set()
        self._stops_wake.set()
        with self._lock:
            streams = list(self._streams.values())
            followers = list(self._followers.values())
        for stream in streams:
            stream.close()
        for f in followers:
            f.stop(abandon=True)
        self.logs.shutdown()

    def _watch_loop(self, kind: str, kwargs: dict[str, str]) -> None:
        state = self.watch_state[kind]
        backoff = 1.0
        while not self._stop.is_set():
            try:
                items, rv = self.kube.list(kind, **kwargs)
                state["lists"] += 1
                self.apply_list(kind, items)
                while not self._stop.is_set():
                    stream = self.kube.watch(kind, rv, timeout_seconds=WATCH_TIMEOUT_SECONDS, **kwargs)
                    with self._lock:
                        self._streams[kind] = stream
                    if self._stop.is_set():
                        stream.close()
                        return
                    state["resourceVersion"] = rv
                    state["watches"] += 1
                    self._watch_ok(kind)
                    backoff = 1.0
                    for typ, obj in stream:
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        state["resourceVersion"] = rv
                        if typ != "BOOKMARK":
                            self.apply_watch_event(kind, typ, obj)
                    # the server ended the watch (its timeout): resume from rv
            except KubeError as exc:
                if self._stop.is_set():
                    return
                if exc.status == 410:
                    # "too old resource version": etcd compacted the history the watch needed;
                    # list again at once (the list tells what changed meanwhile)
                    state["expired"] += 1
                    log.info("watch of %ss in %s expired (%s); listing again", kind, self.namespace, exc)
                    continue
                state["errors"] += 1
                self._watch_failed(kind, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, WATCH_BACKOFF_MAX)
            except Exception:  # noqa: BLE001 - keep watching whatever happens
                log.exception("watching %ss in %s failed; retrying", kind, self.namespace)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, WATCH_BACKOFF_MAX)

    def _watch_ok(self, kind: str) -> None:
        if self._watch_error[kind] is not None:
            log.info("watching %ss in %s again", kind, self.namespace)
        self._watch_error[kind] = None
        self._warned.pop(kind, None)
        self._ready[kind].set()

    def _watch_failed(self, kind: str, exc: KubeError) -> None:
        self._watch_error[kind] = exc
        if exc.status >= 400:  # the server answered: start() need not wait any longer
            self._ready[kind].set()
        if self._warned.get(kind) != str(exc):  # one line per distinct failure, not per retry
            self._warned[kind] = str(exc)
            log.warning("watching %ss in %s: %s; retrying", kind, self.namespace, exc)

    def apply_list(self, kind: str, items: list[dict]) -> None:
        """Take a full list of ``kind`` (Pod, Event or Workload) into the caches in place of what they
        held (a Pod no longer listed is gone); the watch threads call this after each list,
        tests feed saved lists through it. Until the first Pod list a missing Pod proves
        nothing."""
        with self._changed:
            self._listed[kind] = True
            if kind == "Workload":
                self._workloads = {n: kueue.workload_summary(o) for o in items
                                   if isinstance(n := (o.get("metadata") or {}).get("name"), str)}
                self._workload_uids = {u: n for n, w in self._workloads.items()
                                       if (u := w["metadata"].get("uid"))}
            elif kind == "Pod":
                seen = {(o.get("metadata") or {}).get("name"): o for o in items}
                for name, old in list(self._pods.items()):
                    if name not in seen:
                        self._gone[name] = old
                        self._note_change(name)
                self._pods = {n: o for n, o in seen.items() if n}
                for n in self._pods:
                    self._gone.pop(n, None)
                    self._note_change(n)  # a list after a lost watch: any of them may have changed
                self.logs.changed()
            else:
                self._events = {}
                for o in items:
                    self._apply_event("ADDED", o)
            self._changed.notify_all()

    def apply_watch_event(self, kind: str, typ: str, obj: dict) -> None:
        """Take one watch event (``kind`` Pod, Event or Workload; ``typ`` ADDED, MODIFIED or DELETED) into
        the caches; the watch threads call this, tests feed saved objects through it."""
        with self._changed:
            if kind == "Workload":
                name = (obj.get("metadata") or {}).get("name")
                if isinstance(name, str):
                    uid = (obj.get("metadata") or {}).get("uid")
                    if typ == "DELETED":
                        self._workloads.pop(name, None)
                        if uid:
                            self._workload_uids.pop(uid, None)
                    else:
                        self._workloads[name] = kueue.workload_summary(obj)
                        if uid:
                            self._workload_uids[uid] = name
            elif kind == "Pod":
                name = (obj.get("metadata") or {}).get("name")
                if not isinstance(name, str):
                    return  # not an object this runtime can track (no name)
                if typ == "DELETED":
                    self._pods.pop(name, None)
                    if name in self._created or name in self._followers:
                        self._gone[name] = obj
                else:
                    self._pods[name] = obj
                    self._gone.pop(name, None)
                self.logs.changed({name})
                self._note_change(name)
            else:
                self._apply_event(typ, obj)
            self._changed.notify_all()

    def _apply_event(self, typ: str, obj: dict) -> None:
        pod = (obj.get("involvedObject") or {}).get("name")
        if not isinstance(pod, str) or (pod not in self._created and pod not in self._pods):
            return
        uid = (obj.get("metadata") or {}).get("uid") or (obj.get("metadata") or {}).get("name")
        if not isinstance(uid, str):
            return  # an Event without uid or name cannot be told from the next one
        bucket = self._events.setdefault(pod, {})
        if typ == "DELETED":
            bucket.pop(uid, None)
            return
        bucket[uid] = obj
        if len(bucket) > MAX_EVENTS_PER_POD:
            bucket.pop(next(iter(bucket)))

    def _note_change(self, pod: str) -> None:
        with self._changes_lock:
            self._changes.add(pod)

    def take_changes(self) -> set[str]:
        """The handles (``<namespace>/<pod>``) of the Pods whose log grew (a follower wrote to
        its file, or ended) or which the watch saw change since the last call
        (:class:`~rlark.runtimes.base.ReportsChanges`)."""
        with self._changes_lock:
            pods, self._changes = self._changes, set()
        return {f"{self.namespace}/{pod}" for pod in pods}

    def wait_for_change(self, timeout: float) -> None:
        """Block until a watch delivers something (or ``timeout`` seconds)."""
        with self._changed:
            self._changed.wait(timeout)

    def _not_seen_yet(self, name: str, now: float) -> bool:
        """A Pod this runtime tracks that its watch has not shown yet: one it created, within
        the watch lag; any, while the Pod watch has not listed or is failing (a cache that is
        empty or stale proves nothing). An adopted Pod was created by a server process that
        ended before this one listed, so a list without it means it is gone."""
        created = self._created.get(name)
        return created is not None and name not in self._gone and (
            not self._listed["Pod"] or self._watch_error["Pod"] is not None
            or (name not in self._adopted and now - created < CREATE_LAG_SECONDS))

    def container_state(self, pod: str) -> str:
        """``waiting``, ``running``, ``terminated`` or ``gone`` (from the watch cache; a Pod of
        that name that is not the tracked Worker's (:meth:`_mine`) counts as not there)."""
        with self._lock:
            obj = self._cached_pod(pod)
            if obj is None:
                return "waiting" if self._not_seen_yet(pod, time.time()) else "gone"
        status = obj.get("status") or {}
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == render.CONTAINER:
                state = cs.get("state") or {}
                if "running" in state:
                    return "running"
                if "terminated" in state:
                    return "terminated"
        if status.get("phase") in (PodPhase.Succeeded, PodPhase.Failed):
            return "terminated"
        return "waiting"

    def note_log_denied(self, pod: str, exc: KubeError | None) -> None:
        """The log follower of ``pod`` was refused (``exc``: 401/403) or is reading again (None)."""
        with self._lock:
            if exc is None:
                self._log_errors.pop(pod, None)
            else:
                if self._log_errors.get(pod) != str(exc):
                    log.warning("%s", exc)
                self._log_errors[pod] = str(exc)

    # --- Runtime protocol -------------------------------------------------------------------------

    def place(self, job: Job, run_uid: str, workers: list[PlannedWorker], taken: Taken,
              namespace: str | None = None) -> Placement:
        """The head Service's DNS name and port 6379; Ray's defaults for every Worker. (Always in
        this runtime's namespace: :class:`.namespaces.ProjectNamespaces` picks the runtime.)

        First the names the Run needs are freed (:meth:`free_names`).

        Raises:
            NamesBusy: objects of an earlier Run of the Job still hold some names; try again.
            KubeError: the API refused a read or delete (the message names it).
        """
        self.free_names(job, run_uid, workers)
        return Placement(head_address=render.head_address(job, self.namespace),
                         workers={w.node_rank: WorkerPlace() for w in workers})

    def free_names(self, job: Job, run_uid: str, workers: list[PlannedWorker]) -> None:
        """Delete the Pods and the head Service that earlier Runs of ``job`` left in the
        namespace (found by the Job's label; RLark's own only), Pods with grace period 0; then
        raise :class:`NamesBusy` naming those this Run needs that are still there (being
        deleted, e.g. held by a finalizer). Objects of another Job, or not made by RLark, are
        left alone here (creating over them fails and names them).

        Raises:
            NamesBusy, KubeError: see :meth:`place`.
        """
        service = head_service_name(job.name)
        wanted = {("Pod", w.name) for w in workers} | {("Service", service)}

        def leftovers() -> list[tuple[str, dict]]:
            pods, _ = self.kube.list("Pod", label_selector=f"{MANAGED},{render.LABEL_JOB}={job.name}")
            found = [("Pod", p) for p in pods]
            svc = self.kube.get("Service", service)
            if svc is not None:
                found.append(("Service", svc))
            out = []
            for kind, obj in found:
                labels = (obj.get("metadata") or {}).get("labels") or {}
                if (labels.get(render.LABEL_MANAGED_BY) == render.MANAGED_BY
                        and labels.get(render.LABEL_JOB) == job.name
                        and labels.get(render.LABEL_RUN) != run_uid):
                    out.append((kind, obj))
            return out

        found = leftovers()
        if not found:
            return
        for kind, obj in found:
            meta = obj["metadata"]
            if kind == "Pod" or not meta.get("deletionTimestamp"):
                # grace 0: the API server removes a Pod at once (its container is long gone:
                # the Run it belonged to has ended), unless a finalizer holds it
                # with its uid as a precondition: an object made meanwhile under the name (by
                # another Job, say) is not touched
                self.kube.delete(kind, meta["name"], grace_seconds=0 if kind == "Pod" else None,
                                 uid=meta.get("uid"))
                log.info("deleted %s %s left by run %s of Job %s", kind, meta["name"],
                         (meta.get("labels") or {}).get(render.LABEL_RUN), job.name)
        busy = []
        for kind, obj in leftovers():
            meta = obj["metadata"]
            if (kind, meta["name"]) not in wanted:
                continue
            finalizers = meta.get("finalizers") or []
            busy.append(f"{kind} {meta['name']} of run {(meta.get('labels') or {}).get(render.LABEL_RUN)} "
                        "is still being deleted"
                        + (f" (finalizers: {', '.join(finalizers)})" if finalizers else ""))
        if busy:
            raise NamesBusy(f"waiting for the names this Run needs in namespace {self.namespace}: "
                            + "; ".join(busy))

    def _taken(self, kind: str, name: str, obj: dict, job: str) -> str:
        """Why ``kind name`` cannot be this Job's: who holds the name."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        where = f"{kind} {name} already exists in namespace {self.namespace}"
        if labels.get(render.LABEL_MANAGED_BY) != render.MANAGED_BY:
            return f"{where} and was not created by RLark; rename the Job or delete it"
        other = labels.get(render.LABEL_JOB)
        if other != job:
            return (f"{where} and belongs to RLark Job {other!r} (run {labels.get(render.LABEL_RUN)}): "
                    f"the object names of Job {job!r} (<job>-<role>-<index>) collide with it; "
                    "rename the Job or the role")
        return f"{where}: run {labels.get(render.LABEL_RUN)} of this Job still holds it"

    def _create(self, obj: dict, job: str, run_uid: str, batch: bool = False) -> dict:
        """Create ``obj``; when its name is taken, return the object if it is already this
        Run's (a launch tried again), else fail naming the holder (never delete or adopt it).
        A Run's launch is tried again when the server stopped mid-launch (the Run was still
        Pending in the store): its ConfigMap, PVCs and some Pods exist already and are kept.
        ``batch``: :meth:`KubeClient.create`'s.

        Raises:
            KubeError: the name is taken (409), or another API error.
        """
        kind, name = obj["kind"], obj["metadata"]["name"]
        try:
            return self.kube.create(obj, batch=batch)
        except KubeError as exc:
            if exc.status != 409:
                raise
        existing = self.kube.get(kind, name)
        if existing is None:  # deleted meanwhile
            return self.kube.create(obj)
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if (labels.get(render.LABEL_MANAGED_BY) == render.MANAGED_BY
                and labels.get(render.LABEL_JOB) == job and labels.get(render.LABEL_RUN) == run_uid):
            return existing
        raise KubeError(self._taken(kind, name, existing, job), 409)

    def _ensure_run(self, job: Job, run_uid: str,
                    secrets: dict[tuple[str, str], str] | None = None,
                    ray_token: str | None = None, queue: str | None = None) -> render.RenderOptions:
        with self._lock:
            opts = self._runs.get(run_uid)
        if opts is not None:
            return opts
        self.check_secret_refs(job, (secrets or {}).keys())
        priority = None
        if queue:
            try:
                priority = kueue.priority_class(job.spec.priority, self.priority_classes)
            except ValueError as exc:
                raise LaunchRefused(str(exc)) from None
            local_queue = self.kube.get("LocalQueue", queue)
            if local_queue is not None:
                with self._lock:
                    self._local_queues[queue] = (local_queue.get("spec") or {}).get("clusterQueue")
            else:
                raise KubeError(
                    f"Kueue LocalQueue {queue} does not exist in namespace {self.namespace} (or "
                    "Kueue is not installed): create it (docs/kubernetes.md, \"Queues and gang "
                    "admission\") or set the project's queue to another one, or to none", 404)
            self.watch_workloads()
            refused = self._watch_error["Workload"]
            if refused is not None and refused.status in DENIED:
                raise KubeError(self._workloads_refused(refused), refused.status)
        base = render.RenderOptions(namespace=self.namespace, ray_dashboard=self.ray_dashboard,
                                    run_as_user=self.pod_policy.run_as_user,
                                    allow_root=self.pod_policy.allow_root, policy=self.pod_policy,
                                    ray_auth=bool(ray_token), queue=queue,
                                    priority_class=priority)
        cm = render.render_config_map(job, run_uid, base)
        stored = self._create(cm, job.name, run_uid)
        uid = (stored.get("metadata") or {}).get("uid")
        if not uid:
            raise KubeError(f"ConfigMap {cm['metadata']['name']} has no uid")
        opts = replace(base, owner={"apiVersion": "v1", "kind": "ConfigMap",
                                    "name": cm["metadata"]["name"], "uid": uid})
        secret = render.render_secret(job, run_uid, opts, secrets or {})
        if secret is not None:  # before any Pod that refers to it
            self._create(secret, job.name, run_uid)
        if ray_token:  # likewise: every Pod of the Run takes its token from it
            self._create(render.render_ray_secret(job, run_uid, opts, ray_token), job.name, run_uid)
        self._create(render.render_service(job, run_uid, opts), job.name, run_uid)
        self._create(render.render_network_policy(job, run_uid, opts), job.name, run_uid)
        for claim in render.render_claims(job, run_uid, opts):
            self._create(claim, job.name, run_uid)
        with self._lock:
            self._runs[run_uid] = opts
        return opts

    def check_secret_refs(self, job: Job, managed: Iterable[tuple[str, str]]) -> None:
        """Refuse a Run whose env names a Kubernetes Secret of this namespace that no
        administrator allowed for the namespace's projects (``secret_projects``;
        :func:`.podpolicy.check_secret_refs`), or a key such a Secret lacks. One read per
        Secret named; the refusal reads the same whether the Secret exists or not.

        Raises:
            PolicyDenied: naming each such variable and the fix.
            KubeError: RLark may not read (RBAC: get secrets) or could not read a Secret.
        """
        projects = sorted(self.secret_projects()) if self.secret_projects is not None else []
        found = check_secret_refs(job, managed, " or ".join(projects) or "(none)", self.namespace,
                                  lambda name: read_secret_info(self.kube, name), projects)
        if found:
            raise PolicyDenied(found, "the server's secret policy")

    def launch(self, spec: LaunchSpec) -> Launched:
        """Hold the Job against the Pod policy (and, on the Run's first Worker, its Secret
        references), create the Run's shared objects once, then this Worker's Pod; follow its
        log.

        Raises:
            PolicyDenied: the Job asks for what the server's policy does not allow; nothing
                was created.
            KubeError: an API call was refused or failed (the message names it).
        """
        enforce(spec.job, self.pod_policy)
        opts = self._ensure_run(spec.job, spec.run_uid, spec.secrets, spec.ray_token, spec.queue)
        env = dict(spec.env)
        if self.ray_dashboard and spec.worker.is_head:
            env["RLARK_RAY_DASHBOARD"] = "1"
        pod = render.render_pod(spec.job, spec.worker, env, spec.run_uid, opts,
                                managed=spec.secrets.keys())
        name = pod["metadata"]["name"]
        self.track_pod(name, head=spec.worker.is_head,
                       join_timeout=spec.job.spec.failure_policy.join_timeout_seconds,
                       run_uid=spec.run_uid, rank=spec.worker.node_rank)
        # the head is the launch's first Pod, made alone (rlark.controller.fanout); the others
        # are a batch, paced behind every other request (RateLimit.wait_batch)
        created = self._create(pod, spec.job.name, spec.run_uid, batch=not spec.worker.is_head)
        if opts.queue and not kueue.gated(created) and not (created.get("spec") or {}).get("nodeName"):
            # Kueue's webhook did not hold it back: this namespace is not under Kueue's Pod
            # integration, and the Pod would start now, alone: fail closed
            self.kube.delete("Pod", name, grace_seconds=0,
                             uid=(created.get("metadata") or {}).get("uid"))
            raise KubeError(
                f"Kueue did not hold Pod {name} behind its admission gate ({kueue.ADMISSION_GATE}): "
                f"namespace {self.namespace} is not under Kueue's Pod integration (Kueue's "
                "managedJobsNamespaceSelector, docs/kubernetes.md \"Queues and gang admission\"); "
                "the Pod was deleted")
        self._follow(name, spec.log_path)
        return Launched(handle=f"{self.namespace}/{name}")

    def _follow(self, pod: str, log_path: str, keep: bool = False) -> None:
        """Follow ``pod``'s log into ``log_path`` (from where the file's cursor says). A follower
        already running is replaced, or with ``keep`` kept."""
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            old = self._followers.get(pod)
            if keep and old is not None and not old.done.is_set() and old.path == log_path:
                return
            if old is not None:
                old.stop(abandon=True)  # before the new one opens the file
            self._followers[pod] = self.logs.follow(pod, log_path)

    def adopt(self, spec: AdoptSpec) -> None:
        """Watch again a Worker's Pod that an earlier server process created (after a restart):
        track it as :meth:`launch` does (dated by the Pod's ``creationTimestamp``, else
        ``spec.launched_at``), except that a Pod the listed watch does not hold reads as gone at
        once, not "not seen yet" (a watch that has not listed, or is failing, still proves
        nothing: fail closed); and follow its log into ``spec.log_path`` from where that file's
        cursor says. Adopting a Pod this runtime already tracks only makes sure its log is followed.
        Makes no API call; never raises for a Pod that is gone (:meth:`observe` says so). A Pod
        of that name without the Run's label (``spec.ref.run_uid``) is not taken: it reads as
        gone, and its log is not followed.

        Nothing of the Run's is taken back here: :meth:`launch` finds the Run's ConfigMap
        again when it needs its owner reference, and :meth:`end_run` works by label.
        """
        name = self._pod_name(spec.ref)
        queued = False
        with self._lock:  # one step: never tracked as launched here (the watch lag)
            if name not in self._created:
                pod = self._pods.get(name)
                created = parse_time(((pod or {}).get("metadata") or {}).get("creationTimestamp"))
                if created is None:
                    created = spec.launched_at if spec.launched_at is not None else 0.0
                events = self._events.get(name)  # the same Pod: what its Events said still holds
                self.track_pod(name, head=spec.is_head,
                               join_timeout=spec.job.spec.failure_policy.join_timeout_seconds,
                               created=created, run_uid=spec.ref.run_uid)
                if events is not None:
                    self._events[name] = events
                self._adopted[name] = time.time()
                queued = kueue.GROUP_LABEL in (((pod or {}).get("metadata") or {}).get("labels") or {})
        if queued:  # a Pod of a Kueue pod group: what Kueue says of its group counts
            self.watch_workloads(wait=False)
        if spec.log_path:
            self._follow(name, spec.log_path, keep=True)

    def find(self, run_uid: str, worker: str, namespace: str | None = None) -> Launched | None:
        """The Pod of Worker ``worker`` (its name) of Run ``run_uid`` in this runtime's namespace
        (``namespace`` is for :class:`.namespaces.ProjectNamespaces`), found by the Run's labels,
        as ``Launched(handle="<namespace>/<pod>")``; None when no such Pod exists (also one of
        another Run holding the name). Answered from the watch cache once it has listed and
        while its watch works, else by one list call.

        Raises:
            KubeError: the cache cannot tell and the API refused or failed the list.
        """
        def ours(pod: dict) -> bool:
            meta = pod.get("metadata") or {}
            return (meta.get("name") == worker
                    and (meta.get("labels") or {}).get(render.LABEL_RUN) == run_uid)

        with self._lock:
            cached = self._listed["Pod"] and self._watch_error["Pod"] is None
            pods = list(self._pods.values()) if cached else None
        if pods is None:
            pods, _ = self.kube.list("Pod", label_selector=f"{MANAGED},{render.LABEL_RUN}={run_uid}")
        if any(ours(p) for p in pods):
            return Launched(handle=f"{self.namespace}/{worker}")
        return None

    def track_pod(self, name: str, head: bool, join_timeout: float, created: float | None = None,
                  run_uid: str | None = None, rank: int | None = None) -> None:
        """Start tracking a Pod this runtime creates: its Events are kept, a missing cache entry
        means "not seen yet" for 30 s, and its pending timeout is ``min(policy, 0.9 x
        join_timeout)`` so the scheduler's reason comes before the head's JoinTimeout.
        ``run_uid``: the Worker's Run; a Pod of that name without its label is not the Worker's.
        ``rank``: its node rank, when known before the watch shows the Pod."""
        with self._lock:
            if rank is not None:
                self._ranks[name] = str(rank)
            if run_uid is not None:
                self._owners[name] = run_uid
            else:
                self._owners.pop(name, None)
            self._created[name] = time.time() if created is None else created
            self._gone.pop(name, None)
            for d in (self._delete_sent, self._delete_errors, self._log_errors, self._drain_since,
                      self._adopted):
                d.pop(name, None)
            self._deleting.discard(name)
            self._foreign.discard(name)
            self._events.pop(name, None)
            self._policies[name] = replace(self.policy, pending_timeout_seconds=min(
                self.policy.pending_timeout_seconds, 0.9 * join_timeout))
            if head:
                self._heads.add(name)
            else:
                self._heads.discard(name)

    @staticmethod
    def _pod_name(ref: WorkerRef) -> str:
        return ref.handle.rsplit("/", 1)[-1] if ref.handle else ref.name

    def _mine(self, name: str, obj: dict | None, run_uid: str | None = None) -> bool:
        """Whether ``obj`` (a Pod named ``name``) is the Worker's this runtime tracks under that
        name: made by RLark and, when the Worker's Run is known (``run_uid``, else the one
        :meth:`track_pod` recorded), labelled with that Run. Call with the lock held."""
        if obj is None:
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(render.LABEL_MANAGED_BY) != render.MANAGED_BY:
            return False
        owner = run_uid or self._owners.get(name)
        return owner is None or labels.get(render.LABEL_RUN) == owner

    def tracks(self, ref: WorkerRef) -> bool:
        """Whether this runtime tracks the Worker's Pod for the Worker's Run (:meth:`track_pod`
        with its ``run_uid``), e.g. one whose launch failed before the Pod was made."""
        name = self._pod_name(ref)
        with self._lock:
            return (ref.run_uid is not None and name in self._created
                    and self._owners.get(name) == ref.run_uid)

    def held_by_another(self, name: str) -> bool:
        """Whether the watch cache holds a Pod ``name`` that is not the tracked Worker's
        (:meth:`_mine`): another Job's or Run's, or not made by RLark."""
        with self._lock:
            pod = self._pods.get(name)
            return pod is not None and not self._mine(name, pod)

    def _cached_pod(self, name: str, run_uid: str | None = None) -> dict | None:
        """The watch cache's Pod ``name`` when it is the Worker's (:meth:`_mine`), else None."""
        with self._lock:
            pod = self._pods.get(name)
            return pod if self._mine(name, pod, run_uid) else None

    def pod_status(self, ref: WorkerRef, now: float | None = None) -> PodStatus:
        """The Worker's Pod through :func:`.status.interpret` (cache only, no API call)."""
        name = self._pod_name(ref)
        now = time.time() if now is None else now
        with self._lock:
            pod = self._cached_pod(name, ref.run_uid)
            gone = pod is None
            last = self._gone.get(name)
            if not self._mine(name, last, ref.run_uid):
                last = None
            if gone and self._not_seen_yet(name, now):
                return PodStatus(PodState.Unscheduled, True)
            events = list(self._events.get(name, {}).values())
            obj = pod if pod is not None else last
            labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
            head = name in self._heads or labels.get(render.LABEL_RANK) == "0"
            adopted = self._adopted.get(name)
            if gone and obj is None and adopted is not None and name not in self._deleting:
                # never seen by this process: nothing tells how or when it went
                return PodStatus(PodState.Gone, False, None, (
                    Reason.HeadLost if head else Reason.WorkerLost,
                    f"Pod {name} was deleted while no RLark server watched it (this server, "
                    f"which adopted its Worker at {_utc(adopted)}, never saw it)"))
            queued, admitted_at, stopped = self._queue_of_pod(obj)
            return interpret(obj, events, now=now, policy=self._policies.get(name, self.policy),
                             container=render.CONTAINER, head=head, gone=gone,
                             deleted_by_rlark=name in self._deleting, queued=queued,
                             pending_since=admitted_at, stopped_by_queue=stopped)

    def _queue_of_pod(self, pod: dict | None) -> tuple[bool, float | None, tuple[Reason, str] | None]:
        """For a Pod of a Kueue pod group: whether it still waits behind Kueue's gate, when its
        group was admitted (its Workload's ``Admitted`` time, from the watch cache), and what
        Kueue did when it stopped the Pod (:func:`.kueue.preemption_of`, the preempting
        Workload named when this server watches its namespace: this one, or another project's
        through :attr:`find_workload`). Call with the lock held."""
        labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
        group = labels.get(kueue.GROUP_LABEL)
        if not group:
            return False, None, None
        wl = self._workloads.get(group)
        admitted = kueue.admission_of(wl, labels.get(kueue.QUEUE_LABEL, "?")).admitted_at
        cond: dict = next((c for c in ((pod or {}).get("status") or {}).get("conditions") or []
                           if c.get("type") == kueue.TERMINATION_TARGET), {})
        uid = kueue.preemptor_uid(str(cond.get("message") or ""))
        by = None
        if uid:
            found = self.workload_of_uid(uid)
            if found is None and self.find_workload is not None:
                found = self.find_workload(uid)
            by = f"Workload {found}" if found else f"the Workload of uid {uid}"
        return kueue.gated(pod), admitted, kueue.preemption_of(pod, by)

    def workload_of_uid(self, uid: str) -> str | None:
        """``namespace/name`` of the Workload of ``uid`` this runtime's watch caches (None: not
        one of them). Takes no lock (one dict read), so the runtimes of other namespaces may
        ask while they hold theirs."""
        name = self._workload_uids.get(uid)
        return f"{self.namespace}/{name}" if name else None

    def queue_for(self, project_queue: str | None, namespace: str | None = None) -> str | None:
        """The Kueue LocalQueue a new Run's Pods wait in: the project's setting, else the
        server's (:func:`.kueue.effective_queue`); None: none, they start at once."""
        return kueue.effective_queue(project_queue, self.queue)

    def queue_state(self, job: str, run_uid: str, queue: str,
                    namespace: str | None = None) -> QueueState:
        """What Kueue says of the pod group of Run ``run_uid`` of Job ``job`` in LocalQueue
        ``queue``: admitted or not, and while not, why (:func:`.kueue.admission_of`), from the
        Workload watch (started here when it is not yet: after a server restart). No API call
        once the watch runs."""
        self.watch_workloads(wait=False)
        self._want_positions(queue)
        group = kueue.group_name(job, run_uid)
        with self._lock:
            known = queue in self._local_queues
        if not known:  # (a Run launched by an earlier server process) one read per queue
            try:
                found_queue = self.kube.get("LocalQueue", queue)
            except KubeError:
                found_queue = None
            with self._lock:
                self._local_queues[queue] = ((found_queue or {}).get("spec") or {}).get("clusterQueue")
        with self._lock:
            listed, error = self._listed["Workload"], self._watch_error["Workload"]
            wl = self._workloads.get(group)
            cluster_queue = self._local_queues.get(queue)
        failure = None
        if error is not None and error.status in DENIED:
            failure = (Reason.Forbidden, self._workloads_refused(error))
        if not listed:
            why = (f"RLark cannot read Kueue's Workloads in namespace {self.namespace}: {error}"
                   if error is not None else "reading Kueue's Workloads")
            found = kueue.Admission(queue, False, cluster_queue, waiting_for=why)
        else:
            found = kueue.admission_of(wl, queue, cluster_queue, self._position_of(queue, group))
        position = None if found.admitted or found.inadmissible else found.position
        return QueueState(admitted=found.admitted, message=found.message,
                          cluster_queue=found.cluster_queue, admitted_at=found.admitted_at,
                          inadmissible=found.inadmissible, failure=failure, position=position)

    # --- places in line (Kueue's visibility API) ------------------------------------------------

    def _want_positions(self, queue: str) -> None:
        """Note that a queued Run waits in LocalQueue ``queue``; start the reader (once)."""
        with self._lock:
            self._positions_wanted[queue] = time.monotonic()
            started, self._positions_reader = self._positions_reader, True
        if not started:
            threading.Thread(target=self._positions_loop, daemon=True,
                             name=f"rlark-kueue-positions-{self.namespace}").start()

    def _position_of(self, queue: str, workload: str) -> int | None:
        """The place in line of Workload ``workload`` of LocalQueue ``queue`` (1 = next) as the
        last read of the visibility API said, if that is at most :data:`POSITIONS_STALE`
        seconds old; None: not known (no read yet, the API not served, not pending)."""
        with self._lock:
            read = self._positions.get(queue)
        if read is None or time.monotonic() - read[0] > POSITIONS_STALE:
            return None
        return read[1].get(workload)

    def _positions_loop(self) -> None:
        """Read the pending Workloads of every LocalQueue queued Runs wait in, one read per
        queue every :data:`POSITIONS_INTERVAL` seconds (not one per Run), until
        :meth:`shutdown`. Calls the API outside the lock; never raises."""
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                for idle in [q for q, t in self._positions_wanted.items() if now - t > POSITIONS_IDLE]:
                    del self._positions_wanted[idle]
                    self._positions.pop(idle, None)
                queues = sorted(self._positions_wanted)
            for queue in queues:
                if self._stop.is_set():
                    return
                self._read_positions(queue)
            if self._stop.wait(POSITIONS_INTERVAL):
                return

    def _read_positions(self, queue: str) -> None:
        """One read of LocalQueue ``queue``'s pending Workloads (:func:`.kueue.pending_positions`).
        A failed read drops the queue's places (no place is shown rather than an old one) and
        is logged once per HTTP status: 404 (the API is not served: Kueue's feature gate
        VisibilityOnDemand off or no APIService; or Kueue does not know the LocalQueue), 503 (its
        APIService is registered but unavailable), 403 (RBAC)."""
        try:
            summary = self.kube.get_path(
                f"read the pending Workloads of Kueue LocalQueue {queue} (visibility API)",
                kueue.pending_workloads_path(self.namespace, queue), timeout=POSITIONS_TIMEOUT,
                query=[("limit", str(kueue.PENDING_LIMIT))])
        except (KubeError, ValueError) as exc:  # ValueError: an answer that is not JSON
            status = exc.status if isinstance(exc, KubeError) else -1
            with self._lock:
                self._positions.pop(queue, None)
                first = status not in self._positions_noted
                self._positions_noted.add(status)
            if first:
                why = {404: "the API server does not serve it (Kueue's feature gate "
                            "VisibilityOnDemand is off or its APIService is missing) or Kueue "
                            "does not know the LocalQueue",
                       503: "its APIService is registered but not available",
                       403: f"RBAC forbids it: grant get on {kueue.VISIBILITY_GROUP} "
                            "localqueues/pendingworkloads",
                       -1: "its answer is not JSON"}.get(status, "it failed")
                log.warning("Kueue's visibility API gives no places in line in namespace %s: %s "
                            "(%s); queued Runs show none (logged once)", self.namespace, why, exc)
            return
        places = kueue.pending_positions(summary)
        with self._lock:
            self._positions[queue] = (time.monotonic(), places)

    def _workloads_refused(self, error: KubeError) -> str:
        return (f"RLark may not watch Kueue's Workloads in namespace {self.namespace}, so it "
                f"cannot tell when its queue admits a Run: {error}")

    def observe(self, ref: WorkerRef) -> Observed:
        """Alive / exit code / Kubernetes failure / record facts of the Worker's Pod. A Worker
        whose container ended stays alive until its log has been written out (at most
        :data:`LOG_DRAIN_SECONDS`; a stream that stays open but quiet for
        :data:`LOG_QUIET_SECONDS` is closed). RLark being refused the Pod's log is the failure
        ``Forbidden``; being refused its delete, ``StopFailed``."""
        st = self.pod_status(ref)
        name = self._pod_name(ref)
        alive, failure = st.alive, st.failure
        with self._lock:
            denied_log = self._log_errors.get(name)
            denied_delete = self._delete_errors.get(name)
        if failure is None and denied_log:
            failure = (Reason.Forbidden, f"RLark may not read the log of Pod {name}, so it cannot "
                                         f"follow its Worker: {denied_log}")
        if alive and failure is None and denied_delete:
            failure = (Reason.StopFailed, f"RLark could not delete Pod {name} to stop its Worker: "
                                          f"{denied_delete}")
        if not alive:
            follower = self._followers.get(name)
            if follower is not None and not follower.done.is_set():
                now = time.monotonic()
                started = self._drain_since.setdefault(name, now)
                if now - max(started, follower.last_data) >= LOG_QUIET_SECONDS:
                    follower.stop()
                alive = now - started < LOG_DRAIN_SECONDS
        return Observed(alive=alive, exit_code=None if alive else st.exit_code,
                        failure=failure, facts=st.facts or None)

    def _delete(self, ref: WorkerRef, grace: int | None) -> None:
        """Ask for the Worker's Pod to be deleted with ``grace`` (:meth:`_stop_loop` sends it);
        returns at once. Asked again within :data:`DELETE_RETRY_SECONDS` with the same grace,
        nothing is sent again (the controller asks every pass)."""
        name = self._pod_name(ref)
        now = time.monotonic()
        with self._lock:
            self._deleting.add(name)
            sent = self._delete_sent.get(name)
            if sent is not None and sent[0] == grace and now - sent[1] < DELETE_RETRY_SECONDS:
                return
            self._delete_sent[name] = (grace, now)
            self._stops_asked[name] = (ref.run_uid or self._owners.get(name), grace)
            self._stops_idle.clear()
            if self._stopper is None:
                self._stopper = threading.Thread(target=self._stop_loop, daemon=True,
                                                 name=f"rlark-stop-{self.namespace}")
                self._stopper.start()
        self._stops_wake.set()

    def _stop_loop(self) -> None:
        """Send the deletes asked (:meth:`_delete`), as :func:`.stopplan.plan_deletes` groups
        them, until the runtime shuts down."""
        while not self._stop.is_set():
            self._stops_wake.wait()
            self._stops_wake.clear()
            with self._lock:
                asked, self._stops_asked = self._stops_asked, {}
                runs = {run for run, _ in asked.values() if run is not None}
                tracked: dict[str, dict[str, str | None]] = {run: {} for run in runs}
                for name, run in self._owners.items():
                    if run in tracked:
                        tracked[run][name] = self._rank_of(name)
            for d in plan_deletes(asked, tracked, MANAGED, render.LABEL_RUN, render.LABEL_RANK):
                if self._stop.is_set():
                    return
                try:
                    if d.selector is None:
                        self._delete_one(d.names[0], asked[d.names[0]][0], d.grace)
                    else:
                        self._delete_many(d)
                except Exception as exc:  # noqa: BLE001 - the thread must live: say it, ask again later
                    log.exception("deleting Pods %s", ", ".join(d.names[:5]))
                    self._delete_failed(d.names, KubeError(f"{type(exc).__name__}: {exc}"))
            with self._lock:
                if not self._stops_asked:
                    self._stops_idle.set()

    def wait_stops_sent(self, timeout: float) -> bool:
        """Block until every delete asked so far has been sent (answered or failed), at most
        ``timeout`` seconds; whether it was."""
        return self._stops_idle.wait(timeout)

    def _rank_of(self, name: str) -> str | None:
        """The node rank of tracked Pod ``name``: as launched, else its label in the watch
        cache (also once gone); None when neither knows. Call with the lock held."""
        rank = self._ranks.get(name)
        if rank is None:
            obj = self._pods.get(name) or self._gone.get(name)
            rank = (((obj or {}).get("metadata") or {}).get("labels") or {}).get(render.LABEL_RANK)
        return rank

    def _delete_failed(self, names: Iterable[str], exc: KubeError | None) -> None:
        """Remember (``exc``) or clear (None) why deleting ``names`` failed: ``observe`` says
        ``StopFailed`` with it; each new message is logged once."""
        with self._lock:
            for name in names:
                if exc is None:
                    self._delete_errors.pop(name, None)
                    continue
                first = self._delete_errors.get(name) != str(exc)
                self._delete_errors[name] = str(exc)
                if first:
                    log.warning("deleting Pod %s: %s", name, exc)

    def _delete_many(self, d: PodDelete) -> None:
        """One collection delete of the Pods ``d.selector`` selects (every RLark Pod of one Run,
        maybe minus some ranks)."""
        try:
            self.kube.delete_collection("Pod", d.selector or "", grace_seconds=d.grace)
        except KubeError as exc:
            self._delete_failed(d.names, exc)
        else:
            self._delete_failed(d.names, None)

    def _delete_one(self, name: str, run_uid: str | None, grace: int | None) -> None:
        """Delete Pod ``name``: the one the watch cache holds, else the one the API has under
        its name, and only when it is the Worker's (:meth:`_mine`), with its uid as the
        delete's precondition. A Pod of another Job or Run, or not made by RLark, is left alone
        (logged once)."""
        with self._lock:
            cached = self._pods.get(name)
        try:
            pod = cached if cached is not None else self.kube.get("Pod", name)
            with self._lock:
                mine = self._mine(name, pod, run_uid)
            if pod is not None and not mine:
                labels = (pod.get("metadata") or {}).get("labels") or {}
                with self._lock:
                    first = name not in self._foreign
                    self._foreign.add(name)
                if first:
                    log.warning("not deleting Pod %s: it is not the Worker's (Job %r, run %r)",
                                name, labels.get(render.LABEL_JOB), labels.get(render.LABEL_RUN))
                return
            if pod is not None:
                self.kube.delete("Pod", name, grace_seconds=grace,
                                 uid=(pod.get("metadata") or {}).get("uid"))
        except KubeError as exc:
            self._delete_failed((name,), exc)
        else:
            self._delete_failed((name,), None)

    def signal_stop(self, ref: WorkerRef) -> None:
        """Delete the Pod with its grace period (the kubelet sends SIGTERM, then SIGKILL)."""
        self._delete(ref, None)

    def kill(self, ref: WorkerRef) -> None:
        """Delete the Pod with grace period 0."""
        self._delete(ref, 0)

    def forget(self, ref: WorkerRef) -> None:
        """Drop the caches of a Worker whose end is recorded; stop following its log."""
        name = self._pod_name(ref)
        with self._lock:
            follower = self._followers.pop(name, None)
            for d in (self._created, self._policies, self._drain_since, self._events, self._gone,
                      self._delete_sent, self._delete_errors, self._log_errors, self._adopted,
                      self._owners, self._ranks, self._stops_asked):
                d.pop(name, None)
            self._heads.discard(name)
            self._deleting.discard(name)
            self._foreign.discard(name)
        if follower is not None:
            follower.stop()

    def end_run(self, run_uid: str, namespace: str | None = None) -> None:
        """Delete everything of the Run by label (Pods at once: their ends are recorded).

        Raises:
            KubeError: some kinds could not be deleted (all are tried; the message names each
                refusal and the command that removes what is left).
        """
        selector = f"{render.LABEL_RUN}={run_uid}"
        errors = []
        for kind, grace in (("Pod", 0), ("Service", None), ("NetworkPolicy", None),
                            ("PersistentVolumeClaim", None), ("Secret", None), ("ConfigMap", None)):
            try:
                self.kube.delete_collection(kind, selector, grace_seconds=grace)
            except KubeError as exc:
                errors.append(str(exc))
        with self._lock:
            self._runs.pop(run_uid, None)
        if errors:
            raise KubeError(
                f"objects of run {run_uid} were left in namespace {self.namespace}: "
                + "; ".join(errors) + "; remove them with: kubectl delete "
                "pods,services,networkpolicies,secrets,configmaps,pvc "
                f"-n {self.namespace} -l {selector}")

    # --- inventory --------------------------------------------------------------------------------

    def inventory(self, max_age: float = 5.0) -> tuple[list[NodeInfo] | None, str, str | None]:
        """``(nodes, free_basis, error)``: the node inventory (cached ``max_age`` seconds),
        ``"cluster"`` or ``"namespace"`` for what free capacity counts, and an error text when
        the API could not be read (then ``nodes`` is None)."""
        now = time.monotonic()
        with self._lock:
            if self._inventory is not None and now - self._inventory[0] < max_age:
                return self._inventory[1]
        try:
            nodes = self.kube.list_nodes()
            try:
                pods, basis = self.kube.list_pods_everywhere()
            except KubeError:
                pods, basis = [], "none"
            result: tuple[list[NodeInfo] | None, str, str | None] = (parse_nodes(nodes, pods),
                                                                     basis, None)
        except KubeError as exc:
            result = (None, "none", str(exc))
        with self._lock:
            self._inventory = (now, result)
        return result
