"""A controller's pass does not load the large blobs of the Runs it reconciles (issue 23, item 3:
"large blobs deferred"): each Worker's ``facts`` (package lists, diffs: megabytes at scale) and
the records of the Job's earlier Runs stay in the database while a pass loads a Run
(:data:`rlark.controller.rows.RUN_GRAPH`), watches its Workers (``_fingerprint``) and acts; the
facts a Worker reports are merged into the stored ones when the pass commits, and the run record
built at the end still has every Worker's facts. Real SQLite and PostgreSQL stores; nothing is
launched (the Run is moved to Starting by hand, its head's lifecycle lines written to its log)."""

from __future__ import annotations

import json

from sqlalchemy import event, inspect, select, update

from rlark.controller.loop import Controller
from rlark.controller.rows import RUN_GRAPH
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.services.jobs import JobService
from rlark.status import Cause, Phase
from rlark.store import JobRow, RunRow, Store, WorkerRow
from rlark.store.runs import new_run
from tests.test_local_runtime import job_yaml

#: a package list as the bootstrap reports it (about 100 KiB of JSON)
PACKAGES = {"list": [f"package-{i}==1.{i}.0" for i in range(5000)], "sha256": "ab" * 32}
OLD_RECORD = {"note": "x" * 100_000}


class Statements:
    """The SQL statements ``store``'s engine runs inside a ``with`` block."""

    def __init__(self, store: Store):
        self.engine, self.seen = store.engine, []

    def _note(self, _conn, _cursor, statement, *_args):
        self.seen.append(statement)

    def __enter__(self) -> list[str]:
        event.listen(self.engine, "before_cursor_execute", self._note)
        return self.seen

    def __exit__(self, *exc) -> None:
        event.remove(self.engine, "before_cursor_execute", self._note)


def reading_facts(statements: list[str]) -> list[str]:
    return [st for st in statements if "workers.facts" in st]


def earlier_and_current_run(store: Store, log_path) -> tuple[int, int]:
    """Job ``blobs``: its Run 1 ended (Succeeded) with a large record and Workers with package
    lists, and its current Run 2 Starting, with package lists too, its head logging to
    ``log_path``. Returns the two Runs' ids."""
    JobService(store).create(job_yaml("blobs", pool_workers=1))
    with store.session() as s:
        job = s.scalars(select(JobRow).where(JobRow.name == "blobs")).one()
        first = job.runs[0]
        first.phase = Phase.Succeeded
        for w in first.workers:
            w.facts = {"packages": PACKAGES, "python": "3.11.9", "released": True}
            w.released = True
        current = new_run(job, Cause.Restarted)
        s.add(current)
        s.flush()
        job.current_run_id = current.id
        current.phase = job.phase = Phase.Starting
        for w in current.workers:
            w.facts = {"packages": PACKAGES, "python": "3.11.9"}
            if w.is_head:
                w.log_path = str(log_path)
        ids = first.id, current.id
    with store.session() as s:  # a stored record as large as a real one (past the schema check)
        s.execute(update(RunRow).where(RunRow.id == ids[0]).values(record=OLD_RECORD))
    return ids


def lifecycle_line(event_kind: str, **data) -> str:
    return "RLARK_EVENT " + json.dumps({"ts": 1.0, "event": event_kind, **data}) + "\n"


