"""An in-memory stand-in for :class:`rlark.runtimes.kubernetes.client.KubeClient`.

No Kubernetes API server can run on the machines RLark is tested on (FACTS.md), so the logic
*above* the thin client (create order, owner uids, name clashes with an earlier Run, deletes by
label) is driven through this object, which keeps the API's observable rules that logic relies
on: ``create`` answers 409 for a taken name and returns the stored object with a new
``metadata.uid``; ``get`` of a missing object is None; ``delete`` of a missing one is False;
``delete_collection`` takes an equality label selector; deleting an owner removes its dependents
(the garbage collector, at once). Every call is kept in ``calls`` as ``(verb, kind, name)``.
"""

from __future__ import annotations

import copy
import itertools
from typing import Iterator

from rlark.runtimes.kubernetes.client import KubeError


def _matches(obj: dict, selector: str | None) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKube:
    """The KubeClient calls RLark makes, against a dict of objects in one namespace."""

    def __init__(self, namespace: str = "rl"):
        self.namespace = namespace
        self.objects: dict[tuple[str, str], dict] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.logs: dict[str, list[bytes]] = {}
        self._uids = itertools.count(1)

    # --- what tests look at ------------------------------------------------------------------

    def names(self, kind: str) -> list[str]:
        return sorted(name for k, name in self.objects if k == kind)

    def obj(self, kind: str, name: str) -> dict:
        return self.objects[(kind, name)]

    def put(self, obj: dict) -> dict:
        """Store an object as if someone else had created it (no call recorded)."""
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).setdefault("uid", f"uid-{next(self._uids)}")
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj
        return obj

    # --- the KubeClient interface -------------------------------------------------------------

    def create(self, obj: dict) -> dict:
        kind, name = obj["kind"], obj["metadata"]["name"]
        self.calls.append(("create", kind, name))
        if (kind, name) in self.objects:
            raise KubeError(f"create {kind} {name}: 409 {kind.lower()}s \"{name}\" already exists", 409)
        stored = self.put(obj)
        stored["metadata"]["namespace"] = self.namespace
        return copy.deepcopy(stored)

    def get(self, kind: str, name: str) -> dict | None:
        self.calls.append(("get", kind, name))
        obj = self.objects.get((kind, name))
        return copy.deepcopy(obj) if obj is not None else None

    def _remove(self, kind: str, name: str) -> None:
        obj = self.objects.pop((kind, name))
        uid = obj["metadata"]["uid"]
        for key, other in list(self.objects.items()):  # the garbage collector
            refs = (other.get("metadata") or {}).get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs) and key in self.objects:
                self._remove(*key)

    def delete(self, kind: str, name: str, grace_seconds: int | None = None,
               propagation: str = "Background") -> bool:
        self.calls.append(("delete", kind, name))
        if (kind, name) not in self.objects:
            return False
        self._remove(kind, name)
        return True

    def delete_collection(self, kind: str, label_selector: str, grace_seconds: int | None = None) -> None:
        self.calls.append(("delete_collection", kind, label_selector))
        for (k, name), obj in list(self.objects.items()):
            if k == kind and (k, name) in self.objects and _matches(obj, label_selector):
                self._remove(k, name)

    def list(self, kind: str, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        self.calls.append(("list", kind, label_selector or ""))
        items = [copy.deepcopy(o) for (k, _), o in sorted(self.objects.items())
                 if k == kind and _matches(o, label_selector)]
        return items, "1"

    def watch(self, kind: str, resource_version: str, label_selector: str | None = None,
              field_selector: str | None = None, timeout_seconds: int = 300) -> Iterator[tuple[str, dict]]:
        return iter(())

    def log_stream(self, pod: str, container: str, since_seconds: int | None = None):
        if ("Pod", pod) not in self.objects:
            raise KubeError(f"logs of {pod}: 404 not found", 404)
        return _Stream(self.logs.get(pod, []))

    def list_nodes(self) -> list[dict]:
        return [copy.deepcopy(o) for (k, _), o in self.objects.items() if k == "Node"]

    def list_pods_everywhere(self) -> tuple[list[dict], str]:
        return self.list("Pod")[0], "cluster"


class _Stream:
    """What ``read_namespaced_pod_log(..., _preload_content=False)`` returns, for the follower."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = list(chunks)

    def stream(self, n: int) -> Iterator[bytes]:
        yield from self.chunks

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass
