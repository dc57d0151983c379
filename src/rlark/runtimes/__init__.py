"""Where Workers run: the Runtime protocol (:mod:`.base`) and its implementations, ``local``
(process groups on this machine: :mod:`.local`) and ``kubernetes`` (Pods: :mod:`.kubernetes`).

Outside this package a runtime's name is data only (a Run's ``runtime``, ``rlark server
--runtime``): what differs between runtimes is asked of the runtime (the controller's
:class:`~rlark.runtimes.base.Runtime`) or of its profile (the services':
:class:`~rlark.runtimes.base.RuntimeProfile`, :func:`profile`), never decided by comparing
names. Importing this package imports neither runtime.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from rlark.runtimes.base import Opened, RuntimeProfile

#: the runtimes ``rlark server --runtime`` takes
RUNTIMES = ("local", "kubernetes")
#: the runtime of a server (and of a Run) that names none
DEFAULT = "local"
#: the runtimes whose objects ``rlark render`` prints
RENDERS = ("kubernetes",)


def _profile_class(name: str | None) -> Any:
    """The :class:`~rlark.runtimes.base.RuntimeProfile` class of runtime ``name`` (None: the
    default), imported on first use.

    Raises:
        ValueError: no such runtime.
    """
    name = name or DEFAULT
    if name == "local":
        from rlark.runtimes.local.profile import LocalProfile

        return LocalProfile
    if name == "kubernetes":
        from rlark.runtimes.kubernetes.profile import KubernetesProfile

        return KubernetesProfile
    raise ValueError(f"unknown runtime {name!r}; use one of {', '.join(RUNTIMES)}")


def profile(name: str | None = None, **options: Any) -> RuntimeProfile:
    """The profile of runtime ``name`` (None: the default), made with those of ``options`` it
    takes (each runtime's are documented on its class: the local runtime's ``host``,
    ``path_reachable``, ``runtime_checks``, ``isolation``; Kubernetes' ``inventory``,
    ``pending_timeout``, ``pod_policy``, ``kube_secret_info``); the others' are ignored, so a
    caller need not know which runtime it has.

    Raises:
        ValueError: no such runtime.
    """
    cls = _profile_class(name)
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in options.items() if k in known})


def open_runtime(name: str, *, namespace: str | None = None, worker_isolation: str | None = None,
                 projects_in: Callable[[str, str], list[str]] | None = None) -> Opened:
    """Open runtime ``name`` for ``rlark server`` (settings read from the environment; see
    :func:`rlark.runtimes.local.wiring.open_local` and
    :func:`rlark.runtimes.kubernetes.wiring.open_kubernetes`). ``namespace``: Kubernetes, the
    server's; ``worker_isolation``: local, how each Worker's processes are kept together;
    ``projects_in``: Kubernetes, ``(namespace, server's namespace) -> the projects whose Runs go
    there`` (read from the store, which the runtime never touches itself).

    Raises:
        ValueError: no such runtime, or a setting is unusable (see the functions above).
    """
    _profile_class(name)
    if name == "kubernetes":
        from rlark.runtimes.kubernetes.wiring import open_kubernetes

        return open_kubernetes(namespace, projects_in or (lambda ns, server_ns: []))
    from rlark.runtimes.local.wiring import open_local

    return open_local(worker_isolation)
