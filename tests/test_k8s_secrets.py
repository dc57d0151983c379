"""Secrets on Kubernetes (issue 13 item 1), against the test bed's real API server as RLark's
own ServiceAccount: an RLark-managed secret becomes a Secret of the Run, owned by its ConfigMap,
labelled and deleted with it; the Pods take their values with ``valueFrom.secretKeyRef`` and no
Pod holds a value; a name RLark does not manage must be a Kubernetes Secret of the namespace that
an administrator allowed for the project (label ``rlark.io/project``), with the key; the submit
checks both (issue 18: tests/test_k8s_isolation.py has the attacks).
"""

from __future__ import annotations

import base64
import json
import logging

import pytest

from tests.k8s_testbed import KwokWorkers, RlarkOnK8s, setup_timeout, wait_for

pytest.importorskip("kubernetes")

from rlark.runtimes.kubernetes import render  # noqa: E402
from rlark.services.errors import Invalid  # noqa: E402
from rlark.spec import load_job  # noqa: E402

pytestmark = pytest.mark.timeout(setup_timeout())

VALUE = "wb-k8s-0123456789abcdef"
JOB = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: sec}
spec:
  headRole: head
  terminationGracePeriodSeconds: 5
  runScript: python train.py
  roles:
    - name: head
      workers: 1
      image: docker.io/rlinf/rlinf:0.3.0
      env:
        - {name: WANDB_API_KEY, valueFrom: {secretKeyRef: {name: wandb, key: api_key}}}
        - {name: HF_TOKEN, valueFrom: {secretKeyRef: {name: hf, key: token}}}
        - {name: HELLO, value: world}
"""


@pytest.fixture
def rlark(k8s_testbed, k8s_namespace, rlark_home, caplog):
    caplog.set_level(logging.ERROR, logger="rlark.kubernetes")
    r = RlarkOnK8s(k8s_testbed, k8s_namespace, rlark_home)
    yield r
    r.close()


def kube_secret(tb, ns: str, name: str, data: dict[str, str], project: str | None = None) -> None:
    """A Kubernetes Secret, as the admin; ``project``: allowed for that project (its label)."""
    labels = {"rlark.io/project": project} if project else {}
    tb.admin().create_namespaced_secret(ns, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def test_a_kubernetes_secret_the_job_names_must_be_allowed_and_have_its_key(rlark, k8s_testbed, k8s_namespace):
    rlark.set_secret("wandb", {"api_key": VALUE})
    with pytest.raises(Invalid) as exc:
        rlark.submit(JOB)
    found = [f for f in exc.value.findings if f.severity == "error"]
    assert [(f.code, f.path) for f in found] == [
        ("SecretNotAllowed", "spec.roles[0].env[1].valueFrom.secretKeyRef.name")]
    assert k8s_namespace in found[0].hint and "rlark.io/project=default" in found[0].hint
    kube_secret(k8s_testbed, k8s_namespace, "hf", {"other": "x"}, project="default")
    with pytest.raises(Invalid) as exc:
        rlark.submit(JOB)
    found = [f for f in exc.value.findings if f.severity == "error"]
    assert [(f.code, f.path) for f in found] == [
        ("SecretNotFound", "spec.roles[0].env[1].valueFrom.secretKeyRef.key")]
    assert "other" not in found[0].message + found[0].hint  # an allowed Secret's keys are not listed either


def test_a_run_has_its_own_secret_and_its_pods_only_refer_to_it(rlark, k8s_testbed, k8s_namespace, tmp_path):
    rlark.set_secret("wandb", {"api_key": VALUE})
    kube_secret(k8s_testbed, k8s_namespace, "hf", {"token": "hf-of-the-namespace"}, project="default")
    workers = KwokWorkers(k8s_testbed, k8s_namespace, load_job(JOB)[0], tmp_path)
    rlark.submit(JOB)
    workers.wait_running()
    uid = rlark.run_row("sec").uid
    objs = rlark.objects(f"{render.LABEL_RUN}={uid}")
    [owner], [pod] = objs["ConfigMap"], objs["Pod"]
    # the Run's two Secrets: its env values and its Ray token (render.render_ray_secret)
    secrets = {s.metadata.name: s for s in objs["Secret"]}
    assert sorted(secrets) == [f"sec-run-{uid}-env", f"sec-run-{uid}-ray"]
    secret = secrets[f"sec-run-{uid}-env"]
    assert all(s.metadata.owner_references[0].uid == owner.metadata.uid for s in secrets.values())
    assert secret.metadata.owner_references[0].uid == owner.metadata.uid
    assert base64.b64decode(secret.data["wandb.api_key"]).decode() == VALUE
    assert list(secret.data) == ["wandb.api_key"]  # the namespace's own Secret is not copied
    env = {e.name: e for e in pod.spec.containers[0].env}
    ref = env["WANDB_API_KEY"].value_from.secret_key_ref
    assert (ref.name, ref.key, env["WANDB_API_KEY"].value) == (secret.metadata.name, "wandb.api_key", None)
    ref = env["HF_TOKEN"].value_from.secret_key_ref
    assert (ref.name, ref.key) == ("hf", "token")
    assert env["HELLO"].value == "world"
    pod_json = json.dumps(k8s_testbed.admin().api_client.sanitize_for_serialization(pod))
    assert VALUE not in pod_json and "hf-of-the-namespace" not in pod_json
    assert VALUE not in json.dumps(rlark.job("sec")) and VALUE not in json.dumps(rlark.jobs.events("sec"))
    rlark.jobs.stop("sec")
    rlark.wait_ended("sec", timeout=60)
    wait_for("the Run's objects, its Secret too, to be deleted",
             lambda: not any(rlark.objects(f"{render.LABEL_RUN}={uid}").values()), timeout=60)
    assert k8s_testbed.admin().read_namespaced_secret("hf", k8s_namespace)  # not RLark's: kept
