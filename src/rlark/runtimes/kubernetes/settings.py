"""The Kubernetes runtime's settings, from the server's environment (``rlark server`` sets the
variables from its options): how long Kubernetes may retry before RLark names a failure, Ray's
dashboard on head Pods, and what Worker Pods may ask for.
"""

from __future__ import annotations

import os

from rlark.runtimes.kubernetes.podpolicy import PodPolicy
from rlark.runtimes.kubernetes.status import StatusPolicy
from rlark.settings import bool_env, csv_env, positive_int_env, seconds_env


def status_policy() -> StatusPolicy:
    """Kubernetes runtime: how long Kubernetes may retry before RLark names a failure.

    ``RLARK_K8S_PENDING_TIMEOUT`` (default 300 s; a Pod still unscheduled then fails the Run as
    ``Unschedulable``; capped per Job at 0.9 x its joinTimeoutSeconds), ``RLARK_K8S_IMAGE_PULL_GRACE``
    (30 s of ErrImagePull/ImagePullBackOff before ``ImagePull``), ``RLARK_K8S_MOUNT_GRACE`` (60 s
    of FailedMount before ``MountFailed``).

    Raises:
        ValueError: a value is not a positive number.
    """
    return StatusPolicy(
        image_pull_grace_seconds=seconds_env("RLARK_K8S_IMAGE_PULL_GRACE", 30.0),
        mount_grace_seconds=seconds_env("RLARK_K8S_MOUNT_GRACE", 60.0),
        pending_timeout_seconds=seconds_env("RLARK_K8S_PENDING_TIMEOUT", 300.0),
    )


def ray_dashboard() -> bool:
    """``RLARK_K8S_RAY_DASHBOARD=1`` starts Ray's dashboard on each head Pod (port 8265 of the
    head Service; the image needs ``ray[default]``)."""
    return os.environ.get("RLARK_K8S_RAY_DASHBOARD", "") == "1"


def pod_policy() -> PodPolicy:
    """Kubernetes runtime: what Worker Pods may ask for beyond the secure defaults
    (:class:`rlark.runtimes.kubernetes.podpolicy.PodPolicy`; docs/security.md):

    * ``RLARK_K8S_ALLOW_ROOT=1`` (``rlark server --k8s-allow-root``): a role may set
      ``kubernetes.runAsRoot`` (default: refused at preflight);
    * ``RLARK_K8S_HOST_PATH_PREFIXES``: comma-separated absolute directories a ``hostPath``
      mount may lie under (``--k8s-host-path-prefix DIR``; default none: no hostPath at all);
    * ``RLARK_K8S_SERVICE_ACCOUNTS``: comma-separated ServiceAccount names a role may name in
      ``kubernetes.serviceAccountName`` (``--k8s-service-account NAME``; default none: the
      namespace's ``default``);
    * ``RLARK_K8S_RUN_AS_USER``: the user id Workers run as when their role names none
      (default 1000);
    * ``RLARK_K8S_CSI_DRIVERS``: comma-separated CSI drivers an objectStorage mount may name in
      ``kubernetes.csiDriver`` (``--k8s-csi-driver NAME``; default none: no inline CSI volumes);
    * ``RLARK_K8S_STORAGE_CLASSES``: comma-separated StorageClasses an objectStorage mount may
      name in ``kubernetes.storageClass`` (``--k8s-storage-class NAME``; default none);
    * ``RLARK_K8S_TOLERATIONS``: comma-separated ``KEY[=VALUE][:EFFECT]`` entries (or ``*``)
      covering the tolerations a role may have (``--k8s-toleration``; default none).

    Raises:
        ValueError: a value is unusable (a prefix that is relative or a system directory, a
            ServiceAccount or StorageClass name that is not a DNS-1123 subdomain, a CSI driver
            or toleration entry that is not one, a user id below 1).
    """
    return PodPolicy.checked(
        allow_root=bool_env("RLARK_K8S_ALLOW_ROOT"),
        host_path_prefixes=tuple(csv_env("RLARK_K8S_HOST_PATH_PREFIXES")),
        service_accounts=tuple(csv_env("RLARK_K8S_SERVICE_ACCOUNTS")),
        run_as_user=positive_int_env("RLARK_K8S_RUN_AS_USER", 1000),
        csi_drivers=tuple(csv_env("RLARK_K8S_CSI_DRIVERS")),
        storage_classes=tuple(csv_env("RLARK_K8S_STORAGE_CLASSES")),
        tolerations=tuple(csv_env("RLARK_K8S_TOLERATIONS")),
    )


def queue() -> str | None:
    """``RLARK_K8S_QUEUE`` (``rlark server --k8s-queue NAME``): the Kueue LocalQueue of the
    projects that name none; unset or ``none``: no queue.

    Raises:
        ValueError: not a LocalQueue name (:func:`.kueue.check_queue_name`).
    """
    from rlark.runtimes.kubernetes.kueue import check_queue_name

    raw = os.environ.get("RLARK_K8S_QUEUE", "").strip()
    if not raw:
        return None
    try:
        return check_queue_name(raw)
    except ValueError as exc:
        raise ValueError(f"RLARK_K8S_QUEUE (--k8s-queue): {exc}") from None


def priority_classes() -> dict[str, int]:
    """``RLARK_K8S_PRIORITY_CLASSES`` (``--k8s-priority-class NAME=VALUE``, comma-separated):
    Kueue WorkloadPriorityClass name -> its value, as the cluster's administrator made them
    (``kubectl get workloadpriorityclasses``): a queued Run of ``spec.priority`` VALUE names
    class NAME (:func:`.kueue.priority_class`).

    Raises:
        ValueError: an entry is not ``NAME=VALUE`` with a DNS-1123 subdomain and a whole number,
            or two entries name one class.
    """
    from rlark.names import DNS1123_SUBDOMAIN

    out: dict[str, int] = {}
    for item in csv_env("RLARK_K8S_PRIORITY_CLASSES"):
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            number = int(value.strip()) if sep else None
        except ValueError:
            number = None
        if number is None or not DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
            raise ValueError(f"RLARK_K8S_PRIORITY_CLASSES (--k8s-priority-class): {item!r} is not "
                             "NAME=VALUE (a WorkloadPriorityClass name and its whole-number value)")
        if name in out:
            raise ValueError(f"RLARK_K8S_PRIORITY_CLASSES (--k8s-priority-class): class {name!r} "
                             "is given twice")
        out[name] = number
    return out


def rate_limit() -> tuple[float, int]:
    """``(qps, burst)`` of the token bucket every Kubernetes API request of the server passes
    (:class:`.client.RateLimit`): ``RLARK_K8S_QPS`` (``--k8s-qps``, requests per second on
    average, default 100) and ``RLARK_K8S_BURST`` (``--k8s-burst``, requests at once after a
    quiet spell, default 200): the KubeRay operator's defaults.

    Raises:
        ValueError: a value is not a positive number (QPS) or whole number (burst).
    """
    from rlark.runtimes.kubernetes.client import DEFAULT_BURST, DEFAULT_QPS

    return (seconds_env("RLARK_K8S_QPS", DEFAULT_QPS, unit=" (requests per second)"),
            positive_int_env("RLARK_K8S_BURST", DEFAULT_BURST))
