"""Secrets, Worker environments and the composer's bounds, without servers (issue 13 items 1-3):
the spec's ``valueFrom.secretKeyRef`` rules, sealing at rest and its key, the local Worker's
allow-listed environment, a Pod that refers to a per-Run Secret and never holds a value, masking,
``rlark secret set``'s argument parsing, the composer slots.

Pure functions and real files; each attacking input is given and the safe outcome asserted.
"""

from __future__ import annotations

import base64
import os
import stat
import threading

import pytest

from rlark.preflight import check_job, looks_like_credential
from rlark.ranks import plan_workers
from rlark.runtimes.base import SecretMissing, bootstrap_env, secret_env
from rlark.runtimes.kubernetes import render
from rlark.runtimes.local import worker_environment
from rlark.secretbox import KEY_ENV, KEY_FILE_ENV, SecretBox, SecretKeyError, load_keys, new_key
from rlark.services.secrets import MASK, mask_data, masker
from rlark.spec import Job, dump_job, secret_refs

VALUE = "wb-5ecret-value-0f-the-user"


def job(env: list[dict], **spec) -> Job:
    return Job.model_validate({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "ppo"},
        "spec": {"headRole": "head", "runScript": "python train.py", **spec, "roles": [
            {"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0", "env": env},
            {"name": "pool", "workers": 2, "image": "docker.io/rlinf/rlinf:0.3.0", "env": env}]}})


REF = {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api_key"}}}
K8S_REF = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token.v1", "key": "token"}}}


def codes(findings) -> list[str]:
    return [f.code for f in findings]


# --- the spec -----------------------------------------------------------------------------------


def test_a_secret_reference_is_kept_as_written_and_is_no_value():
    j = job([REF, {"name": "PLAIN", "value": "1"}])
    assert check_job(j) == []
    assert secret_refs(j) == [("wandb", "api_key")]
    assert "valueFrom:\n" in dump_job(j) and "secretKeyRef" in dump_job(j)
    assert j.spec.roles[0].env[0].value is None


def test_value_and_value_from_together_is_an_error_naming_the_field():
    both = {**REF, "value": VALUE}
    findings = check_job(job([both]))
    assert codes(findings) == ["EnvValueAndValueFrom", "EnvValueAndValueFrom"]
    assert findings[0].path == "spec.roles[0].env[0]"
    assert VALUE not in findings[0].message


@pytest.mark.parametrize("ref,path", [
    ({"name": "Bad_Name", "key": "k"}, "name"),
    ({"name": "ok", "key": "no spaces"}, "key"),
    ({"name": "ok", "key": ""}, "key"),
])
def test_a_secret_reference_must_be_a_usable_name_and_key(ref, path):
    findings = check_job(job([{"name": "X", "valueFrom": {"secretKeyRef": ref}}]))
    assert codes(findings)[:1] == ["InvalidSecretRef"]
    assert findings[0].path == f"spec.roles[0].env[0].valueFrom.secretKeyRef.{path}"


def test_a_reserved_name_from_a_secret_is_refused_too():
    findings = check_job(job([{"name": "RLARK_EVENT_TOKEN", **{k: v for k, v in REF.items()
                                                              if k != "name"}}]))
    assert "ReservedEnv" in codes(findings)


@pytest.mark.parametrize("name", ["HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
                                  "DB_PASSWORD", "GITHUB_ACCESS_TOKEN", "OPENAI_APIKEY"])
def test_a_credential_in_clear_gets_a_warning_without_its_value(name):
    assert looks_like_credential(name)
    findings = check_job(job([{"name": name, "value": VALUE}]))
    assert codes(findings) == ["PlainSecretEnv", "PlainSecretEnv"]
    assert findings[0].severity == "warning"
    assert "secretKeyRef" in findings[0].hint
    assert VALUE not in findings[0].message + findings[0].hint


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "KEYFRAME_DIR", "MASTER_PORT",
                                  "AUTHOR", "NCCL_SOCKET_IFNAME"])
def test_ordinary_variables_get_no_credential_warning(name):
    assert not looks_like_credential(name)
    assert check_job(job([{"name": name, "value": "x"}])) == []


