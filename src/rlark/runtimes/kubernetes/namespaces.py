"""One Kubernetes runtime per namespace: RLark projects map to namespaces, so a server runs the
Runs of each project in that project's namespace (services/accounts.py: ``project_namespace``).

:class:`ProjectNamespaces` is the Runtime the controller uses on Kubernetes. It keeps a
:class:`.runtime.KubernetesRuntime` (with its own Pod and Event watches) per namespace it has
been asked to use, started on first use, and sends each call to the one that owns the Worker: a
Worker's handle is ``<namespace>/<pod>``; a new Run names its namespace in ``place`` and
``LaunchSpec.namespace``; None means the server's own namespace.

No new Run starts in the server's own namespace: it holds RLark's own Secrets (the database
URL, the key the project secrets are sealed with, the first administrator's token), which any
Pod there could name. ``place`` and ``launch`` refuse it (:class:`ServerNamespaceRefused`)
before anything is created. Runs that already live there (made before projects stopped mapping
to it) are still observed, stopped, adopted and cleaned up there.
"""

from __future__ import annotations

import threading
from typing import Callable

from rlark.ranks import PlannedWorker
from rlark.runtimes.base import (AdoptSpec, LaunchSpec, Launched, Observed, Placement, QueueState,
                                 Taken, WorkerRef)
from rlark.runtimes.kubernetes.runtime import LAUNCH_CONCURRENCY, KubernetesRuntime
from rlark.spec import Job


class ServerNamespaceRefused(ValueError):
    """A new Run would start in the server's own namespace (see the module docstring)."""

    reason = "ServerNamespace"

    def __init__(self, namespace: str):
        super().__init__(
            f"ServerNamespace: namespace {namespace} is the RLark server's own (it holds RLark's "
            "Secrets: the database URL, the secret key, the admin token), so no Run starts "
            "there; nothing was created. A Run made before projects stopped mapping to the "
            "server's namespace ends here: start the Job again and its new Run goes to its "
            "project's namespace (`rlark project get` shows it)")


