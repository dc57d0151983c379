"""Pod + Events -> a Worker's state and, when Kubernetes knows it, why it cannot run (pure).

:func:`interpret` takes the Pod object exactly as the API server returns it (``kubectl get pod
-o json``: camelCase dicts), the Events whose ``involvedObject`` is that Pod, and the time, and
returns a :class:`PodStatus`: alive or not, the exit code, a failure ``(reason, message)`` with
Kubernetes' own text, and facts for the run record (image digest, node, Pod IP).

Failure reasons (the Run's reason when it is the first failure):

=====================  ==========================================================================
``ImagePull``          container waiting ``ErrImagePull``/``ImagePullBackOff`` for longer than the
                       grace (kubelet retries with back-off; the registry's text comes from the
                       latest ``Failed`` Event), or ``InvalidImageName``/``ErrImageNeverPull`` at
                       once. The message says whether the registry answered *not found*,
                       *unauthorized*, or Docker Hub's "does not exist or may require
                       authorization" (which cannot tell the two apart).
``Unschedulable``      not bound to a node after the pending timeout; the scheduler's message from
                       the ``PodScheduled`` condition or the latest ``FailedScheduling`` Event.
``MountFailed``        ``FailedMount``/``FailedAttachVolume`` Events for longer than the mount grace
                       while the container has not started; or the init container that copies
                       copy-mode ``objectStorage`` mounts in failed (the copier's S3 code).
``ContainerCreateFailed``  ``CreateContainerConfigError``/``CreateContainerError``/
                       ``RunContainerError`` for longer than the pull grace.
``ContainerStartFailed``   terminated with ``StartError``/``ContainerCannotRun`` (e.g. no
                       ``python`` in the image).
``OOMKilled``          the container was killed by the kernel's OOM killer.
``Evicted``            the kubelet evicted the Pod (node pressure); its message.
``CrashLoop``          ``CrashLoopBackOff`` (only with a restart policy other than Never).
``HeadLost`` / ``WorkerLost``  the Pod was deleted, or is being deleted, by someone other than
                       RLark, or failed with a node-level reason (``NodeLost``, ``Shutdown``,
                       ``Terminated``, ``DisruptionTarget`` condition).
``AdmissionRejected``  the kubelet refused the Pod (``OutOfcpu``, ``UnexpectedAdmissionError``...).
``Preempted``          its queue (Kueue) preempted the Run's Pod group and deleted the Pod
                       (``stopped_by_queue``; another eviction by Kueue is ``Evicted``).
=====================  ==========================================================================

A Pod still behind its queue's admission gate (``queued``) is never ``Unschedulable``: the
scheduler has not been asked yet; once its group is admitted the pending timeout counts from
then (``pending_since``).

A plain non-zero exit is *not* a runtime failure: the bootstrap's own lifecycle line (or the
exit code, as ``HeadLost``/``WorkerLost``/``RunFailed``) tells the state machine more.

Kubernetes facts: Pod phases and container states as in
https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/; waiting reasons
``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``, ``ErrImageNeverPull``,
``CreateContainerConfigError``, ``CreateContainerError``, ``RunContainerError`` and
``CrashLoopBackOff`` from the kubelet (pkg/kubelet/images/types.go, pkg/kubelet/container/sync_result.go);
``Evicted`` from the eviction manager; the ``DisruptionTarget`` condition since 1.26.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Sequence

from rlark.runtimes.kubernetes.copymounts import INIT_CONTAINER as COPY_IN_CONTAINER
from rlark.status import Reason

IMAGE_PULL_WAITING = ("ErrImagePull", "ImagePullBackOff")
IMAGE_PULL_FATAL = ("InvalidImageName", "ErrImageNeverPull")
CREATE_WAITING = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
START_TERMINATED = ("StartError", "ContainerCannotRun")
LOST_POD_REASONS = ("NodeLost", "Shutdown", "Terminated", "NodeShutdown")
MOUNT_EVENTS = ("FailedMount", "FailedAttachVolume")
#: the kubelet's Event reasons for a failed image pull, and for its back-off before the next try
PULL_FAILED_EVENTS = ("Failed",)
PULL_RETRY_EVENTS = ("Failed", "BackOff")
MAX_TEXT = 600


class PodPhase(StrEnum):
    """A Pod's ``status.phase`` (core/v1 ``PodPhase``, Kubernetes' "Pod phase"): Kubernetes'
    words, not RLark's phases, though some are spelled alike."""

    Pending = "Pending"
    Running = "Running"
    Succeeded = "Succeeded"
    Failed = "Failed"
    Unknown = "Unknown"


