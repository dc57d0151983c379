"""Noticing that a Ray node has no worker port left: Ray's own log files say "No available
ports" when a worker process cannot start for want of one, and the tasks waiting for it wait
forever. A thread per node reads what is new in them and reports one ``warning``
(``RayWorkerPortsExhausted``)."""

from __future__ import annotations

import os
import threading

from rlark.bootstrap.config import BootstrapConfig
from rlark.bootstrap.report import emit

#: what a Ray worker process logs when the raylet has no port left for it (core_worker_process.cc,
#: "Failed to register worker to Raylet: Invalid: No available ports. Please specify a wider port
#: range using --min-worker-port and --max-worker-port"; 2.47-2.60)
PORTS_EXHAUSTED = b"No available ports"
PORT_WATCH_SECONDS = 2.0
#: a log file is read at most this much at a time (the needle is looked for in what is new)
PORT_WATCH_READ_BYTES = 1 << 20


def find_port_exhaustion(log_dir: str, offsets: dict[str, int]) -> str | None:
    """Look through what is new in Ray's own log files in ``log_dir`` (``*.log``, ``*.err``,
    ``raylet.out``; not ``worker-*.out``, where tasks' prints go) since the ``offsets`` (path ->
    bytes read, updated) for :data:`PORTS_EXHAUSTED`. Returns the name of the first file that
    has it, else None."""
    try:
        names = sorted(os.listdir(log_dir))
    except OSError:
        return None
    for name in names:
        if not (name.endswith((".log", ".err")) or (name.startswith("raylet") and name.endswith(".out"))):
            continue
        path = os.path.join(log_dir, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        start = offsets.get(path, 0)
        if size <= start:
            continue
        # keep len(needle) bytes of overlap, so a line split across two reads is still seen
        start = max(0, start - len(PORTS_EXHAUSTED))
        try:
            with open(path, "rb") as f:
                f.seek(start)
                chunk = f.read(min(size - start, PORT_WATCH_READ_BYTES))
        except OSError:
            continue
        offsets[path] = start + len(chunk)
        if PORTS_EXHAUSTED in chunk:
            return name
    return None


def port_exhaustion_message(cfg: BootstrapConfig, lo: int | None, hi: int | None, where: str) -> str:
    """The text of the RayWorkerPortsExhausted warning. Pure."""
    rng = (f"{hi - lo + 1} worker ports ({lo}-{hi})" if lo is not None and hi is not None
           else "Ray's worker ports")
    return (f"Ray on rank {cfg.node_rank} ({cfg.worker}) has no worker port left: every one of "
            f"its {rng} is held by a worker process, and a new worker could not start "
            f"(\"No available ports\" in {where}); the tasks or actors waiting for it wait "
            "forever. Give the role more with ray.workerPorts (the default is 16 per CPU).")


def watch_worker_ports(cfg: BootstrapConfig, log_dir: str, stopping: threading.Event) -> None:
    """Look through ``log_dir`` (:func:`find_port_exhaustion`) every
    :data:`PORT_WATCH_SECONDS` in a daemon thread until ``stopping`` is set, and report one
    ``warning`` (reason ``RayWorkerPortsExhausted``, :func:`port_exhaustion_message`) the first
    time a worker process could not start for want of a port."""
    lo = cfg.ray_ports.get("min-worker-port")
    hi = cfg.ray_ports.get("max-worker-port")

    def watch() -> None:
        offsets: dict[str, int] = {}
        while not stopping.wait(PORT_WATCH_SECONDS):
            where = find_port_exhaustion(log_dir, offsets)
            if where:
                emit("warning", reason="RayWorkerPortsExhausted",
                     message=port_exhaustion_message(cfg, lo, hi, where),
                     node_rank=cfg.node_rank, worker=cfg.worker)
                return

    threading.Thread(target=watch, daemon=True).start()
