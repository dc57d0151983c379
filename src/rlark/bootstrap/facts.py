"""Facts about a Worker for the run record: what it is (host, IP, rank, Python, Ray, visible
CPUs, GPUs, memory: :func:`collect_facts`, reported at its start) and, after the prepare script,
what it runs (code, versions, devices, packages, the head's config snapshot:
:func:`record_facts`, gathered beside ``ray start`` by :class:`FactsInBackground`). Cheap and
bounded: versions come from package metadata, nothing heavy is imported, every probe has a time
limit, and a fact that cannot be learnt never fails the Run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import sys
import threading
import time
from typing import Callable, Iterable

from rlark.bootstrap.config import BootstrapConfig
from rlark.bootstrap.facts_code import Budget, git_facts, probe, rlinf_code_facts
from rlark.bootstrap.facts_config import config_snapshot

#: pip wheels that carry device libraries (NCCL, cuDNN, cuBLAS, the CUDA runtime...):
#: distribution names starting with these
DEVICE_LIB_PREFIXES = ("nvidia-", "cuda-", "pytorch-triton", "triton")


def dist_version(dist: str) -> str | None:
    """The version of the installed distribution ``dist`` (package metadata: nothing of it is
    imported), None when it is not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - python < 3.8
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _visible_memory_bytes() -> int | None:
    """Memory this process may use: the cgroup v2 limit when set, else MemTotal."""
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            raw = f.read().strip()
        if raw != "max":
            return int(raw)
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _visible_gpus() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    try:
        return sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return []


def _node_ip_guess(cfg: BootstrapConfig) -> str:
    if cfg.node_ip:
        return cfg.node_ip
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((cfg.head_host, cfg.head_port))
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def collect_facts(cfg: BootstrapConfig) -> dict:
    """Facts about this Worker for the run record: host, IP, rank, role, versions, CPUs, GPUs,
    memory (bytes). Cheap: versions come from package metadata, nothing heavy is imported."""
    cpus: int | None
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "ip": _node_ip_guess(cfg),
        "node_rank": cfg.node_rank,
        "role": cfg.role,
        "worker": cfg.worker,
        "pid": os.getpid(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "ray": dist_version("ray"),
        "rlinf": dist_version("rlinf"),
        "torch": dist_version("torch"),
        "visible_cpus": cpus,
        "visible_gpus": _visible_gpus(),
        "visible_memory_bytes": _visible_memory_bytes(),
        "ray_resources": {
            "num_cpus": cfg.num_cpus,
            "num_gpus": cfg.num_gpus,
            "memory_bytes": cfg.memory_bytes,
            "object_store_bytes": cfg.object_store_bytes,
            "custom": cfg.resources,
            # None: Ray's own range (nothing pinned)
            "worker_ports": ([cfg.ray_ports["min-worker-port"], cfg.ray_ports["max-worker-port"]]
                             if "min-worker-port" in cfg.ray_ports
                             and "max-worker-port" in cfg.ray_ports else None),
        },
    }


