"""``KubernetesRuntime``: the Runtime protocol on Pods (one Pod per Worker, a Ray cluster per Run).

* ``place``: the head is the headless Service ``<job>-head.<ns>.svc:6379`` (Ray's default GCS
  port); every Worker keeps Ray's default ports and its Pod IP (nothing to allocate).
* ``launch``: on a Run's first Worker, create its ConfigMap (the owner), then the Service and
  PVCs (owned by it); then the Worker's Pod (owned by it), and a thread that follows the Pod's
  log into ``LaunchSpec.log_path`` (the controller reads lifecycle lines there; the file
  outlives the Pod).
* ``observe``: answered from watch-fed caches (one watch on the RLark Pods of the namespace,
  one on its Pod Events) through :func:`.status.interpret`; no API call per observation.
* ``signal_stop`` / ``kill``: delete the Pod (grace period of the Pod / 0).
* ``end_run``: delete the Run's Pods, Service, PVCs and ConfigMap by the ``rlark.io/run`` label.

All API calls go through :class:`.client.KubeClient`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlark.ranks import PlannedWorker
from rlark.runtimes.base import (
    LaunchSpec,
    Launched,
    Observed,
    Placement,
    Taken,
    WorkerPlace,
    WorkerRef,
)
from rlark.runtimes.kubernetes import render
from rlark.runtimes.kubernetes.capacity import NodeInfo, parse_nodes
from rlark.runtimes.kubernetes.client import KubeClient, KubeError
from rlark.runtimes.kubernetes.logcursor import LogCursor
from rlark.runtimes.kubernetes.status import PodStatus, StatusPolicy, interpret
from rlark.spec import Job

log = logging.getLogger("rlark.kubernetes")

MANAGED = f"{render.LABEL_MANAGED_BY}={render.MANAGED_BY}"
#: a Pod this process created may be missing from the watch cache this long (watch lag)
CREATE_LAG_SECONDS = 30.0
#: after a Pod's container ended, how long ``observe`` waits for its log to be written out
LOG_DRAIN_SECONDS = 10.0
MAX_EVENTS_PER_POD = 50


class _Follower(threading.Thread):
    """Follows one Pod's log into a file until the container has terminated or the Pod is gone."""

    def __init__(self, runtime: "KubernetesRuntime", pod: str, path: str):
        super().__init__(name=f"rlark-log-{pod}", daemon=True)
        self.rt = runtime
        self.pod = pod
        self.path = path
        self.stopped = threading.Event()
        self.done = threading.Event()
        self._resp = None

    def stop(self) -> None:
        self.stopped.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass

    def run(self) -> None:
        cursor = LogCursor()
        try:
            with open(self.path, "ab", buffering=0) as out:
                while not self.stopped.is_set():
                    state = self.rt.container_state(self.pod)
                    if state == "waiting":
                        self.rt.wait_for_change(5.0)
                        continue
                    since = cursor.resume(time.time())
                    try:
                        self._resp = self.rt.kube.log_stream(self.pod, render.CONTAINER, since)
                    except KubeError as exc:
                        if exc.status == 404 or state == "gone":
                            break  # nothing left to read
                        self.stopped.wait(1.0)  # 400: not started yet; others: retry
                        continue
                    try:
                        for chunk in self._resp.stream(64 * 1024):
                            data = cursor.feed(chunk)
                            if data:
                                out.write(data)
                            if self.stopped.is_set():
                                break
                    except Exception as exc:  # noqa: BLE001 - a dropped connection: reconnect
                        log.debug("log stream of %s broke: %s", self.pod, exc)
                    finally:
                        self._resp.release_conn()
                        self._resp = None
                    if self.rt.container_state(self.pod) in ("terminated", "gone"):
                        out.write(cursor.flush())
                        break
        except OSError as exc:
            log.warning("cannot write the log of %s to %s: %s", self.pod, self.path, exc)
        finally:
            self.done.set()


