"""Rendered objects (and deploy/kubernetes) pass kubernetes-validate in strict mode for
Kubernetes 1.29 through 1.37 (strict: unknown fields are errors, FACTS.md).

Every distinct object *shape* (field structure, values ignored) of Jobs with 1 to 64 Workers,
all mount kinds, GPUs and devices, with and without owner references, is validated once per
version; that keeps the test to seconds while covering every field RLark renders.
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate  # in the test extras: a missing install fails, never skips
import pytest
import yaml

from rlark.runtimes.kubernetes import render
from tests.k8s_jobs import FULL_POLICY, big_job, job

VERSIONS = [f"1.{minor}" for minor in range(29, 38)]
DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ppo-run-r1",
         "uid": "6f1c2a52-1f0e-4f5e-9d0c-3a4b5c6d7e8f"}


def shape(node):
    """The structure of an object: dict keys and leaf types, lists reduced to their distinct
    item shapes."""
    if isinstance(node, dict):
        return {k: shape(v) for k, v in sorted(node.items())}
    if isinstance(node, list):
        items = {json.dumps(shape(v), sort_keys=True) for v in node}
        return sorted(items)
    return type(node).__name__


def rendered_objects():
    jobs = [job(1), job(3), job(8, full=True), job(64, full=True), big_job(64)]
    for j in jobs:
        for owner, token in ((None, None), (OWNER, "a-run-s-ray-token")):
            yield from render.render_run(j, "r1", render.RenderOptions(
                namespace="rl", owner=owner, ray_dashboard=True, policy=FULL_POLICY),
                ray_token=token)
    # env from secrets: the Run's Secret, and Pods that refer to it and to a Kubernetes Secret
    from rlark.ranks import plan_workers
    from rlark.spec import EnvVar

    j = job(3).model_copy(deep=True)
    j.spec.roles[0].env = [EnvVar.model_validate(e) for e in (
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api_key"}}},
        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "hf.v1", "key": "token"}}})]
    opts = render.RenderOptions(namespace="rl", owner=OWNER)
    values = {("wandb", "api_key"): "v"}
    yield render.render_secret(j, "r1", opts, values)
    for w in plan_workers(j):
        yield render.render_pod(j, w, render.worker_env(j, w, "r1", opts), "r1", opts,
                                managed=values.keys())


def distinct(objs):
    seen, out = set(), []
    for o in objs:
        key = json.dumps(shape(o), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out


SHAPES = distinct(rendered_objects())


def deploy_objects():
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                yield path.name, doc


def test_the_shapes_cover_every_kind_and_mount_kind():
    kinds = {o["kind"] for o in SHAPES}
    assert kinds == {"ConfigMap", "Service", "NetworkPolicy", "PersistentVolumeClaim", "Pod", "Secret"}
    volumes = {k for o in SHAPES if o["kind"] == "Pod" for v in o["spec"]["volumes"] for k in v}
    assert {"hostPath", "persistentVolumeClaim", "csi", "configMap", "emptyDir"} <= volumes
    assert any("ownerReferences" in o["metadata"] for o in SHAPES)
    assert any("nvidia.com/gpu" in json.dumps(o) for o in SHAPES)
    assert any("secretKeyRef" in json.dumps(o) for o in SHAPES)


@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_objects_are_valid_in_strict_mode(version):
    for obj in SHAPES:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_deploy_manifests_are_valid_in_strict_mode(version):
    docs = list(deploy_objects())
    assert {d["kind"] for _, d in docs} >= {"Deployment", "ServiceAccount", "Role", "RoleBinding",
                                           "ClusterRole", "ClusterRoleBinding", "Secret", "Service",
                                           "PersistentVolumeClaim", "Namespace"}
    for name, doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_strict_mode_catches_an_unknown_field():
    """The check has teeth: a misspelt field fails in every version."""
    pod = json.loads(json.dumps(next(o for o in SHAPES if o["kind"] == "Pod")))
    pod["spec"]["containers"][0]["terminationMessagePolicyy"] = "File"
    for version in (VERSIONS[0], VERSIONS[-1]):
        with pytest.raises(kubernetes_validate.ValidationError, match="terminationMessagePolicyy"):
            kubernetes_validate.validate(pod, version, strict=True)


def test_a_whole_64_worker_stream_is_valid_for_the_newest_version():
    for obj in render.render_run(job(64, full=True), "r1",
                                 render.RenderOptions(owner=OWNER, policy=FULL_POLICY),
                                 ray_token="a-run-s-ray-token"):
        kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
