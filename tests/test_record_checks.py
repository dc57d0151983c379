"""Run record checks that should pass for a good run and fail or warn for a bad one (issue 19,
items 6 and 7): a provisional record says so; RLark's composition of the config passes when it
read the very files the head saw with the run script's overrides; resources compare what Ray
counts too, bytes in units. Pure: records built from plain rows (tests/test_record_v2.py)."""

from __future__ import annotations

import copy

from rlark.record.build import build_record, compare_inputs, public_record
from rlark.record.export import render
from rlark.record.schema import RecordV2
from tests.test_record_v2 import COMPOSED, PROBES, facts, rows


def checks_of(rec: dict) -> dict:
    return {c["id"]: c for c in rec["checks"]["items"]}


# --- provisional (item 6) --------------------------------------------------------------------------


def test_a_record_built_before_the_workers_ended_is_provisional_and_says_so():
    live = build_record(*rows())
    assert live["provisional"] is True and "have not all ended" in live["provisionalReason"]
    assert live["checks"]["status"] == "provisional"
    assert {c["status"] for c in live["checks"]["items"]} <= {"pass", "warn", "fail"}
    md = render(live, "md")
    assert md.splitlines()[2].startswith("- **Provisional:** the Run's Workers have not all ended")
    RecordV2.model_validate(live)

    stored = build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True)
    assert stored["provisional"] is False and "provisionalReason" not in stored
    assert stored["checks"]["status"] == "pass" and "Provisional" not in render(stored, "md")


def test_a_record_stored_before_the_field_existed_reads_as_final():
    stored = build_record(*rows(), composed=COMPOSED, probes=PROBES, final=True)
    old = {k: v for k, v in stored.items() if k != "provisional"}
    assert public_record(old)["provisional"] is False
    assert "provisional" not in old  # the stored row itself is not changed


# --- configs: RLark's composition (item 7) -----------------------------------------------------------


def test_inputs_compare_with_the_heads_snapshot():
    head = {"files": [{"path": "a.yaml", "sha256": "1"}, {"path": "sub/b.yaml", "sha256": "2"}]}
    assert compare_inputs(head, {"files": {"a.yaml": "1", "sub/b.yaml": "2"}}) == {"same": True}
    assert compare_inputs(head, {"files": {"a.yaml": "1", "sub/b.yaml": "3", "c.yaml": "4"}}) == {
        "same": False, "differ": ["c.yaml", "sub/b.yaml"]}
    assert compare_inputs(head, {"files": {"a.yaml": None, "sub/b.yaml": "2"}})["same"] is False
    assert compare_inputs({"absent": "not a directory in this Worker"}, {"files": {}}) == {
        "same": None, "why": "the head did not report the Hydra files it saw (not a directory in "
                            "this Worker)"}
    assert compare_inputs({**head, "filesCut": True}, {"files": {}})["same"] is None
    assert compare_inputs(head, None)["same"] is None


def test_a_composition_from_other_files_or_without_the_run_scripts_overrides_warns():
    changed = {**COMPOSED, "inputs": {"files": {"train.yaml": "bb" * 32}, "cut": False}}
    check = checks_of(build_record(*rows(), composed=changed, probes=PROBES, final=True))["configs"]
    assert check["status"] == "warn" and check["evidence"][0] == (
        "resolved config is RLark's composition from Hydra files that differ from those the head "
        "saw when the Run started (train.yaml): it may not be what ran")

    job, run, workers = rows()
    run.spec = copy.deepcopy(run.spec)
    run.spec["spec"]["runScript"] = "python train.py runner.max_steps=3 algorithm.lr=0.1"
    check = checks_of(build_record(job, run, workers, composed=COMPOSED, probes=PROBES,
                                   final=True))["configs"]
    assert check["status"] == "warn" and check["evidence"][0] == (
        "the run script passes override(s) algorithm.lr=0.1 that spec.rlinf.overrides does not "
        "list, so RLark's composition lacks them: list them in spec.rlinf.overrides")

    unhashed = {k: v for k, v in COMPOSED.items() if k != "inputs"}
    check = checks_of(build_record(*rows(), composed=unhashed, probes=PROBES, final=True))["configs"]
    assert check["status"] == "warn" and "not compared with the Hydra files" in check["evidence"][0]


# --- resources (item 7) --------------------------------------------------------------------------------


def test_resources_show_bytes_in_units_and_compare_what_ray_counts():
    job, run, workers = rows()
    run.spec = copy.deepcopy(run.spec)
    run.spec["spec"]["roles"][0]["resources"]["memory"] = "3Gi"
    head = facts(0, "head", gpus=1)
    head["visible_memory_bytes"] = 25275990016
    head["ray_node_table"]["resources"].update({"memory": float(3 << 30), "node:127.0.0.2": 1.0})
    workers[0].facts = head
    check = checks_of(build_record(job, run, workers, composed=COMPOSED, probes=PROBES,
                                   final=True))["resources"]
    assert check["status"] == "pass"
    assert check["evidence"][0] == ("rank 0 (rec-head-0): asked 1 CPU, 3 GiB memory, 1 GPU; Ray "
                                    "counts 1 CPU, 3 GiB memory, 1 GPU; sees 2 CPUs, 23.5 GiB "
                                    "memory, 1 GPU")

    head["ray_node_table"]["resources"].update({"memory": float(1 << 30), "CPU": 0.0})
    check = checks_of(build_record(job, run, workers, composed=COMPOSED, probes=PROBES,
                                   final=True))["resources"]
    assert check["status"] == "fail" and check["evidence"] == [
        "rank 0 (rec-head-0): Ray counts 0 CPUs, role head asked for 1.0",
        "rank 0 (rec-head-0): Ray counts 1 GiB of memory, role head asked for 3Gi"]

    head["visible_memory_bytes"] = 2 << 30
    check = checks_of(build_record(job, run, workers, composed=COMPOSED, probes=PROBES,
                                   final=True))["resources"]
    assert "rank 0 (rec-head-0) saw 2 GiB of memory, role head asked for 3Gi" in check["evidence"]


def test_the_server_hashes_the_files_the_heads_snapshot_lists(tmp_path):
    """``config_inputs`` finds the Hydra files as the head's ``config_snapshot`` does, so the two
    compare equal on the same directory; a link out of the config roots is never read."""
    from rlark.bootstrap.facts_config import config_snapshot
    from rlark.services.records import config_inputs

    config = tmp_path / "config"
    (config / "sub").mkdir(parents=True)
    (config / ".hidden").mkdir()
    (config / "train.yaml").write_text("cluster: {num_nodes: 1}\n")
    (config / "sub" / "model.yml").write_text("a: 1\n")
    (config / ".hidden" / "skip.yaml").write_text("b: 2\n")
    (config / "notes.txt").write_text("not hydra\n")
    inputs = config_inputs(str(config), [str(tmp_path)])
    assert sorted(inputs["files"]) == ["sub/model.yml", "train.yaml"] and inputs["cut"] is False
    assert compare_inputs(config_snapshot(str(config), "train"), inputs) == {"same": True}

    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text("secret: 1\n")
    (config / "link.yaml").symlink_to(outside)
    inputs = config_inputs(str(config), [str(config)])
    assert inputs["files"]["link.yaml"] is None  # not read: it leads out of the roots
    assert compare_inputs(config_snapshot(str(config), "train"), inputs) == {
        "same": False, "differ": ["link.yaml"]}
