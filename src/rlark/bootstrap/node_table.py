"""Reading the node table of a Run's Ray cluster: with Ray's own GcsClient inside the Ray
versions this was run against (:class:`GcsNodes`), else through the public ``ray.nodes()`` of
a driver in a child process (:class:`DriverNodes`). Both give the node dicts of
:func:`node_dict`, which the join barrier reads (``barrier.check_ranks``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from rlark.bootstrap.config import (BARRIER_POLL_SECONDS, EXIT_BAD_CONFIG, RAY_START_TIMEOUT,
                                    BootstrapError)
from rlark.bootstrap.ray_node import ray_version

#: Ray versions the bootstrap's use of Ray internals was run against (tests/test_ray_versions.py,
#: Python 3.10 and 3.11): RLinf's minimum (2.47) up to 2.60. Inside this range the barrier reads
#: the node table with Ray's GcsClient (:class:`GcsNodes`); outside it, with the public
#: ``ray.nodes()`` (:class:`DriverNodes`).
RAY_TESTED_RANGE = ((2, 47), (2, 60))
#: RLARK_RAY_NODES=gcs|driver chooses the node-table reader (default: by version, see above)
NODE_TABLE_METHODS = ("gcs", "driver")


def node_table_method(version: tuple[int, int] | None, override: str | None = None) -> str:
    """``gcs`` inside :data:`RAY_TESTED_RANGE`, else ``driver``; ``override`` (RLARK_RAY_NODES)
    wins. Pure.

    Raises:
        BootstrapError: ``BadConfig`` for an override that is neither method.
    """
    if override:
        if override not in NODE_TABLE_METHODS:
            raise BootstrapError(
                "BadConfig", f"RLARK_RAY_NODES={override!r} is not one of "
                f"{', '.join(NODE_TABLE_METHODS)}", EXIT_BAD_CONFIG)
        return override
    low, high = RAY_TESTED_RANGE
    return "gcs" if version is not None and low <= version <= high else "driver"


def node_dict(node_id: str, alive: bool, address: str, hostname: str, labels: dict,
              resources: dict | None = None) -> dict:
    """One node as :func:`check_ranks` reads it (the keys and shapes of ``ray.nodes()``;
    ``Resources``: the node's total resources as Ray counts them, e.g. ``{"CPU": 1.0,
    "memory": 2147483648.0, "GPU": 1.0, "rdma/hca": 1.0}``)."""
    return {"NodeID": node_id, "Alive": bool(alive), "NodeManagerAddress": address,
            "NodeManagerHostname": hostname, "Labels": dict(labels or {}),
            "Resources": {str(k): float(v) for k, v in (resources or {}).items()}}


class GcsNodes:
    """The node table of a Ray cluster, read over one GCS connection with Ray's own GcsClient
    (``ray._raylet.GcsClient(address=...).get_all_node_info(timeout=...)``, what ``ray start``,
    ``ray status`` and the autoscaler use; the same call in every Ray of
    :data:`RAY_TESTED_RANGE`). Ray's public ``ray.nodes()`` needs a connected driver: measured
    here, 2.6 s to import Ray plus 3.2 s for ``ray.init`` on a busy 2-core host, and when the GCS
    dies it blocks about 60 s and then exits; this client answers in about 1 ms, and a GCS that
    goes away raises here within ``timeout`` instead of ending this process.
    """

    method = "gcs"

    def __init__(self, address: str, timeout: float = 5.0):
        # a Cython class: Ray's type information does not declare it
        from ray._raylet import GcsClient  # type: ignore[attr-defined]

        self.timeout = timeout
        self.client = GcsClient(address=address)

    def nodes(self) -> list[dict]:
        """Every node the GCS knows (:func:`node_dict`). The node state is compared with the
        message's own ``ALIVE`` constant, so no generated protobuf module is imported."""
        return [
            node_dict(node_id.hex(), info.state == info.ALIVE, info.node_manager_address,
                      info.node_manager_hostname, info.labels,
                      getattr(info, "resources_total", None))
            for node_id, info in self.client.get_all_node_info(timeout=self.timeout).items()
        ]

    def close(self) -> None:
        self.client = None