class PodState(StrEnum):
    """What RLark makes of a Worker's Pod (:attr:`PodStatus.phase`)."""

    Unscheduled = "Unscheduled"  # not bound to a node yet
    Scheduled = "Scheduled"  # bound, its container not running yet (image pull, mounts)
    Pending = "Pending"  # its PodPhase, while the container is not running for another reason
    Running = "Running"
    Succeeded = "Succeeded"
    Failed = "Failed"
    Unknown = "Unknown"  # the node stopped reporting (PodPhase Unknown)
    Gone = "Gone"  # the Pod object no longer exists


@dataclass(frozen=True)
class StatusPolicy:
    """How long Kubernetes may keep retrying before RLark names a failure (seconds)."""

    image_pull_grace_seconds: float = 30.0
    mount_grace_seconds: float = 60.0
    pending_timeout_seconds: float = 300.0


@dataclass(frozen=True)
class PodStatus:
    """What RLark makes of one Worker's Pod.

    ``phase``: ``Unscheduled``, ``Scheduled`` (bound, container not running yet: image pull,
    mounts), ``Running``, ``Succeeded``, ``Failed`` or ``Gone`` (the object no longer exists).
    ``alive``: the Worker may still do something (False once the container has terminated or the
    Pod is gone). ``exit_code``: the container's, when terminated. ``failure``: ``(reason,
    message)`` when Kubernetes knows why the Worker cannot run. ``facts``: image, imageID,
    imageDigest, node, podIP, hostIP, qosClass (those present).
    """

    phase: PodState
    alive: bool
    exit_code: int | None = None
    failure: tuple[Reason, str] | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def _state(phase: object) -> PodState:
    """A live Pod's :class:`PodState` from its ``status.phase`` (``Unknown`` for a value
    Kubernetes does not define)."""
    try:
        return PodState(phase) if isinstance(phase, str) else PodState.Unknown
    except ValueError:
        return PodState.Unknown


