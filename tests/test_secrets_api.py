"""``/api/v1/secrets`` and what a Job with secrets gets from the API (issue 13 items 1 and 3):
who may set, list and delete a project's secrets; no answer, audit entry or error ever holds a
value; submit and check refuse references the project cannot satisfy; the composer reads configs
only under the Job's workingDir or a config root and answers the same whether a path elsewhere
exists; a full composer queue is 429 with Retry-After.

Real FastAPI app and SQLite store (no controller), real composer children.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
import yaml

from rlark.store import SecretRow
from tests.access import admin_token, api_client, make_user
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

VALUE = "wb-0123456789abcdef-user-value"


@pytest.fixture
def clients(app_store):
    app, store = app_store
    return {
        "admin": api_client(app, admin_token(store)),
        "member": api_client(app, make_user(store, "mia", "default", "member")),
        "viewer": api_client(app, make_user(store, "vic", "default", "viewer")),
        "stranger": api_client(app, make_user(store, "otto", "other", "member")),
    }


def job_doc(env: list[dict], name: str = "ppo", **spec) -> dict:
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"headRole": "head", "runScript": "python train.py", **spec,
                     "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0", "env": env}]}}


REF = {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api_key"}}}


def set_secret(client, name="wandb", data=None, method="patch"):
    return getattr(client, method)(f"/api/v1/secrets/{name}", json={"data": data or {"api_key": VALUE}})


def test_members_set_viewers_list_and_nobody_reads_a_value(clients, app_store):
    member, viewer = clients["member"], clients["viewer"]
    r = set_secret(member)
    assert r.status_code == 200, r.text
    assert r.json()["keys"] == [{"key": "api_key", "state": "set", "usedBy": []}]
    assert r.json()["updatedBy"] == "mia"
    r = set_secret(member, data={"entity": "team-rl"})  # PATCH adds a key, keeps the other
    assert [k["key"] for k in r.json()["keys"]] == ["api_key", "entity"]
    answers = [r, viewer.get("/api/v1/secrets"), viewer.get("/api/v1/secrets/wandb"),
               clients["admin"].get("/api/v1/audit")]
    for a in answers:
        assert a.status_code == 200, a.text
        assert VALUE not in a.text and "team-rl" not in a.text
    assert viewer.get("/api/v1/secrets").json()[0]["name"] == "wandb"
    audit = [a for a in answers[-1].json()["items"] if a["action"] == "secret.set"]
    assert [a["detail"] for a in audit] == ["updated; keys set: entity", "created; keys set: api_key"]
    # at rest: sealed, not in clear
    _, store = app_store
    with store.session() as s:
        sealed = s.query(SecretRow).one().sealed
    assert VALUE not in sealed
    assert set_secret(viewer).status_code == 403
    assert viewer.delete("/api/v1/secrets/wandb").status_code == 403


def test_other_projects_secrets_are_invisible(clients):
    assert set_secret(clients["member"]).status_code == 200
    stranger = clients["stranger"]
    for r in (stranger.get("/api/v1/secrets"), stranger.get("/api/v1/secrets/wandb"),
              set_secret(stranger), stranger.delete("/api/v1/secrets/wandb")):
        assert r.status_code == 404, r.text
        assert VALUE not in r.text
    assert stranger.get("/api/v1/secrets?project=other").json() == []
    assert set_secret(stranger, name="wandb").status_code == 404  # still default's


def test_put_replaces_and_delete_removes_keys_then_the_secret(clients):
    member = clients["member"]
    set_secret(member, data={"a": "aaaa-1", "b": "bbbb-2"})
    r = set_secret(member, data={"c": "cccc-3"}, method="put")
    assert [k["key"] for k in r.json()["keys"]] == ["c"]
    set_secret(member, data={"d": "dddd-4"})
    r = member.delete("/api/v1/secrets/wandb?key=c")
    assert r.status_code == 200 and r.json()["deleted"]
    assert [k["key"] for k in member.get("/api/v1/secrets/wandb").json()["keys"]] == ["d"]
    assert member.delete("/api/v1/secrets/wandb?key=zz").status_code == 404
    assert member.delete("/api/v1/secrets/wandb").status_code == 200
    assert member.get("/api/v1/secrets/wandb").status_code == 404
    assert member.delete("/api/v1/secrets/wandb").status_code == 404


@pytest.mark.parametrize("body", [
    {"data": {"k": 12345678}},
    {"data": {"bad key": VALUE}},
    {"data": {"k": VALUE + "\x00"}},
    {"data": {}},
    {"dat": {"k": VALUE}},
    {"data": {"k": VALUE}, "extra": VALUE},
    [VALUE],
])
def test_a_bad_body_is_a_4xx_that_never_echoes_a_value(clients, body):
    r = clients["member"].patch("/api/v1/secrets/wandb", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["code"] == "Invalid"
    assert VALUE not in r.text and "12345678" not in r.text


def test_a_bad_name_or_a_huge_value_is_refused(clients):
    member = clients["member"]
    assert set_secret(member, name="Not_A_Name").status_code == 422
    r = set_secret(member, data={"k": "x" * (64 * 1024 + 1)})
    assert r.status_code == 422 and "64 KiB" in r.json()["detail"]["message"]


def test_submit_refuses_a_reference_the_project_cannot_satisfy(clients):
    member = clients["member"]
    for doc, path in (
        (job_doc([REF]), "spec.roles[0].env[0].valueFrom.secretKeyRef.name"),
        (job_doc([{**REF, "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "nope"}}}]),
         "spec.roles[0].env[0].valueFrom.secretKeyRef.key"),
    ):
        if path.endswith(".key"):
            set_secret(member)
        for r in (member.post("/api/v1/check", json=doc), member.post("/api/v1/jobs", json=doc)):
            found = [f for f in r.json().get("findings") or r.json()["detail"]["findings"]
                     if f["code"] == "SecretNotFound"]
            assert [f["path"] for f in found] == [path], r.text
            assert "rlark secret set" in found[0]["hint"]
    assert member.get("/api/v1/jobs").json()["total"] == 0


def test_a_job_with_a_secret_shows_the_reference_and_never_the_value(clients):
    member = clients["member"]
    set_secret(member)
    doc = job_doc([REF, {"name": "HF_TOKEN", "value": "hf_in_clear_0000"}])
    r = member.post("/api/v1/jobs", json=doc)
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["spec"]["roles"][0]["env"][0] == REF
    assert "PlainSecretEnv" in [f["code"] for f in r.json()["findings"]]
    for path in ("/api/v1/jobs/ppo", "/api/v1/jobs", "/api/v1/jobs/ppo/events",
                 "/api/v1/jobs/ppo/runs", "/api/v1/jobs/ppo/record",
                 "/api/v1/jobs/ppo/record?format=md", "/api/v1/secrets"):
        a = member.get(path)
        assert a.status_code == 200, (path, a.text)
        assert VALUE not in a.text, path
    used = member.get("/api/v1/secrets/wandb").json()["keys"]
    assert used == [{"key": "api_key", "state": "set", "usedBy": ["ppo"]}]


def test_a_key_jobs_refer_to_that_is_gone_lists_as_unset(clients):
    member = clients["member"]
    set_secret(member, data={"api_key": VALUE, "other": "oooo-1"})
    assert member.post("/api/v1/jobs", json=job_doc([REF])).status_code == 201
    member.delete("/api/v1/secrets/wandb?key=api_key")
    keys = {k["key"]: k for k in member.get("/api/v1/secrets/wandb").json()["keys"]}
    assert keys["api_key"] == {"key": "api_key", "state": "unset", "usedBy": ["ppo"]}
    member.delete("/api/v1/secrets/wandb")
    listed = member.get("/api/v1/secrets").json()
    assert listed[0]["name"] == "wandb" and listed[0]["exists"] is False


# --- the composer: where it reads, what it tells -------------------------------------------------------


def quickstart(tmp_path) -> dict:
    doc = yaml.safe_load((EXAMPLES / "quickstart" / "job.yaml").read_text())
    doc["spec"]["workingDir"] = str(EXAMPLES / "quickstart")
    return doc


def with_config(doc: dict, config_dir: str, name: str) -> dict:
    """``doc`` naming another RLinf config, its run script naming the same one (a run script
    naming a different config is RLinfConfigNameMismatch, not what these tests are about)."""
    doc["spec"]["rlinf"] = {"configDir": config_dir, "configName": name}
    doc["spec"]["runScript"] = doc["spec"]["runScript"].replace(
        "--config-name quickstart", f"--config-name {name}")
    return doc


def check(client, doc) -> list[dict]:
    r = client.post("/api/v1/check", json=doc)
    assert r.status_code == 200, r.text
    return r.json()["findings"]


def rlinf_findings(findings) -> list[dict]:
    return [f for f in findings if f["code"].startswith("RLinf")]


def test_a_config_dir_outside_the_working_dir_gets_one_answer_whether_it_exists_or_not(
        clients, tmp_path):
    elsewhere = tmp_path / "server-only"
    (elsewhere / "config").mkdir(parents=True)
    (elsewhere / "config" / "secret.yaml").write_text("cluster: {num_nodes: 1}\n")
    member = clients["member"]
    answers = []
    for config_dir, name in ((str(elsewhere / "config"), "secret"),
                             (str(elsewhere / "config"), "missing"),
                             (str(tmp_path / "no-such-dir"), "secret"),
                             ("../../../../../../../" + str(elsewhere / "config"), "secret")):
        doc = with_config(quickstart(tmp_path), config_dir, name)
        found = rlinf_findings(check(member, doc))
        assert [f["code"] for f in found] == ["RLinfConfigNotChecked"], found
        shown = os.path.normpath(os.path.join(doc["spec"]["workingDir"], config_dir))
        answers.append(found[0]["message"].replace(shown, "DIR").replace(name, "NAME"))
    assert len(set(answers)) == 1, answers


def test_a_symlink_out_of_the_working_dir_is_not_followed(clients, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "quickstart.yaml").write_text("cluster: {num_nodes: 99}\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "config").symlink_to(outside)
    doc = quickstart(tmp_path)
    doc["spec"]["workingDir"] = str(work)
    doc["spec"]["rlinf"] = {"configDir": "config", "configName": "quickstart"}
    found = rlinf_findings(check(clients["member"], doc))
    assert [f["code"] for f in found] == ["RLinfConfigNotChecked"]
    assert "99" not in json.dumps(found)


def test_files_a_config_pulls_in_from_elsewhere_read_as_missing(clients, tmp_path):
    """A config under workingDir whose search path and defaults point outside: Hydra reads
    nothing there, and the answer is the same whether the file exists."""
    outside = tmp_path / "outside"
    (outside / "leak").mkdir(parents=True)
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    (work / "config" / "main.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://" + str(outside) + "\n"
        "defaults:\n  - leak: data\n  - _self_\ncluster: {num_nodes: 1}\n")
    doc = quickstart(tmp_path)
    doc["spec"]["workingDir"] = str(work)
    with_config(doc, "config", "main")
    member = clients["member"]
    absent = rlinf_findings(check(member, doc))
    (outside / "leak" / "data.yaml").write_text("stolen: the-servers-file-content\n")
    present = rlinf_findings(check(member, doc))
    assert [f["code"] for f in present] == ["RLinfConfigIncomplete"], present
    assert present == absent
    assert "the-servers-file-content" not in json.dumps(present)


def test_a_config_root_of_the_server_is_read(clients, tmp_path, monkeypatch):
    root = tmp_path / "configs"
    root.mkdir()
    (root / "three.yaml").write_text("cluster: {num_nodes: 3}\n")
    doc = with_config(quickstart(tmp_path), str(root), "three")
    assert [f["code"] for f in rlinf_findings(check(clients["member"], doc))] == ["RLinfConfigNotChecked"]
    monkeypatch.setenv("RLARK_CONFIG_ROOTS", str(root))
    codes = [f["code"] for f in check(clients["member"], doc)]
    assert "RLinfConfigNotChecked" not in codes and "RLinfFieldMissing" in codes  # read: checked


def test_a_secret_value_never_reaches_the_composer(clients, tmp_path):
    member = clients["member"]
    set_secret(member)
    doc = quickstart(tmp_path)
    doc["spec"]["roles"][0]["env"] = [{"name": "MY_NODES", "valueFrom": REF["valueFrom"]}]
    doc["spec"]["rlinf"]["overrides"] = ["+cluster.extra=${oc.env:MY_NODES}"]
    r = member.post("/api/v1/check", json=doc)
    assert r.status_code == 200 and VALUE not in r.text


def test_a_full_composer_queue_is_429_with_retry_after(clients, tmp_path, monkeypatch):
    from rlark.rlinf_config import isolated

    slots = isolated.ComposerSlots(slots=1, queue=0, wait_seconds=0.1)
    monkeypatch.setattr(isolated, "_slots", slots)
    held, done = threading.Event(), threading.Event()

    def hold():
        with slots.slot():
            held.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        r = clients["member"].post("/api/v1/check", json=quickstart(tmp_path))
        assert r.status_code == 429, r.text
        assert r.headers["Retry-After"] == str(isolated.RETRY_AFTER_SECONDS)
        assert r.json()["detail"]["code"] == "TooManyRequests"
        assert "composing" in r.json()["detail"]["message"]
        r = clients["member"].post("/api/v1/jobs", json=quickstart(tmp_path))
        assert r.status_code == 429
    finally:
        done.set()
        t.join(10)
    assert clients["member"].post("/api/v1/check", json=quickstart(tmp_path)).status_code == 200


# --- the key at a server's start ---------------------------------------------------------------------


def test_a_server_refuses_to_start_without_the_key_its_secrets_were_sealed_with(
        clients, app_store, rlark_home, monkeypatch):
    from rlark.secretbox import KEY_ENV, SecretKeyError, new_key
    from rlark.services.secrets import server_box

    _, store = app_store
    set_secret(clients["member"])
    assert server_box(store).open  # the key file made with the app opens them
    key_file = rlark_home / "secret.key"
    kept = key_file.read_text()
    key_file.unlink()
    with pytest.raises(SecretKeyError) as exc:  # a new key would lose the stored secrets
        server_box(store)
    assert "does not exist" in str(exc.value) and "sealed with that key" in str(exc.value)
    assert not key_file.exists()
    monkeypatch.setenv(KEY_ENV, new_key())
    with pytest.raises(SecretKeyError) as exc:
        server_box(store)
    assert "secret 'wandb' of project 'default'" in str(exc.value)
    assert VALUE not in str(exc.value)
    monkeypatch.setenv(KEY_ENV, f"{new_key()},{kept.strip()}")  # rotation: the old one still opens
    assert server_box(store) is not None


def test_a_bad_key_setting_stops_the_server_before_it_serves(rlark_home, monkeypatch):
    from rlark.secretbox import KEY_ENV
    from rlark.server import build_app

    monkeypatch.setenv(KEY_ENV, "not-a-key")
    with pytest.raises(ValueError, match="not a Fernet key"):
        build_app(f"sqlite:///{rlark_home / 'rlark.db'}")


# --- the console's Secrets page ----------------------------------------------------------------------


def test_the_console_lists_sets_and_deletes_without_ever_showing_a_value(clients, app_store):
    member, viewer = clients["member"], clients["viewer"]
    set_secret(member)
    assert member.post("/api/v1/jobs", json=job_doc([REF])).status_code == 201
    page = viewer.get("/secrets")
    assert page.status_code == 200 and VALUE not in page.text
    assert 'data-secret="wandb" data-key="api_key" data-state="set"' in page.text
    assert 'href="/jobs/ppo"' in page.text and 'id="secret-form"' not in page.text  # viewers read
    other = "hf-0123456789-console"
    r = member.post("/secrets", data={"name": "hf", "key": "token", "value": other},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/secrets"
    assert other not in r.headers.get("set-cookie", "")
    page = member.get("/secrets")
    assert 'data-secret="hf" data-key="token" data-state="set"' in page.text
    assert 'id="secret-form"' in page.text and other not in page.text
    refused = member.post("/secrets", data={"name": "Bad_Name", "key": "k", "value": other})
    assert refused.status_code == 422 and other not in refused.text
    assert "is not valid" in refused.text
    assert viewer.post("/secrets", data={"name": "x", "key": "k", "value": other}).status_code == 403
    r = member.post("/secrets/hf/delete", data={"key": "token"}, follow_redirects=False)
    assert r.status_code == 303
    assert 'data-secret="hf"' not in member.get("/secrets").text
