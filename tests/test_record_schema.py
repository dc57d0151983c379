"""The run record has one format: the closed pydantic models of rlark.record.schema, which the
builder produces every record through, which publish its JSON Schema, and without which the
store keeps no record (issue 20, item 3)."""

from __future__ import annotations

import copy

import jsonschema
import pytest
from sqlalchemy import select, update

from rlark.record.build import build_record
from rlark.record.schema import RecordInvalid, RecordV2, record_schema
from tests.test_record_v2 import COMPOSED, PROBES, V1, facts, rows


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(record_schema())


def built() -> dict[str, dict]:
    return {"final": build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True),
            "provisional": build_record(*rows()),
            "no composition": build_record(*rows(), probes=PROBES, final=True)}


@pytest.mark.parametrize("kind", ["final", "provisional", "no composition"])
def test_a_built_record_is_what_its_model_holds_and_what_the_schema_publishes(kind):
    rec = built()[kind]
    assert RecordV2.model_validate(rec).model_dump(exclude_unset=True) == rec
    assert list(validator().iter_errors(rec)) == []


def test_the_published_schema_is_closed():
    rec = built()["final"]
    broken = {
        "a key at the top": {**rec, "stored": True},
        "a key in a Worker": {**rec, "workers": {**rec["workers"], "items": [
            {**rec["workers"]["items"][0], "gpu": 1}, *rec["workers"]["items"][1:]]}},
        "a key in a check": {**rec, "checks": {**rec["checks"], "items": [
            {**rec["checks"]["items"][0], "why": "x"}]}},
        "a key in the resolved config": {**rec, "configs": {**rec["configs"], "resolved": {
            **rec["configs"]["resolved"], "extra": 1}}},
        "a key in the times": {**rec, "times": {**rec["times"], "queued": None}},
    }
    for what, bad in broken.items():
        assert list(validator().iter_errors(bad)), what
        with pytest.raises(ValueError):
            RecordV2.model_validate(bad)
    # the free-form places are JSON values, whatever their keys
    free = copy.deepcopy(rec)
    free["workers"]["items"][0]["facts"]["anything"] = {"a": [1, None, {"b": 2.5}]}
    free["spec"]["x-extra"] = True
    free["configs"]["resolved"]["data"] = {"any": {"hydra": ["config"]}}
    assert list(validator().iter_errors(free)) == []


def test_reports_of_any_shape_still_give_a_record_that_matches_the_schema():
    # a Worker's own code may report anything; the record keeps it as JSON values, and its
    # typed columns as text, so a report can never keep its Run's record from being stored
    odd = facts(1, "pool")
    odd.update({"hostname": 5, "ray": 3, "python": {"v": 3}, "imageDigest": 7,
                "ray_node_table": {"labels": {"rlark.io/node-rank": 1}, "resources": [1, 2]},
                "factsSeconds": "slow"})
    odd["code"]["workingDir"]["diffSha256"] = 12
    job, run, workers = rows(facts={1: odd})
    workers[1].host, workers[1].ip = 5, ["10.0.0.1"]
    composed = {**COMPOSED, "data": {**COMPOSED["data"], 1: ("a", "b")}}
    rec = build_record(job, run, workers, composed=composed, probes=PROBES, final=True)
    assert list(validator().iter_errors(rec)) == []
    w = rec["workers"]["items"][1]
    assert (w["host"], w["ip"], w["rayVersion"]) == ("5", '["10.0.0.1"]', 3)
    assert rec["imageDigests"] == {"pool": {"7": ["rec-pool-0"]}}
    assert rec["configs"]["resolved"]["data"]["1"] == ["a", "b"]


def _a_run(store, name: str) -> None:
    from rlark.store import JobRow, RunRow
    with store.session() as s:
        job = JobRow(name=name, spec={"kind": "Job"}, project_id=1)  # the default project
        s.add(RunRow(job=job, number=1, uid=f"u-{name}", spec={"kind": "Job"}))


def test_a_record_that_does_not_match_the_schema_cannot_be_stored(store):
    from rlark.store import RunRow

    _a_run(store, "rec")
    good = built()["final"]
    broken = {
        "stored": {**good, "stored": True},
        "workers.items.0.nodeRank": {**good, "workers": {**good["workers"], "items": [
            {**good["workers"]["items"][0], "nodeRank": "0"}]}},
        "checks": {k: v for k, v in good.items() if k != "checks"},
        "checks.status": {**good, "checks": {"status": "maybe", "items": []}},
        "recordVersion": V1,  # read when stored long ago, never stored now
    }
    for field, bad in broken.items():
        with store.session() as s:
            run = s.scalar(select(RunRow))
            with pytest.raises(RecordInvalid) as err:
                run.record = bad
        assert field in str(err.value), (field, str(err.value))
    with store.session() as s:
        assert s.scalar(select(RunRow)).record is None
        s.scalar(select(RunRow)).record = good
    with store.session() as s:
        assert s.scalar(select(RunRow)).record == good


def test_records_stored_before_are_still_read(store):
    # rows written by an older RLark: the store reads them as they are, every reader shows them
    from rlark.record.diff import diff_records
    from rlark.record.export import render
    from rlark.store import RunRow

    _a_run(store, "old")
    with store.session() as s:
        s.execute(update(RunRow).values(record=V1))
    with store.session() as s:
        rec = s.scalar(select(RunRow)).record
    assert rec == V1
    assert render(rec, "md").startswith("# Run record: old run 1")
    assert diff_records(rec, built()["final"])["a"]["recordVersion"] == 1
    assert list(validator().iter_errors(rec)) == []