def parse_time(value: Any) -> float | None:
    """RFC 3339 time (``2019-04-04T16:06:56Z``, MicroTime with fractions) -> Unix seconds."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _container_status(pod: dict, container: str) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == container:
            return cs
    return statuses[0] if statuses else {}


def _init_status(pod: dict, name: str) -> dict:
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if cs.get("name") == name:
            return cs
    return {}


def copy_in_failure(pod_name: str, terminated: dict) -> str:
    """The ``MountFailed`` message of a Pod whose copy-in init container failed (pure): the
    mount, its source and the S3 error code from the copier's last line (its termination
    message, ``objectcopy.main_init``), else the container's reason, exit code and last log
    text."""
    import json

    text = str(terminated.get("message") or "")
    said: Any = None
    for line in reversed(text.strip().splitlines()):
        try:
            said = json.loads(line)
        except ValueError:
            continue
        break
    if isinstance(said, dict) and said.get("ok") is False:
        where = (f"mount {str(said.get('mount'))[:253]!r} ({str(said.get('source'))[:500]}): "
                 if said.get("mount") else "")
        return _clip(f"Pod {pod_name}: {where}copy in failed: {str(said.get('code'))[:64]}: "
                     f"{str(said.get('message') or '')}")
    return _clip(f"Pod {pod_name}: the copy in of its objectStorage mounts (init container "
                 f"{COPY_IN_CONTAINER}) ended with exit code {terminated.get('exitCode')} "
                 f"{terminated.get('reason') or ''}: {text.strip()[-400:]}")


def _container_spec(pod: dict, name: str) -> dict:
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        if c.get("name") == name:
            return c
    return containers[0] if containers else {}


def _condition(pod: dict, kind: str) -> dict:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return {}


def _event_time(ev: dict, first: bool = True) -> float | None:
    keys = ("firstTimestamp", "eventTime", "lastTimestamp") if first else (
        "lastTimestamp", "eventTime", "firstTimestamp")
    for key in keys:
        t = parse_time(ev.get(key))
        if t is not None:
            return t
    series = ev.get("series") or {}
    return parse_time(series.get("lastObservedTime"))


def _events(events: Sequence[dict], reasons: Sequence[str]) -> list[dict]:
    """Events with one of ``reasons``, oldest first."""
    chosen = [e for e in events if e.get("reason") in reasons]
    return sorted(chosen, key=lambda e: _event_time(e, first=False) or 0.0)


def image_digest(image_id: str | None) -> str | None:
    """``repo@sha256:abc`` (containerd) or ``docker-pullable://repo@sha256:abc`` -> ``sha256:abc``;
    None for an image id that is not a repository digest (``docker://sha256:...``) or empty."""
    if not image_id or "@" not in image_id:
        return None
    digest = image_id.rsplit("@", 1)[1]
    return digest if ":" in digest else None


def facts_of(pod: dict, container: str = "worker") -> dict[str, Any]:
    """Run-record facts from a Pod: image (as the kubelet resolved it), imageID, imageDigest,
    node, podIP, hostIP, qosClass; only those that are set."""
    status = pod.get("status") or {}
    cs = _container_status(pod, container)
    out = {
        "image": cs.get("image"),
        "imageID": cs.get("imageID") or None,
        "imageDigest": image_digest(cs.get("imageID")),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "podIP": status.get("podIP"),
        "hostIP": status.get("hostIP"),
        "qosClass": status.get("qosClass"),
    }
    return {k: v for k, v in out.items() if v}


# --- image pull messages --------------------------------------------------------------------------

_AMBIGUOUS = (
    "may require 'docker login'",
    "may require authorization",
    "does not exist or no pull access",
)
_UNAUTHORIZED = (
    "401 unauthorized",
    "403 forbidden",
    "unauthorized",
    "authentication required",
    "no basic auth credentials",
    "requested access to the resource is denied",
    "authorization failed",
    "invalid username/password",
    "access denied",
)
_NOT_FOUND = ("manifest unknown", "not found", "name unknown", "404")
_RATE = ("toomanyrequests", "429 too many requests", "rate limit")
_NETWORK = ("i/o timeout", "connection refused", "connection reset", "no such host",
            "tls handshake", "context deadline exceeded", "network is unreachable", "dial tcp")

PULL_KINDS = {
    "ambiguous": "the registry says the repository does not exist or needs credentials (it does "
                 "not tell which); check the image name, then imagePullSecrets",
    "unauthorized": "the registry refused the credentials (unauthorized); add or fix "
                    "spec.roles[].kubernetes.imagePullSecrets",
    "not_found": "the registry has no such image or tag (not found); check the image reference",
    "rate_limited": "the registry is rate-limiting pulls; use a mirror or credentials",
    "unreachable": "the registry could not be reached from the node (network)",
    "invalid": "the image reference is not valid",
    "unknown": "the image could not be pulled",
}


def classify_pull_error(text: str) -> str:
    """The kind of an image pull error message: ``ambiguous``, ``unauthorized``, ``not_found``,
    ``rate_limited``, ``unreachable`` or ``unknown`` (keys of :data:`PULL_KINDS`).

    Registry wording seen in kubelet messages: Docker Hub answers a missing *and* a private
    repository with "pull access denied, repository does not exist or may require authorization"
    (containerd) / "... may require 'docker login'" (dockershim): ``ambiguous``. Distribution
    registries answer 401/403 (``unauthorized``) or ``manifest unknown`` / ``not found``."""
    low = (text or "").lower()
    if any(p in low for p in _AMBIGUOUS):
        return "ambiguous"
    if any(p in low for p in _RATE):
        return "rate_limited"
    if any(p in low for p in _UNAUTHORIZED):
        return "unauthorized"
    if any(p in low for p in _NOT_FOUND):
        return "not_found"
    if any(p in low for p in _NETWORK):
        return "unreachable"
    return "unknown"


def _pull_failure(pod: dict, events: Sequence[dict], waiting: dict, image: str) -> tuple[Reason, str]:
    pulls = [e for e in _events(events, PULL_FAILED_EVENTS)
             if "pull" in (e.get("message") or "").lower() and not
             (e.get("message") or "").startswith("Error: ")]
    detail = pulls[-1]["message"] if pulls else (waiting.get("message") or waiting.get("reason", ""))
    if waiting.get("reason") == "InvalidImageName":
        kind = "invalid"
    else:
        kind = classify_pull_error(detail)
        if kind == "unknown" and waiting.get("message"):
            kind = classify_pull_error(waiting["message"])
    name = (pod.get("metadata") or {}).get("name", "?")
    return (Reason.ImagePull, _clip(f"Pod {name} cannot pull image {image!r} ({waiting.get('reason')}): "
                               f"{PULL_KINDS[kind]}. Kubelet: {detail}"))


# --- the interpretation -----------------------------------------------------------------------------


def _ended_by_deletion(meta: dict, terminated: dict | None) -> bool:
    """Whether a deleted Pod's container ended because of the deletion: it had not ended (no
    ``terminated``), or it ended once the deletion was asked for (``deletionTimestamp`` minus
    ``deletionGracePeriodSeconds``, with 1 s of clock slack). A container that had finished
    before someone deleted the Pod ended on its own."""
    if terminated is None:
        return True
    asked = parse_time(meta.get("deletionTimestamp"))
    ended = parse_time(terminated.get("finishedAt"))
    if asked is None or ended is None:
        return False
    return ended >= asked - float(meta.get("deletionGracePeriodSeconds") or 0) - 1.0


def interpret(
    pod: dict | None,
    events: Sequence[dict] = (),
    *,
    now: float,
    policy: StatusPolicy = StatusPolicy(),
    container: str = "worker",
    head: bool = False,
    gone: bool = False,
    deleted_by_rlark: bool = False,
    queued: bool = False,
    pending_since: float | None = None,
    stopped_by_queue: tuple[Reason, str] | None = None,
) -> PodStatus:
    """Interpret one Worker's Pod.

    Args:
        pod: the Pod as the API returns it; when ``gone``, the last version seen (or None).
        events: core/v1 Events of this Pod (any order).
        now: the current time, Unix seconds (compared with the API's timestamps).
        policy: graces and the pending timeout.
        container: the Worker's container name (else the first container's status is used).
        head: the Pod is the Run's head (names a loss ``HeadLost`` instead of ``WorkerLost``).
        gone: the Pod object no longer exists (watch DELETED / 404).
        deleted_by_rlark: RLark itself asked to delete it (stop, teardown): not a failure.
        queued: the Pod waits behind its queue's admission gate (Kueue's
            ``kueue.x-k8s.io/admission``): nothing for the scheduler yet, so no pending
            timeout (the queue wait has its own bound, ``failurePolicy.queueTimeoutSeconds``).
        pending_since: when the Pod's group was admitted (Unix seconds): the pending timeout
            counts from then, not from the Pod's creation.
        stopped_by_queue: the queue stopped the Pod and deleted it (Kueue's preemption or
            eviction, :func:`.kueue.preemption_of`): that failure, whatever its container does
            as it goes.
    Returns:
        A :class:`PodStatus`. Never raises for odd objects: missing fields read as absent.
    """
    lost = Reason.HeadLost if head else Reason.WorkerLost
    pod = pod or {}
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    name = meta.get("name", "?")
    facts = facts_of(pod, container) if pod else {}
    cs = _container_status(pod, container) if pod else {}
    state = cs.get("state") or {}
    terminated = state.get("terminated")
    waiting = state.get("waiting") or {}
    exit_code = terminated.get("exitCode") if terminated else None
    phase = status.get("phase", PodPhase.Pending)
    image = _container_spec(pod, container).get("image") or cs.get("image") or "?"

    if gone:
        if deleted_by_rlark:
            return PodStatus(PodState.Gone, False, exit_code, None, facts)
        if pod:  # its last state may say why it went (evicted, OOM-killed, node lost...)
            last = interpret(pod, events, now=now, policy=policy, container=container, head=head,
                             stopped_by_queue=stopped_by_queue)
            if last.failure is not None:
                return PodStatus(PodState.Gone, False, exit_code, last.failure, facts)
        if terminated is not None or phase in (PodPhase.Succeeded, PodPhase.Failed):
            return PodStatus(PodState.Gone, False, exit_code, None, facts)
        where = f" on node {spec['nodeName']}" if spec.get("nodeName") else ""
        return PodStatus(PodState.Gone, False, None, (lost, _clip(
            f"Pod {name} was deleted (not by RLark) while {phase}{where}, before its Worker "
            "finished")), facts)

    if stopped_by_queue is not None and not deleted_by_rlark:
        over = terminated is not None or phase in (PodPhase.Succeeded, PodPhase.Failed)
        return PodStatus(PodState.Failed if over else _state(phase), not over, exit_code,
                         stopped_by_queue, facts)

    # the kubelet and the node: evicted, lost, rejected
    reason = status.get("reason") or ""
    if phase == PodPhase.Failed and reason == "Evicted":
        return PodStatus(PodState.Failed, False, exit_code, (Reason.Evicted, _clip(
            f"Pod {name} was evicted by the kubelet of {spec.get('nodeName') or status.get('hostIP', '?')}: "
            f"{status.get('message', '')}")), facts)
    if phase == PodPhase.Failed and (reason.startswith("OutOf") or reason in (
            "UnexpectedAdmissionError", "NodeAffinity", "NodeSelectorMismatching")):
        return PodStatus(PodState.Failed, False, exit_code, (Reason.AdmissionRejected, _clip(
            f"the kubelet on node {spec.get('nodeName', '?')} rejected Pod {name}: {reason}: "
            f"{status.get('message', '')}")), facts)
    disruption = _condition(pod, "DisruptionTarget")
    if phase == PodPhase.Failed and (reason in LOST_POD_REASONS or disruption.get("status") == "True"):
        why = f"{reason}: {status.get('message', '')}" if reason else (
            f"{disruption.get('reason', '')}: {disruption.get('message', '')}")
        return PodStatus(PodState.Failed, False, exit_code, (lost, _clip(
            f"Pod {name} on node {spec.get('nodeName', '?')} was terminated by Kubernetes: {why}")),
            facts)

    # the init container that copies the copy-mode mounts in (copymounts.py)
    copy_in = _init_status(pod, COPY_IN_CONTAINER)
    copy_ended = (copy_in.get("state") or {}).get("terminated")
    # (a Pod being deleted kills its copy in too: that is the deletion's story, told below)
    if copy_ended and copy_ended.get("exitCode") not in (0, None) and terminated is None \
            and not meta.get("deletionTimestamp"):
        return PodStatus(PodState.Failed if phase == PodPhase.Failed else _state(phase),
                         phase != PodPhase.Failed, None,
                         (Reason.MountFailed, copy_in_failure(name, copy_ended)), facts)
    if not waiting or waiting.get("reason") == "PodInitializing":
        # the image is pulled for the init container first: its waiting reasons are the Pod's
        waiting = (copy_in.get("state") or {}).get("waiting") or waiting

    # the container
    for st in (terminated, (cs.get("lastState") or {}).get("terminated")):
        if st and st.get("reason") == "OOMKilled":
            limit = (_container_spec(pod, container).get("resources") or {}).get("limits", {}).get("memory")
            alive = terminated is None and phase not in (PodPhase.Succeeded, PodPhase.Failed)
            return PodStatus(_state(phase) if alive else PodState.Failed, alive, exit_code, (
                Reason.OOMKilled, _clip(
                f"container {cs.get('name', container)} of Pod {name} was killed by the kernel's "
                f"OOM killer (exit code {st.get('exitCode')})"
                + (f"; its memory limit is {limit}" if limit else "")
                + "; raise resources.memory")), facts)
    if terminated and terminated.get("reason") in START_TERMINATED:
        return PodStatus(PodState.Failed, False, exit_code, (Reason.ContainerStartFailed, _clip(
            f"container {cs.get('name', container)} of Pod {name} could not start: "
            f"{terminated.get('reason')}: {terminated.get('message', '')}")), facts)
    if waiting.get("reason") == "CrashLoopBackOff":
        previous = (cs.get("lastState") or {}).get("terminated") or {}
        return PodStatus(_state(phase), True, None, (Reason.CrashLoop, _clip(
            f"container {cs.get('name', container)} of Pod {name} keeps failing "
            f"({cs.get('restartCount', 0)} restarts; last exit code {previous.get('exitCode')} "
            f"{previous.get('reason', '')}): {waiting.get('message', '')}")), facts)

    if terminated is not None or phase in (PodPhase.Succeeded, PodPhase.Failed):
        if meta.get("deletionTimestamp") and not deleted_by_rlark and _ended_by_deletion(meta, terminated):
            code = f" (exit code {exit_code})" if exit_code is not None else ""
            return PodStatus(PodState.Failed, False, exit_code, (lost, _clip(
                f"Pod {name} was deleted (not by RLark) before its Worker finished{code}")), facts)
        return PodStatus(PodState.Succeeded if phase == PodPhase.Succeeded else PodState.Failed,
                         False, exit_code,
                         None, facts)

    if meta.get("deletionTimestamp") and not deleted_by_rlark:
        why = (f" ({disruption.get('reason')}: {disruption.get('message', '')})"
               if disruption.get("status") == "True" else "")
        return PodStatus(_state(phase), True, None, (lost, _clip(
            f"Pod {name} is being deleted (not by RLark) while {phase}{why}")), facts)

    # not started yet: scheduling, image, mounts, container creation
    cond = _condition(pod, "PodScheduled")
    bound = bool(spec.get("nodeName") or cond.get("status") == "True" or status.get("hostIP"))
    if not bound:
        if queued:
            return PodStatus(PodState.Unscheduled, True, None, None, facts)
        since = parse_time(cond.get("lastTransitionTime")) if cond.get("status") == "False" else None
        since = since or parse_time(meta.get("creationTimestamp")) or now
        if pending_since is not None:
            since = max(since, pending_since)
        waited = now - since
        if waited >= policy.pending_timeout_seconds:
            sched = _events(events, ("FailedScheduling",))
            msg = cond.get("message") or (sched[-1].get("message") if sched else "") or (
                "no scheduler message")
            return PodStatus(PodState.Unscheduled, True, None, (Reason.Unschedulable, _clip(
                f"Pod {name} was not scheduled within {waited:.0f} s: {msg}")), facts)
        return PodStatus(PodState.Unscheduled, True, None, None, facts)

    wreason = waiting.get("reason", "")
    if wreason in IMAGE_PULL_FATAL:
        return PodStatus(PodState.Scheduled, True, None, _pull_failure(pod, events, waiting, image),
                         facts)
    if wreason in IMAGE_PULL_WAITING:
        pulls = [t for t in (_event_time(e) for e in _events(events, PULL_RETRY_EVENTS)) if t]
        since = min(pulls) if pulls else (parse_time(status.get("startTime")) or now)
        if now - since >= policy.image_pull_grace_seconds:
            return PodStatus(PodState.Scheduled, True, None,
                             _pull_failure(pod, events, waiting, image), facts)
        return PodStatus(PodState.Scheduled, True, None, None, facts)
    if wreason in CREATE_WAITING:
        since = parse_time(status.get("startTime")) or now
        if now - since >= policy.image_pull_grace_seconds:
            return PodStatus(PodState.Scheduled, True, None, (Reason.ContainerCreateFailed, _clip(
                f"Pod {name}: {wreason}: {waiting.get('message', '')}")), facts)
        return PodStatus(PodState.Scheduled, True, None, None, facts)
    if not state.get("running"):
        mounts = _events(events, MOUNT_EVENTS)
        if mounts:
            since = min((t for t in (_event_time(e) for e in mounts) if t is not None), default=now)
            if now - since >= policy.mount_grace_seconds:
                setup = [e for e in mounts if (e.get("message") or "").startswith("MountVolume")]
                msg = (setup or mounts)[-1].get("message", "")
                return PodStatus(PodState.Scheduled, True, None, (Reason.MountFailed, _clip(
                    f"Pod {name} on node {spec.get('nodeName') or status.get('hostIP', '?')}: {msg}")), facts)
        return PodStatus(PodState.Scheduled, True, None, None, facts)
    return PodStatus(PodState.Running, True, None, None, facts)
