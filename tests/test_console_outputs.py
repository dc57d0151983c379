"""The console's Outputs tab and its resume (issue 22, items 4 and 6), and the API's outputs
routes, without a browser: a real app on a real SQLite store (tests/test_console.py's fixtures),
a Run's record finished as the controller finishes it (:func:`rlark.record.finish.finish_record`,
reading a real directory back), no controller running."""

from __future__ import annotations

import hashlib
import html as html_lib
import re
from urllib.parse import urlencode

import pytest

from rlark.status import Phase
from tests.test_console import client, finish, service  # noqa: F401  (fixtures)

ACTOR = b"actor weights\n"


def html_text(fragment: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", fragment))


def job_yaml(name: str, out: str, run: str) -> str:
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  outputs: [{{name: logs, path: {out}}}]
  runScript: {run!r}
  roles:
    - name: head
      image: docker.io/rlinf/rlinf:0.3.0
      mounts: [{{name: out, type: hostPath, source: {out}, mountPath: {out}}}]
"""


def finished_with_record(service, name: str) -> None:
    """The Job's current Run Succeeded with its head's facts, and its record finished: its
    outputs read back as the controller does once every Worker has ended."""
    from rlark.record.finish import finish_record
    from rlark.store import JobRow, RunRow

    finish(service, name, Phase.Succeeded.value, "Completed", "the run script exited with code 0")
    with service.store.session() as s:
        job = s.query(JobRow).filter_by(name=name).one()
        run = s.get(RunRow, job.current_run_id)
        for w in run.workers:
            w.facts = {"python": "3.11.7"}
            w.lifecycle = {"gone": True}
        run.record = finish_record(run, None, keys={})


@pytest.fixture
def out(tmp_path):
    root = tmp_path / "out"
    step = root / "exp" / "checkpoints" / "global_step_3" / "actor"
    step.mkdir(parents=True)
    (step / "model.pt").write_bytes(ACTOR)
    (root / "exp" / "metrics.txt").write_text("step 3\n")
    root.chmod(0o755)
    return root


def test_the_outputs_tab_lists_what_was_read_back_and_downloads_a_file(client, service, out):
    r = client.post("/api/v1/jobs", content=job_yaml("ot", str(out), "python t.py").encode(),
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    # before the Run ended: nothing is read back yet
    page = client.get("/jobs/ot?tab=outputs")
    assert page.status_code == 200 and 'data-outputs="pending"' in page.text
    finished_with_record(service, "ot")
    page = client.get("/jobs/ot?tab=outputs")
    assert page.status_code == 200, page.text
    assert 'data-tab="outputs"' in page.text and 'data-output="logs"' in page.text
    assert 'data-ok="true"' in page.text
    assert "exp/checkpoints/global_step_3/actor/model.pt" in page.text
    assert hashlib.sha256(ACTOR).hexdigest()[:16] in page.text
    link = re.search(r'href="(/jobs/ot/outputs/logs/file\?[^"]+)"[^>]*data-file="exp/metrics.txt"',
                     page.text)
    assert link is not None, page.text
    got = client.get(link.group(1).replace("&amp;", "&"))
    assert got.status_code == 200 and got.content == b"step 3\n"
    assert got.headers["content-disposition"] == 'attachment; filename="metrics.txt"'
    for bad in ("../out/x", "/etc/passwd", "exp/../../x"):
        refused = client.get("/jobs/ot/outputs/logs/file", params={"path": bad, "run": 1})
        assert refused.status_code in (404, 422) and b"root" not in refused.content, bad
    # the same through the API, as `rlark outputs` reads it
    api = client.get("/api/v1/jobs/ot/outputs").json()
    assert api["final"] is True and api["run"] == 1
    [o] = api["outputs"]
    assert (o["name"], o["fileCount"], o["readBack"]["ok"]) == ("logs", 2, True)
    assert api["resume"]["step"] == 3
    body = client.get("/api/v1/jobs/ot/outputs/logs/file",
                      params={"path": "exp/checkpoints/global_step_3/actor/model.pt"})
    assert body.status_code == 200 and body.content == ACTOR
    assert client.get("/api/v1/jobs/ot/outputs/nope/file", params={"path": "x"}).status_code == 404
    # in Chinese
    zh = client.get("/jobs/ot?tab=outputs", cookies={"rlark_lang": "zh-CN"})
    assert "回读" in zh.text


def test_restart_resumes_from_the_checkpoint_found_and_is_refused_without_one(client, service, out):
    from rlark.store import JobRow, RunRow

    script = "python t.py $RLARK_RLINF_OVERRIDES"
    r = client.post("/api/v1/jobs", content=job_yaml("rs", str(out), script).encode(),
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    finished_with_record(service, "rs")
    page = client.get("/jobs/rs?tab=outputs")
    assert f"{out}/exp/checkpoints/global_step_3" in page.text and 'data-action="resume"' in page.text
    # the console's restart, resuming (its form); the new Run asks to resume from run 1
    form = client.post("/jobs/rs/restart", data={"resume": "1", "next": "/jobs/rs?tab=outputs"})
    assert form.status_code == 303, form.text
    with service.store.session() as s:
        job = s.query(JobRow).filter_by(name="rs").one()
        run = s.get(RunRow, job.current_run_id)
        assert (run.number, run.resume) == (2, {"fromRun": 1, "automatic": False, "by": "admin"})

    # a run script that does not pass the checkpoint on: refused, saying so
    r = client.post("/api/v1/jobs", content=job_yaml("nr", str(out), "python t.py").encode(),
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201
    finished_with_record(service, "nr")
    refused = client.post("/api/v1/jobs/nr/restart", params={"resume": "true"})
    assert refused.status_code == 422, refused.text
    assert [f["code"] for f in refused.json()["detail"]["findings"]] == ["ResumeNotPassed"]
    # a Run that left no checkpoint: refused, naming what was looked at
    for f in (out / "exp" / "checkpoints" / "global_step_3" / "actor").iterdir():
        f.unlink()
    r = client.post("/api/v1/jobs", content=job_yaml("nc", str(out), script).encode(),
                    headers={"Content-Type": "application/yaml"})
    finished_with_record(service, "nc")
    refused = client.post("/api/v1/jobs/nc/restart", params={"resume": "true"})
    assert refused.status_code == 422, refused.text
    assert "run 1 of Job 'nc' left no checkpoint to resume from" in refused.json()["detail"]["message"]


def test_the_wizards_mount_rows_say_what_each_kind_is_on_the_servers_runtime(client):
    from tests.test_console import post_wizard, wizard_form

    form = wizard_form(step="2", **{
        "role-0-mount-0-name": "ckpt", "role-0-mount-0-type": "pvc",
        "role-0-mount-0-source": "ckpt", "role-0-mount-0-path": "/ckpt",
        "role-0-mount-1-name": "data", "role-0-mount-1-type": "objectStorage",
        "role-0-mount-1-source": "s3://b/d", "role-0-mount-1-path": "/data"})
    html = post_wizard(client, form, "add-mount:0").text
    said = {k: html_text(v) for k, v in re.findall(r'data-mount-means="(\w+)">(.*?)</p>', html)}
    assert "the project's volume" in said["pvc"] and "local runtime" in said["pvc"]
    assert "copy mode" in said["objectStorage"] and "FUSE is refused" in said["objectStorage"]
    zh = client.post("/create", content=urlencode(
        {**form, "action": "add-mount:0"}), cookies={"rlark_lang": "zh-CN"},
        headers={"Content-Type": "application/x-www-form-urlencoded", "HX-Request": "true"}).text
    assert "复制模式" in zh