def test_a_pass_loads_no_facts_and_no_earlier_record_yet_keeps_and_records_them(store, tmp_path):
    log_path = tmp_path / "head.log"
    log_path.write_text(lifecycle_line("facts", hostname="node-a", cuda="12.4")
                        + lifecycle_line("phase", phase="StartingRay", ray_node_id="f" * 56))
    ctl = Controller(store, LocalRuntime())
    ctl.reconcile_once()  # its first pass (adoption) on an empty store
    earlier, current = earlier_and_current_run(store, log_path)

    # what a pass loads of the Run: neither facts nor the earlier Run's record
    with Statements(store) as sql, store.session() as s:
        run = s.get(RunRow, current, options=RUN_GRAPH)
        runs = {r.id: r for r in run.job.runs}
        assert set(runs) == {earlier, current}
        workers = [w for r in runs.values() for w in r.workers]
        assert len(workers) == 4
        assert all("facts" in inspect(w).unloaded for w in workers)
        assert "record" in inspect(runs[earlier]).unloaded
        assert reading_facts(sql) == []
        assert not any("runs.record" in st and "runs.job_id IN" in st for st in sql)

    with Statements(store) as sql:
        ctl.reconcile_once()
    # the head's facts line and its Ray node id were merged at the commit: one read of the
    # facts of the Workers that reported some, none of the others'
    assert len(reading_facts(sql)) == 1, reading_facts(sql)
    with store.session() as s:
        head = s.scalars(select(WorkerRow).where(WorkerRow.run_id == current,
                                                 WorkerRow.is_head.is_(True))).one()
        assert head.facts["packages"] == PACKAGES and head.facts["python"] == "3.11.9"
        assert (head.facts["cuda"], head.facts["ray_node_id"]) == ("12.4", "f" * 56)
        assert head.host == "node-a"
        assert s.get(RunRow, earlier).record == OLD_RECORD

    with Statements(store) as sql:  # nothing new: no facts read at all
        ctl.reconcile_once()
    assert reading_facts(sql) == []
    with Statements(store) as sql:  # the Workers watched between passes: their handles only
        ctl._fingerprint(refresh=True)
    assert sql and not any("workers.facts" in st or "workers.lifecycle" in st for st in sql), sql

    # the record, built when the Run ends, has every Worker's facts
    jobs = JobService(store)
    jobs.stop("blobs")
    for _ in range(5):
        ctl.reconcile_once()
    rec = jobs.record("blobs", 2)
    assert rec["provisional"] is False
    items = rec["workers"]["items"]
    head_entry = next(w for w in items if w["isHead"])
    assert (head_entry["facts"]["cuda"], head_entry["facts"]["python"]) == ("12.4", "3.11.9")
    assert len(items) == 2 and all(w["facts"]["python"] == "3.11.9" for w in items)
    assert [p["packages"] for p in rec["packageLists"].values()] == [PACKAGES["list"]]


def test_a_facts_line_past_the_bound_is_dropped_at_the_commit_once_said(store, tmp_path):
    """The bound on a Worker's stored facts holds though the pass never loaded them: the line
    that would pass it is dropped when the pass commits, with one Warning Event."""
    log_path = tmp_path / "head.log"
    log_path.write_text(lifecycle_line("facts", blob="y" * 4000)
                        + lifecycle_line("facts", cuda="12.4"))
    ctl = Controller(store, LocalRuntime())
    ctl.reconcile_once()  # its first pass (adoption) on an empty store
    _, current = earlier_and_current_run(store, log_path)
    size = len(json.dumps({"packages": PACKAGES, "python": "3.11.9"}))
    ctl.MAX_FACTS_BYTES = size + 1000  # the stored facts fit; with the blob line they would not
    ctl.reconcile_once()
    with store.session() as s:
        head = s.scalars(select(WorkerRow).where(WorkerRow.run_id == current,
                                                 WorkerRow.is_head.is_(True))).one()
        assert "blob" not in head.facts and head.facts["cuda"] == "12.4"
        assert head.lifecycle.get("facts_dropped") is True
    dropped = [e for e in JobService(store).events("blobs") if e["reason"] == "ReportsDropped"]
    assert len(dropped) == 1 and "facts reached" in dropped[0]["message"]


def test_watching_the_live_workers_between_passes_is_one_read_however_many_there_are(store, tmp_path):
    """``_fingerprint(refresh=True)`` after each pass reads the live Workers' handles in one
    statement: a column it needs left out of the read (their Run's id, once) made it one more
    read per Worker, 1,000 at 1,000 Workers after every pass (issue 23)."""
    JobService(store).create(job_yaml("many", pool_workers=24))
    with store.session() as s:
        run = s.scalars(select(JobRow).where(JobRow.name == "many")).one().runs[0]
        run.phase = Phase.Starting
        for w in run.workers:  # launched (a handle), alive for the store
            w.handle, w.log_path = f"rl/{w.name}", str(tmp_path / f"{w.name}.log")
    ctl = Controller(store, LocalRuntime())
    with Statements(store) as sql:
        seen = ctl._fingerprint(refresh=True)
    assert [len(v) for v in seen.values()] == [25]
    assert len(sql) == 1, sql
