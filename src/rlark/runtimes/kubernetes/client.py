"""The thin layer that talks to the Kubernetes API server (official ``kubernetes`` client).

Create, read, delete, list, watch, read logs: nothing else, and no decisions. Objects go in and
come out as the API's own JSON (camelCase dicts, ``_preload_content=False``), the shape
:mod:`.render` builds and :mod:`.status` / :mod:`.capacity` read.

Tested against a real control plane (kube-apiserver, etcd, controller-manager, scheduler and
kwok Nodes: ``scripts/k8s-testbed``, ``tests/test_k8s_client.py``).
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.watch.watch import iter_resp_lines

if TYPE_CHECKING:
    from rlark.runtimes.kubernetes.logreader import AsyncLogReader

#: Where Kubernetes mounts a Pod's ServiceAccount credentials (``token``, ``ca.crt``,
#: ``namespace``): https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/.
#: :meth:`KubeClient.connect` reads it at call time, so tests can point it at a directory of
#: their own.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

#: seconds to open a connection, and to wait for the answer of an ordinary (non-streaming) call
CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 60.0
#: a watch's read timeout beyond its own ``timeoutSeconds`` (the server ends it then; a silent
#: connection is given up this much later)
WATCH_READ_SLACK = 30.0
#: connections kept per API server by the official client (watches and calls)
POOL_SIZE = 128

#: kind -> the CoreV1Api method suffix
_KINDS = {
    "Pod": "pod",
    "Service": "service",
    "ConfigMap": "config_map",
    "PersistentVolumeClaim": "persistent_volume_claim",
    "Event": "event",
    "Secret": "secret",
    "NetworkPolicy": "network_policy",
}
#: kinds of another API group than core/v1: kind -> the KubeClient attribute of its API
_GROUP_API = {"NetworkPolicy": "networking"}
#: Kueue's kinds (custom resources, CustomObjectsApi): kind -> (group, version, plural), as
#: Kueue v0.17 serves them (config/components/crd/bases: kueue.x-k8s.io_workloads.yaml,
#: kueue.x-k8s.io_localqueues.yaml)
_CUSTOM = {
    "Workload": ("kueue.x-k8s.io", "v1beta2", "workloads"),
    "LocalQueue": ("kueue.x-k8s.io", "v1beta2", "localqueues"),
}

#: where a 403 sends a person: the RBAC rules RLark's ServiceAccount is given
RBAC_HINT = "RLark's RBAC rules: deploy/kubernetes/rbac.yaml, project-namespace.example.yaml"


#: requests per second and burst of a client's token bucket (``--k8s-qps``, ``--k8s-burst``):
#: the KubeRay operator's defaults since v1.5 (ray-operator/apis/config/v1alpha1/defaults.go),
#: so both ask the same of an API server
DEFAULT_QPS, DEFAULT_BURST = 100.0, 200


class RateLimit:
    """A token bucket shared by every API request of a server (the official Python client has
    none; client-go's ``QPS``/``Burst`` are the model): on average at most ``qps`` requests a
    second, ``burst`` at once after a quiet spell; a request that can wait takes only a spare
    token (:meth:`take_spare`). Thread-safe; ``now`` (a monotonic clock in seconds) is
    injectable for tests.

    Raises:
        ValueError: ``qps`` not above 0 or ``burst`` below 1.
    """

    def __init__(self, qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST, now=time.monotonic):
        if not qps > 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, not qps={qps} burst={burst}")
        self.qps, self.burst, self.now = float(qps), int(burst), now
        self._tokens, self._at = float(burst), now()
        self._lock = threading.Lock()
        self._batch = threading.Lock()  # one batch request polls for a spare token at a time
        #: requests paced; of them, those that had to wait, and the seconds they waited in all
        self.taken, self.waited, self.waited_s = 0, 0, 0.0

    def reserve(self) -> float:
        """Take a token for one request now; returns the seconds to wait before sending it (0:
        at once). Requests that come while the bucket is empty queue up behind each other."""
        with self._lock:
            t = self.now()
            self._tokens = min(float(self.burst), self._tokens + (t - self._at) * self.qps)
            self._at = t
            self._tokens -= 1.0
            self.taken += 1
            delay = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            if delay > 0:
                self.waited += 1
                self.waited_s += delay
            return delay

    def take_spare(self, keep: float = 0.0) -> float:
        """Take a token only if one is free now with ``keep`` more left over (at most ``burst - 1``:
        all a bucket can hold), never going into debt: 0.0 when taken, else the seconds until
        one would be (nothing taken). For requests
        that can wait behind the others: a log stream opened a few seconds later loses nothing
        (it resumes from its cursor), a Pod created later delays the whole launch; at 1,000 Pods
        the log streams of the first Pods took half of the bucket while the rest were created."""
        keep = min(keep, self.burst - 1.0)  # a small bucket never holds 1 + keep
        with self._lock:
            t = self.now()
            self._tokens = min(float(self.burst), self._tokens + (t - self._at) * self.qps)
            self._at = t
            if self._tokens >= 1.0 + keep:
                self._tokens -= 1.0
                self.taken += 1
                return 0.0
            return (1.0 + keep - self._tokens) / self.qps

    def wait_batch(self) -> None:
        """Block until a spare token is taken (:meth:`take_spare`), one such waiter at a time:
        for the requests of a large batch (a launch's Pods after its first). They never put
        the bucket into debt, so any other request (a small Job's launch, a stop, a read) waits
        for at most one token, not behind every Pod of the batch in flight: 16 at once made a
        Job of one Worker wait about 0.16 s per request during a launch of 1,000 (issue 23)."""
        with self._batch:
            while (delay := self.take_spare()) > 0:
                time.sleep(delay)

    def wait(self) -> None:
        """Block until one more request may be sent (:meth:`reserve`)."""
        delay = self.reserve()
        if delay > 0:
            time.sleep(delay)


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
    hint = f" ({RBAC_HINT})" if exc.status == 403 else ""
    return KubeError(f"{what}: {exc.status} {detail}{hint}", exc.status or 0)


def abort(resp) -> None:
    """End a streaming response (a watch, a followed log) from another thread: its socket is
    shut down, so the thread reading it gets end-of-stream at once. (``resp.close()`` would
    wait for that read to return, which on a quiet stream may be never.) The reading thread
    then closes the response itself (:func:`release`)."""
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass


def release(resp) -> None:
    """Close a streaming response in the thread that read it (its connection is not reused)."""
    for step in (resp.close, resp.release_conn):
        try:
            step()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass


def call(what: str, fn, *args, timeout: tuple[float, float] = (CONNECT_TIMEOUT, REQUEST_TIMEOUT),
         **kwargs) -> Any:
    """``fn(*args, **kwargs)``, a method of one of the official client's APIs, with the answer as
    the API's own JSON and ``timeout`` (connect, read) seconds.

    Raises:
        KubeError: the call failed; ``what`` (e.g. ``read Pod x``) begins its message.
    """
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        raise _error(exc, what) from None
    except Exception as exc:  # urllib3 connection errors and the like
        raise KubeError(f"{what}: {type(exc).__name__}: {exc}") from None
    return json.loads(resp.data) if resp.data else {}


class WatchStream:
    """One open watch: iterate for ``(type, object)`` (ADDED, MODIFIED, DELETED, BOOKMARK) until
    the server ends it; :meth:`close` (from any thread) ends it early.

    Raises (while iterating):
        KubeError: status 410 when the watch's resourceVersion is too old (list again), the
            status of any other ``ERROR`` event, 0 when the connection broke.
    """

    def __init__(self, resp, what: str):
        self._resp = resp
        self.what = what
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        try:
            for line in iter_resp_lines(self._resp):
                if not line.strip():
                    continue
                event = json.loads(line)
                typ, obj = event.get("type"), event.get("object") or {}
                if typ == "ERROR":  # a Status object: 410 Gone, 500...
                    code = int(obj.get("code") or 0)
                    raise KubeError(f"{self.what}: {code} {obj.get('message') or obj.get('reason')}", code)
                yield typ, obj
        except KubeError:
            raise
        except Exception as exc:  # urllib3 errors, a broken connection, bad JSON
            if not self._closed.is_set():
                raise KubeError(f"{self.what}: {type(exc).__name__}: {exc}") from None
        finally:
            self._closed.set()
            release(self._resp)

    def close(self) -> None:
        """End the watch (from any thread; the iterating thread then stops quietly)."""
        if self._closed.is_set():
            return
        self._closed.set()
        abort(self._resp)


class KubeClient:
    """CoreV1 calls in one namespace (nodes and all-namespace Pods for the inventory), and
    NetworkingV1 for NetworkPolicies (the same connection)."""

    def __init__(self, api: client.CoreV1Api, namespace: str, limit: RateLimit | None = None):
        self.api = api
        #: paces every request of this client (share one among a server's clients); None: none
        self.limit = limit
        self.networking = client.NetworkingV1Api(api.api_client)
        self.custom = client.CustomObjectsApi(api.api_client)
        self.namespace = namespace

    def _fn(self, verb: str, kind: str):
        """The official client's method ``<verb>_<kind suffix>`` of the API ``kind`` is in."""
        api = getattr(self, _GROUP_API.get(kind, "api"))
        return getattr(api, f"{verb}_{_KINDS[kind]}")

    @classmethod
    def connect(cls, namespace: str | None = None, context: str | None = None,
                kubeconfig: str | None = None, limit: RateLimit | None = None) -> "KubeClient":
        """In-cluster configuration when running in a Pod (the ServiceAccount's token and CA in
        :data:`SERVICE_ACCOUNT_DIR`, the API server from ``$KUBERNETES_SERVICE_HOST`` and
        ``$KUBERNETES_SERVICE_PORT``), else a kubeconfig (``kubeconfig``, else ``$KUBECONFIG``,
        else ``~/.kube/config``; its ``context`` or its current one). Namespace: the argument,
        else the ServiceAccount's (``SERVICE_ACCOUNT_DIR/namespace``), else the kubeconfig
        context's, else ``default``. The configuration is this client's own (the ``kubernetes``
        package's global default is left alone). A rotated ServiceAccount token is re-read.

        Raises:
            KubeError: no usable configuration (both reasons named).
        """
        configuration = client.Configuration()
        sa_dir = SERVICE_ACCOUNT_DIR
        # read now: the kubernetes package reads $KUBECONFIG once, when it is imported
        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        in_cluster = True
        try:
            InClusterConfigLoader(token_filename=os.path.join(sa_dir, "token"),
                                  cert_filename=os.path.join(sa_dir, "ca.crt")).load_and_set(configuration)
        except ConfigException as exc:
            in_cluster, why_not = False, exc
            try:
                config.load_kube_config(config_file=kubeconfig, context=context,
                                        client_configuration=configuration)
            except (ConfigException, OSError, ValueError) as exc2:
                raise KubeError(f"no Kubernetes configuration: not in a Pod ({why_not}; "
                                f"{sa_dir}) and no usable kubeconfig ({exc2})") from None
        if namespace is None:
            if in_cluster:
                try:
                    with open(os.path.join(sa_dir, "namespace")) as f:
                        namespace = f.read().strip() or None
                except OSError:
                    namespace = None
            else:
                try:
                    contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
                    chosen = next((c for c in contexts if c.get("name") == context), None) if context \
                        else current
                    namespace = ((chosen or {}).get("context") or {}).get("namespace")
                except (ConfigException, OSError, ValueError):
                    namespace = None
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, POOL_SIZE)
        return cls(client.CoreV1Api(client.ApiClient(configuration)), namespace or "default", limit)

    def in_namespace(self, namespace: str) -> "KubeClient":
        """A client of the same connection and rate limit for ``namespace``."""
        return KubeClient(self.api, namespace, self.limit)

    def _pace(self, batch: bool = False) -> None:
        if self.limit is not None:
            self.limit.wait_batch() if batch else self.limit.wait()

    def _call(self, what: str, fn, *args, **kwargs) -> Any:
        self._pace()
        return call(what, fn, *args, **kwargs)

    def create(self, obj: dict, batch: bool = False) -> dict:
        """Create a namespaced object; returns it as stored (with ``metadata.uid``). ``batch``:
        one of many (a launch's Pods after its first), paced behind every other request
        (:meth:`RateLimit.wait_batch`).

        Raises:
            KubeError: status 409 when the name is taken, 403 when RBAC forbids it...
        """
        kind = obj["kind"]
        fn = self._fn("create_namespaced", kind)
        self._pace(batch)
        return call(f"create {kind} {obj['metadata']['name']}", fn, self.namespace, obj)

    def get(self, kind: str, name: str) -> dict | None:
        """The object, or None when it does not exist (for Kueue's kinds also when Kueue's API
        is not served at all: the API server answers 404 to both)."""
        try:
            if kind in _CUSTOM:
                return self._call(f"read {kind} {name}", self.custom.get_namespaced_custom_object,
                                  *_CUSTOM[kind][:2], self.namespace, _CUSTOM[kind][2], name)
            fn = self._fn("read_namespaced", kind)
            return self._call(f"read {kind} {name}", fn, name, self.namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def get_path(self, what: str, path: str, timeout: float = REQUEST_TIMEOUT,
                 query: builtins.list[tuple[str, str]] | None = None) -> dict:
        """GET ``path`` (an API path such as an aggregated API's subresource, which the
        generated methods would escape) with this client's credentials, as JSON, within
        ``timeout`` seconds (connect and read each).

        Raises:
            KubeError: the call failed (``what`` begins its message; its HTTP status).
        """
        return self._call(what, self.api.api_client.call_api, path, "GET", query_params=query or [],
                          header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                          _return_http_data_only=True, timeout=(min(CONNECT_TIMEOUT, timeout), timeout))

    def delete(self, kind: str, name: str, grace_seconds: int | None = None,
               propagation: str = "Background", uid: str | None = None) -> bool:
        """Delete one object (``grace_seconds``: None for the object's own grace period, 0 to
        remove a Pod from the API at once); False when it was already gone. ``uid``: only the
        object with that uid (a precondition the API server checks: an object made meanwhile
        under the same name is not touched, and False is returned as for one gone)."""
        fn = self._fn("delete_namespaced", kind)
        body: dict[str, Any] = {"propagationPolicy": propagation}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        try:
            self._call(f"delete {kind} {name}", fn, name, self.namespace, body=body)
            return True
        except KubeError as exc:
            if exc.status == 404 or (exc.status == 409 and uid is not None):
                return False
            raise

    def delete_collection(self, kind: str, label_selector: str, grace_seconds: int | None = None) -> None:
        """Delete every object of ``kind`` matching ``label_selector`` in the namespace."""
        fn = self._fn("delete_collection_namespaced", kind)
        kwargs: dict[str, Any] = {"label_selector": label_selector, "propagation_policy": "Background"}
        if grace_seconds is not None:
            kwargs["grace_period_seconds"] = grace_seconds
        self._call(f"delete {kind}s {label_selector}", fn, self.namespace, **kwargs)

    def list(self, kind: str, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[builtins.list[dict], str]:
        """``(items, resourceVersion)`` of a namespaced list."""
        kwargs = {k: v for k, v in (("label_selector", label_selector),
                                    ("field_selector", field_selector)) if v}
        if kind in _CUSTOM:
            group, version, plural = _CUSTOM[kind]
            data = self._call(f"list {kind}s", self.custom.list_namespaced_custom_object, group,
                              version, self.namespace, plural, **kwargs)
        else:
            data = self._call(f"list {kind}s", self._fn("list_namespaced", kind), self.namespace,
                              **kwargs)
        return data.get("items") or [], (data.get("metadata") or {}).get("resourceVersion", "")

    def watch(self, kind: str, resource_version: str, label_selector: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> WatchStream:
        """Open a watch of every change after ``resource_version``, with BOOKMARK events
        (``allowWatchBookmarks``: the server tells the current resourceVersion now and then,
        also when nothing selected changed, so a watch resumed from it is not too old); the
        server ends it after ``timeout_seconds``.

        Raises:
            KubeError: at once when the watch cannot be opened (403: RBAC; 0: no connection);
                while iterating, see :class:`WatchStream`.
        """
        kwargs = {k: v for k, v in (("label_selector", label_selector),
                                    ("field_selector", field_selector)) if v}
        if kind in _CUSTOM:
            group, version, plural = _CUSTOM[kind]
            custom = self.custom.list_namespaced_custom_object

            def fn(namespace, **kw):
                return custom(group, version, namespace, plural, **kw)
        else:
            fn = getattr(self.api, f"list_namespaced_{_KINDS[kind]}")
        what = f"watch {kind}s"
        self._pace()
        try:
            resp = fn(self.namespace, watch=True, resource_version=resource_version,
                      allow_watch_bookmarks=True, timeout_seconds=timeout_seconds,
                      _preload_content=False,
                      _request_timeout=(CONNECT_TIMEOUT, timeout_seconds + WATCH_READ_SLACK), **kwargs)
        except ApiException as exc:
            raise _error(exc, what) from None
        except Exception as exc:
            raise KubeError(f"{what}: {type(exc).__name__}: {exc}") from None
        return WatchStream(resp, what)

    def log_stream(self, pod: str, container: str, since_seconds: int | None = None):
        """Follow a container's log with timestamps (``kubectl logs -f --timestamps``).

        Returns the urllib3 response: iterate ``.stream(n)`` for bytes, ``.close()`` to stop.
        Raises:
            KubeError: 400 while the container has not started, 404 when the Pod is gone, 403
                when RBAC forbids ``pods/log``.
        """
        kwargs: dict[str, Any] = {"container": container, "follow": True, "timestamps": True,
                                  "_preload_content": False,
                                  # a quiet log may stay quiet for long: no read timeout
                                  "_request_timeout": (CONNECT_TIMEOUT, None)}
        if since_seconds is not None:
            kwargs["since_seconds"] = max(1, int(since_seconds))
        self._pace()
        try:
            return self.api.read_namespaced_pod_log(pod, self.namespace, **kwargs)
        except ApiException as exc:
            raise _error(exc, f"logs of Pod {pod}") from None
        except Exception as exc:
            raise KubeError(f"logs of Pod {pod}: {type(exc).__name__}: {exc}") from None

    def log_reader(self) -> "AsyncLogReader":
        """A reader of followed Pod logs for one asyncio loop (:class:`.logreader.AsyncLogReader`),
        with this client's server, credentials and namespace. Create and use it in that loop."""
        from rlark.runtimes.kubernetes.logreader import AsyncLogReader

        return AsyncLogReader(self.api.api_client.configuration, self.namespace, self.limit)

    def list_nodes(self) -> builtins.list[dict]:
        """Every Node object."""
        return self._call("list nodes", self.api.list_node).get("items") or []

    def list_pods_everywhere(self) -> tuple[builtins.list[dict], str]:
        """Pods of every namespace that are not finished (for free capacity) and ``"cluster"``;
        when RBAC allows only this namespace (403), its Pods and ``"namespace"``."""
        try:
            data = self._call("list pods (all namespaces)", self.api.list_pod_for_all_namespaces,
                              field_selector="status.phase!=Succeeded,status.phase!=Failed")
            return data.get("items") or [], "cluster"
        except KubeError as exc:
            if exc.status != 403:
                raise
        items, _ = self.list("Pod", field_selector="status.phase!=Succeeded,status.phase!=Failed")
        return items, "namespace"