class KubernetesRuntime:
    """Workers as Pods in one namespace. See the module docstring for each protocol method.

    Args:
        kube: the API layer (default: :meth:`KubeClient.connect` with ``namespace``).
        policy: graces and pending timeout of :func:`.status.interpret`.
        ray_dashboard: start Ray's dashboard on each head (``ray[default]`` in the image).
        start: start the watches now (and wait up to 10 s for their first list).
    """

    name = "kubernetes"

    def __init__(self, namespace: str | None = None, kube: KubeClient | None = None,
                 policy: StatusPolicy = StatusPolicy(), ray_dashboard: bool = False,
                 start: bool = True):
        self.kube = kube or KubeClient.connect(namespace)
        self.namespace = self.kube.namespace
        self.policy = policy
        self.ray_dashboard = ray_dashboard
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pods: dict[str, dict] = {}
        self._gone: dict[str, dict | None] = {}
        self._events: dict[str, dict[str, dict]] = {}
        self._created: dict[str, float] = {}
        self._deleting: set[str] = set()
        self._heads: set[str] = set()
        self._policies: dict[str, StatusPolicy] = {}
        self._followers: dict[str, _Follower] = {}
        self._drain_since: dict[str, float] = {}
        self._runs: dict[str, render.RenderOptions] = {}
        self._inventory: tuple[float, Any] | None = None
        self._stop = threading.Event()
        self._synced = {"Pod": threading.Event(), "Event": threading.Event()}
        if start:
            self.start()

    # --- watches --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the Pod and Event watches; wait up to 10 s for the first Pod list."""
        for kind, kwargs in (("Pod", {"label_selector": MANAGED}),
                             ("Event", {"field_selector": "involvedObject.kind=Pod"})):
            threading.Thread(target=self._watch_loop, args=(kind, kwargs), daemon=True,
                             name=f"rlark-watch-{kind.lower()}").start()
        if not self._synced["Pod"].wait(10.0):
            log.warning("no Pod list from the API server of namespace %s after 10 s; still trying",
                        self.namespace)

    def shutdown(self) -> None:
        self._stop.set()
        for f in list(self._followers.values()):
            f.stop()

    def _watch_loop(self, kind: str, kwargs: dict[str, str]) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                items, rv = self.kube.list(kind, **kwargs)
                self._reset(kind, items)
                self._synced[kind].set()
                backoff = 1.0
                while not self._stop.is_set():
                    for typ, obj in self.kube.watch(kind, rv, **kwargs):
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if typ != "BOOKMARK":
                            self.apply_watch_event(kind, typ, obj)
                        if self._stop.is_set():
                            return
            except KubeError as exc:
                if exc.status != 410:  # 410: resourceVersion too old, list again at once
                    log.warning("watching %ss in %s: %s; retrying in %.0f s", kind,
                                self.namespace, exc, backoff)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
            except Exception:  # noqa: BLE001 - keep watching whatever happens
                log.exception("watching %ss failed; retrying", kind)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _reset(self, kind: str, items: list[dict]) -> None:
        with self._changed:
            if kind == "Pod":
                seen = {(o.get("metadata") or {}).get("name"): o for o in items}
                for name, old in list(self._pods.items()):
                    if name not in seen:
                        self._gone[name] = old
                self._pods = {n: o for n, o in seen.items() if n}
                for n in self._pods:
                    self._gone.pop(n, None)
            else:
                self._events = {}
                for o in items:
                    self._apply_event("ADDED", o)
            self._changed.notify_all()

    def apply_watch_event(self, kind: str, typ: str, obj: dict) -> None:
        """Take one watch event (``kind`` Pod or Event; ``typ`` ADDED, MODIFIED or DELETED) into
        the caches; the watch threads call this, tests feed saved objects through it."""
        with self._changed:
            if kind == "Pod":
                name = (obj.get("metadata") or {}).get("name")
                if typ == "DELETED":
                    self._pods.pop(name, None)
                    if name in self._created or name in self._followers:
                        self._gone[name] = obj
                else:
                    self._pods[name] = obj
                    self._gone.pop(name, None)
            else:
                self._apply_event(typ, obj)
            self._changed.notify_all()

    def _apply_event(self, typ: str, obj: dict) -> None:
        pod = (obj.get("involvedObject") or {}).get("name")
        if pod not in self._created and pod not in self._pods:
            return
        uid = (obj.get("metadata") or {}).get("uid") or (obj.get("metadata") or {}).get("name")
        bucket = self._events.setdefault(pod, {})
        if typ == "DELETED":
            bucket.pop(uid, None)
            return
        bucket[uid] = obj
        if len(bucket) > MAX_EVENTS_PER_POD:
            bucket.pop(next(iter(bucket)))

    def wait_for_change(self, timeout: float) -> None:
        """Block until a watch delivers something (or ``timeout`` seconds)."""
        with self._changed:
            self._changed.wait(timeout)

    def container_state(self, pod: str) -> str:
        """``waiting``, ``running``, ``terminated`` or ``gone`` (from the watch cache)."""
        with self._lock:
            obj = self._pods.get(pod)
            if obj is None:
                created = self._created.get(pod)
                if created is not None and time.time() - created < CREATE_LAG_SECONDS \
                        and pod not in self._gone:
                    return "waiting"
                return "gone"
        status = obj.get("status") or {}
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == render.CONTAINER:
                state = cs.get("state") or {}
                if "running" in state:
                    return "running"
                if "terminated" in state:
                    return "terminated"
        if status.get("phase") in ("Succeeded", "Failed"):
            return "terminated"
        return "waiting"

    # --- Runtime protocol -------------------------------------------------------------------------

    def place(self, job: Job, run_uid: str, workers: list[PlannedWorker], taken: Taken,
              namespace: str | None = None) -> Placement:
        """The head Service's DNS name and port 6379; Ray's defaults for every Worker. (Always in
        this runtime's namespace: :class:`.namespaces.ProjectNamespaces` picks the runtime.)"""
        return Placement(head_address=render.head_address(job, self.namespace),
                         workers={w.node_rank: WorkerPlace() for w in workers})

    def _ensure_run(self, job: Job, run_uid: str) -> render.RenderOptions:
        with self._lock:
            opts = self._runs.get(run_uid)
        if opts is not None:
            return opts
        base = render.RenderOptions(namespace=self.namespace, ray_dashboard=self.ray_dashboard)
        cm = render.render_config_map(job, run_uid, base)
        try:
            stored = self.kube.create(cm)
        except KubeError as exc:
            if exc.status != 409:
                raise
            stored = self.kube.get("ConfigMap", cm["metadata"]["name"]) or {}
        uid = (stored.get("metadata") or {}).get("uid")
        if not uid:
            raise KubeError(f"ConfigMap {cm['metadata']['name']} has no uid")
        opts = replace(base, owner={"apiVersion": "v1", "kind": "ConfigMap",
                                    "name": cm["metadata"]["name"], "uid": uid})
        for obj in [render.render_service(job, run_uid, opts), *render.render_claims(job, run_uid, opts)]:
            self._create_replacing(obj, run_uid)
        with self._lock:
            self._runs[run_uid] = opts
        return opts

    def _create_replacing(self, obj: dict, run_uid: str) -> dict:
        """Create ``obj``; when an object of that name from another Run is still there (a Pod
        or Service of the Job's previous Run being deleted), delete it at once and retry for up
        to 10 s.

        Raises:
            KubeError: the name stays taken, or another API error.
        """
        kind, name = obj["kind"], obj["metadata"]["name"]
        deadline = time.monotonic() + 10.0
        while True:
            try:
                return self.kube.create(obj)
            except KubeError as exc:
                if exc.status != 409:
                    raise
            existing = self.kube.get(kind, name)
            if existing is None:
                continue
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if labels.get(render.LABEL_RUN) == run_uid:
                return existing  # ours already (a retried launch)
            if labels.get(render.LABEL_MANAGED_BY) != render.MANAGED_BY:
                raise KubeError(f"{kind} {name} already exists in namespace {self.namespace} and "
                                "was not created by RLark; rename the Job or delete it", 409)
            if time.monotonic() > deadline:
                raise KubeError(f"{kind} {name} of run {labels.get(render.LABEL_RUN)} is still "
                                "being deleted", 409)
            self.kube.delete(kind, name, grace_seconds=0)
            time.sleep(0.2)

    def launch(self, spec: LaunchSpec) -> Launched:
        """Create the Run's shared objects once, then this Worker's Pod; follow its log."""
        opts = self._ensure_run(spec.job, spec.run_uid)
        env = dict(spec.env)
        if self.ray_dashboard and spec.worker.is_head:
            env["RLARK_RAY_DASHBOARD"] = "1"
        pod = render.render_pod(spec.job, spec.worker, env, spec.run_uid, opts)
        name = pod["metadata"]["name"]
        self.track_pod(name, head=spec.worker.is_head,
                       join_timeout=spec.job.spec.failure_policy.join_timeout_seconds)
        self._create_replacing(pod, spec.run_uid)
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        follower = _Follower(self, name, spec.log_path)
        with self._lock:
            old = self._followers.pop(name, None)
            self._followers[name] = follower
        if old is not None:
            old.stop()
        follower.start()
        return Launched(handle=f"{self.namespace}/{name}")

    def track_pod(self, name: str, head: bool, join_timeout: float, created: float | None = None) -> None:
        """Start tracking a Pod this runtime creates: its Events are kept, a missing cache entry
        means "not seen yet" for 30 s, and its pending timeout is ``min(policy, 0.9 x
        join_timeout)`` so the scheduler's reason comes before the head's JoinTimeout."""
        with self._lock:
            self._created[name] = time.time() if created is None else created
            self._gone.pop(name, None)
            self._deleting.discard(name)
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

    def pod_status(self, ref: WorkerRef, now: float | None = None) -> PodStatus:
        """The Worker's Pod through :func:`.status.interpret` (cache only, no API call)."""
        name = self._pod_name(ref)
        now = time.time() if now is None else now
        with self._lock:
            pod = self._pods.get(name)
            gone = pod is None
            last = self._gone.get(name)
            if gone and name in self._created and name not in self._gone \
                    and now - self._created[name] < CREATE_LAG_SECONDS:
                return PodStatus("Unscheduled", True)
            events = list(self._events.get(name, {}).values())
            obj = pod if pod is not None else last
            labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
            head = name in self._heads or labels.get(render.LABEL_RANK) == "0"
            return interpret(obj, events, now=now, policy=self._policies.get(name, self.policy),
                             container=render.CONTAINER, head=head, gone=gone,
                             deleted_by_rlark=name in self._deleting)

    def observe(self, ref: WorkerRef) -> Observed:
        """Alive / exit code / Kubernetes failure / record facts of the Worker's Pod. A Worker
        whose container ended stays alive until its log has been written out (at most 10 s)."""
        st = self.pod_status(ref)
        name = self._pod_name(ref)
        alive = st.alive
        if not alive:
            follower = self._followers.get(name)
            if follower is not None and not follower.done.is_set():
                started = self._drain_since.setdefault(name, time.monotonic())
                alive = time.monotonic() - started < LOG_DRAIN_SECONDS
        return Observed(alive=alive, exit_code=None if alive else st.exit_code,
                        failure=st.failure, facts=st.facts or None)

    def _delete(self, ref: WorkerRef, grace: int | None) -> None:
        name = self._pod_name(ref)
        with self._lock:
            self._deleting.add(name)
        try:
            self.kube.delete("Pod", name, grace_seconds=grace)
        except KubeError as exc:
            log.warning("deleting Pod %s: %s", name, exc)

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
            for d in (self._created, self._policies, self._drain_since, self._events, self._gone):
                d.pop(name, None)
            self._heads.discard(name)
            self._deleting.discard(name)
        if follower is not None:
            follower.stop()

    def end_run(self, run_uid: str, namespace: str | None = None) -> None:
        """Delete everything of the Run by label (Pods at once: their ends are recorded)."""
        selector = f"{render.LABEL_RUN}={run_uid}"
        for kind, grace in (("Pod", 0), ("Service", None), ("PersistentVolumeClaim", None),
                            ("ConfigMap", None)):
            try:
                self.kube.delete_collection(kind, selector, grace_seconds=grace)
            except KubeError as exc:
                log.warning("deleting the %ss of run %s: %s", kind, run_uid, exc)
        with self._lock:
            self._runs.pop(run_uid, None)

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
            result = (parse_nodes(nodes, pods), basis, None)
        except KubeError as exc:
            result = (None, "none", str(exc))
        with self._lock:
            self._inventory = (now, result)
        return result