def test_an_empty_credential_variable_is_no_warning():
    assert check_job(job([{"name": "HF_TOKEN", "value": ""}])) == []


# --- sealing at rest ---------------------------------------------------------------------------


def test_sealed_data_holds_no_value_and_opens_with_its_key():
    box = SecretBox([new_key().encode()])
    token = box.seal({"api_key": VALUE})
    assert VALUE not in token and base64.urlsafe_b64encode(VALUE.encode()).decode() not in token
    assert box.open(token) == {"api_key": VALUE}
    assert box.seal({"api_key": VALUE}) != token  # a fresh IV each time


def test_another_key_cannot_open_and_the_error_names_where_the_key_came_from():
    token = SecretBox([new_key().encode()]).seal({"api_key": VALUE})
    other = SecretBox([new_key().encode()])
    with pytest.raises(SecretKeyError) as exc:
        other.open(token, "secret 'wandb'")
    assert "secret 'wandb'" in str(exc.value) and KEY_ENV in str(exc.value)
    assert VALUE not in str(exc.value)


def test_a_rotated_key_list_opens_old_tokens_and_seals_with_the_first(monkeypatch, rlark_home):
    old, new = new_key(), new_key()
    token = SecretBox([old.encode()]).seal({"k": VALUE})
    monkeypatch.setenv(KEY_ENV, f"{new},{old}")
    box = SecretBox.from_settings()
    assert box.open(token) == {"k": VALUE}
    with pytest.raises(SecretKeyError):
        SecretBox([old.encode()]).open(box.seal({"k": VALUE}))


def test_the_key_file_is_made_private_once_and_reused(monkeypatch, rlark_home):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    with pytest.raises(SecretKeyError, match="does not exist"):
        load_keys(create=False)
    keys, source = load_keys(create=True)
    path = rlark_home / "secret.key"
    assert source.created and source.where == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, source2 = load_keys(create=True)
    assert again == keys and not source2.created


def test_a_key_file_others_can_read_is_refused(monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV, raising=False)
    path = tmp_path / "key"
    path.write_text(new_key())
    path.chmod(0o644)
    monkeypatch.setenv(KEY_FILE_ENV, str(path))
    with pytest.raises(SecretKeyError, match="chmod 600"):
        load_keys()


def test_a_malformed_key_is_refused_without_printing_it(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "not-a-fernet-key-but-a-secret")
    with pytest.raises(SecretKeyError) as exc:
        load_keys()
    assert "not-a-fernet-key-but-a-secret" not in str(exc.value)
    assert repr(SecretBox([new_key().encode()])).startswith("SecretBox(key from")


# --- the local Worker's environment ------------------------------------------------------------------

SERVER_ENV = {
    "PATH": "/usr/local/bin:/usr/bin", "HOME": "/root", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
    "TZ": "UTC", "https_proxy": "http://proxy:3128", "NO_PROXY": "localhost",
    "RLARK_DATABASE_URL": "postgresql://rlark:db-password@db/rlark",
    "AWS_SECRET_ACCESS_KEY": "server-aws-secret", "RLARK_ADMIN_TOKEN": "rlark_x",
    "RAY_ADDRESS": "10.0.0.1:6379", "RLINF_NODE_RANK": "7", "GITHUB_TOKEN": "ghp_server",
    "PYTHONPATH": "/srv/rlark", "MY_SITE_SETTING": "42",
}


def test_a_local_worker_gets_only_the_allow_listed_part_of_the_servers_environment():
    j = job([{"name": "HELLO", "value": "world"}, REF])
    w = plan_workers(j)[0]
    launch = bootstrap_env(j, w, run_uid="r1", head_address="127.0.0.2:20000")
    env = worker_environment(SERVER_ENV, launch, secret_env(j.role("head"), {("wandb", "api_key"): VALUE}))
    for kept in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "https_proxy", "NO_PROXY"):
        assert env[kept] == SERVER_ENV[kept]
    for dropped in ("RLARK_DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "RLARK_ADMIN_TOKEN",
                    "GITHUB_TOKEN", "PYTHONPATH", "MY_SITE_SETTING"):
        assert dropped not in env
    assert env["HELLO"] == "world" and env["WANDB_API_KEY"] == VALUE
    assert env["RLINF_NODE_RANK"] == "0" and "RAY_ADDRESS" not in env  # RLark's, not the server's
    assert env["RLARK_RUN_ID"] == "r1" and env["PYTHONUNBUFFERED"] == "1"
    assert not any("db-password" in v or "server-aws-secret" in v for v in env.values())


