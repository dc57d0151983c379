"""Outputs proven and resume (issue 22, items 3 and 4), the parts that need no server: which
outputs a Run has, RLinf's checkpoint directories among what was read back and which one a
resumed Run takes, the override it gets, where the server may read an S3 endpoint from, and
reading a directory back without following what the workload made of it. The end-to-end tests
(a real server, Ray and S3 server) are tests/test_outputs_e2e.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rlark.record.checks import check_read_back
from rlark.record.outputs import (MAX_FILES, Budget, ReadBackContext, ReadBackError,
                                  checkpoint_dirs, endpoint_refusal, iter_file, list_outputs,
                                  open_below, output_targets, read_dir, resume_override,
                                  resume_point)


def spec(outputs: list[dict], mounts: list[dict]) -> dict:
    return {"spec": {"headRole": "head", "outputs": outputs,
                     "roles": [{"name": "head", "mounts": mounts}]}}


CKPT = {"name": "c", "type": "pvc", "source": "ckpt", "mountPath": "/ckpt"}
DEEP = {"name": "tb", "type": "hostPath", "source": "/srv/tb", "mountPath": "/ckpt/tb"}


def test_the_outputs_of_a_run_are_its_named_ones_then_the_configs_written_locations():
    locations = [{"key": "runner.logger.log_path", "kind": "output", "path": "/ckpt/logs/x"},
                 {"key": "runner.output_dir", "kind": "output", "path": "/out"},
                 {"key": "actor.model.model_path", "kind": "model", "path": "/models/m"},
                 {"key": "runner.ckpt_path", "kind": "checkpoint", "path": None}]
    got = output_targets(spec([{"name": "logs", "path": "/ckpt/logs/"},
                               {"name": "tb", "path": "/ckpt/tb/run"}], [CKPT, DEEP]), locations)
    assert [(t["name"], t["path"], t["origin"], t["named"], (t["mount"] or {}).get("name"))
            for t in got] == [
        ("logs", "/ckpt/logs", "spec.outputs[0]", True, "c"),
        ("tb", "/ckpt/tb/run", "spec.outputs[1]", True, "tb"),  # the deepest mount holds it
        # a config location below a named output is that output; a model is not written
        ("runner.output_dir", "/out", "runner.output_dir", False, None)]


def step_files(step: int, mtime: float, actor: bool = True, prefix: str = "exp/") -> list:
    inside = "actor/model.pt" if actor else "critic/model.pt"
    return [(f"{prefix}checkpoints/global_step_{step}/{inside}", 10, mtime),
            (f"{prefix}checkpoints/global_step_{step}/data/data.pt", 2, mtime - 1)]


def listed(files: list, ok: bool = True, name: str = "logs") -> dict:
    cps, outside = checkpoint_dirs(files)
    return {"name": name, "origin": "spec.outputs[0]", "path": "/ckpt/logs",
            "readBack": {"ok": ok}, "checkpoints": cps, "newestOutside": outside}


def test_rlinf_checkpoint_directories_are_found_with_their_newest_file():
    cps, outside = checkpoint_dirs([*step_files(1, 100.0), *step_files(12, 300.0),
                                    ("exp/tensorboard/events.1", 5, 200.0),
                                    ("exp/checkpoints/notes.txt", 1, 400.0)])
    assert cps == [
        {"dir": "exp/checkpoints/global_step_1", "step": 1, "files": 2, "bytes": 12, "actor": True,
         "newest": 100.0},
        {"dir": "exp/checkpoints/global_step_12", "step": 12, "files": 2, "bytes": 12,
         "actor": True, "newest": 300.0}]
    assert outside == 400.0


def test_a_succeeded_run_resumes_from_its_highest_step():
    point, notes = resume_point([listed([*step_files(1, 1.0), *step_files(2, 2.0)])], True)
    assert point == {"checkpoint": "/ckpt/logs/exp/checkpoints/global_step_2", "step": 2,
                     "output": "logs", "origin": "spec.outputs[0]"}
    assert notes == []


def test_a_run_cut_off_while_writing_a_checkpoint_resumes_from_the_one_before():
    # step 2 was being written when the Run was stopped: nothing came after it
    files = [*step_files(1, 1.0), ("exp/tensorboard/events", 3, 1.5), *step_files(2, 2.0)]
    point, notes = resume_point([listed(files)], False)
    assert point is not None and point["step"] == 1
    assert notes == ["/ckpt/logs/exp/checkpoints/global_step_2: skipped, the Run did not succeed "
                     "and wrote nothing after it (it may have been cut off while being written)"]
    # the same Run went on after step 2 (its metrics were written later): step 2 is whole
    point, _ = resume_point([listed([*files, ("exp/tensorboard/events.2", 3, 2.5)])], False)
    assert point is not None and point["step"] == 2
    # a checkpoint RLinf cannot resume from (no actor/) is never taken
    point, notes = resume_point([listed([*step_files(1, 1.0), *step_files(2, 2.0, actor=False)])],
                                True)
    assert point is not None and point["step"] == 1 and "no actor/ in it" in notes[0]


def test_no_checkpoint_says_why():
    assert resume_point([], True) == (None, ["no output of the Run was read back after it"])
    assert resume_point([listed([("exp/tb", 1, 1.0)])], True) == (
        None, ["no checkpoints/global_step_<N> directory in the Run's outputs"])
    point, notes = resume_point([listed(step_files(1, 1.0))], False)
    assert point is None and "skipped" in notes[0]
    # an output that could not be read back is not looked in
    assert resume_point([listed(step_files(1, 1.0), ok=False)], True)[0] is None


def test_the_resume_override_carries_only_a_path_a_shell_variable_and_hydra_keep_whole():
    assert resume_override("/ckpt/exp/checkpoints/global_step_3") == \
        "runner.resume_dir=/ckpt/exp/checkpoints/global_step_3"
    for bad in ("/ckpt/a b/global_step_1", "/ckpt/a=b/global_step_1", "relative/global_step_1",
                "/ckpt/$(reboot)/global_step_1"):
        with pytest.raises(ValueError, match="RLARK_RLINF_OVERRIDES"):
            resume_override(bad)


def test_a_run_requeued_after_a_preemption_resumes_like_a_retry_where_the_job_says():
    """A Run the queue preempted is followed (onPreemption: Requeue) by an automatic Run of
    cause Retry, as a failed one is (controller/transitions.py, _maybe_retry): with
    failurePolicy.resume it resumes from the Run before it; what a user asked comes first."""
    from rlark.controller.launch import wanted_resume
    from rlark.status import Cause

    assert wanted_resume(None, Cause.Retry, True, 1) == {"fromRun": 1, "automatic": True}
    assert wanted_resume({}, Cause.Retry, True, 3) == {"fromRun": 3, "automatic": True}
    assert wanted_resume(None, Cause.Retry, False, 1) == {}  # the Job asks for no resume
    asked = {"fromRun": 1}
    assert wanted_resume(asked, Cause.Restarted, False, 2) == asked  # rlark restart --resume
    assert wanted_resume(asked, Cause.Retry, True, 2) == asked
    for cause in (Cause.Submitted, Cause.Started, Cause.Restarted, Cause.Updated):
        assert wanted_resume(None, cause, True, 1) == {}  # a user's new Run starts afresh
    assert wanted_resume(None, Cause.Retry, True, None) == {}


def test_the_head_gets_the_resume_in_its_environment_and_nothing_when_it_starts_afresh():
    from rlark.ranks import plan_workers
    from rlark.runtimes.base import bootstrap_env
    from rlark.spec import Job

    job = Job.model_validate({"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "j"},
                              "spec": {"headRole": "h", "runScript": "true", "roles": [
                                  {"name": "h", "image": "x/y:1", "workers": 2}]}})
    head, other = plan_workers(job)
    env = bootstrap_env(job, head, run_uid="u", head_address="h:1",
                        resume_override="runner.resume_dir=/c/checkpoints/global_step_2")
    assert env["RLARK_RLINF_OVERRIDES"] == "runner.resume_dir=/c/checkpoints/global_step_2"
    assert env["RLARK_RESUME_DIR"] == "/c/checkpoints/global_step_2"
    fresh = bootstrap_env(job, head, run_uid="u", head_address="h:1")
    assert fresh["RLARK_RLINF_OVERRIDES"] == "" and fresh["RLARK_RESUME_DIR"] == ""
    assert "RLARK_RLINF_OVERRIDES" not in bootstrap_env(job, other, run_uid="u",
                                                        head_address="h:1")


def test_the_server_reads_no_s3_endpoint_in_its_own_network_unless_allowed():
    def resolve(answers):
        return lambda host, port: answers[host]

    names = {"metadata.internal": ["169.254.169.254"], "minio": ["10.1.2.3"],
             "s3.example.com": ["93.184.216.34"], "split": ["93.184.216.34", "127.0.0.1"]}
    why, _ = endpoint_refusal("http://metadata.internal/", [], resolve(names))
    assert why is not None and "link-local" in why and "RLARK_OBJECT_STORAGE_ALLOW_NETWORKS" in why
    assert "private" in (endpoint_refusal("http://minio:9000", [], resolve(names))[0] or "")
    # a name that points partly inside is refused, whatever the order of the answers
    assert "loopback" in (endpoint_refusal("https://split", [], resolve(names))[0] or "")
    # allowed: an http endpoint is pinned to the address checked, https keeps its name
    assert endpoint_refusal("http://minio:9000/s3", ["10.0.0.0/8"], resolve(names)) == (
        None, "http://10.1.2.3:9000/s3")
    assert endpoint_refusal("https://s3.example.com", [], resolve(names)) == (
        None, "https://s3.example.com")


@pytest.fixture
def out_dir(tmp_path) -> Path:
    root = tmp_path / "out"
    (root / "exp" / "checkpoints" / "global_step_1" / "actor").mkdir(parents=True)
    (root / "exp" / "checkpoints" / "global_step_1" / "actor" / "model.pt").write_bytes(b"w" * 100)
    (root / "exp" / "log.txt").write_text("step 1\n")
    secret = tmp_path / "server-only.txt"
    secret.write_text("not the Run's")
    (root / "link").symlink_to(secret)
    (root / "exp" / "dirlink").symlink_to(tmp_path)
    os.link(secret, root / "hard")  # a second name of a file outside the output
    os.mkfifo(root / "fifo")
    return root


def test_a_directory_is_read_back_without_following_what_the_workload_made(out_dir):
    got = read_dir(str(out_dir), Budget())
    assert got["fileCount"] == 3 and got["skipped"] == 3  # two links and a fifo
    files = {f["path"]: f for f in got["files"]}
    model = files["exp/checkpoints/global_step_1/actor/model.pt"]
    assert model["sha256"] == hashlib.sha256(b"w" * 100).hexdigest() and model["bytes"] == 100
    assert isinstance(model["mtime"], float)
    # listed, never read: it may be a file of someone else's
    assert "sha256" not in files["hard"] and files["hard"]["why"] == (
        "listed, not read: hard: not a regular file with a single name")
    assert got["checkpoints"][0]["dir"] == "exp/checkpoints/global_step_1"
    for rel in ("link", "exp/dirlink/server-only.txt", "hard", "fifo", "../server-only.txt",
                "exp/../link", ""):
        with pytest.raises((ReadBackError, OSError)):
            os.close(open_below(str(out_dir), rel))
    fd = open_below(str(out_dir), "exp/log.txt")
    assert os.read(fd, 100) == b"step 1\n"
    os.close(fd)


def test_a_large_output_is_cut_and_said_so(tmp_path):
    for i in range(MAX_FILES + 5):
        (tmp_path / f"f{i:05d}").write_bytes(b"")
    got = read_dir(str(tmp_path), Budget(hash_bytes=0))
    assert got["fileCount"] == MAX_FILES + 5 and got["filesCut"] is True
    assert len(got["files"]) == MAX_FILES


def test_outputs_are_listed_through_the_runtimes_view_and_a_file_read_only_below_one(out_dir):
    rec = {"spec": spec([{"name": "logs", "path": "/ckpt/logs"}, {"name": "gone", "path": "/tmp/x"}],
                        [{**CKPT, "mountPath": "/ckpt"}]),
           "workers": {"items": [{"role": "head", "nodeRank": 0, "facts": {"python": "3"}}]},
           "locations": []}
    seen = []

    def worker_dir(rec, path, rank, sandboxed):
        seen.append((path, rank, sandboxed))
        return (str(out_dir), "the volume") if path == "/ckpt/logs" else (None, "elsewhere")

    ctx = ReadBackContext(worker_dir=worker_dir, persistent_filesystem=True, keys={},
                          sandboxed=True)
    first, gone = list_outputs(rec, ctx)
    assert seen == [("/ckpt/logs", 0, True)]
    assert first["readBack"] == {"via": "pvc", "at": str(out_dir), "ok": True, "why": None}
    assert first["persistent"] is True and first["fileCount"] == 3
    # named, and under no mount: nothing written there outlives the Workers
    assert gone["persistent"] is False and gone["readBack"]["ok"] is False
    size, chunks = iter_file(rec, first, "exp/log.txt", ctx)
    assert (size, b"".join(chunks)) == (7, b"step 1\n")
    for bad in ("../server-only.txt", "/etc/passwd", "link", "exp//log.txt"):
        with pytest.raises(ReadBackError):
            iter_file(rec, first, bad, ctx)
    check = check_read_back([first, gone])
    assert check["status"] == "fail"
    assert check["evidence"] == ["output gone (/tmp/x) lies on no writable mount of role head: "
                                 "nothing written there outlives the Workers"]
    assert check_read_back([first])["evidence"] == [
        f"output logs (/ckpt/logs): 3 file(s), 120 B, read back from {out_dir}"]  # 100 + 7 + 13


def test_the_read_back_check_warns_where_the_server_cannot_look_and_fails_for_nothing_written():
    base = {"name": "c", "path": "/ckpt", "role": "head", "origin": "spec.outputs[0]",
            "named": True, "persistent": True}
    unseen = {**base, "readBack": {"via": "pvc", "ok": False, "unseen": True,
                                   "why": "the server does not see the Workers' files"}}
    empty = {**base, "fileCount": 0, "readBack": {"via": "objectStorage", "at": "s3://b/p",
                                                  "ok": True}}
    broken = {**base, "readBack": {"via": "objectStorage", "at": "s3://b/p", "ok": False,
                                   "why": "listing s3://b/p failed: AccessDenied"}}
    assert check_read_back([unseen])["status"] == "warn"
    assert check_read_back([empty])["evidence"] == [
        "output c (/ckpt) holds no file after the Run (s3://b/p)"]
    assert check_read_back([broken])["evidence"] == [
        "output c (/ckpt) could not be read back from s3://b/p: listing s3://b/p failed: "
        "AccessDenied"]
    assert check_read_back([])["status"] == "warn"


def test_outputs_are_proposed_from_the_configs_written_locations():
    from rlark.console.messages import localize_finding
    from rlark.rlinf_config.locations import proposed_outputs

    data = {"runner": {"output_dir": "/out", "logger": {"log_path": "/ckpt/logs/x"},
                       "resume_dir": None},
            "actor": {"model": {"model_path": "/models/m"}}}
    named = [{"name": "logs", "path": "/ckpt/logs"}]
    [f] = proposed_outputs(data, named, None)
    assert (f.code, f.severity.value, f.path) == ("OutputProposed", "info", "runner.output_dir")
    assert f.message == "runner.output_dir = /out: the Run writes its outputs there"
    assert "{name: output-dir, path: /out}" in f.hint
    message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN")
    assert "运行在那里写入" in message and "spec.outputs" in hint and "/out" in hint
    # a Job that names no output has every such location read back as one: nothing to propose
    assert proposed_outputs(data, [], None) == []


def test_the_resume_events_and_failure_and_the_read_back_evidence_in_chinese():
    from rlark.console.messages import check_evidence, message_text, reason_label

    said = message_text("Resuming", "run 3 resumes from /c/x/checkpoints/global_step_1 (step 1) "
                        "of run 2", "zh-CN")
    assert said == "运行 3 从运行 2 的 /c/x/checkpoints/global_step_1（第 1 步）恢复"
    assert "从头开始" in message_text(
        "Resuming", "run 2 starts afresh: run 1 left no checkpoint (no output of the Run was read "
        "back after it)", "zh-CN")
    assert message_text("ResumeFailed", "run 1 left no checkpoint to resume from: no "
                        "checkpoints/global_step_<N> directory in the Run's outputs",
                        "zh-CN").startswith("运行 1 没有留下可恢复的检查点")
    assert reason_label("ResumeFailed", "zh-CN") == "恢复失败"
    for line in ("output logs (/ckpt/logs): 2 file(s), 17 B, read back from s3://b/p",
                 "output c (/ckpt) holds no file after the Run (s3://b/p)",
                 "output gone (/tmp/x) lies on no writable mount of role head: nothing written "
                 "there outlives the Workers"):
        assert "输出" in check_evidence("outputs-readable", line, "zh-CN"), line


def test_the_records_markdown_shows_its_outputs_and_where_it_resumed_from():
    from rlark.record.export import _markdown_v2

    rec = {"outputs": [{"name": "logs", "path": "/ckpt/logs", "mount": {"type": "pvc", "name": "c"},
                        "readBack": {"ok": True, "at": "/v/c/logs"}, "fileCount": 2, "bytes": 17},
                       {"name": "gone", "path": "/tmp/x", "mount": None,
                        "readBack": {"ok": False, "why": "on no mount"}}],
           "resume": {"fromRun": 1, "automatic": True, "checkpoint": "/ckpt/logs/g/global_step_1",
                      "step": 1, "override": "runner.resume_dir=/ckpt/logs/g/global_step_1",
                      "notes": ["/ckpt/logs/g/global_step_2: skipped"]}}
    text = "\n".join(_markdown_v2(rec))
    assert "- From run 1 (automatic retry): `/ckpt/logs/g/global_step_1` (step 1)" in text
    assert "| logs | /ckpt/logs | pvc c | /v/c/logs | 2 | 17 B |" in text
    assert "| gone | /tmp/x | - | not read back: on no mount | - | - |" in text
