"""``rlark queue`` (also ``rlark get queue``): the Runs waiting to be admitted, by queue."""

from __future__ import annotations

from typing import Optional

from rich.table import Table

from rlark.cli.base import ServerOpt, _call, _client, _emit, _output, _output_option, out


def _requests(r: dict, workers: int) -> str:
    """``4 Workers: 8 CPUs, 32Gi, 4 GPUs``."""
    gib = 1024**3
    parts = []
    if r.get("cpu"):
        parts.append(f"{r['cpu']:g} CPU{'s' if r['cpu'] != 1 else ''}")
    if r.get("memory"):
        parts.append(f"{r['memory'] / gib:.3g}Gi")
    if r.get("gpu"):
        parts.append(f"{r['gpu']:g} GPU{'s' if r['gpu'] != 1 else ''}")
    head = f"{workers} Worker{'s' if workers != 1 else ''}"
    return head + (": " + ", ".join(parts) if parts else "")


def _waited(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def queue(output: str = _output_option(), server: Optional[str] = ServerOpt) -> None:
    """List the Runs waiting to be admitted (Pending), by queue: QUEUE (this machine's
    admission queue on the local runtime; a Kueue LocalQueue on Kubernetes), POS (place in
    line, 1 = next; - where the queue reports none), PRIORITY (spec.priority), the project,
    Job and Run, what all its Workers ask for, how long it has waited, and what it waits for.
    Site administrators see every project's Runs; others, those of their projects."""
    output = _output(output)
    data = _call(_client(server).get, "/api/v1/queue")
    if output != "text":
        _emit(data, output)
        return
    if not data["items"]:
        out.print("no Run is waiting")
        return
    table = Table(box=None, header_style="bold")
    for col in ("QUEUE", "POS", "PRIORITY", "PROJECT", "JOB", "RUN", "REQUESTS", "WAITING",
                "WAITS FOR"):
        table.add_column(col, overflow="fold")
    for i in data["items"]:
        table.add_row(i["queue"] or "-", str(i["position"]) if i["position"] else "-",
                      str(i["priority"]), i["project"], i["job"], str(i["run"]),
                      _requests(i["requests"], i["workers"]), _waited(i["waitingSeconds"]),
                      i["message"] or i["reason"] or "-")
    out.print(table)
