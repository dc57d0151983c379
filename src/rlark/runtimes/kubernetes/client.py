"""The thin layer that talks to the Kubernetes API server (official ``kubernetes`` client).

Create, delete, list, watch, read logs: nothing else, and no decisions. Objects go in and come
out as the API's own JSON (camelCase dicts, ``_preload_content=False``), the shape
:mod:`.render` builds and :mod:`.status` / :mod:`.capacity` read.

Not unit-tested: no API server can run on the machines RLark is developed on (FACTS.md);
``scripts/k8s-smoke.sh`` exercises it against a real cluster (docs/kubernetes.md lists what was
not exercised).
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

#: kind -> the CoreV1Api method suffix
_KINDS = {
    "Pod": "pod",
    "Service": "service",
    "ConfigMap": "config_map",
    "PersistentVolumeClaim": "persistent_volume_claim",
    "Event": "event",
}


class KubeError(RuntimeError):
    """An API call failed; ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


def _error(exc: ApiException, what: str) -> KubeError:
    detail = exc.reason or ""
    try:
        body = json.loads(exc.body or "{}")
        detail = body.get("message") or detail
    except (ValueError, TypeError):
        pass
    return KubeError(f"{what}: {exc.status} {detail}", exc.status or 0)


class KubeClient:
    """CoreV1 calls in one namespace (nodes and all-namespace Pods for the inventory)."""

    def __init__(self, api: client.CoreV1Api, namespace: str):
        self.api = api
        self.namespace = namespace

    @classmethod
    def connect(cls, namespace: str | None = None, context: str | None = None) -> "KubeClient":
        """In-cluster configuration (ServiceAccount token) when running in a Pod, else the
        kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``, optional ``context``). Namespace: the
        argument, else the ServiceAccount's namespace, else the kubeconfig context's, else
        ``default``.

        Raises:
            KubeError: no usable configuration.
        """
        try:
            config.load_incluster_config()
            in_cluster = True
        except config.ConfigException:
            in_cluster = False
            try:
                config.load_kube_config(context=context)
            except (config.ConfigException, OSError) as exc:
                raise KubeError(
                    f"no Kubernetes configuration: not in a Pod and no usable kubeconfig ({exc})"
                ) from None
        if namespace is None:
            if in_cluster and os.path.exists(SA_NAMESPACE):
                with open(SA_NAMESPACE) as f:
                    namespace = f.read().strip()
            else:
                try:
                    _, current = config.list_kube_config_contexts()
                    namespace = (current or {}).get("context", {}).get("namespace")
                except (config.ConfigException, OSError):
                    namespace = None
        return cls(client.CoreV1Api(), namespace or "default")

    def _call(self, what: str, fn, *args, **kwargs) -> Any:
        try:
            resp = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise _error(exc, what) from None
        except Exception as exc:  # urllib3 connection errors and the like
            raise KubeError(f"{what}: {exc}") from None
        return json.loads(resp.data) if resp.data else {}

    def create(self, obj: dict) -> dict:
        """Create a namespaced object; returns it as stored (with ``metadata.uid``).

        Raises:
            KubeError: status 409 when it exists, 403 when RBAC forbids it...
        """
        kind = obj["kind"]
        fn = getattr(self.api, f"create_namespaced_{_KINDS[kind]}")
        return self._call(f"create {kind} {obj['metadata']['name']}", fn, self.namespace, obj)

    def get(self, kind: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        fn = getattr(self.api, f"read_namespaced_{_KINDS[kind]}")
        try:
            return self._call(f"read {kind} {name}", fn, name, self.namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, kind: str, name: str, grace_seconds: int | None = None,
               propagation: str = "Background") -> bool:
        """Delete one object; False when it was already gone."""
        fn = getattr(self.api, f"delete_namespaced_{_KINDS[kind]}")
        body: dict[str, Any] = {"propagationPolicy": propagation}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            self._call(f"delete {kind} {name}", fn, name, self.namespace, body=body)
            return True
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise

    def delete_collection(self, kind: str, label_selector: str, grace_seconds: int | None = None) -> None:
        """Delete every object of ``kind`` matching ``label_selector`` in the namespace."""
        fn = getattr(self.api, f"delete_collection_namespaced_{_KINDS[kind]}")
        kwargs: dict[str, Any] = {"label_selector": label_selector, "propagation_policy": "Background"}
        if grace_seconds is not None:
            kwargs["grace_period_seconds"] = grace_seconds
        self._call(f"delete {kind}s {label_selector}", fn, self.namespace, **kwargs)

    def list(self, kind: str, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        """``(items, resourceVersion)`` of a namespaced list."""
        fn = getattr(self.api, f"list_namespaced_{_KINDS[kind]}")
        kwargs = {k: v for k, v in (("label_selector", label_selector),
                                    ("field_selector", field_selector)) if v}
        data = self._call(f"list {kind}s", fn, self.namespace, **kwargs)
        return data.get("items") or [], (data.get("metadata") or {}).get("resourceVersion", "")

    def watch(self, kind: str, resource_version: str, label_selector: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> Iterator[tuple[str, dict]]:
        """``(type, object)`` for every change after ``resource_version`` (ADDED, MODIFIED,
        DELETED, BOOKMARK) until the server ends the watch (``timeout_seconds``).

        Raises:
            KubeError: status 410 when ``resource_version`` is too old (list again).
        """
        fn = getattr(self.api, f"list_namespaced_{_KINDS[kind]}")
        kwargs = {k: v for k, v in (("label_selector", label_selector),
                                    ("field_selector", field_selector)) if v}
        w = watch.Watch()
        try:
            for event in w.stream(fn, self.namespace, resource_version=resource_version,
                                  timeout_seconds=timeout_seconds, allow_watch_bookmarks=True,
                                  deserialize=False, **kwargs):
                yield event["type"], event["object"]
        except ApiException as exc:
            raise _error(exc, f"watch {kind}s") from None
        except KubeError:
            raise
        except Exception as exc:
            raise KubeError(f"watch {kind}s: {exc}") from None
        finally:
            w.stop()

    def log_stream(self, pod: str, container: str, since_seconds: int | None = None):
        """Follow a container's log with timestamps (``kubectl logs -f --timestamps``).

        Returns the urllib3 response: iterate ``.stream(n)`` for bytes, ``.close()`` to stop.
        Raises:
            KubeError: 400 while the container has not started, 404 when the Pod is gone.
        """
        kwargs: dict[str, Any] = {"container": container, "follow": True, "timestamps": True,
                                  "_preload_content": False}
        if since_seconds is not None:
            kwargs["since_seconds"] = max(1, int(since_seconds))
        try:
            return self.api.read_namespaced_pod_log(pod, self.namespace, **kwargs)
        except ApiException as exc:
            raise _error(exc, f"logs of {pod}") from None
        except Exception as exc:
            raise KubeError(f"logs of {pod}: {exc}") from None

    def list_nodes(self) -> list[dict]:
        """Every Node object."""
        return self._call("list nodes", self.api.list_node).get("items") or []

    def list_pods_everywhere(self) -> tuple[list[dict], str]:
        """Pods of every namespace (for free capacity), ``("cluster")``; when RBAC allows only
        this namespace, its Pods and ``"namespace"``."""
        try:
            data = self._call("list pods (all namespaces)", self.api.list_pod_for_all_namespaces,
                              field_selector="status.phase!=Succeeded,status.phase!=Failed")
            return data.get("items") or [], "cluster"
        except KubeError as exc:
            if exc.status != 403:
                raise
        items, _ = self.list("Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
        return items, "namespace"
