"""One Worker's life, the program the keeper starts as the workload (``python
rlark-bootstrap.pyz worker``, see ``__main__.py``).

Contract (ARCHITECTURE.md, "Worker bootstrap contract"):

* Inputs come only from environment variables (``RLARK_*`` and ``RLINF_NODE_RANK``); see
  :class:`~rlark.bootstrap.config.BootstrapConfig`. Nothing calls back to the RLark server.
* ``RLINF_NODE_RANK`` is exported before ``ray start`` (RLinf reads it from the raylet's
  environment, so it must be there when the raylet starts); each Ray node is also labelled with
  ``rlark.io/node-rank``, ``rlark.io/role`` and ``rlark.io/run`` so the head can verify the mapping.
* Order: facts -> prepare script (bounded) -> ``ray start`` (the record's facts gathered
  beside it: ``facts.FactsInBackground``) -> head: join barrier on one Ray connection (polling
  every 0.1 s, naming missing ranks), rank check (0..N-1 exactly once), the record's facts
  reported, ``RAY_ADDRESS`` and the run script, whose exit code is the head's exit code; other
  Workers: wait for the head, ``ray start --block`` (their record's facts reported when
  gathered, at the latest on the way out), exit non-zero when their node fails. Every Worker's
  wait for the cluster ends ``RLARK_JOIN_TIMEOUT_SECONDS`` after its own start (prepare script
  included); RLark enforces the same deadline from the Run's launch for every rank.
* Prepare and run scripts run with ``bash -e -o pipefail -c`` (``scripts.script_argv``): the
  first failing command ends the script with its exit code.
* This program runs under the Worker's keeper (``keeper.py``), the first process of every
  Worker: progress and facts are reported to it as JSON lines (``RLARK_REPORT_FD``,
  ``report.py``), and it writes them, checked, as the Worker's lifecycle lines
  (``RLARK_EVENT {json}``, ``lifecycle.py``), so every runtime learns them from the Worker's log.
  The keeper starts the head's run script itself when this program reports ``start_run`` (the
  join barrier passed) and tells it when the run script ended (``RLARK_CONTROL_FD``).

Fail closed: on any failure the bootstrap reports a reason and exits non-zero; it never goes on.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from rlark.bootstrap import report
from rlark.bootstrap.barrier import JoinBarrier
from rlark.bootstrap.config import (EXIT_BAD_CONFIG, EXIT_HEAD_UNREACHABLE, EXIT_NODE_LOST,
                                    EXIT_STOPPED, HEAD_POLL_SECONDS, JOIN_SLACK_SECONDS,
                                    NODE_CHECK_SECONDS, RAY_START_ATTEMPTS, BootstrapConfig,
                                    BootstrapError)
from rlark.bootstrap.facts import FactsInBackground, collect_facts
from rlark.bootstrap.facts_config import find_hydra_outputs, hydra_output_facts
from rlark.bootstrap.ray_node import RayNode, name_resolves, port_open
from rlark.bootstrap.report import emit
from rlark.bootstrap.scripts import run_prepare


class Bootstrap(RayNode):
    """One Worker's life. ``run()`` returns the exit code."""

    def __init__(self, cfg: BootstrapConfig, env: dict[str, str]):
        super().__init__(cfg, env)
        #: the record's facts, gathered beside `ray start` (:meth:`run`)
        self.record_facts: FactsInBackground | None = None

    def run_head(self) -> int:
        """Start the head's Ray, pass the join barrier, then have the keeper start the run script
        (keeper.py: it starts and waits for it, so its exit status is observed, not reported)
        and watch every rank's node until the keeper says the run script ended. Returns the
        run script's exit status as the keeper saw it.

        Raises:
            BootstrapError: the barrier failed, a node was lost while the run script ran (the
                keeper stops the run script when it reads the ``failed`` report), or there is no
                keeper to start the run script (``BadConfig``).
        """
        control = report.keeper_link()
        if control is None:
            raise BootstrapError("BadConfig", "RLARK_CONTROL_FD is not set: the head's run script "
                                 "is started by RLark's keeper (keeper.py), which is not there",
                                 EXIT_BAD_CONFIG)
        self.start_ray()
        # Ray's Python package takes a second to import: do it while the head's Ray starts
        threading.Thread(target=lambda: __import__("ray._raylet"), daemon=True).start()
        barrier = JoinBarrier(self)
        barrier.wait()
        # the head's record facts (its config snapshot, its working directory's state) say what
        # was there before the run script; gathered while the nodes started, so seldom waited for
        if self.record_facts is not None:
            end = time.monotonic() + self.cfg.facts_budget
            while (not self.record_facts.wait(0.1) and not self.stopping.is_set()
                   and time.monotonic() < end):
                pass
            self.check_stopped()
        emit("start_run")
        # The barrier's connection stays open: the head keeps checking that every rank's node is
        # alive (a frozen or partitioned Worker is invisible to its process table; Ray's health
        # checks see it), and reports a failure, which makes the keeper stop the run script,
        # instead of letting RLinf wait on a dead node.
        next_check = time.monotonic() + NODE_CHECK_SECONDS
        try:
            while True:
                said = control.wait(0.5)
                if said is not None:
                    code, run_started = said
                    break
                if self.stopping.is_set():
                    continue
                failure = None
                if self.ray.poll() is not None:
                    failure = self.ray_exited("alive")
                elif time.monotonic() >= next_check:
                    next_check = time.monotonic() + NODE_CHECK_SECONDS
                    failure = barrier.check_alive()
                if failure is not None:
                    raise failure
        finally:
            barrier.close()
        self.check_stopped()
        self._report_hydra_outputs(run_started)
        return code

    def _report_hydra_outputs(self, since: float) -> None:
        """A ``facts`` line with the Hydra output directory the run script wrote (the newest
        ``.hydra/config.yaml`` below the working directory written since it started), so the
        record holds the config RLinf really ran; nothing when there is none."""
        try:
            top = self.cfg.working_dir or os.getcwd()
            found = find_hydra_outputs(top, since - 1.0)
            if found:
                emit("facts", hydra_output={**hydra_output_facts(found[0]),
                                            "others": found[1:10]})
        except Exception as exc:  # noqa: BLE001 - a missing fact never fails the Run
            emit("facts", hydra_output={"absent": f"{type(exc).__name__}: {exc}"})

    def _head_unreachable(self, budget: float, resolved: bool = True) -> BootstrapError:
        why = "" if resolved else f" (its name {self.cfg.head_host!r} never resolved)"
        return BootstrapError(
            "HeadUnreachable",
            f"could not join the head {self.cfg.head_address} within {budget:g} s of this "
            f"Worker's start{why}",
            EXIT_HEAD_UNREACHABLE,
        )

    def _wait_head(self, ready: Callable[[str, int], bool], deadline: float) -> bool:
        """Poll ``ready(head host, head port)`` every HEAD_POLL_SECONDS until it holds (True) or
        ``deadline`` passes (False); a stop ends the wait (``check_stopped``)."""
        while not ready(self.cfg.head_host, self.cfg.head_port):
            self.check_stopped()
            if time.monotonic() > deadline:
                return False
            time.sleep(HEAD_POLL_SECONDS)
        return True

    def run_worker(self) -> int:
        """A Worker other than the head: wait for the head, start this node's Ray
        (``ray start --address --block``) and live as long as it does.

        Raises:
            BootstrapError: ``HeadUnreachable`` past the join deadline, ``RayStartFailed``,
                ``NodeLost`` when the node ends (it always does: a Worker never succeeds alone),
                ``Stopped``.
        """
        cfg = self.cfg
        budget = cfg.join_timeout + JOIN_SLACK_SECONDS  # from this Worker's start, prepare included
        deadline = self.join_deadline
        emit("phase", phase="WaitingForHead", head=cfg.head_address)
        # the head's name first (at once for an IP; on Kubernetes the headless Service's DNS
        # record has the head Pod's IP a moment after the Pod, before its GCS is up): a `ray
        # start --address NAME` that found no address gave up after 60 s, never reaching the
        # GCS up 2 s later (test bed's real node, 2026-12-07); one that finds the address
        # retries a GCS that is not up yet until it answers
        if not self._wait_head(name_resolves, deadline):
            raise self._head_unreachable(budget, resolved=False)
        attempts = 0
        while True:
            # `ray start --address` retries the head itself, so starting at once overlaps its own
            # start-up (seconds of imports) with the head's; if it gives up before the head is
            # up (a long prepare script on the head), wait for the head's port and try again.
            attempts += 1
            proc = self.start_ray()
            node_id = self.wait_node_up(deadline)
            if node_id is not None:
                emit("phase", phase="RayStarted", ray_node_id=node_id)
                code = proc.wait()
                self.check_stopped()
                if not self._start_again(code, attempts, deadline):
                    raise BootstrapError(
                        "NodeLost",
                        f"`ray start --block` exited with code {code}: this Ray node is gone",
                        EXIT_NODE_LOST,
                        exit_code=code,
                    )
                continue
            self.check_stopped()
            if proc.poll() is None:
                proc.kill()  # still retrying the GCS, deaf to SIGTERM; nothing of it runs yet
                proc.wait()
            if time.monotonic() > deadline:
                raise self._head_unreachable(budget)
            if port_open(cfg.head_host, cfg.head_port):
                # the head answers: this node failed by itself
                if self._start_again(proc.returncode, attempts, deadline):
                    continue
                raise self.ray_exited("start")
            emit("phase", phase="WaitingForHead", head=cfg.head_address, retry=True)
            if not self._wait_head(port_open, deadline):
                raise self._head_unreachable(budget)

    def _start_again(self, code: int | None, attempts: int, deadline: float) -> bool:
        """After this Worker's ``ray start`` ended with ``code`` (its ``attempts``-th): whether
        to run it once more, said in a ``warning`` line (``RayStartRetried``). Only a start that
        failed before its node registered (:meth:`RayNode.start_failed_early`), while the head
        answers, within :data:`RAY_START_ATTEMPTS` and the join deadline."""
        if (not self.start_failed_early(code) or attempts >= RAY_START_ATTEMPTS
                or time.monotonic() > deadline
                or not port_open(self.cfg.head_host, self.cfg.head_port)):
            return False
        emit("warning", reason="RayStartRetried",
             message=f"`ray start` exited with code {code} before this Ray node was up; starting "
                     f"it again (attempt {attempts + 1} of {RAY_START_ATTEMPTS}); its output is in "
                     "this Worker's log",
             node_rank=self.cfg.node_rank, worker=self.cfg.worker)
        self.wait_raylet_gone()
        return True

    def run(self) -> int:
        """The Worker's whole life: facts, prepare script, Ray authentication check, the
        record's facts started in the background, then :meth:`run_head` or :meth:`run_worker`;
        every failure is reported (a ``failed`` line) and becomes the exit status; children are
        stopped on the way out, and the record's facts waited for (at most the stop grace)."""
        try:
            emit("facts", **collect_facts(self.cfg))
            if self.cfg.working_dir and not os.path.isdir(self.cfg.working_dir):
                # e.g. a path of the submitting machine that is not in the image (Kubernetes)
                raise BootstrapError(
                    "BadConfig",
                    f"RLARK_WORKING_DIR={self.cfg.working_dir!r} (spec.workingDir) is not a "
                    "directory in this Worker",
                    EXIT_BAD_CONFIG,
                )
            run_prepare(self.cfg, self.spawn, self.check_stopped)
            self.check_ray_auth()  # after the prepare script, which may install Ray
            # after the prepare script, so what it installed is what is recorded; beside `ray
            # start`, at idle priority, not before it: on a machine busy with Ray's start-ups
            # they wait for a free CPU instead of holding up this Worker's node
            self.record_facts = FactsInBackground(self.cfg, lambda facts: emit("facts", **facts),
                                                  close_fds=report.keeper_fds())
            code = self.run_head() if self.cfg.is_head else self.run_worker()
        except BootstrapError as exc:
            if exc.reason == "Stopped" or self.stopping.is_set():
                code = EXIT_STOPPED  # the keeper reports the stop
            else:
                emit(
                    "failed",
                    reason=exc.reason,
                    message=exc.message,
                    node_rank=self.cfg.node_rank,
                    worker=self.cfg.worker,
                    status=exc.status,  # what this Worker exits with (shown once its Run ends)
                    **exc.details,
                )
                code = exc.status
        finally:
            self.shutdown(self.cfg.stop_grace)
            if self.record_facts is not None:  # reported before this Worker ends, if in time
                self.record_facts.finish(self.cfg.stop_grace)
        return code


def main() -> int:
    """``worker``: the Worker's bootstrap with the ``RLARK_*`` environment, started by the
    keeper (keeper.py), which gives it ``RLARK_REPORT_FD`` and ``RLARK_CONTROL_FD``. Returns
    the exit status."""
    if isinstance(sys.stdout, io.TextIOWrapper):  # the workload's lines reach the log at once
        sys.stdout.reconfigure(line_buffering=True)
    report.attach(os.environ)
    try:
        cfg = BootstrapConfig.from_env(dict(os.environ))
    except BootstrapError as exc:
        emit("failed", reason=exc.reason, message=exc.message, status=exc.status)
        return exc.status
    boot = Bootstrap(cfg, dict(os.environ))
    signal.signal(signal.SIGTERM, boot.on_stop_signal)
    signal.signal(signal.SIGINT, boot.on_stop_signal)
    return boot.run()
