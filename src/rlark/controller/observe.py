"""The observe pass: what the Workers of an active Run say (their lifecycle lines, read from the
stored offsets) and what the runtime sees of them (alive, exit status, a failure it knows), taken
into the Worker rows; then the state machine's view of the Run (:func:`rlark.controller.phases.decide`
decides from it).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session, object_session

from rlark.controller.lifecycle import (check_event, merge_facts, node_table_facts, note_moment,
                                       read_new_events)
from rlark.controller.phases import ConditionUpdate, RunView, WorkerView, worker_phase
from rlark.controller.rows import add_facts, iso_time, ref, set_conditions, utcnow, when
from rlark.controller.state import ControllerState
from rlark.runtimes.base import Observed
from rlark.bootstrap.usage import add_sample
from rlark.status import ConditionType, EventType, Phase, Reason, reported_reason, worker_phase_of
from rlark.store import RunRow, WorkerRow
from rlark.store.runs import add_event


def merge_runtime_facts(w: WorkerRow, seen: Observed,
                        known: dict[int, dict[str, Any]] | None = None) -> None:
    """Facts the runtime saw (a Pod's image digest, node) join the Worker's own facts
    (:func:`~rlark.controller.rows.add_facts`: merged when the pass commits). ``known``: Worker
    id -> the runtime facts already merged and committed (the controller's memory of them): the
    same facts again add nothing, so a pass that sees no change reads and writes no facts."""
    facts = seen.facts
    if not facts or (known is not None and known.get(w.id) == facts):
        return
    add_facts(w, dict(facts))
    s = object_session(w)
    if s is not None:
        s.info.setdefault(ControllerState.RUNTIME_FACTS, {})[w.id] = dict(facts)


def worker_view(w: WorkerRow) -> WorkerView:
    """The state machine's view of one Worker row (:class:`rlark.controller.phases.WorkerView`),
    from its lifecycle as the observe pass keeps it."""
    life = w.lifecycle or {}
    return WorkerView(
        name=w.name,
        role=w.role,
        node_rank=w.node_rank,
        is_head=w.is_head,
        launched=w.launched,
        alive=w.launched and not life.get("gone"),
        exit_code=w.exit_code,
        failed=life.get("failed"),
        running=bool(life.get("running")),
        running_at=life.get("running") if isinstance(life.get("running"), (int, float)) else None,
        run_finished=life.get("run_finished"),
        copying_out=life.get("copying_out") if isinstance(life.get("copying_out"), (int, float))
        else None,
        stopped=bool(life.get("stopped")),
        joined=bool(life.get("joined")),
        reported_phase=worker_phase_of(life.get("phase")),
        trusted=(w.run.channel != "keeper"
                 or bool((life.get("keeper") or {}).get("protected"))),
        heartbeat=life.get("heartbeat"),
        last_seen=life.get("seen_at"),
        stopped_since=life.get("stopped_since"),
        preempted=life.get("preempted"),
    )


def set_observed_conditions(s: Session, run: RunRow, updates: list[ConditionUpdate]) -> None:
    """:func:`set_conditions`, with an Event when ``Responsive`` turns False (a Warning naming
    the silent Workers) or True again."""
    before = next((c.get("status") for c in run.conditions or []
                   if c.get("type") == ConditionType.Responsive), None)
    set_conditions(run, updates)
    for u in updates:
        if u.type != ConditionType.Responsive or str(u.status) == str(before) \
                or (before is None and u.status):
            continue
        add_event(s, run.job_id, u.reason, u.message, run_number=run.number,
                  type=EventType.Normal if u.status else EventType.Warning)


class Observing(ControllerState):
    """The observe pass of :class:`~rlark.controller.loop.Controller`."""

    def _observe(self, s: Session, run: RunRow) -> None:
        by_rank = {w.node_rank: w for w in run.workers}
        for w in run.workers:
            if not w.log_path or w.released:
                continue
            events, w.log_offset = read_new_events(w.log_path, w.log_offset, run.event_token)
            life = dict(w.lifecycle or {})
            if events:
                self._apply_events(s, run, w, events, life, by_rank)
                # _apply_joined may have marked this Worker joined meanwhile: merge, keep both
                w.lifecycle = {**(w.lifecycle or {}), **life}
                life = dict(w.lifecycle)
            if w.launched and not life.get("gone"):
                seen = self.runtime.observe(ref(w))
                merge_runtime_facts(w, seen, self._runtime_facts)
                window = self._adopted.pop(w.id, None)
                if (seen.failure and seen.failure[0] == Reason.Preempted
                        and not life.get("preempted")):
                    # kept apart from its own report: a preemption explains the rest
                    life["preempted"] = {"message": seen.failure[1], "ts": time.time()}
                    w.lifecycle = {**(w.lifecycle or {}), **life}
                if seen.failure and not life.get("failed"):
                    # the runtime knows why the Worker cannot run (a Pod's ImagePull...)
                    reason, message = seen.failure
                    if window is not None and reason in (Reason.WorkerLost, Reason.HeadLost):
                        message = (f"{message}; it ended while the RLark server was down, between "
                                   f"{iso_time(window[0])} and {iso_time(window[1])}")
                    life["failed"] = {"reason": reason, "message": message, "ts": time.time(),
                                      "source": "runtime"}
                    w.lifecycle = {**(w.lifecycle or {}), **life}
                if not seen.alive:
                    # read everything the Worker wrote before it ended
                    events, w.log_offset = read_new_events(w.log_path, w.log_offset,
                                                           run.event_token, to_end=True)
                    self._apply_events(s, run, w, events, life, by_rank)
                    code = self._observed_exit(s, run, w, seen, life)
                    if window is not None and run.phase in (Phase.Starting, Phase.Running):
                        self._lost_while_down(w, life, window)
                    life["gone"] = True
                    w.exit_code = code
                    w.lifecycle = life
                    w.finished_at = utcnow()

    #: Warning Events one Worker's lifecycle lines may add to its Job; later ones are counted

    MAX_WARNING_EVENTS = 20
    #: the most of facts one Worker's row keeps (JSON bytes; the keeper's bound, again here for
    #: a channel that is not the keeper's): what would pass it is dropped, once said
    MAX_FACTS_BYTES = 8 * 1024 * 1024

    def _apply_events(self, s: Session, run: RunRow, w: WorkerRow, events: list[dict],
                      life: dict, by_rank: dict[int, WorkerRow]) -> None:
        """Take a Worker's lifecycle lines into its row (``life``: its lifecycle, updated in
        place). Each line is checked for its kind's shape first (:func:`check_event`); a line
        that is not well formed is dropped, with one Warning Event per Worker saying so.
        Warning lines become Warning Events up to :attr:`MAX_WARNING_EVENTS` per Worker."""
        if events:
            life["seen_at"] = time.time()  # a sign of life, on this server's clock
        for raw in events:
            ev = check_event(raw)
            if ev is None:
                if not life.get("malformed"):
                    life["malformed"] = True
                    add_event(s, run.job_id, Reason.ReportsDropped,
                              f"a lifecycle line of {w.name} ({str(raw.get('event'))[:40]!r}) is "
                              "not well formed and was ignored (and any more such lines)",
                              run_number=run.number, worker=w.name, type=EventType.Warning)
                continue
            note_moment(life, ev)
            kind = ev["event"]
            if kind == "facts":
                # merged when the pass commits (the stored facts are not loaded by a pass); one
                # that would pass the bound is dropped then, once said (lifecycle.facts_dropped)
                add_facts(w, merge_facts({}, ev), bound=self.MAX_FACTS_BYTES)
                w.host = ev.get("hostname") or w.host
                w.ip = w.ip or ev.get("ip")
            elif kind == "alive":
                if ev.get("stopped"):
                    life.setdefault("stopped_since", time.time())
                    life["stopped"] = [str(x)[:40] for x in ev["stopped"][:4]]
                else:
                    life.pop("stopped_since", None)
                    life.pop("stopped", None)
            elif kind == "usage":
                life["usage"] = add_sample(life.get("usage"), ev)
            elif kind == "keeper":
                life["keeper"] = {"protected": ev["protected"], "uid": ev["uid"]}
                if isinstance(ev.get("heartbeat"), (int, float)) and ev["heartbeat"] > 0:
                    life["heartbeat"] = float(ev["heartbeat"])
                add_facts(w, {"keeper": {
                    k: ev.get(k) for k in ("protected", "uid", "sandbox", "unprotected")
                    if ev.get(k) is not None}})
            elif kind == "phase":
                life["phase"] = ev.get("phase")
                if ev.get("ray_node_id"):
                    w.ray_node_id = ev["ray_node_id"]
                    add_facts(w, {"ray_node_id": ev["ray_node_id"]})
            elif kind == "nodes":
                self._apply_joined(s, run, by_rank, ev)
            elif kind in ("failed", "run_finished"):
                life[kind] = ev
            elif kind == "running":
                life["running"] = ev.get("ts")
            elif kind == "copying_out":
                life["copying_out"] = ev.get("run_ended")
            elif kind == "stopped":
                life["stopped"] = True
            elif kind == "exit":
                life["exit"] = ev.get("code")
            elif kind == "mount":
                # each object-storage mount's mode (and why, where auto chose copy), with the
                # bytes copied in and out in copy mode (record and describe show them)
                mounts = dict(life.get("mounts") or {})
                seen = {**mounts.get(ev["name"], {}), "mode": ev["mode"],
                        **{k: ev[k] for k in ("requested", "why") if ev.get(k)}}
                if ev["mode"] == "copy":
                    seen.update({f"{ev['direction']}Files": ev["files"],
                                 f"{ev['direction']}Bytes": ev["bytes"]})
                else:
                    seen["mounted" if ev["direction"] == "mount" else "unmounted"] = True
                mounts[ev["name"]] = seen
                life["mounts"] = mounts
            elif kind == "warning":
                # trouble that does not end the Run, e.g. the bootstrap saw Ray's worker ports
                # run out ("No available ports"): a Warning Event naming the Worker
                n = life["warnings"] = int(life.get("warnings") or 0) + 1
                if n <= self.MAX_WARNING_EVENTS:
                    add_event(s, run.job_id, Reason.of(ev.get("reason")) or Reason.WorkerWarning,
                              str(ev.get("message") or ""), run_number=run.number,
                              worker=w.name, type=EventType.Warning)
                elif n == self.MAX_WARNING_EVENTS + 1:
                    add_event(s, run.job_id, Reason.WarningsSuppressed,
                              f"{w.name} reported more than {self.MAX_WARNING_EVENTS} warnings; "
                              "the rest are not kept as Events", run_number=run.number,
                              worker=w.name, type=EventType.Warning)

    @staticmethod
    def _observed_exit(s: Session, run: RunRow, w: WorkerRow, seen: Observed,
                       life: dict) -> int | None:
        """A gone Worker's exit status: what the runtime observed, else its keeper's ``exit``
        line. A line that says otherwise than the observation is reported (a Warning Event),
        not believed; so is a head's ``run_finished`` from a keeper whose channel is not
        protected (:func:`rlark.controller.phases.run_result`)."""
        said = life.get("exit")
        if seen.exit_code is None:
            return said
        finished = life.get("run_finished")
        trusted = bool((life.get("keeper") or {}).get("protected")) or run.channel != "keeper"
        claims = []
        if said is not None and said != seen.exit_code:
            claims.append(f"exit status {said}")
        if finished is not None and not trusted and finished.get("exit_code") != seen.exit_code:
            claims.append(f"run script exit status {finished.get('exit_code')}")
        if claims:
            add_event(s, run.job_id, Reason.LifecycleContradiction,
                      f"{w.name}'s lifecycle lines say {' and '.join(claims)}, but the runtime saw "
                      f"it exit with {seen.exit_code}; the runtime's observation is kept",
                      run_number=run.number, worker=w.name, type=EventType.Warning)
        return seen.exit_code

    @staticmethod
    def _lost_while_down(w: WorkerRow, life: dict, window: tuple[float | None, float]) -> None:
        """An adopted Worker found gone that said nothing about its end (no failed, stopped,
        exit or run_finished line): it ended while no server watched it, between the previous
        server's last heartbeat and the adoption (``WorkerLost`` naming its rank and that window)."""
        if any(life.get(k) is not None for k in ("failed", "run_finished", "exit")) or life.get("stopped"):
            return
        since, found = window
        life["failed"] = {
            "reason": Reason.WorkerLost, "ts": found,
            "message": (f"ended while the RLark server was down, between {iso_time(since)} and "
                        f"{iso_time(found)}, without a word in its log"),
        }

    def _apply_joined(self, s: Session, run: RunRow, by_rank: dict[int, WorkerRow], ev: dict) -> None:
        missing = ev.get("missing") or []
        if run.phase == Phase.Starting:
            joined = len(by_rank) - len(missing)
            run.reason = Reason.WaitingForWorkers if missing else Reason.AllJoined
            run.message = (f"{joined}/{len(by_rank)} Ray nodes joined"
                           + (f"; waiting for rank{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(map(str, missing))}" if missing else ""))
        for node in ev.get("joined", []):
            w = by_rank.get(node.get("node_rank"))
            if w is None:
                continue
            first_time = not (w.lifecycle or {}).get("joined")
            w.ray_node_id = node.get("ray_node_id") or w.ray_node_id
            w.ip = node.get("ip") or w.ip
            w.lifecycle = {**(w.lifecycle or {}), "joined": True}
            if node.get("labels") is not None and first_time:
                add_facts(w, {"ray_node_table": node_table_facts(node)})
            if first_time:
                add_event(s, run.job_id, Reason.NodeJoined,
                          f"rank {w.node_rank} ({w.name}) joined as Ray node "
                          f"{(w.ray_node_id or '?')[:12]} at {w.ip}",
                          run_number=run.number, worker=w.name,
                          at=when(ev.get("ts") if isinstance(ev.get("ts"), (int, float)) else None, run))

    def _view(self, run: RunRow, now: float | None = None) -> RunView:
        """The state machine's view of the Run (and each Worker's display phase, updated)."""
        workers = []
        for w in run.workers:
            wv = worker_view(w)
            workers.append(wv)
            life = w.lifecycle or {}
            if not w.released and not life.get("settled"):
                w.phase = worker_phase(wv, wv.reported_phase, bool(life.get("joined")))
                if wv.failed:
                    w.reason, w.message = reported_reason(wv.failed.get("reason"),
                                                          str(wv.failed.get("message") or ""),
                                                          worker=True)
        fp = (run.spec or {}).get("spec", {}).get("failurePolicy", {})
        return RunView(phase=run.phase, stop_requested=run.stop_requested, workers=workers,
                       now=time.time() if now is None else now,
                       launched_at=run.started_at.timestamp() if run.started_at else None,
                       join_timeout=float(fp.get("joinTimeoutSeconds", 300)),
                       unresponsive_timeout=float(fp.get("unresponsiveTimeoutSeconds", 300)))