#: the driver DriverNodes runs: Ray's public API only; one JSON line per read on stdout
_DRIVER_PROGRAM = r"""
import json, sys, time
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False,
         namespace="rlark-barrier")
period = float(sys.argv[2])
while True:
    nodes = [{"NodeID": n.get("NodeID"), "Alive": n.get("Alive"),
              "NodeManagerAddress": n.get("NodeManagerAddress"),
              "NodeManagerHostname": n.get("NodeManagerHostname"),
              "Labels": n.get("Labels") or {},
              "Resources": n.get("Resources") or {}} for n in ray.nodes()]
    print(json.dumps(nodes), flush=True)
    time.sleep(period)
"""


class DriverNodes:
    """The node table through Ray's public API: a child process that is a Ray driver
    (``ray.init(address=...)``) and prints ``ray.nodes()`` as one JSON line every
    ``period`` seconds. For Rays outside :data:`RAY_TESTED_RANGE` (or RLARK_RAY_NODES=driver):
    slower to start (a driver connects in seconds) and slower to notice a dead GCS (``stale``
    seconds without a fresh table raise), but it needs nothing of Ray's internals. A child, so a
    driver that Ray ends when the GCS goes away does not take the bootstrap with it.
    """

    method = "driver"

    def __init__(self, address: str, env: dict[str, str], period: float = BARRIER_POLL_SECONDS,
                 stale: float = 10.0, connect_timeout: float = RAY_START_TIMEOUT,
                 on_spawn=None):
        self.address, self.period = address, period
        self.env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
        self.stale = stale
        self.connect_timeout = connect_timeout
        self.on_spawn = on_spawn  # e.g. the bootstrap's list of children to stop at the end
        self.started = 0.0
        self.proc: subprocess.Popen | None = None
        self._latest: list[dict] | None = None
        self._at = 0.0
        self._said = ""  # the driver's last line that was not a table
        self._lock = threading.Lock()

    def _spawn(self) -> subprocess.Popen:
        # on the first read, i.e. once this node's raylet runs: a driver connects through it
        self.started = time.monotonic()
        self.proc = proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER_PROGRAM, self.address, str(self.period)],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )
        if self.on_spawn is not None:
            self.on_spawn(proc)
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout or ():
            try:
                table = json.loads(line) if line.startswith("[") else None
            except ValueError:
                table = None
            with self._lock:
                if isinstance(table, list):
                    self._latest, self._at = table, time.monotonic()
                elif line.strip():
                    self._said = line.strip()[-300:]  # Ray's own words, for the error

    def nodes(self) -> list[dict]:
        """The latest table (``[]`` while the driver connects).

        Raises:
            RuntimeError: the driver exited, did not connect within ``connect_timeout``, or
            printed nothing new for ``stale`` seconds (the GCS is gone).
        """
        proc = self.proc if self.proc is not None else self._spawn()
        with self._lock:
            latest, at = self._latest, self._at
        now = time.monotonic()
        if proc.poll() is not None:
            raise RuntimeError(f"the ray.nodes() driver exited with code {proc.returncode}"
                               + (f": {self._said}" if self._said else ""))
        if latest is None:
            if now - self.started > self.connect_timeout:
                raise RuntimeError("the ray.nodes() driver did not connect")
            return []
        if now - at > self.stale:
            raise RuntimeError(f"no node table from the ray.nodes() driver for {self.stale:g} s")
        return [node_dict(n.get("NodeID") or "", bool(n.get("Alive")),
                          n.get("NodeManagerAddress") or "", n.get("NodeManagerHostname") or "",
                          n.get("Labels") or {}, n.get("Resources")) for n in latest]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def open_node_table(address: str, env: dict[str, str], on_spawn=None) -> "GcsNodes | DriverNodes":
    """The node-table reader for this Worker's Ray (:func:`node_table_method`); ``on_spawn``
    gets the driver process of :class:`DriverNodes` when it starts.

    Raises:
        BootstrapError: ``BadConfig`` for a bad RLARK_RAY_NODES.
        Exception: the GCS does not answer (GcsClient's own error).
    """
    method = node_table_method(ray_version(), env.get("RLARK_RAY_NODES") or None)
    if method == "gcs":
        return GcsNodes(address)
    return DriverNodes(address, env, on_spawn=on_spawn)
