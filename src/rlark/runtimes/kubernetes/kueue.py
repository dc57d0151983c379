"""Kueue for RLark's Pods (pure: no I/O): what a Run's Pods carry so that Kueue admits them as one
group, and what RLark reads back from Kueue's objects (a group's Workload, a preempted Pod).

Kueue's Pod integration (Kueue >= 0.6; names as in Kueue v0.17.0's sources) admits a *pod group*:
every Pod labelled with the same ``kueue.x-k8s.io/pod-group-name`` in a namespace, annotated with
the group's size ``kueue.x-k8s.io/pod-group-total-count`` and labelled with its LocalQueue
``kueue.x-k8s.io/queue-name`` (``pkg/controller/jobs/pod/constants/constants.go``:
``GroupNameLabel``, ``GroupTotalCountAnnotation``; ``pkg/controller/constants/constants.go``:
``QueueLabel``). Its webhook adds the scheduling gate ``kueue.x-k8s.io/admission``
(``SchedulingGateName``) to each such Pod, and the finalizer ``kueue.x-k8s.io/managed``; once the
whole group exists, Kueue makes one Workload for it, named as the group
(``pod_controller.go``: ``workloadName``), and when the ClusterQueue admits that Workload it removes
every Pod's gate at once, so no Pod of the group is bound to a node before all are admitted.

RLark never makes a Pod of a Run again (a new Run is a new group), so every Pod carries
``kueue.x-k8s.io/retriable-in-group: "false"`` (``RetriableInGroupAnnotationKey``): Kueue then
counts the group finished, and frees its quota, once all its Pods have ended, instead of holding
the quota for replacement Pods (Kueue's site, docs/tasks/run/plain_pods.md, "Termination").

A Workload's priority comes from the WorkloadPriorityClass a Pod names in the label
``kueue.x-k8s.io/priority-class`` (``WorkloadPriorityClassLabel``; ``jobframework.ExtractPriority``).

Preemption: Kueue evicts the preempted Workload (condition ``Evicted``, reason ``Preempted``;
``apis/kueue/v1beta2/workload_types.go``), then stops the group
(``pod_controller.go``: ``Stop``): it sets on every Pod the condition ``TerminationTarget``
(``ConditionTypeTerminationTarget``) with the eviction's message and reason
``WorkloadEvictedDueTo<the Evicted condition's reason>``, e.g. ``WorkloadEvictedDueToPreempted``
(``jobframework.StopReasonWorkloadEvicted``, suffixed for a composable job such as a pod group:
``pkg/controller/jobframework/reconciler.go``, ``stopJob``), and deletes the Pod; it never makes
them again. A preemption's message is ``Preempted to accommodate a workload (UID: U,
JobUID: J) due to <why>; ...`` (``pkg/scheduler/preemption/preemption.go``: ``preemptionMessage``).

Workload conditions read here (``workload_types.go``): ``Admitted``, ``QuotaReserved`` (False with
reason ``Pending`` from the scheduler, ``Inadmissible`` from the workload controller, and Kueue's
message: "couldn't assign flavors to pod set ...: insufficient unused quota for nvidia.com/gpu in
flavor F, 2 more needed", or "... > maximum capacity (4)" for a group no quota can ever hold:
``pkg/scheduler/flavorassigner/flavorassigner.go``), ``Evicted``, ``Finished``.

Place in line: Kueue v0.17 reports none on the Workload; its *visibility API* does, an aggregated
API its manager serves (feature gate ``VisibilityOnDemand``, beta and on by default since v0.9:
``pkg/features/kube_features.go``; ``pkg/visibility/server.go``): group
``visibility.kueue.x-k8s.io``, versions ``v1beta2`` and ``v1beta1``, ``GET
/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<name>/pendingworkloads``
(and ``clusterqueues/<name>/pendingworkloads``) answers a ``PendingWorkloadsSummary`` whose
``items`` are the pending Workloads (``metadata.name``, ``priority``, ``localQueueName``,
``positionInClusterQueue``, ``positionInLocalQueue``; both positions count from 0, at most
``limit`` of them, 1000 by default: ``apis/visibility/v1beta2/types.go``, ``defaults.go``;
``pkg/visibility/storage/pending_workloads_lq.go``). RLark reads a LocalQueue's
(:func:`pending_positions`) and shows the place in the ClusterQueue, the order in which the
ClusterQueue considers its Workloads for admission.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlark.names import DNS1123_LABEL
from rlark.runtimes.kubernetes.status import parse_time
from rlark.status import Reason, queued_message

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
#: the visibility API's group and the version RLark reads (Kueue >= 0.14 serves v1beta2)
VISIBILITY_GROUP, VISIBILITY_VERSION = "visibility.kueue.x-k8s.io", "v1beta2"
#: the most pending Workloads of a LocalQueue RLark asks for at once (Kueue's default limit)
PENDING_LIMIT = 1000
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
TERMINATION_TARGET = "TerminationTarget"
STOP_EVICTED = "WorkloadEvicted"
#: the Evicted condition's reason of a preemption (``WorkloadEvictedByPreemption``)
EVICTED_BY_PREEMPTION = "Preempted"
#: a project's (or the server's) queue setting that means "no queue": Pods start at once
NO_QUEUE = "none"
#: a group Kueue can never admit as its ClusterQueue is set up (flavorassigner.go's noFit)
_NO_FIT = "> maximum capacity"
_PREEMPTOR_UID = re.compile(r"Preempted to accommodate a workload \(UID: ([^,)]+)")


def check_queue_name(name: str) -> str:
    """``name`` if it can be a LocalQueue's name (a DNS-1123 label: it is a label value on
    every Pod) or ``none``.

    Raises:
        ValueError: naming the value and the rule.
    """
    if name != NO_QUEUE and not (DNS1123_LABEL.match(name or "") and len(name) <= 63):
        raise ValueError(f"queue {name!r} is not a Kueue LocalQueue name (a DNS-1123 label: "
                         f"lower-case letters, digits and '-', at most 63) nor {NO_QUEUE!r}")
    return name


def effective_queue(project_queue: str | None, server_queue: str | None) -> str | None:
    """The LocalQueue a new Run's Pods go to: the project's setting, else the server's
    (``--k8s-queue``); None when that is unset or ``none`` (the Pods start at once)."""
    queue = project_queue or server_queue
    return None if queue in (None, "", NO_QUEUE) else queue


def group_name(job: str, run_id: str) -> str:
    """The pod group (and so Workload) name of a Run: ``<job>-<run id>``, or ``rlark-<run id>``
    when that would pass 63 characters (a label value's bound)."""
    name = f"{job}-{run_id}"
    return name if len(name) <= 63 else f"rlark-{run_id}"


def priority_class(priority: int, classes: dict[str, int]) -> str | None:
    """The WorkloadPriorityClass a Run of ``spec.priority`` names: the one of ``classes``
    (name -> value, the server's ``--k8s-priority-class``) with that value; None for priority
    0 when none has it (Kueue's default priority).

    Raises:
        ValueError: a non-zero priority no class has (naming those there are).
    """
    found = sorted(name for name, value in classes.items() if value == priority)
    if found:
        return found[0]
    if priority == 0:
        return None
    have = ", ".join(f"{v} ({n})" for n, v in sorted(classes.items(), key=lambda kv: kv[1]))
    raise ValueError(f"spec.priority = {priority} names no WorkloadPriorityClass this server "
                     f"knows (rlark server --k8s-priority-class NAME=VALUE): "
                     f"{have or 'none is set'}")


def pod_metadata(queue: str, group: str, total: int,
                 priority: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, annotations)`` that put a Pod into ``group`` of ``total`` Pods in LocalQueue
    ``queue`` (and WorkloadPriorityClass ``priority`` when given), a group whose Pods are never
    replaced (:data:`RETRIABLE_ANNOTATION`)."""
    labels = {QUEUE_LABEL: queue, GROUP_LABEL: group}
    if priority:
        labels[PRIORITY_CLASS_LABEL] = priority
    return labels, {TOTAL_ANNOTATION: str(total), RETRIABLE_ANNOTATION: "false"}


def gated(pod: dict | None) -> bool:
    """Whether ``pod`` still holds Kueue's admission gate (its group is not admitted)."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == ADMISSION_GATE for g in gates)


def _condition(obj: dict | None, kind: str) -> dict:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return {}


def preemptor_uid(message: str) -> str | None:
    """The uid of the Workload a preemption message names (None: not such a message)."""
    m = _PREEMPTOR_UID.search(message or "")
    return m.group(1) if m and m.group(1) != "UNKNOWN" else None


def preemption_of(pod: dict | None, preemptor: str | None = None) -> tuple[Reason, str] | None:
    """What Kueue did to ``pod`` when it stopped the Pod's group for an eviction of its Workload
    (condition ``TerminationTarget``, reason ``WorkloadEvicted`` or ``WorkloadEvictedDueTo<why>``):
    ``Preempted`` for a preemption, ``Evicted`` for another eviction (a ClusterQueue stopped,
    pods-ready timeout...), with Kueue's message; ``preemptor``: the workload its uid names, as
    RLark could tell it (e.g. ``Workload ns/big-1a2b``). None: Kueue did not stop it for an
    eviction."""
    cond = _condition(pod, TERMINATION_TARGET)
    reason = str(cond.get("reason") or "")
    if cond.get("status") != "True" or not reason.startswith(STOP_EVICTED):
        return None
    why = reason[len(STOP_EVICTED):].removeprefix("DueTo")
    name = ((pod or {}).get("metadata") or {}).get("name", "?")
    said = str(cond.get("message") or "")
    if why == EVICTED_BY_PREEMPTION or (not why and said.startswith("Preempted")):
        by = f" by {preemptor}" if preemptor else ""
        return Reason.Preempted, (f"Kueue preempted the Run's Pod group{by} and deleted its Pods "
                                  f"(Pod {name}): {said}")
    return Reason.Evicted, (f"Kueue evicted the Run's Pod group{f' ({why})' if why else ''} and "
                            f"deleted its Pods (Pod {name}): {said}")


def pending_workloads_path(namespace: str, queue: str) -> str:
    """The visibility API's path of LocalQueue ``queue``'s pending Workloads in ``namespace``
    (both DNS-1123 labels: nothing to escape)."""
    return (f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/namespaces/{namespace}"
            f"/localqueues/{queue}/pendingworkloads")


def pending_positions(summary: dict | None) -> dict[str, int]:
    """Workload name -> its place in its ClusterQueue's line, 1 = the next it considers, from a
    ``PendingWorkloadsSummary`` of the visibility API (``positionInClusterQueue``, which counts
    from 0). An item without a name or a non-negative integer position is left out (an answer
    of another Kueue version must not break the Run's status)."""
    found: dict[str, int] = {}
    items = (summary or {}).get("items") if isinstance(summary, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        name = (item.get("metadata") or {}).get("name") if isinstance(item.get("metadata"), dict) else None
        place = item.get("positionInClusterQueue")
        if (isinstance(name, str) and name and isinstance(place, int) and not isinstance(place, bool)
                and place >= 0):
            found[name] = place + 1
    return found


@dataclass(frozen=True)
class Admission:
    """What Kueue says of a Run's pod group (:func:`admission_of`).

    ``admitted``: Kueue admitted the group (its Pods are let through to the scheduler);
    ``cluster_queue``: the ClusterQueue (its admission's, else the LocalQueue's when known);
    ``admitted_at``: when (Unix seconds); ``waiting_for``: while not admitted, what for in
    Kueue's words; ``inadmissible``: Kueue can never admit it as its queues are set up (larger
    than the ClusterQueue's quota with all it may borrow, no such LocalQueue...)."""

    queue: str
    admitted: bool
    cluster_queue: str | None = None
    admitted_at: float | None = None
    waiting_for: str = ""
    inadmissible: bool = False
    workload: str | None = None
    #: its place in the ClusterQueue's line (1 = next) while not admitted, when Kueue's
    #: visibility API told it (:func:`pending_positions`)
    position: int | None = None

    @property
    def where(self) -> str:
        """``Kueue LocalQueue team (ClusterQueue gpus)``."""
        cq = f" (ClusterQueue {self.cluster_queue})" if self.cluster_queue else ""
        return f"Kueue LocalQueue {self.queue}{cq}"

    @property
    def message(self) -> str:
        """While queued: the ``Queued`` message (:func:`rlark.status.queued_message`); once
        admitted, what admitted it."""
        if self.admitted:
            return f"admitted by {self.where}"
        why = self.waiting_for
        if self.inadmissible:
            why = f"inadmissible: {why}" if why else "inadmissible"
        return queued_message(self.where, None if self.inadmissible else self.position, why)


def admission_of(workload: dict | None, queue: str, cluster_queue: str | None = None,
                 position: int | None = None) -> Admission:
    """What Kueue says of a pod group from its Workload (None: Kueue has not made it yet) in
    LocalQueue ``queue`` (``cluster_queue``: that LocalQueue's ClusterQueue, when known;
    ``position``: its place in line, when the visibility API told it)."""
    if not workload:
        return Admission(queue, False, cluster_queue,
                         waiting_for="waiting for Kueue to make the Workload of the Run's Pods")
    name = (workload.get("metadata") or {}).get("name")
    status = workload.get("status") or {}
    cq = ((status.get("admission") or {}).get("clusterQueue")) or cluster_queue
    admitted = _condition(workload, "Admitted")
    if admitted.get("status") == "True":
        return Admission(queue, True, cq, parse_time(admitted.get("lastTransitionTime")),
                         workload=name)
    if (workload.get("spec") or {}).get("active") is False:
        return Admission(queue, False, cq, waiting_for="its Workload is deactivated "
                         "(spec.active: false)", inadmissible=True, workload=name)
    reserved = _condition(workload, "QuotaReserved")
    said = str(reserved.get("message") or "")
    if reserved.get("status") == "True":
        return Admission(queue, False, cq, waiting_for=f"quota reserved; waiting for its "
                         f"admission checks{': ' + said if said else ''}", workload=name)
    if reserved.get("status") == "False" and said:
        return Admission(queue, False, cq, waiting_for=said,
                         inadmissible=reserved.get("reason") == "Inadmissible" or _NO_FIT in said,
                         workload=name, position=position)
    return Admission(queue, False, cq, waiting_for="waiting for Kueue to consider it",
                     workload=name, position=position)


def workload_summary(workload: dict) -> dict[str, Any]:
    """The parts of a Workload RLark keeps in its cache: name, uid, ``spec.active`` and
    ``spec.queueName``, the status' conditions and its admission's ClusterQueue (a Workload's
    spec holds whole Pod templates: not kept)."""
    meta = workload.get("metadata") or {}
    status = workload.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "uid": meta.get("uid"),
                         "resourceVersion": meta.get("resourceVersion")},
            "spec": {"active": (workload.get("spec") or {}).get("active"),
                     "queueName": (workload.get("spec") or {}).get("queueName")},
            "status": {"conditions": status.get("conditions") or [],
                       "admission": {"clusterQueue": (status.get("admission") or {}).get("clusterQueue")}}}
