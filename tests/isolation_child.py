"""A local runtime in a process of its own, for tests/test_local_isolation.py: it runs with the
privileges a test gives it (root, root without CAP_SYS_ADMIN, another user), launches one Worker
whose "interpreter" is the attacking script the test wrote, and ends it as the controller would.

    python -m tests.isolation_child launch|adopt WORKDIR

``launch``: start the Worker (``RLARK_WORKER_ISOLATION`` picks the isolation), wait until the
script's leftover processes exist, then end it: ``ENDING=exit`` lets the script exit by itself
(the Run ends: it waits for the file ``go``, made once the leftovers were seen), ``ENDING=stop`` sends SIGTERM, then SIGKILL after a grace (the Run is stopped),
``ENDING=leave`` ends nothing and prints the Worker's handle (a server that goes away). Every
stage is bounded. ``adopt``: a later server's runtime takes the handle ``ref.json`` holds and
kills that Worker. One JSON object on stdout says what happened.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil

from rlark.ranks import PlannedWorker
from rlark.runtimes.base import LaunchSpec, WorkerPlace, WorkerRef
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.runtimes.local.reservations import Reservations
from rlark.spec import Job

RUN_UID = "isotest"
WORKER = "iso-head-0"
STAGE_SECONDS = 30.0


def leftovers(token: str) -> list[int]:
    """PIDs (in this process's PID namespace) of the script's leftover processes, ``sleep
    1000.<token>``, ``sleep 1001.<token>`` and ``sleep 1002.<token>``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if len(cmd) == 2 and cmd[1] in {f"{n}.{token}" for n in (1000, 1001, 1002)}:
            out.append(p.pid)
    return out


def cap_sys_admin() -> bool:
    """This process holds CAP_SYS_ADMIN (bit 21 of CapEff, capabilities(7))."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 21 & 1)
    return False


def until(what: str, check, seconds: float = STAGE_SECONDS):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(json.dumps({"error": f"{what}: not within {seconds:g} s"}))
        time.sleep(0.05)


def job(script: str) -> Job:
    return Job.model_validate({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "iso"},
        "spec": {"headRole": "head", "runScript": "true",
                 "roles": [{"name": "head", "workers": 1, "image": "docker.io/rlinf/rlinf:0.3.0",
                            "local": {"python": script}}]},
    })


def launch(work: Path) -> dict:
    token = os.environ["LEFTOVER_TOKEN"]
    ending = os.environ.get("ENDING", "exit")
    rt = LocalRuntime(Reservations(str(work / "locks")))
    worker = PlannedWorker(name=WORKER, role="head", index=0, node_rank=0, is_head=True)
    env = {"LEFTOVER_TOKEN": token, "STAY": "0" if ending == "exit" else "1",
           "GO": str(work / "go"), "RLARK_RUN_ID": RUN_UID, "RLARK_WORKER": WORKER}
    launched = rt.launch(LaunchSpec(job=job(str(work / "attack.sh")), run_uid=RUN_UID,
                                    worker=worker, env=env, log_path=str(work / "worker.log"),
                                    place=WorkerPlace()))
    ref = WorkerRef(name=WORKER, pid=launched.pid, pid_started=launched.pid_started,
                    handle=launched.handle, run_uid=RUN_UID)
    out = {"isolation": rt.isolation.view(), "handle": launched.handle, "pid": launched.pid,
           "uid": os.geteuid(), "capSysAdmin": cap_sys_admin()}
    out["leftovers"] = until("the script's three leftover processes",
                             lambda: len(found := leftovers(token)) >= 3 and found)
    (work / "ref.json").write_text(json.dumps({"pid": ref.pid, "pid_started": ref.pid_started,
                                               "handle": ref.handle}))
    if ending == "leave":
        return out
    start = time.monotonic()
    (work / "go").touch()  # ENDING=exit: the script exits now
    if ending == "stop":
        rt.signal_stop(ref)
        grace = time.monotonic() + 2.0  # the Job's terminationGracePeriodSeconds
        while rt.observe(ref).alive and time.monotonic() < grace:
            time.sleep(0.05)
        rt.kill(ref)
    seen = until("the Worker gone", lambda: (o := rt.observe(ref)) and not o.alive and o)
    out["exitCode"] = seen.exit_code
    out["endedAfter"] = round(time.monotonic() - start, 3)
    rt.forget(ref)
    out["cgroupLeft"] = bool(launched.handle) and os.path.exists(launched.handle.split(":", 1)[1])
    return out


def adopt(work: Path) -> dict:
    saved = json.loads((work / "ref.json").read_text())
    rt = LocalRuntime(Reservations(str(work / "locks")))
    ref = WorkerRef(name=WORKER, run_uid=RUN_UID, **saved)
    start = time.monotonic()
    alive_before = rt.observe(ref).alive
    rt.kill(ref)
    until("the adopted Worker gone", lambda: not rt.observe(ref).alive)
    rt.forget(ref)
    handle = saved["handle"] or ""
    return {"isolation": rt.isolation.view(), "aliveBefore": alive_before,
            "uid": os.geteuid(), "capSysAdmin": cap_sys_admin(),
            "endedAfter": round(time.monotonic() - start, 3),
            "cgroupLeft": bool(handle) and os.path.exists(handle.split(":", 1)[1])}


if __name__ == "__main__":
    action, work = sys.argv[1], Path(sys.argv[2])
    print(json.dumps(launch(work) if action == "launch" else adopt(work)))
