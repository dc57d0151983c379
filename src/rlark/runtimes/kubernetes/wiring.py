"""The Kubernetes runtime opened for ``rlark server``: one runtime per namespace (projects map to
namespaces), the node inventory and Secret reads for the services' checks, and what a leader's
terms need (:func:`rlark.runtimes.open_runtime`)."""

from __future__ import annotations

from typing import Callable

from rlark.runtimes.base import Opened, Runtime
from rlark.runtimes.kubernetes.profile import KubernetesProfile


def open_kubernetes(namespace: str | None, projects_in: Callable[[str, str], list[str]]) -> Opened:
    """The Kubernetes runtime of a server in ``namespace`` (default: the in-cluster
    ServiceAccount's namespace or the kubeconfig context's): every replica starts its watches
    here, so RBAC refusing them shows at start. ``projects_in(ns, server namespace)``: the
    projects whose Runs go to namespace ``ns`` (whose Secrets labelled for them their Jobs may
    name). Settings from the environment: :func:`rlark.runtimes.kubernetes.settings.status_policy`,
    :func:`~rlark.runtimes.kubernetes.settings.ray_dashboard`,
    :func:`~rlark.runtimes.kubernetes.settings.pod_policy`,
    :func:`~rlark.runtimes.kubernetes.settings.queue`,
    :func:`~rlark.runtimes.kubernetes.settings.priority_classes`,
    :func:`~rlark.runtimes.kubernetes.settings.rate_limit` (one token bucket for every request
    of every namespace's runtime).

    Raises:
        ValueError: a setting is unusable, no Kubernetes configuration, or RBAC refuses the
            watches.
    """
    from rlark.runtimes.kubernetes.client import KubeClient, KubeError, RateLimit
    from rlark.runtimes.kubernetes.namespaces import ProjectNamespaces
    from rlark.runtimes.kubernetes.runtime import KubernetesRuntime, read_secret_info
    from rlark.runtimes.kubernetes.settings import (pod_policy, priority_classes, queue,
                                                    rate_limit, ray_dashboard, status_policy)

    k8s_policy = status_policy()
    dashboard = ray_dashboard()
    policy = pod_policy()
    server_queue, classes = queue(), priority_classes()
    try:
        kube = KubeClient.connect(namespace, limit=RateLimit(*rate_limit()))
    except KubeError as exc:
        raise ValueError(str(exc)) from None

    def runtime_for(ns: str) -> KubernetesRuntime:
        return KubernetesRuntime(kube=kube.in_namespace(ns), policy=k8s_policy,
                                 ray_dashboard=dashboard, pod_policy=policy,
                                 secret_projects=lambda: projects_in(ns, kube.namespace),
                                 queue=server_queue, priority_classes=classes)

    def namespaces() -> ProjectNamespaces:
        """Every namespace's runtime (watches started: RBAC refusing them raises)."""
        return ProjectNamespaces(runtime_for(kube.namespace), runtime_for)

    try:
        first = namespaces()
    except KubeError as exc:
        raise ValueError(str(exc)) from None

    def kube_secret_info(ns: str | None, name: str):
        """The labels and key names of Kubernetes Secret ``name`` in ``ns`` (None: it does not
        exist); its values are read by the API call and dropped there."""
        return read_secret_info(kube.in_namespace(ns or kube.namespace), name)

    def shutdown(runtime: Runtime) -> None:
        if isinstance(runtime, ProjectNamespaces):
            runtime.shutdown()

    profile = KubernetesProfile(
        inventory=KubernetesRuntime(kube=kube, policy=k8s_policy, start=False).inventory,
        pending_timeout=k8s_policy.pending_timeout_seconds, pod_policy=policy,
        kube_secret_info=kube_secret_info, default_queue=server_queue, priority_classes=classes)
    return Opened(runtime=first, profile=profile, namespace=kube.namespace, fresh=namespaces,
                  lease_api=kube.api.api_client, shutdown=shutdown)