def test_the_server_may_pass_more_names_but_never_rlarks_own():
    env = worker_environment(SERVER_ENV, {"RLARK_RUN_ID": "r1"},
                             allow=("MY_SITE_SETTING", "RLARK_DATABASE_URL", "RLINF_NODE_RANK"))
    assert env["MY_SITE_SETTING"] == "42"
    assert "RLARK_DATABASE_URL" not in env and "RLINF_NODE_RANK" not in env


def test_worker_env_setting_refuses_rlarks_own_names(monkeypatch):
    from rlark import settings

    monkeypatch.setenv("RLARK_WORKER_ENV", "MY_SITE_SETTING, HF_HOME")
    assert settings.worker_env() == ["MY_SITE_SETTING", "HF_HOME"]
    for bad in ("RLARK_DATABASE_URL", "RAY_ADDRESS", "not a name"):
        monkeypatch.setenv("RLARK_WORKER_ENV", bad)
        with pytest.raises(ValueError, match="RLARK_WORKER_ENV"):
            settings.worker_env()


def test_a_secret_the_run_has_no_value_for_is_a_named_failure_without_values():
    j = job([REF, {"name": "OTHER", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}])
    with pytest.raises(SecretMissing) as exc:
        secret_env(j.role("head"), {("wandb", "api_key"): VALUE})
    assert "'gone'" in str(exc.value) and "OTHER" in str(exc.value) and VALUE not in str(exc.value)


def test_the_bootstrap_environment_holds_no_secret_value():
    j = job([REF])
    env = bootstrap_env(j, plan_workers(j)[0], run_uid="r1", head_address="h:1")
    assert "WANDB_API_KEY" not in env


# --- Kubernetes: the Pod refers, the Run's Secret holds -----------------------------------------------


def test_pods_refer_to_the_runs_secret_and_never_hold_a_value():
    j = job([REF, K8S_REF, {"name": "PLAIN", "value": "1"}])
    opts = render.RenderOptions(namespace="rl", owner={"apiVersion": "v1", "kind": "ConfigMap",
                                                       "name": "ppo-run-r1", "uid": "u-1"})
    values = {("wandb", "api_key"): VALUE}
    secret = render.render_secret(j, "r1", opts, values)
    assert secret["metadata"]["name"] == "ppo-run-r1-env"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert secret["metadata"]["labels"][render.LABEL_RUN] == "r1"
    assert base64.b64decode(secret["data"]["wandb.api_key"]).decode() == VALUE
    for w in plan_workers(j):
        pod = render.render_pod(j, w, render.worker_env(j, w, "r1", opts), "r1", opts,
                                managed=values.keys())
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["WANDB_API_KEY"] == {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
            "name": "ppo-run-r1-env", "key": "wandb.api_key"}}}
        # a name RLark does not manage is the namespace's own Kubernetes Secret
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token.v1", "key": "token"}}
        assert env["PLAIN"] == {"name": "PLAIN", "value": "1"}
        assert VALUE not in str(pod)


def test_a_run_without_rlark_secrets_has_no_secret_object():
    j = job([K8S_REF])
    assert render.render_secret(j, "r1", render.RenderOptions(), {}) is None
    objs = render.render_run(j, "r1")  # rlark render: references stay Kubernetes Secrets
    assert [o["kind"] for o in objs].count("Secret") == 0
    pod = objs[-1]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token.v1",
                                                               "key": "token"}}} in pod["spec"]["containers"][0]["env"]


# --- masking ---------------------------------------------------------------------------------


def test_masking_replaces_every_value_everywhere_longest_first():
    mask = masker([VALUE, VALUE[:10], "ab"])
    text = f"key={VALUE} prefix={VALUE[:10]} short=ab"
    assert mask(text) == f"key={MASK} prefix={MASK} short=ab"
    data = {"message": f"RunFailed: {VALUE}", "items": [{"line": VALUE}], "n": 3}
    assert mask_data(data, mask) == {"message": f"RunFailed: {MASK}", "items": [{"line": MASK}], "n": 3}
    assert masker([])("x") == "x"


