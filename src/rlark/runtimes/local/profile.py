"""The local runtime's profile: what the services ask of it before and after a Run
(:class:`rlark.runtimes.base.RuntimeProfile`). Workers run on this machine, read its files and
pull no image; this machine is the one node, and what is left of a Run's outputs can be looked
at here.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Callable

from rlark import settings
from rlark.findings import Finding
from rlark.rlinf_config.locations import Filesystem
from rlark.runtimes.local.outputs import output_probes, server_dir
from rlark.runtimes.local import volumes
from rlark.runtimes.local.preflight import check_for_local_runtime, host_capacity, local_request
from rlark.spec import Job


def local_node(hostname: str, host: dict[str, float], requests: list[dict[str, float]]) -> dict[str, Any]:
    """This machine as :meth:`rlark.services.jobs.JobService.nodes` lists it: ``host`` is its
    capacity (:func:`rlark.runtimes.local.preflight.host_capacity`: cpu cores, memory bytes, gpu
    count), ``requests`` what each active local Job asks for
    (:func:`rlark.runtimes.local.preflight.local_request`); free never goes below 0."""
    keys = (("cpu", "cpu"), ("memory", "memory"), ("nvidia.com/gpu", "gpu"))
    alloc = {k: host[h] if k == "cpu" else int(host[h]) for k, h in keys}
    requested = {k: sum(r[h] for r in requests) for k, h in keys}
    requested = {k: v if k == "cpu" else int(v) for k, v in requested.items()}
    return {"name": hostname, "ready": True, "schedulable": True, "labels": {}, "taints": [],
            "allocatable": alloc, "requested": requested,
            "free": {k: max(alloc[k] - requested[k], 0) for k in alloc}}


@dataclass
class LocalProfile:
    """The local runtime's :class:`~rlark.runtimes.base.RuntimeProfile`.

    ``host``: this machine's capacity (:func:`host_capacity`; None: measured when asked);
    ``path_reachable``: whether the Workers may see a path at all
    (:meth:`rlark.runtimes.local.runtime.LocalRuntime.path_reachable`; what they may not,
    preflight never says exists or not); ``runtime_checks``: the runtime's own Findings for a
    Job (who its Workers run as, what of this machine they may read:
    :meth:`~rlark.runtimes.local.runtime.LocalRuntime.preflight`); ``isolation``: what
    isolation Workers get (:meth:`rlark.runtimes.local.isolation.Isolation.view`, shown with
    the node); ``home``: the ``$RLARK_HOME`` whose volumes it lists (None: the server's)."""

    host: dict[str, float] | None = None
    path_reachable: Callable[[str], bool] | None = None
    runtime_checks: Callable[[Job], list[Finding]] | None = None
    isolation: dict[str, Any] | None = None
    #: where the volumes are: ``$RLARK_HOME`` (None: :func:`rlark.settings.rlark_home` when asked)
    home: str | None = None

    name = "local"
    #: Runs wait in this machine's own admission queue; there is no queue of a cluster to name
    queues = False
    default_queue: str | None = None
    here_only = True
    own_secrets = False
    namespaced = False
    leader_election = False
    filesystem = Filesystem(persistent=True, why="local runtime: this machine's own filesystem",
                            host_paths_at_source=True)
    record_notes = ("local runtime: images are recorded, not pulled; each Worker ran with the "
                    "Python environment named in its facts (python_executable)",)
    pulls_images = False

    def queue_of(self, project_queue: str | None) -> str | None:
        """None: Runs wait in this machine's own admission queue, which has no name."""
        return None

    def check_queue(self, name: str) -> str:
        """Refuses every name: this runtime has no queue of a cluster to name.

        Raises:
            ValueError: always.
        """
        raise ValueError("this server runs Workers on this machine (local runtime), whose Runs "
                         "wait in its own admission queue (by spec.priority, then age); a "
                         "project's queue names a Kueue LocalQueue on Kubernetes")

    def preflight(self, job: Job, *, errors: bool,
                  neighbours: Callable[[], list[tuple[str, str, dict[str, Any]]]]) -> list[Finding]:
        """:func:`check_for_local_runtime`, then :attr:`runtime_checks`."""
        from rlark.runtimes.local.objects import fuse_problem
        from rlark.runtimes.local.settings import s3fs_path

        # probed at each submit: s3fs installed or removed while the server runs counts
        out = check_for_local_runtime(job, self.host, self.path_reachable,
                                      fuse=fuse_problem(s3fs_path()))
        if self.runtime_checks is not None:
            out = out + self.runtime_checks(job)
        return out

    def launch_findings(self, job: Job, secret_findings: Callable[[], list[Finding]]) -> list[Finding]:
        """Nothing: what a submit checked holds at launch."""
        return []

    def queue_findings(self, job: Job, queue: str | None) -> list[Finding]:
        """Nothing: this machine's admission queue orders every ``spec.priority``."""
        return []

    def own_secret_findings(self, job: Job, managed: set[tuple[str, str]], project: str,
                            namespace: str | None) -> list[Finding]:
        """Nothing: every reference names an RLark-managed secret (:attr:`own_secrets` False)."""
        return []

    def request_of(self, spec: dict[str, Any]) -> dict[str, float]:
        """:func:`local_request` of a stored Run spec; nothing for one that no longer parses (a
        spec stored by another RLark version must not break the node view)."""
        try:
            return local_request(Job.model_validate(spec))
        except ValueError:  # pydantic's ValidationError is a ValueError
            return {"cpu": 0.0, "memory": 0, "gpu": 0}

    def nodes(self, requests: Callable[[], list[dict[str, float]]]
              ) -> tuple[list[dict[str, Any]], str, str | None]:
        """This machine (:func:`local_node`), with what the active local Runs ask for and the
        Workers' isolation; free capacity as RLark counts it (``rlark``)."""
        items = [local_node(socket.gethostname(), self.host or host_capacity(), requests())]
        if self.isolation is not None:
            items[0]["isolation"] = self.isolation
        return items, "rlark", None

    def output_probes(self, rec: dict[str, Any], sandboxed: bool) -> dict[str, dict[str, Any]]:
        """:func:`rlark.runtimes.local.outputs.output_probes`."""
        return output_probes(rec, sandboxed)

    def worker_dir(self, rec: dict[str, Any], path: str, rank: int,
                   sandboxed: bool) -> tuple[str | None, str]:
        """:func:`rlark.runtimes.local.outputs.server_dir`: where the Worker's view of ``path``
        lies on this machine (its copy of the working directory, a hostPath mount's source...)."""
        return server_dir(rec, path, rank, sandboxed)

    def volumes(self, project: str) -> list[dict[str, Any]]:
        """:func:`rlark.runtimes.local.volumes.listing` in this server's ``$RLARK_HOME``."""
        return volumes.listing(self.home or str(settings.rlark_home()), project)

    def delete_volume(self, project: str, name: str) -> dict[str, Any] | None:
        """:func:`rlark.runtimes.local.volumes.remove` in this server's ``$RLARK_HOME``."""
        held = volumes.remove(self.home or str(settings.rlark_home()), project, name)
        return None if held is None else {"name": name, "bytes": held[0], "entries": held[1]}