class ProjectNamespaces:
    """The Runtime protocol over one :class:`KubernetesRuntime` per namespace.

    Args:
        default: the server's runtime (its namespace is the default one, and its node inventory
            serves them all).
        factory: makes the runtime of another namespace (sharing the API client's
            configuration), e.g. ``lambda ns: KubernetesRuntime(kube=KubeClient(api, ns))``.
    """

    name = "kubernetes"
    #: a reference to a secret RLark does not manage names a Kubernetes Secret (the Pod's)
    own_secrets = True
    #: as each namespace's :class:`KubernetesRuntime`
    launch_concurrency = LAUNCH_CONCURRENCY

    def __init__(self, default: KubernetesRuntime, factory: Callable[[str], KubernetesRuntime]):
        self.default = default
        self.namespace = default.namespace
        self._factory = factory
        self._by_ns: dict[str, KubernetesRuntime] = {default.namespace: default}
        default.find_workload = self.workload_of_uid
        self._lock = threading.Lock()

    def runtime_for(self, namespace: str | None) -> KubernetesRuntime:
        """The runtime of ``namespace`` (None: the server's), started on first use."""
        ns = namespace or self.namespace
        with self._lock:
            rt = self._by_ns.get(ns)
            if rt is None:
                rt = self._by_ns[ns] = self._factory(ns)
                rt.find_workload = self.workload_of_uid
            return rt

    def workload_of_uid(self, uid: str) -> str | None:
        """``namespace/name`` of the Workload of ``uid`` in any namespace this server watches
        Workloads in (None: none of them): what preempted a Run may be another project's, e.g.
        under a cohort's fair sharing. Takes no lock (see
        :meth:`KubernetesRuntime.workload_of_uid`)."""
        for rt in tuple(self._by_ns.values()):
            found = rt.workload_of_uid(uid)
            if found:
                return found
        return None

    def _owner(self, ref: WorkerRef, namespace: str | None = None) -> KubernetesRuntime:
        """The runtime of the namespace the handle names; for a Worker without a handle (its
        launch failed: its Pod was tracked, never made) and no ``namespace``, the started
        runtime that tracks its Pod for its Run; else that of ``namespace`` (None: the
        server's). A Worker's name alone says nothing of its namespace: Workers of the same
        name run in other projects' namespaces."""
        if ref.handle and "/" in ref.handle:
            return self.runtime_for(ref.handle.split("/", 1)[0])
        if namespace is None:
            with self._lock:
                started = list(self._by_ns.values())
            for rt in started:
                if rt.tracks(ref):
                    return rt
        return self.runtime_for(namespace)

    @property
    def namespaces(self) -> list[str]:
        with self._lock:
            return sorted(self._by_ns)

    # --- the Runtime protocol -------------------------------------------------------------------

    def _for_new_run(self, namespace: str | None) -> KubernetesRuntime:
        """The runtime a new Run's objects go to; never the server's namespace.

        Raises:
            ServerNamespaceRefused: ``namespace`` is the server's (or None).
        """
        if (namespace or self.namespace) == self.namespace:
            raise ServerNamespaceRefused(self.namespace)
        return self.runtime_for(namespace)

    def place(self, job: Job, run_uid: str, workers: list[PlannedWorker], taken: Taken,
              namespace: str | None = None) -> Placement:
        """:meth:`KubernetesRuntime.place` in ``namespace``.

        Raises:
            ServerNamespaceRefused: ``namespace`` is the server's (or None).
        """
        return self._for_new_run(namespace).place(job, run_uid, workers, taken)

    def launch(self, spec: LaunchSpec) -> Launched:
        """:meth:`KubernetesRuntime.launch` in ``spec.namespace``.

        Raises:
            ServerNamespaceRefused: ``spec.namespace`` is the server's (or None).
        """
        return self._for_new_run(spec.namespace).launch(spec)

    def observe(self, ref: WorkerRef) -> Observed:
        return self._owner(ref).observe(ref)

    def take_changes(self) -> set[str]:
        """The Workers of every namespace that changed since the last call
        (:meth:`KubernetesRuntime.take_changes`)."""
        with self._lock:
            runtimes = list(self._by_ns.values())
        return set().union(*(rt.take_changes() for rt in runtimes))

    def signal_stop(self, ref: WorkerRef) -> None:
        self._owner(ref).signal_stop(ref)

    def kill(self, ref: WorkerRef) -> None:
        self._owner(ref).kill(ref)

    def forget(self, ref: WorkerRef) -> None:
        self._owner(ref).forget(ref)

    def end_run(self, run_uid: str, namespace: str | None = None) -> None:
        self.runtime_for(namespace).end_run(run_uid)

    def find(self, run_uid: str, worker: str, namespace: str | None = None) -> Launched | None:
        return self.runtime_for(namespace).find(run_uid, worker)

    def adopt(self, spec: AdoptSpec) -> None:
        self._owner(spec.ref, spec.namespace).adopt(spec)

    def queue_for(self, project_queue: str | None, namespace: str | None = None) -> str | None:
        """:meth:`KubernetesRuntime.queue_for` (the server's queue setting is every
        namespace's; nothing is started)."""
        return self.default.queue_for(project_queue)

    def queue_state(self, job: str, run_uid: str, queue: str,
                    namespace: str | None = None) -> QueueState:
        return self.runtime_for(namespace).queue_state(job, run_uid, queue)

    def inventory(self, max_age: float = 5.0):
        """The node inventory (nodes are cluster-wide: the server's runtime reads them)."""
        return self.default.inventory(max_age)

    def shutdown(self) -> None:
        with self._lock:
            runtimes = list(self._by_ns.values())
        for rt in runtimes:
            rt.shutdown()