def test_a_value_with_regex_characters_is_masked_literally():
    odd = "a.b*c(d)[e]+$"
    assert masker([odd])(f"<{odd}> axbbc") == f"<{MASK}> axbbc"


# --- rlark secret set arguments ------------------------------------------------------------------------


def test_values_come_from_arguments_files_and_stdin(tmp_path):
    from rlark.cli.secrets import parse_values

    f = tmp_path / "sa.json"
    f.write_text('{"type": "service_account"}\n')
    got = parse_values(["a=1", "b=x=y", "c"], [f"sa.json={f}"], lambda key: f"from-stdin-{key}")
    assert got == {"a": "1", "b": "x=y", "c": "from-stdin-c", "sa.json": '{"type": "service_account"}\n'}
    for pairs, files, match in ((["a", "b"], [], "only one KEY"), (["a=1", "a=2"], [], "more than once"),
                                ([], [], "at least one"), ([], ["k"], "KEY=PATH"),
                                ([], [f"k={tmp_path / 'missing'}"], "cannot read")):
        with pytest.raises(ValueError, match=match):
            parse_values(pairs, files, lambda key: "v")


# --- composer slots ---------------------------------------------------------------------------------------


def test_composer_slots_queue_then_refuse():
    from rlark.rlinf_config.isolated import ComposerBusy, ComposerSlots

    slots = ComposerSlots(slots=1, queue=1, wait_seconds=30)
    holding, release, queued_done = threading.Event(), threading.Event(), threading.Event()

    def hold():
        with slots.slot():
            holding.set()
            release.wait(30)

    def queued():
        with slots.slot():
            queued_done.set()

    first = threading.Thread(target=hold)
    first.start()
    assert holding.wait(10)
    second = threading.Thread(target=queued)
    second.start()
    deadline = threading.Event()
    for _ in range(1000):  # bounded: until the second caller is waiting in the queue
        if slots.waiting == 1:
            break
        deadline.wait(0.01)
    assert slots.waiting == 1
    with pytest.raises(ComposerBusy) as exc:  # the queue is full: refused at once
        with slots.slot():
            pass
    assert exc.value.retry_after > 0
    release.set()
    assert queued_done.wait(10)
    first.join(10)
    second.join(10)
    with slots.slot():  # free again
        pass


def test_a_wait_for_a_slot_is_bounded():
    from rlark.rlinf_config.isolated import ComposerBusy, ComposerSlots

    slots = ComposerSlots(slots=1, queue=4, wait_seconds=0.05)
    with slots.slot():
        with pytest.raises(ComposerBusy, match="within 0.05 s"):
            with slots.slot():
                pass
    assert slots.waiting == 0


def test_config_roots_must_be_absolute(monkeypatch):
    from rlark import settings

    monkeypatch.setenv("RLARK_CONFIG_ROOTS", "/srv/configs,relative/dir")
    with pytest.raises(ValueError, match="relative/dir"):
        settings.config_roots()
    monkeypatch.setenv("RLARK_CONFIG_ROOTS", "/srv/configs")
    assert settings.config_roots() == ["/srv/configs"]
    assert os.path.isabs(settings.config_roots()[0])


def test_each_line_of_a_value_of_several_lines_is_masked_on_its_own():
    """The attack: a PEM key echoed by a run script reaches the logs line by line, where the
    whole value never appears; each of its lines is masked, the whole value too."""
    pem = "-----BEGIN KEY-----\nLINE1SECRETPEM\r\nLINE2SECRETPEM  \n-----END KEY-----\n"
    mask = masker([pem])
    assert mask("pem=[-----BEGIN KEY-----") == f"pem=[{MASK}"
    assert mask("LINE1SECRETPEM") == MASK and mask("  LINE2SECRETPEM]") == f"  {MASK}]"
    assert mask(f"all: {pem}!") == f"all: {MASK}!"
    assert mask("a line of its own") == "a line of its own"
