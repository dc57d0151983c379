"""``rlark record diff`` (issue 19, item 5): the spec the user changed first, then what RLark
observed; addresses and per-run identities are no differences; values shown as values, bytes in
units. Pure: records built from plain rows (tests/test_record_v2.py)."""

from __future__ import annotations

import copy
from datetime import timedelta

from rlark.record.build import build_record
from rlark.record.export import human_bytes
from rlark.record.diff import SECTIONS, comparable, diff_records, display, per_run_resource
from tests.test_record_v2 import COMPOSED, PROBES, T0, rows


def rerun(env: dict[str, str] | None = None, **spec_changes):
    """The rows of another Run of the same Job: everything that is per run by nature differs
    (uid, times, IPs, Ray node ids and their ``node:<ip>`` resources, pids, log paths, the
    Workers' uid and directories); ``env`` sets plain env values on the head role, the other
    keyword arguments set keys of ``spec.spec``."""
    job, run, workers = rows()
    run = copy.deepcopy(run)
    run.number, run.uid = 2, "u2"
    run.created_at = run.started_at = T0 + timedelta(hours=1)
    run.running_at, run.finished_at = T0 + timedelta(hours=1, seconds=9), T0 + timedelta(hours=2)
    body = run.spec["spec"]
    body.update(spec_changes)
    if env:
        body["roles"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    for w in workers:
        w.ip = f"127.0.0.{9 + w.node_rank}"
        w.ray_node_id = f"{w.node_rank + 5}" * 40
        w.started_at, w.finished_at = run.started_at, run.finished_at
        w.log_path = f"/logs/run2/{w.name}.log"
        w.facts = copy.deepcopy(w.facts)
        w.facts.update(pid=4000 + w.node_rank, ip=w.ip, ray_node_id=w.ray_node_id,
                       keeper={"protected": True, "uid": 1879049999, "sandbox": True})
        w.facts["ray_node_rank"]["rayletPid"] = 777
        w.facts["ray_node_table"]["resources"] = {
            "CPU": 1.0, "GPU": float(w.node_rank == 0), f"node:{w.ip}": 1.0,
            "memory": float(1 << 30), "object_store_memory": 322122547.0}
        w.facts["code"]["workingDir"]["path"] = f"/home/rlark/workers/u2/{w.node_rank}/home"
    return job, run, workers


def first(env: dict[str, str] | None = None):
    job, run, workers = rows()
    if env:
        run.spec = copy.deepcopy(run.spec)
        run.spec["spec"]["roles"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    for w in workers:
        w.facts = copy.deepcopy(w.facts)
        w.facts["ray_node_table"]["resources"] = {
            "CPU": 1.0, "GPU": float(w.node_rank == 0), f"node:127.0.0.{w.node_rank + 2}": 1.0,
            "memory": float(1 << 30), "object_store_memory": 322122547.0}
    return job, run, workers


def final(job, run, workers) -> dict:
    return build_record(job, run, workers, composed=COMPOSED, probes=PROBES, final=True)


def test_two_runs_differing_in_one_env_value_show_that_value_and_nothing_else():
    a = final(*first(env={"MODE": "alpha"}))
    b = final(*rerun(env={"MODE": "beta"}))
    d = diff_records(a, b)
    assert d["changes"] == [{"section": "spec", "key": "spec.roles[head].env[MODE].value",
                             "a": "alpha", "b": "beta", "display": {"a": "alpha", "b": "beta"}}]
    assert d["same"] is False
    # and two runs of one spec: no differences at all, whatever their addresses and times
    assert diff_records(final(*first(env={"MODE": "alpha"})),
                        final(*rerun(env={"MODE": "alpha"})))["same"] is True


def test_the_spec_comes_first_then_what_was_observed():
    b_rows = rerun(env={"MODE": "beta"})
    b_rows[2][2].facts["torch"] = "2.14.0"  # observed: a Worker ran another torch
    d = diff_records(final(*first(env={"MODE": "alpha"})), final(*b_rows))
    assert [c["section"] for c in d["changes"]] == ["spec", "versions", "result"]
    assert SECTIONS[0] == "spec"
    assert [c["key"] for c in d["changes"]] == [
        "spec.roles[head].env[MODE].value", "torch", "check.versions"]


def test_secret_references_compare_by_name_and_key():
    job, run, workers = rerun()
    run.spec["spec"]["roles"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-b", "key": "token"}}}]
    a_rows = first()
    a_rows[1].spec = copy.deepcopy(a_rows[1].spec)
    a_rows[1].spec["spec"]["roles"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-a", "key": "token"}}}]
    d = diff_records(final(*a_rows), final(job, run, workers))
    assert [(c["key"], c["a"], c["b"]) for c in d["changes"]] == [
        ("spec.roles[head].env[TOKEN].valueFrom.secretKeyRef.name", "hub-a", "hub-b")]


def test_images_resources_scripts_and_mounts_are_spec_changes():
    job, run, workers = rerun()
    head = run.spec["spec"]["roles"][0]
    head["image"] = "docker.io/rlinf/rlinf:0.3.1"
    head["resources"]["memory"] = "2Gi"
    head["prepareScript"] = "pip install -e .\n"
    head["mounts"][0]["source"] = "/w/out2"
    run.spec["spec"]["runScript"] = "cd src\npython train.py runner.max_steps=3\necho done\n"
    d = diff_records(final(*first()), final(job, run, workers))
    spec = {c["key"]: c for c in d["changes"] if c["section"] == "spec"}
    assert set(spec) == {"spec.roles[head].image", "spec.roles[head].resources.memory",
                         "spec.roles[head].prepareScript", "spec.roles[head].mounts[out].source",
                         "spec.runScript"}
    assert spec["spec.roles[head].image"]["b"] == "docker.io/rlinf/rlinf:0.3.1"
    assert spec["spec.roles[head].prepareScript"]["display"] == {"a": '""', "b": "pip install -e .\n"}
    # a script of several lines against another: the lines that differ, numbered
    assert spec["spec.runScript"]["display"] == {
        "a": "(no line the other lacks)", "b": "1: cd src\n…\n3: echo done"}


def test_addresses_and_identities_are_left_out_of_what_is_compared():
    c = comparable(final(*first()))
    flat = repr(c)
    for noise in ("127.0.0.", "node:", "rayNodeId", "pid", "1879048200", "/logs/", "u1",
                  "2026-12-01"):
        assert noise not in flat, noise
    assert c["resources"]["rank 0.ray.memory"] == float(1 << 30)
    assert c["resources"]["rank 0.seen.memoryBytes"] == 8 << 30
    assert per_run_resource("node:10.0.0.7") and per_run_resource("node:fe80::1")
    assert not per_run_resource("node:__internal_head__") and not per_run_resource("CPU")


def test_values_show_as_values_and_bytes_in_units():
    job, run, workers = rerun()
    workers[0].facts["visible_memory_bytes"] = 25275990016
    workers[0].facts["ray_node_table"]["resources"]["memory"] = float(3 << 30)
    d = diff_records(final(*first()), final(job, run, workers))
    shown = {c["key"]: c["display"] for c in d["changes"]}
    assert shown["rank 0.seen.memoryBytes"] == {"a": "8 GiB", "b": "23.5 GiB"}
    assert shown["rank 0.ray.memory"] == {"a": "1 GiB", "b": "3 GiB"}
    assert display("rank 0.seen.gpuModels", ["A100", "H100"]) == "A100, H100"
    assert display("x", None) == "-" and display("x", True) == "true"
    assert display("x", []) == "(none)"


def test_human_bytes():
    assert human_bytes(25275990016) == "23.5 GiB"
    assert human_bytes(1 << 30) == "1 GiB" and human_bytes(float(3 << 30)) == "3 GiB"
    assert human_bytes(322122547) == "307.2 MiB"
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB"
    assert human_bytes(None) == "-" and human_bytes("2Gi") == "2Gi"


def test_a_provisional_side_says_so():
    job, run, workers = rows()
    live = build_record(job, run, workers)  # before every Worker ended: not final
    d = diff_records(final(*rows()), live)
    assert (d["a"]["provisional"], d["b"]["provisional"]) == (False, True)
