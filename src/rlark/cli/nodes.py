"""``rlark nodes`` (also ``rlark get nodes``): where the server's runtime places Workers."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from rlark.cli.base import ServerOpt, _call, _client, _emit, _output, _output_option, err, out


def nodes(
    output: str = _output_option(),
    show_labels: bool = typer.Option(False, "--show-labels",
                                     help="Add a LABELS column (key=value, as kubectl shows them)."),
    server: Optional[str] = ServerOpt,
) -> None:
    """List the nodes the server's runtime places Workers on (also `rlark get nodes`):
    NAME, STATUS (Ready/NotReady, Cordoned), CPU, MEMORY and GPU (GPUs) as free/allocatable,
    DEVICES (other devices: example.com/fpga...), TAINTS and, with --show-labels, LABELS. Kubernetes: the cluster's nodes; local: this
    machine, where free is what active Jobs' Workers leave."""
    output = _output(output)
    data = _call(_client(server).get, "/api/v1/nodes")
    if output != "text":
        _emit(data, output)
        return
    if data.get("error"):
        err.print(Text(f"warning: {data['error']}", style="yellow"))
    gib = 1024**3
    columns = ("cpu", "memory", "nvidia.com/gpu")

    def amount(d: dict, key: str) -> str:
        v = d.get(key)
        if v is None:
            return "-"
        return f"{v / gib:.1f}Gi" if key == "memory" else f"{v:g}"

    table = Table(box=None, header_style="bold")
    for col in ("NAME", "STATUS", "CPU FREE/ALLOC", "MEMORY FREE/ALLOC", "GPU FREE/ALLOC", "DEVICES",
                "TAINTS", *(("LABELS",) if show_labels else ())):
        table.add_column(col)
    for n in data["items"]:
        status = ("Ready" if n["ready"] else "NotReady") + ("" if n["schedulable"] else ",Cordoned")
        devices = ",".join(f"{k}={amount(n['free'], k)}/{amount(n['allocatable'], k)}"
                           for k in n["allocatable"] if k not in columns)
        labels = (",".join(f"{k}={v}" for k, v in n["labels"].items()) or "-",) if show_labels else ()
        table.add_row(n["name"], status,
                      *(f"{amount(n['free'], k)}/{amount(n['allocatable'], k)}" for k in columns),
                      devices or "-", ",".join(n["taints"]) or "-", *labels)
    if not data["items"]:
        out.print(f"no nodes ({data['runtime']} runtime)")
    else:
        out.print(table)
        if data.get("freeBasis") == "namespace":
            out.print("[dim]free = allocatable minus the requests of Pods in RLark's namespace only "
                      "(no permission to list Pods cluster-wide)[/dim]")
        elif data.get("freeBasis") == "rlark":
            out.print("[dim]free = this machine minus what the Workers of active RLark Jobs ask "
                      "for (other programs are not counted)[/dim]")
    for n in data["items"]:
        iso = n.get("isolation")
        if iso:
            detail = "; ".join(f"{k}: {v}" for k, v in (iso.get("probes") or {}).items())
            style = "" if iso.get("strong") else "yellow"
            out.print(Text(f"Worker isolation on {n['name']}: {iso.get('mode')}"
                           + (f" under {iso['cgroupParent']}" if iso.get("cgroupParent") else "")
                           + ("" if iso.get("strong") else " (WEAK: a process that calls setsid() "
                              "can outlive its Worker)")
                           + (f" [{detail}]" if detail else ""), style=style))
            who = iso.get("identity") or {}
            if who.get("mode") == "uid":
                out.print(Text(f"Worker identity: a uid of each Run's own ({who.get('uids')}), "
                               "a mount namespace that hides this server's files"))
            elif who:
                out.print(Text(f"Worker identity: this server's own user ({who.get('why')}); a "
                               "run script can read the server's files", style="yellow"))
