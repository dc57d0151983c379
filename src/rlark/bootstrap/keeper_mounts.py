"""The keeper's object-storage mounts (``keeper.py``): made before the workload starts (FUSE
mode: ``fuse.py``, s3fs; copy mode: ``objects.py``, copied in), undone once nothing of the
workload is left (unmounted, s3fs waited for; copied out), and what a failure of either makes
of the Worker (``MountFailed``). Apart from the keeper's process loop, which it only calls.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rlark.bootstrap import fuse as fuse_mounts
from rlark.bootstrap import objects as object_mounts
from rlark.bootstrap.config import EXIT_STOPPED

if TYPE_CHECKING:  # keeper.py imports this module
    from rlark.bootstrap.keeper import Keeper

EXIT_MOUNT_FAILED = 89


def make_mounts(keeper: "Keeper") -> tuple[object_mounts.ObjectMounts | None, int | None]:
    """Make the Worker's object-storage mounts before its workload starts: FUSE ones first
    (only in a Worker's own mount namespace, by a keeper running as root), then the copy-mode
    ones copied in. Returns ``(the copy-mode mounts or None, None)`` to go on, or ``(.., exit
    status)`` when the Worker ends here: a mount failed (``MountFailed``) or a stop came."""
    cfg, chan = keeper.cfg, keeper.chan
    fused = [m for m in cfg.objects if m.get("mode") == "fuse"]
    copied = [m for m in cfg.objects if m.get("mode") != "fuse"]

    def tick() -> None:
        keeper._heartbeat(time.monotonic())

    mounts = object_mounts.ObjectMounts(copied, cfg.copy_python, cfg.bootstrap,
                                        keeper._identity(), chan, tick,
                                        state_dir=cfg.objects_state) if copied else None
    if fused:
        why = ("FUSE mounts are made only in a Worker's own mount namespace, by a keeper that "
               "runs as root" if cfg.sandbox is None or cfg.uid is None else None)
        keeper.fuse = fuse_mounts.FuseMounts(fused, cfg.s3fs, cfg.uid or 0, cfg.gid or 0, chan)
        why = why or keeper.fuse.mount_all(lambda: keeper.stop_at is not None, tick)
        if why is not None and keeper.stop_at is None:
            return mounts, mount_failed(keeper, why)
    if mounts is not None and keeper.stop_at is None:
        why = mounts.copy_in(lambda: keeper.stop_at is not None)
        if why and keeper.stop_at is None:
            return mounts, mount_failed(keeper, why)
        mounts.prestart()
    if keeper.stop_at is not None:
        unmount(keeper)
        chan.emit("stopped")
        chan.emit("exit", code=EXIT_STOPPED)
        return mounts, EXIT_STOPPED
    return mounts, None


def mount_failed(keeper: "Keeper", why: str) -> int:
    """End a Worker whose mount failed before its workload started (``MountFailed``)."""
    unmount(keeper)
    keeper.chan.emit("failed", reason="MountFailed", status=EXIT_MOUNT_FAILED, message=why)
    keeper.chan.emit("exit", code=EXIT_MOUNT_FAILED)
    return EXIT_MOUNT_FAILED


def unmount(keeper: "Keeper") -> list[str]:
    """Unmount the FUSE mounts made so far (nothing of the workload runs), within the stop's
    grace; their failures' messages."""
    if keeper.fuse is None:
        return []
    return keeper.fuse.unmount_all(time.monotonic() + keeper.cfg.stop_grace)


def copy_out(keeper: "Keeper", mounts: object_mounts.ObjectMounts | None, code: int) -> int:
    """Once nothing of the workload is left: unmount the Worker's FUSE-mode mounts (each
    s3fs finishes what it was sending, then exits) and copy its copy-mode mounts out, within
    the stop's grace after a stop, else within ``RLARK_OBJECT_SYNC_SECONDS``; then the head's
    held ``run_finished``. A failure of a head whose run script ended by itself fails the Run
    (``failed``, ``MountFailed``: its outputs are not where it said); elsewhere (a stop, a Worker
    that is not the head) it is a warning. Returns the Worker's exit status."""
    now = time.monotonic()
    deadline = (keeper.stop_at + keeper.cfg.stop_grace + 1.5 if keeper.stop_at is not None
                else now + keeper.cfg.sync_seconds)
    failures: list[str] = []
    fuse = keeper.fuse
    if fuse is not None:
        # everything of the workload ends first, s3fs last: what it closed reaches the bucket
        fuse_mounts.kill_all_but({u.proc.pid for u in fuse.up},
                                 lambda pid, status: fuse.note_exit(pid, status))
        failures += fuse.unmount_all(deadline)
    ready = mounts.ready_pids() if mounts is not None else set()
    if ready:  # a Pod's copies, started before the workload: all else goes
        fuse_mounts.kill_all_but(ready, lambda pid, status: None)
    else:
        object_mounts.kill_the_rest()
    if mounts is not None and mounts.writable():
        failures += mounts.copy_out(deadline)
    held = keeper.held_finish
    if failures and held is not None:
        keeper.chan.emit("failed", reason="MountFailed", status=EXIT_MOUNT_FAILED,
                         message="; ".join(failures)[:8000])
        return EXIT_MOUNT_FAILED
    for why in failures:
        keeper.chan.emit("warning", reason="MountFailed", message=why[:8000])
    if held is not None:
        keeper.chan.emit("run_finished", **held)
    return code
