"""Capacity preflight from the node inventory (pure: node and Pod objects in, Findings out).

:func:`parse_nodes` turns ``kubectl get nodes -o json`` items (and, when readable, the Pods bound
to them) into :class:`NodeInfo`: allocatable cpu (cores), memory (bytes), ``nvidia.com/gpu`` and
other extended resources (counts), labels, taints, cordon and readiness, and what running Pods
already request. :func:`check_capacity` then refuses a Worker that no node can hold and warns when
the whole Job does not fit in the free capacity now.

Kubernetes facts (https://kubernetes.io/docs/concepts/scheduling-eviction/): the scheduler
places a Pod only on a node whose *allocatable* minus the *requests* of Pods already bound there
covers the Pod's requests (limits do not count; a container with a limit and no request requests
its limit); an init container's requests count as ``max(sum(containers), max(initContainers))``;
a cordoned node (``spec.unschedulable``) takes no new Pods; a ``NoSchedule``/``NoExecute`` taint
keeps Pods that do not tolerate it away (``PreferNoSchedule`` only steers). Taints whose key is an
extended resource the Worker requests (``nvidia.com/gpu``) are treated as tolerated: clusters
that taint GPU nodes that way usually run the ExtendedResourceToleration admission plugin (GKE,
AKS), which adds the toleration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable

from kubernetes.utils.quantity import parse_quantity

from rlark.findings import Finding, Severity
from rlark.preflight.quantities import parse_cpu, parse_memory_bytes
from rlark.runtimes.kubernetes.status import PodPhase
from rlark.spec import Job, Role, Toleration

GPU = "nvidia.com/gpu"
CORE = ("cpu", "memory")
IGNORED = {"pods", "ephemeral-storage", "hugepages-1Gi", "hugepages-2Mi", "hugepages-32Mi",
           "hugepages-64Ki", "attachable-volumes-azure-disk", "attachable-volumes-aws-ebs",
           "attachable-volumes-gce-pd"}
GiB = 1024**3


@dataclass
class NodeInfo:
    """One node: allocatable and requested amounts (cpu in cores, memory in bytes, others as
    counts), labels, taints (``{"key", "value", "effect"}``), cordon and readiness."""

    name: str
    allocatable: dict[str, Decimal]
    requested: dict[str, Decimal] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    unschedulable: bool = False
    ready: bool = True

    @property
    def free(self) -> dict[str, Decimal]:
        return {r: max(Decimal(0), a - self.requested.get(r, Decimal(0)))
                for r, a in self.allocatable.items()}


def _quantity(value: Any) -> Decimal:
    """A quantity as the API gives it; 0 for what is not a finite one (never raises)."""
    try:
        q = Decimal(parse_quantity(str(value)))
    except (ValueError, ArithmeticError):
        return Decimal(0)
    return q if q.is_finite() else Decimal(0)


def pod_requests(pod: dict) -> dict[str, Decimal]:
    """What one Pod requests from its node (requests, else limits, per container; init
    containers as ``max``)."""
    spec = pod.get("spec") or {}

    def of(container: dict) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        out = {k: _quantity(v) for k, v in (res.get("limits") or {}).items()}
        out.update({k: _quantity(v) for k, v in (res.get("requests") or {}).items()})
        return out

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + _quantity(v)
    return total


def parse_nodes(nodes: Iterable[dict], pods: Iterable[dict] | None = None) -> list[NodeInfo]:
    """Node objects (+ optionally Pod objects of any namespace) -> :class:`NodeInfo`, by name.

    Pods that are Succeeded/Failed or not bound to a node do not count as requests.
    """
    out: dict[str, NodeInfo] = {}
    for node in nodes:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        alloc = {k: _quantity(v) for k, v in (status.get("allocatable") or {}).items()
                 if k not in IGNORED}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [])
        out[meta.get("name", "?")] = NodeInfo(
            name=meta.get("name", "?"),
            allocatable=alloc,
            labels=dict(meta.get("labels") or {}),
            taints=[{k: str(t.get(k, "")) for k in ("key", "value", "effect")}
                    for t in spec.get("taints") or []],
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
        )
    for pod in pods or []:
        info = out.get((pod.get("spec") or {}).get("nodeName") or "")
        ended = (pod.get("status") or {}).get("phase") in (PodPhase.Succeeded, PodPhase.Failed)
        if info is None or ended:
            continue
        for k, v in pod_requests(pod).items():
            info.requested[k] = info.requested.get(k, Decimal(0)) + v
    return sorted(out.values(), key=lambda n: n.name)


def worker_request(role: Role) -> dict[str, Decimal]:
    """What one Worker of ``role`` requests (the Pod RLark renders): cpu cores, memory bytes,
    ``nvidia.com/gpu`` and devices. Assumes quantities that passed preflight."""
    res = role.resources
    out: dict[str, Decimal] = {}
    if res.cpu is not None:
        out["cpu"] = parse_cpu(res.cpu)
    if res.memory is not None:
        out["memory"] = Decimal(parse_memory_bytes(res.memory))
    if res.gpu > 0:
        out[GPU] = Decimal(res.gpu)
    for dev, n in res.devices.items():
        if n > 0:
            out[dev] = Decimal(n)
    return out


def tolerates(tolerations: Iterable[Toleration], taint: dict[str, str]) -> bool:
    """Kubernetes' toleration matching: an empty key with ``Exists`` matches every taint; an
    empty effect matches every effect; ``Exists`` ignores the value, ``Equal`` compares it."""
    for t in tolerations:
        if t.effect and t.effect != taint.get("effect"):
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.get("key"):
                return True
        elif t.key == taint.get("key") and (t.value or "") == taint.get("value", ""):
            return True
    return False


def why_not_eligible(role: Role, node: NodeInfo) -> str | None:
    """None when the node can take the role's Pods, else a short reason: ``cordoned``, ``not
    Ready``, ``nodeSelector``, ``taint key=value:Effect``."""
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not Ready"
    if any(node.labels.get(k) != v for k, v in role.node_selector.items()):
        return "nodeSelector"
    wanted = set(worker_request(role))
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if taint.get("key") in wanted or tolerates(role.kubernetes.tolerations, taint):
            continue
        value = f"={taint['value']}" if taint.get("value") else ""
        return f"taint {taint.get('key')}{value}:{taint.get('effect')}"
    return None


def format_amount(resource: str, amount: Decimal) -> str:
    """cpu -> ``8`` / ``0.5``; memory -> ``64Gi`` / ``1.5Gi`` / bytes below 1 MiB; others as
    integers."""
    if resource == "cpu":
        return f"{float(amount):g}"
    if resource == "memory":
        if amount >= GiB:
            gib = amount / GiB
            return f"{int(gib)}Gi" if gib == gib.to_integral_value() else f"{float(gib):.1f}Gi"
        if amount >= 1024**2:
            return f"{float(amount / 1024**2):.0f}Mi"
        return f"{int(amount)}"
    return f"{int(amount) if amount == amount.to_integral_value() else float(amount)}"


def _path(i: int, resource: str) -> str:
    base = f"spec.roles[{i}].resources"
    if resource in CORE:
        return f"{base}.{resource}"
    if resource == GPU:
        return f"{base}.gpu"
    return f"{base}.devices.{resource}"


def _fits(req: dict[str, Decimal], have: dict[str, Decimal]) -> bool:
    return all(have.get(r, Decimal(0)) >= a for r, a in req.items())


def check_capacity(job: Job, nodes: list[NodeInfo], *, free_basis: str = "cluster",
                   pending_timeout: float | None = None) -> list[Finding]:
    """Findings for ``job`` against the node inventory.

    Errors (the Job is refused): a role no node may run at all (all cordoned / not Ready /
    other labels / untolerated taints), a resource amount larger than any eligible node's
    allocatable ("no node has 9 nvidia.com/gpu; the largest allocatable is 8"), a Worker whose
    amounts fit on no single node together. Warning: the whole Job does not fit in the nodes'
    free capacity now (first-fit of every Worker, largest first), so some Workers will stay
    Pending. ``free_basis`` says what "free" counted (``cluster``: every Pod; ``namespace``: only
    Pods RLark could list). With no nodes at all: one warning.
    """
    if not nodes:
        return [Finding(code="CapacityUnknown", severity=Severity.warning, path="spec.roles",
                        message="spec.roles: the cluster's node list is empty or unreadable; "
                        "capacity was not checked",
                        hint="grant the RLark ServiceAccount get/list on nodes (deploy/kubernetes)")]
    findings: list[Finding] = []
    eligible: dict[str, list[NodeInfo]] = {}
    for i, role in enumerate(job.spec.roles):
        if role.workers < 1:
            continue
        req = worker_request(role)
        reasons = {n.name: why_not_eligible(role, n) for n in nodes}
        ok = [n for n in nodes if reasons[n.name] is None]
        eligible[role.name] = ok
        if not ok:
            counts: dict[str, int] = {}
            for r in reasons.values():
                if r is None:
                    continue  # (none: no node is eligible)
                key = "taints it does not tolerate" if r and r.startswith("taint") else (
                    "other labels than its nodeSelector" if r == "nodeSelector" else r)
                counts[key] = counts.get(key, 0) + 1
            taint = next((r for r in reasons.values() if r and r.startswith("taint")), None)
            summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
            findings.append(Finding(
                code="NoEligibleNode",
                path=f"spec.roles[{i}].nodeSelector" if role.node_selector else f"spec.roles[{i}]",
                message=f"spec.roles[{i}] ({role.name}): no node may run its Workers "
                        f"({len(nodes)} nodes: {summary})" + (f"; e.g. {taint}" if taint else ""),
                hint="fix nodeSelector, add kubernetes.tolerations for the taint, or uncordon a node",
            ))
            continue
        short = False
        for res, amount in req.items():
            best = max(ok, key=lambda n: n.allocatable.get(res, Decimal(0)))
            largest = best.allocatable.get(res, Decimal(0))
            if amount > largest:
                short = True
                note = "" if largest > 0 or res in CORE else (
                    f" (no schedulable node advertises {res}"
                    + ("; is the NVIDIA device plugin installed?)" if res == GPU else ")"))
                findings.append(Finding(
                    code="ExceedsNodeCapacity", path=_path(i, res),
                    message=f"{_path(i, res)}: no node has {format_amount(res, amount)} {res}; "
                            f"the largest allocatable is {format_amount(res, largest)}"
                            + (f" (node {best.name})" if largest > 0 else "") + note,
                    hint=f"ask for at most {format_amount(res, largest)} {res} per Worker and "
                         "use more Workers, or add bigger nodes",
                ))
        if not short and not any(_fits(req, n.allocatable) for n in ok):
            want = ", ".join(f"{format_amount(r, a)} {r}" for r, a in req.items())
            findings.append(Finding(
                code="NoNodeFitsWorker", path=f"spec.roles[{i}].resources",
                message=f"spec.roles[{i}].resources: no single node has {want} together "
                        f"(checked {len(ok)} eligible nodes)",
                hint="lower one of the amounts so a node can hold a whole Worker",
            ))
    if any(f.severity == Severity.error for f in findings):
        return findings
    # the whole Job against free capacity: first-fit, largest Workers first
    free = {n.name: dict(n.free) for n in nodes}
    order = sorted(
        ((r, worker_request(r)) for r in job.spec.roles for _ in range(max(r.workers, 0))),
        key=lambda rw: tuple(-rw[1].get(k, Decimal(0)) for k in (GPU, "cpu", "memory")),
    )
    unplaced: dict[str, int] = {}
    for role, req in order:
        for n in eligible.get(role.name, []):
            have = free[n.name]
            if _fits(req, have):
                for r, a in req.items():
                    have[r] = have.get(r, Decimal(0)) - a
                break
        else:
            unplaced[role.name] = unplaced.get(role.name, 0) + 1
    if unplaced:
        total = job.total_workers
        missing = sum(unplaced.values())
        per_role = ", ".join(f"{n} of role {r}" for r, n in unplaced.items())
        wait = (f"; Workers still Pending after {pending_timeout:g} s fail the Run as Unschedulable"
                if pending_timeout else "")
        basis = "" if free_basis == "cluster" else (
            " (free capacity counted from the Pods RLark can list, its own namespace only)")
        findings.append(Finding(
            code="ExceedsFreeCapacity", severity=Severity.warning, path="spec.roles",
            message=f"spec.roles: {total - missing} of {total} Workers fit in the nodes' free "
                    f"capacity now; {per_role} would wait as Pending{basis}{wait}",
            hint="wait for running Pods to finish, lower the worker counts or resources, or add nodes",
        ))
    return findings


def node_view(node: NodeInfo) -> dict[str, Any]:
    """A node as the REST API shows it: amounts as numbers (cpu cores, memory bytes, counts)."""

    def num(d: dict[str, Decimal]) -> dict[str, float | int]:
        return {k: (int(v) if v == v.to_integral_value() else float(v)) for k, v in sorted(d.items())}

    return {
        "name": node.name,
        "ready": node.ready,
        "schedulable": not node.unschedulable,
        "labels": node.labels,
        "taints": [f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}"
                   for t in node.taints],
        "allocatable": num(node.allocatable),
        "requested": num({k: v for k, v in node.requested.items() if k in node.allocatable}),
        "free": num(node.free),
    }
