"""The Kubernetes runtime's profile: what the services ask of it before and after a Run
(:class:`rlark.runtimes.base.RuntimeProfile`). A Run's objects go to its project's namespace,
its Workers run images on the cluster's nodes with their own file systems, a Job may name
Kubernetes Secrets an administrator allowed for its project, and replicas of the server elect a
leader. Imports the Kubernetes client only when asked to check against the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from rlark.findings import Finding, Severity
from rlark.rlinf_config.locations import CONTAINER
from rlark.runtimes.base import VolumesElsewhere
from rlark.spec import Job

if TYPE_CHECKING:
    from rlark.runtimes.kubernetes.podpolicy import PodPolicy, SecretInfo


@dataclass
class KubernetesProfile:
    """The Kubernetes runtime's :class:`~rlark.runtimes.base.RuntimeProfile`.

    ``inventory``: ``() -> (nodes or None, free basis, error or None)``, e.g.
    :meth:`rlark.runtimes.kubernetes.runtime.KubernetesRuntime.inventory` (None: the capacity
    preflight is skipped); ``pending_timeout``: seconds a Pod may stay unscheduled
    (:func:`rlark.runtimes.kubernetes.settings.status_policy`); ``pod_policy``: what Worker
    Pods may ask for (None: :func:`rlark.runtimes.kubernetes.settings.pod_policy` when asked);
    ``kube_secret_info``: ``(namespace, name)`` -> the labels and key names of that Kubernetes
    Secret (:class:`~rlark.runtimes.kubernetes.podpolicy.SecretInfo`), None when it does not
    exist (raises when RLark may not read it); None: no Kubernetes Secret can be checked, so
    none is allowed; ``default_queue``: the server's Kueue LocalQueue (``--k8s-queue``);
    ``priority_classes``: WorkloadPriorityClass name -> value (``--k8s-priority-class``)."""

    inventory: Callable[[], tuple] | None = None
    pending_timeout: float | None = None
    pod_policy: PodPolicy | None = None
    kube_secret_info: Callable[[str | None, str], SecretInfo | None] | None = None
    #: the server's Kueue LocalQueue for projects that name none (``--k8s-queue``; None: none)
    default_queue: str | None = None
    #: the WorkloadPriorityClasses a queued Run's spec.priority maps to (``--k8s-priority-class``)
    priority_classes: dict[str, int] = field(default_factory=dict)

    name = "kubernetes"
    queues = True
    here_only = False
    own_secrets = True
    namespaced = True
    leader_election = True
    filesystem = CONTAINER
    record_notes: tuple[str, ...] = ()
    pulls_images = True
    isolation: dict[str, Any] | None = None

    def queue_of(self, project_queue: str | None) -> str | None:
        """The Kueue LocalQueue of a project whose own setting is ``project_queue``
        (:func:`rlark.runtimes.kubernetes.kueue.effective_queue`)."""
        from rlark.runtimes.kubernetes.kueue import effective_queue

        return effective_queue(project_queue, self.default_queue)

    def check_queue(self, name: str) -> str:
        """``name`` if a project may name it as its queue (a LocalQueue name, or ``none``).

        Raises:
            ValueError: naming the rule.
        """
        from rlark.runtimes.kubernetes.kueue import check_queue_name

        return check_queue_name(name)

    def _policy(self) -> PodPolicy:
        from rlark.runtimes.kubernetes.settings import pod_policy

        return self.pod_policy if self.pod_policy is not None else pod_policy()

    def preflight(self, job: Job, *, errors: bool,
                  neighbours: Callable[[], list[tuple[str, str, dict[str, Any]]]]) -> list[Finding]:
        """:func:`rlark.runtimes.kubernetes.preflight.check_for_kubernetes` (the Pod policy,
        names the ``neighbours`` hold, the cluster's capacity), for a Job with no error yet."""
        if errors:
            return []
        from rlark.runtimes.kubernetes.preflight import check_for_kubernetes

        nodes, basis, error = self.inventory() if self.inventory else (None, "none", None)
        return check_for_kubernetes(job, nodes, free_basis=basis,
                                    pending_timeout=self.pending_timeout,
                                    inventory_error=error, policy=self.pod_policy,
                                    neighbours=neighbours())

    def launch_findings(self, job: Job, secret_findings: Callable[[], list[Finding]]) -> list[Finding]:
        """The Pod policy (:func:`rlark.runtimes.kubernetes.podpolicy.check_pod_policy`: a policy
        made stricter since the Job was stored applies) and the secrets its env names."""
        from rlark.runtimes.kubernetes.podpolicy import check_pod_policy

        return check_pod_policy(job, self._policy()) + secret_findings()

    def queue_findings(self, job: Job, queue: str | None) -> list[Finding]:
        """In a Kueue LocalQueue, ``spec.priority`` must name a WorkloadPriorityClass the server
        maps (:func:`rlark.runtimes.kubernetes.kueue.priority_class`), else ``PriorityUnmapped``
        (an error; the runtime refuses such a launch too, ``PolicyDenied``); no queue: nothing
        (the priority orders nothing on the cluster)."""
        if queue is None:
            return []
        from rlark.runtimes.kubernetes.kueue import priority_class

        try:
            priority_class(job.spec.priority, self.priority_classes)
        except ValueError as exc:
            return [Finding(
                code="PriorityUnmapped", severity=Severity.error, path="spec.priority",
                message=f"{exc}; the Run would wait in Kueue LocalQueue {queue}, where a "
                        "priority is a WorkloadPriorityClass",
                hint="use one of those values (or 0, Kueue's default priority), or ask the "
                     "administrator to map this one to a WorkloadPriorityClass "
                     "(rlark server --k8s-priority-class NAME=VALUE)")]
        return []

    def own_secret_findings(self, job: Job, managed: set[tuple[str, str]], project: str,
                            namespace: str | None) -> list[Finding]:
        """A name RLark does not manage must be a Kubernetes Secret of the project's namespace
        that an administrator allowed for the project (label ``rlark.io/project=<project>``),
        else ``SecretNotAllowed``, worded the same whether such a Secret exists or not
        (:func:`rlark.runtimes.kubernetes.podpolicy.check_secret_refs`); a read RLark could not
        make is ``SecretNotChecked`` (an error: nothing is allowed unseen)."""
        from rlark.runtimes.kubernetes.podpolicy import check_secret_refs

        lookup = self.kube_secret_info
        try:
            return check_secret_refs(
                job, managed, project, namespace,
                (lambda name: lookup(namespace, name)) if lookup is not None else (lambda name: None))
        except Exception as exc:  # noqa: BLE001 - RBAC, an API server away: refused, said why
            return [Finding(
                code="SecretNotChecked", severity=Severity.error, path="spec.roles",
                message=f"spec.roles: the Job's env names Kubernetes Secrets of namespace "
                        f"{namespace}, and RLark could not check that project {project!r} may "
                        f"use them: {str(exc)[:300]}",
                hint="try again; if it persists, the administrator checks RLark's access to "
                     "the namespace (RBAC: get secrets, deploy/kubernetes/)")]

    def request_of(self, spec: dict[str, Any]) -> dict[str, float]:
        """Nothing: the cluster's scheduler counts what Pods request (:meth:`nodes`)."""
        return {"cpu": 0.0, "memory": 0, "gpu": 0}

    def nodes(self, requests: Callable[[], list[dict[str, float]]]
              ) -> tuple[list[dict[str, Any]], str, str | None]:
        """The cluster's nodes (:func:`rlark.runtimes.kubernetes.capacity.node_view` of the
        inventory); ``error`` set when the API could not be read; free basis ``cluster``,
        ``namespace`` or ``none`` (whose Pods' requests count)."""
        from rlark.runtimes.kubernetes.capacity import node_view

        try:
            nodes, basis, error = self.inventory() if self.inventory else (
                None, "none", "this server has no node inventory")
        except Exception as exc:  # noqa: BLE001 - the page says why instead of failing
            nodes, basis, error = None, "none", f"reading the node inventory failed: {exc}"
        return [node_view(n) for n in nodes or []], basis, error

    def output_probes(self, rec: dict[str, Any], sandboxed: bool) -> dict[str, dict[str, Any]]:
        """Nothing: the server does not see the Workers' files."""
        return {}

    def worker_dir(self, rec: dict[str, Any], path: str, rank: int,
                   sandboxed: bool) -> tuple[str | None, str]:
        """Nowhere: the path lies in the Worker Pod's filesystem (its container's own, or a
        volume the Pod mounts), which the server does not mount."""
        return None, f"{path} lies in the Pod's filesystem, which the server cannot read"

    def volumes(self, project: str) -> list[dict[str, Any]]:
        """None of RLark's own: :data:`VOLUMES_ELSEWHERE`.

        Raises:
            VolumesElsewhere: always.
        """
        raise VolumesElsewhere(VOLUMES_ELSEWHERE)

    def delete_volume(self, project: str, name: str) -> dict[str, Any] | None:
        """None of RLark's own: :data:`VOLUMES_ELSEWHERE`.

        Raises:
            VolumesElsewhere: always.
        """
        raise VolumesElsewhere(VOLUMES_ELSEWHERE)


#: why the Kubernetes runtime lists no volumes
VOLUMES_ELSEWHERE = ("not on this runtime: on Kubernetes a pvc mount names a PersistentVolumeClaim "
                     "of the project's namespace, which RLark neither makes nor deletes; list "
                     "and delete them with kubectl (kubectl get pvc -n NAMESPACE)")