def parse_nvidia_smi(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=uuid,name,driver_version,memory.total --format=csv,noheader,
    nounits`` output as ``[{"uuid", "model", "driver", "memoryMiB"}]``. Pure."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 4 or not cells[0]:
            continue
        try:
            mem: int | None = int(float(cells[3]))
        except ValueError:
            mem = None
        gpus.append({"uuid": cells[0], "model": cells[1], "driver": cells[2], "memoryMiB": mem})
    return gpus


def parse_nvidia_proc_version(text: str) -> str | None:
    """The kernel driver version from ``/proc/driver/nvidia/version`` (``NVRM version: NVIDIA
    UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...``); None when absent. Pure."""
    import re

    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def parse_torch_version_py(text: str) -> dict:
    """``cuda``, ``hip`` and ``git_version`` from torch's generated ``torch/version.py`` (read as
    text: importing torch takes seconds and hundreds of MB). Pure."""
    import ast

    out: dict = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip", "git_version") \
                and isinstance(value, ast.Constant):
            out[target.id] = value.value
    return out


def package_list(dists: "list[tuple[str, str]]") -> tuple[list[str], str]:
    """``(["name==version", ...], sha256)`` of an environment's distributions: names normalised
    as PEP 503 does, sorted, duplicates (one dist on two paths) kept once; the hash is of the
    lines joined by newlines, so equal environments hash equal. Pure."""
    import hashlib
    import re

    lines = sorted({f"{re.sub(r'[-_.]+', '-', n).lower()}=={v}" for n, v in dists if n})
    return lines, hashlib.sha256("\n".join(lines).encode()).hexdigest()


def device_facts(budget: Budget) -> dict:
    """GPUs (UUID, model, driver, memory) from ``nvidia-smi``, the driver from
    ``/proc/driver/nvidia/version`` when nvidia-smi is missing, and device files present
    (``/dev/nvidia*``, ``/dev/infiniband/*``). Absent things are ``None`` with a reason."""
    out: dict = {"gpus": None, "driver": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        got = probe([smi, "--query-gpu=uuid,name,driver_version,memory.total",
                      "--format=csv,noheader,nounits"], budget)
        if isinstance(got, str):
            out["gpusAbsent"] = got
        elif got[0] != 0:
            out["gpusAbsent"] = f"nvidia-smi exited with {got[0]}"
        else:
            out["gpus"] = parse_nvidia_smi(got[1].decode(errors="replace"))
            out["driver"] = next((g["driver"] for g in out["gpus"] if g.get("driver")), None)
    else:
        out["gpusAbsent"] = "nvidia-smi not found"
    if out["driver"] is None:
        try:
            with open("/proc/driver/nvidia/version") as f:
                out["driver"] = parse_nvidia_proc_version(f.read())
        except OSError:
            out["driverAbsent"] = "no NVIDIA driver (no /proc/driver/nvidia/version)"
    files = []
    for d, prefix in (("/dev", "nvidia"), ("/dev/infiniband", "")):
        try:
            files += sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith(prefix))
        except OSError:
            pass
    out["deviceFiles"] = files
    return out


def version_facts() -> dict:
    """Versions beyond :func:`collect_facts`'s: the CUDA (or ROCm) runtime torch was built with
    (``torch.version.cuda`` read from ``torch/version.py``, torch not imported), and the device
    library wheels installed (NCCL, cuDNN... :data:`DEVICE_LIB_PREFIXES`), with ``nccl`` picked
    out; absent ones are None."""
    import importlib.util

    out: dict = {"torchCuda": None, "torchHip": None, "nccl": None, "deviceLibs": {}}
    try:
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.submodule_search_locations:
            path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
            with open(path) as f:
                tv = parse_torch_version_py(f.read())
            out["torchCuda"], out["torchHip"] = tv.get("cuda"), tv.get("hip")
    except (OSError, ImportError, ValueError):
        pass
    try:
        from importlib.metadata import distributions

        for dist in distributions():
            name = (dist.metadata["Name"] or "").lower()
            if name.startswith(DEVICE_LIB_PREFIXES):
                out["deviceLibs"][name] = dist.version
                if "nccl" in name:
                    out["nccl"] = dist.version
    except Exception:  # noqa: BLE001 - a broken dist's metadata is not worth failing for
        pass
    return out


def packages_facts() -> dict:
    """The installed-package list of this Worker's Python and its sha256 (:func:`package_list`)."""
    try:
        from importlib.metadata import distributions

        lines, digest = package_list([(d.metadata["Name"] or "", d.version) for d in distributions()])
    except Exception as exc:  # noqa: BLE001
        return {"absent": f"{type(exc).__name__}: {exc}"}
    return {"sha256": digest, "count": len(lines), "list": lines}


def record_facts(cfg: BootstrapConfig, budget: Budget) -> dict:
    """What the run record needs beyond :func:`collect_facts`, within ``budget``: ``code``
    (working directory and RLinf), ``versions`` (:func:`version_facts`), ``devices``
    (:func:`device_facts`), ``packages`` (:func:`packages_facts`), ``config`` (the head's
    snapshot of the Hydra files, :func:`config_snapshot`) and ``factsSeconds``. Never raises:
    a part that fails is ``{"absent": why}``."""
    started = time.monotonic()
    out: dict = {}

    def part(key: str, fn) -> None:
        try:
            out[key] = fn()
        except Exception as exc:  # noqa: BLE001 - a missing fact never fails the Run
            out[key] = {"absent": f"{type(exc).__name__}: {exc}"}

    workdir = cfg.working_dir or os.getcwd()
    part("code", lambda: {"workingDir": git_facts(workdir, budget),
                          "rlinf": rlinf_code_facts(budget)})
    part("versions_extra", version_facts)
    part("devices", lambda: device_facts(budget))
    part("packages", packages_facts)
    if cfg.is_head and cfg.rlinf_config_dir and cfg.rlinf_config_name:
        config_dir = cfg.rlinf_config_dir
        if not os.path.isabs(config_dir):
            config_dir = os.path.join(workdir, config_dir)
        part("config", lambda: config_snapshot(config_dir, cfg.rlinf_config_name or ""))
    out["factsSeconds"] = round(time.monotonic() - started, 3)
    return out


#: the parts of :func:`record_facts` every Worker reports (the head's ``config`` besides)
RECORD_PARTS = ("code", "versions_extra", "devices", "packages")


def idle_priority() -> str:
    """Give this process (and what it starts later) the CPU only when nothing else wants it:
    ``SCHED_IDLE`` (sched(7); any process may lower its own priority), else nice 19. Returns
    which held (``"idle"``, ``"nice"``, ``"none"``)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19)
        return "nice"
    except OSError:
        return "none"


class FactsInBackground:
    """:func:`record_facts` gathered beside this Worker's ``ray start`` instead of before it,
    so that they cost a Worker's start nothing: in a child process forked from this one (no
    interpreter start or import is paid again) at idle CPU priority (:func:`idle_priority`: on a
    machine busy starting Ray nodes it waits for a free CPU, which comes at the latest once they
    are up), which sends them back as JSON through a pipe; a thread of this process hands them to
    ``report`` (the ``facts`` line) as soon as they are whole. Started after the prepare script,
    so they still say what it left. The child ignores stop signals and ends by itself within
    ``cfg.facts_budget`` seconds of its start (:class:`Budget`), so that a Worker being stopped
    can still report them (:meth:`finish`). Where no child can be forked they are gathered at
    once, in this process. ``close_fds``: descriptors the child closes first (the keeper's
    pipes: it reports nothing itself)."""

    def __init__(self, cfg: BootstrapConfig, report: Callable[[dict], None],
                 close_fds: Iterable[int] = ()):
        self.report = report
        self.reported = threading.Event()
        self.pid: int | None = None
        try:
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            report(record_facts(cfg, Budget(cfg.facts_budget)))
            self.reported.set()
            return
        if pid == 0:  # the child: gather, send, end (never back into the caller's code)
            code = 1
            try:
                os.close(read_end)
                for fd in close_fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                idle_priority()
                view = memoryview(json.dumps(record_facts(cfg, Budget(cfg.facts_budget))).encode())
                while view:
                    view = view[os.write(write_end, view):]
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        self.pid = pid
        threading.Thread(target=self._collect, args=(read_end,), name="record-facts",
                         daemon=True).start()

    def _collect(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            data = pipe.read()
        try:
            os.waitpid(self.pid or 0, 0)
        except ChildProcessError:
            pass
        try:
            facts = json.loads(data)
            if not isinstance(facts, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            why = f"the process gathering them ended before it sent them ({exc})"
            facts = {part: {"absent": why} for part in RECORD_PARTS}
        try:
            self.report(facts)
        finally:
            self.reported.set()

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds until they were reported; whether they were."""
        return self.reported.wait(timeout)

    def finish(self, timeout: float) -> None:
        """On the Worker's way out: wait at most ``timeout`` seconds for them, then end the
        child (their parts are then reported absent)."""
        if self.wait(timeout) or self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.wait(1.0)
