"""Preflight and structural Findings, table-driven.

Each row of ``ROWS`` applies one mutation to a valid base Job and names the exact set of
``(code, path)`` Findings it must produce (usually one), plus a piece of the bad value the message
must show. Generic rules (message names the path; errors carry a hint) run over every row.
Edge values that were once accepted by mistake are in ``BUGS``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import yaml

from rlark.findings import Severity, has_errors
from rlark.preflight.job import check_job, validate_document
from rlark.spec import load_job, parse_job

DIGEST = "sha256:" + "0123456789abcdef" * 4

BASE: dict[str, Any] = {
    "apiVersion": "rlark.io/v1",
    "kind": "Job",
    "metadata": {"name": "ppo", "labels": {"team": "rl"}},
    "spec": {
        "headRole": "head",
        "runScript": "python train.py --config-name ppo",
        "roles": [
            {"name": "head", "workers": 1, "image": "docker.io/rlinf/rlinf:0.3.0"},
            {"name": "pool", "workers": 2, "image": "docker.io/rlinf/rlinf:0.3.0"},
        ],
    },
}


def base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def findings_of(data: dict[str, Any]):
    """Run the whole pipeline a user hits: YAML text -> parse -> value rules."""
    _, findings = validate_document(yaml.safe_dump(data, sort_keys=False))
    return findings


# --- mutation helpers ---------------------------------------------------------------------------


def _walk(data: dict, path: str):
    """``"spec.roles.0.workers"`` -> (parent container, last key)."""
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    obj = data
    for k in keys[:-1]:
        obj = obj[k]
    return obj, keys[-1]


def put(path: str, value: Any) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        obj, key = _walk(d, path)
        obj[key] = value

    return mutate


def drop(path: str) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        obj, key = _walk(d, path)
        del obj[key]

    return mutate


def both(*mutations: Callable[[dict], None]) -> Callable[[dict], None]:
    def mutate(d: dict) -> None:
        for m in mutations:
            m(d)

    return mutate


def mount(name: str, path: str, type: str = "hostPath", source: str = "/srv/data") -> dict:
    return {"name": name, "type": type, "source": source, "mountPath": path}


def env(*names: str) -> list[dict]:
    return [{"name": n, "value": "1"} for n in names]


R0 = "spec.roles[0]"
R1 = "spec.roles[1]"


@dataclass
class Row:
    id: str
    mutate: Callable[[dict], None]
    code: str
    path: str
    value: str | None = None  # a piece of the bad value the message must show
    also: tuple[tuple[str, str], ...] = ()  # further (code, path) Findings this mutation causes
    severity: Severity = Severity.error


ROWS: list[Row] = [
    # --- job name -------------------------------------------------------------------------------
    Row("name-upper-case", put("metadata.name", "PPO"), "InvalidName", "metadata.name", "PPO"),
    Row("name-starts-with-digit", put("metadata.name", "1ppo"), "InvalidName", "metadata.name", "1ppo"),
    Row("name-underscore", put("metadata.name", "ppo_run"), "InvalidName", "metadata.name", "ppo_run"),
    Row("name-trailing-hyphen", put("metadata.name", "ppo-"), "InvalidName", "metadata.name", "ppo-"),
    Row("name-empty", put("metadata.name", ""), "InvalidName", "metadata.name", "''"),
    Row(
        "name-head-service-too-long",  # '<59 chars>-head' is 64 characters
        put("metadata.name", "a" * 59),
        "NameTooLong",
        "metadata.name",
        "a" * 59,
        also=(("NameTooLong", f"{R0}.name"), ("NameTooLong", f"{R1}.name")),
    ),
    Row(
        "worker-name-too-long",  # '<56>-rollout-1' is 66 characters; '<56>-head' fits
        both(put("metadata.name", "a" * 56), put("spec.roles.1.name", "rollout")),
        "NameTooLong",
        f"{R1}.name",
        "a" * 56 + "-rollout-1",
    ),
    Row(
        "worker-name-too-long-by-two-digit-index",  # '<56>-pool-10' is 64 characters
        both(put("metadata.name", "a" * 56), put("spec.roles.1.workers", 11)),
        "NameTooLong",
        f"{R1}.name",
        "a" * 56 + "-pool-10",
    ),
    # --- roles ----------------------------------------------------------------------------------
    Row("role-name-upper-case", put("spec.roles.1.name", "Pool"), "InvalidName", f"{R1}.name", "Pool"),
    Row("role-name-underscore", put("spec.roles.1.name", "pool_1"), "InvalidName", f"{R1}.name", "pool_1"),
    Row("role-name-leading-hyphen", put("spec.roles.1.name", "-pool"), "InvalidName", f"{R1}.name", "-pool"),
    Row("role-name-duplicate", put("spec.roles.1.name", "head"), "DuplicateRoleName", f"{R1}.name", "head"),
    Row("head-role-empty", put("spec.headRole", ""), "HeadRoleMissing", "spec.headRole"),
    Row("head-role-absent", drop("spec.headRole"), "MissingField", "spec.headRole"),
    Row("head-role-unknown", put("spec.headRole", "learner"), "HeadRoleUnknown", "spec.headRole", "learner"),
    Row(
        "roles-empty",
        put("spec.roles", []),
        "NoRoles",
        "spec.roles",
        also=(("HeadRoleUnknown", "spec.headRole"),),
    ),
    Row("workers-zero", put("spec.roles.1.workers", 0), "WorkersBelowOne", f"{R1}.workers", "0"),
    Row("workers-negative", put("spec.roles.1.workers", -1), "WorkersBelowOne", f"{R1}.workers", "-1"),
    # --- images ---------------------------------------------------------------------------------
    Row("image-no-tag", put("spec.roles.0.image", "docker.io/rlinf/rlinf"), "ImageNoVersion", f"{R0}.image", "docker.io/rlinf/rlinf"),
    Row("image-latest", put("spec.roles.0.image", "rlinf/rlinf:latest"), "ImageLatestTag", f"{R0}.image", "rlinf/rlinf:latest"),
    Row("image-upper-case-path", put("spec.roles.0.image", "rlinf/RLinf:1.0"), "InvalidImage", f"{R0}.image", "rlinf/RLinf:1.0"),
    Row("image-space", put("spec.roles.0.image", "rlinf:1.0 "), "InvalidImage", f"{R0}.image", "'rlinf:1.0 '"),
    Row("image-empty", put("spec.roles.0.image", ""), "InvalidImage", f"{R0}.image", "''"),
    Row("image-empty-tag", put("spec.roles.0.image", "rlinf:"), "InvalidImage", f"{R0}.image", "rlinf:"),
    Row("image-registry-port-no-tag", put("spec.roles.0.image", "localhost:5000/x"), "ImageNoVersion", f"{R0}.image", "localhost:5000/x"),
    # --- resources ------------------------------------------------------------------------------
    *[
        Row(f"memory-{v}", put("spec.roles.0.resources", {"memory": v}), "InvalidMemory", f"{R0}.resources.memory", str(v))
        for v in ("8GB", "8", "-1Gi", "lots")
    ],
    Row("memory-zero-bytes", put("spec.roles.0.resources", {"memory": 0}), "InvalidMemory", f"{R0}.resources.memory", "0"),
    *[
        Row(f"cpu-{v}", put("spec.roles.0.resources", {"cpu": v}), "InvalidCpu", f"{R0}.resources.cpu", str(v))
        for v in ("two", "0", "-1", 0, -1)
    ],
    Row("gpu-negative", put("spec.roles.0.resources", {"gpu": -1}), "InvalidGpu", f"{R0}.resources.gpu", "-1"),
    Row("device-named-gpu", put("spec.roles.0.resources", {"devices": {"gpu": 1}}), "InvalidDevice", f"{R0}.resources.devices.gpu", "gpu"),
    Row("device-named-memory", put("spec.roles.0.resources", {"devices": {"memory": 1}}), "InvalidDevice", f"{R0}.resources.devices.memory", "memory"),
    Row("device-count-zero", put("spec.roles.0.resources", {"devices": {"rdma/hca": 0}}), "InvalidDevice", f"{R0}.resources.devices.rdma/hca", "0"),
    Row("device-name-space", put("spec.roles.0.resources", {"devices": {"a b": 1}}), "InvalidDevice", f"{R0}.resources.devices.a b", "a b"),
    Row("device-name-comma-equals", put("spec.roles.0.resources", {"devices": {"x,y=z": 2}}), "InvalidDevice", f"{R0}.resources.devices.x,y=z", "x,y=z"),
    Row("device-count-huge", put("spec.roles.0.resources", {"devices": {"foo": 10**30}}), "InvalidDevice", f"{R0}.resources.devices.foo", "1000000000000000000000000000000"),
    # --- mounts ---------------------------------------------------------------------------------
    Row(
        "mount-path-duplicate",
        put("spec.roles.0.mounts", [mount("a", "/data"), mount("b", "/data")]),
        "DuplicateMountPath", f"{R0}.mounts[1].mountPath", "/data",
    ),
    Row(
        "mount-path-duplicate-trailing-slash",
        put("spec.roles.0.mounts", [mount("a", "/data"), mount("b", "/data/")]),
        "DuplicateMountPath", f"{R0}.mounts[1].mountPath", "/data/",
    ),
    Row("mount-path-relative", put("spec.roles.0.mounts", [mount("a", "data")]), "RelativeMountPath", f"{R0}.mounts[0].mountPath", "data"),
    Row(
        "mount-name-duplicate",
        put("spec.roles.0.mounts", [mount("a", "/x"), mount("a", "/y")]),
        "DuplicateMountName", f"{R0}.mounts[1].name", "a",
    ),
    Row("mount-source-empty", put("spec.roles.0.mounts", [mount("a", "/x", source="")]), "EmptyMountSource", f"{R0}.mounts[0].source"),
    Row("mount-source-blank", put("spec.roles.0.mounts", [mount("a", "/x", "pvc", "  ")]), "EmptyMountSource", f"{R0}.mounts[0].source"),
    Row("mount-pvc-not-a-name", put("spec.roles.0.mounts", [mount("a", "/x", "pvc", "../other-project")]), "InvalidMountSource", f"{R0}.mounts[0].source", "'../other-project'"),
    Row("mount-hostpath-relative", put("spec.roles.0.mounts", [mount("a", "/x", source="data")]), "RelativeMountSource", f"{R0}.mounts[0].source", "data"),
    Row(
        "mount-object-storage-no-scheme",
        put("spec.roles.0.mounts", [mount("a", "/x", "objectStorage", "bucket/prefix")]),
        "InvalidMountSource", f"{R0}.mounts[0].source", "bucket/prefix",
    ),
    # --- env ------------------------------------------------------------------------------------
    *[
        Row(f"env-reserved-{n}", put("spec.roles.1.env", env(n)), "ReservedEnv", f"{R1}.env[0].name", n)
        for n in ("RLINF_NODE_RANK", "RAY_ADDRESS", "RLARK_FOO")
    ],
    *[
        Row(f"env-invalid-name-{n or 'empty'}", put("spec.roles.1.env", env(n)), "InvalidEnvName", f"{R1}.env[0].name", repr(n))
        for n in ("1X", "MY-VAR", "A B", "")
    ],
    Row(
        "env-duplicate-is-warning",
        put("spec.roles.1.env", env("A", "A")),
        "DuplicateEnv", f"{R1}.env[1].name", "A",
        severity=Severity.warning,
    ),
    # --- shared settings ------------------------------------------------------------------------
    Row("run-script-empty", put("spec.runScript", ""), "EmptyRunScript", "spec.runScript"),
    Row("run-script-whitespace", put("spec.runScript", "  \n\t"), "EmptyRunScript", "spec.runScript"),
    Row("run-script-absent", drop("spec.runScript"), "EmptyRunScript", "spec.runScript"),
    Row("working-dir-relative", put("spec.workingDir", "work"), "RelativePath", "spec.workingDir", "work"),
    Row("working-dir-dot", put("spec.workingDir", "."), "RelativePath", "spec.workingDir", "'.'"),
    *[
        Row(f"{f}-{v}", put("spec.failurePolicy", {f: v}), "InvalidTimeout", f"spec.failurePolicy.{f}", str(v))
        for f in ("joinTimeoutSeconds", "prepareTimeoutSeconds")
        for v in (0, -5)
    ],
    Row("grace-period-negative", put("spec.terminationGracePeriodSeconds", -1), "InvalidTimeout", "spec.terminationGracePeriodSeconds", "-1"),
    Row("max-restarts-negative", put("spec.failurePolicy", {"maxRestarts": -1}), "InvalidMaxRestarts", "spec.failurePolicy.maxRestarts", "-1"),
    # --- labels and node selectors --------------------------------------------------------------
    Row(
        "label-key-space", put("metadata.labels", {"bad key": "x"}), "InvalidLabel", "metadata.labels.bad key", "bad key",
    ),
    Row(
        "label-key-upper-case-prefix", put("metadata.labels", {"Rlark.IO/team": "x"}), "InvalidLabel", "metadata.labels.Rlark.IO/team", "Rlark.IO/team",
    ),
    Row("label-value-leading-hyphen", put("metadata.labels", {"team": "-rl"}), "InvalidLabel", "metadata.labels.team", "-rl"),
    Row("label-value-too-long", put("metadata.labels", {"team": "a" * 64}), "InvalidLabel", "metadata.labels.team", "a" * 64),
    Row("node-selector-value-space", put("spec.roles.1.nodeSelector", {"zone": "us east"}), "InvalidLabel", f"{R1}.nodeSelector.zone", "us east"),
    Row(
        "node-selector-key-two-slashes", put("spec.roles.1.nodeSelector", {"a/b/c": "x"}), "InvalidLabel", f"{R1}.nodeSelector.a/b/c", "a/b/c",
    ),
    Row("local-python-relative", put("spec.roles.0.local", {"python": "venv/bin/python"}), "RelativePath", f"{R0}.local.python", "venv/bin/python"),
    # --- structure (pydantic) -------------------------------------------------------------------
    Row("unknown-top-level", put("foo", 1), "UnknownField", "foo", "foo"),
    Row(
        "unknown-nested-typo",
        both(drop("spec.roles.0.workers"), put("spec.roles.0.wrokers", 2)),
        "UnknownField", f"{R0}.wrokers", "wrokers",
    ),
    Row("unknown-in-failure-policy", put("spec.failurePolicy", {"retries": 2}), "UnknownField", "spec.failurePolicy.retries", "retries"),
    Row("unknown-snake-case-mount-path", put("spec.roles.0.mounts", [{"name": "a", "type": "pvc", "source": "c", "mountPath": "/a", "extra": 1}]), "UnknownField", f"{R0}.mounts[0].extra", "extra"),
    Row("missing-metadata", drop("metadata"), "MissingField", "metadata"),
    Row("missing-metadata-name", drop("metadata.name"), "MissingField", "metadata.name"),
    Row("missing-kind", drop("kind"), "MissingField", "kind"),
    Row("missing-roles", drop("spec.roles"), "MissingField", "spec.roles"),
    Row("missing-image", drop("spec.roles.1.image"), "MissingField", f"{R1}.image"),
    Row("missing-mount-path", put("spec.roles.0.mounts", [{"name": "a", "type": "pvc", "source": "c"}]), "MissingField", f"{R0}.mounts[0].mountPath"),
    Row("type-workers-string", put("spec.roles.1.workers", "two"), "InvalidValue", f"{R1}.workers", "two"),
    Row("type-gpu-fraction", put("spec.roles.0.resources", {"gpu": 1.5}), "InvalidValue", f"{R0}.resources.gpu", "1.5"),
    Row("type-cpu-list", put("spec.roles.0.resources", {"cpu": [1]}), "InvalidValue", f"{R0}.resources.cpu", "[1]"),
    # a fractional CPU is valid, and says what each Worker's Ray node counts (issue 19 item 11)
    *[Row(f"cpu-fraction-{v}", put("spec.roles.0.resources", {"cpu": v}), "CpuRoundedUp",
          f"{R0}.resources.cpu", counted, severity=Severity.warning)
      for v, counted in (("500m", "counts 1 CPU"), (0.5, "counts 1 CPU"), ("1.5", "counts 2 CPUs"))],
    Row("type-env-mapping", put("spec.roles.0.env", {"A": "b"}), "InvalidValue", f"{R0}.env", '"A"'),
    Row("type-roles-mapping", put("spec.roles", {"head": {}}), "InvalidValue", "spec.roles", "head"),
    Row("type-metadata-string", put("metadata", "ppo"), "InvalidValue", "metadata", "ppo"),
    Row("type-mount-kind", put("spec.roles.0.mounts", [mount("a", "/a", "nfs")]), "InvalidValue", f"{R0}.mounts[0].type", "nfs"),
    # --- outputs and resume (issue 22) ------------------------------------------------------------
    Row("output-bad-name", put("spec.outputs", [{"name": "Ckpt", "path": "/c"}]),
        "InvalidOutputName", "spec.outputs[0].name", "Ckpt",
        also=(("OutputNotOnMount", "spec.outputs[0].path"),)),
    Row("output-duplicate-name", both(
        put("spec.roles.0.mounts", [mount("c", "/c", "pvc", "ckpt")]),
        put("spec.outputs", [{"name": "c", "path": "/c/a"}, {"name": "c", "path": "/c/b"}])),
        "DuplicateOutputName", "spec.outputs[1].name", "'c'"),
    *[Row(f"output-path-{i}", put("spec.outputs", [{"name": "c", "path": p}]),
          "InvalidOutputPath", "spec.outputs[0].path", p.strip("/") or "/")
      for i, p in enumerate(("ckpt", "/", "/c/../etc", "/c/./d"))],
    Row("output-unknown-role", put("spec.outputs", [{"name": "c", "path": "/c", "role": "pol"}]),
        "UnknownOutputRole", "spec.outputs[0].role", "pol"),
    Row("output-on-no-mount", put("spec.outputs", [{"name": "c", "path": "/ckpt/run"}]),
        "OutputNotOnMount", "spec.outputs[0].path", "/ckpt/run", severity=Severity.warning),
    Row("output-on-another-roles-mount", both(
        put("spec.roles.1.mounts", [mount("c", "/ckpt", "pvc", "ckpt")]),
        put("spec.outputs", [{"name": "c", "path": "/ckpt/run"}])),
        "OutputNotOnMount", "spec.outputs[0].path", "role head", severity=Severity.warning),
    Row("output-on-read-only-mount", both(
        put("spec.roles.0.mounts", [{**mount("c", "/ckpt", "pvc", "ckpt"), "readOnly": True}]),
        put("spec.outputs", [{"name": "c", "path": "/ckpt/run"}])),
        "OutputOnReadOnlyMount", "spec.outputs[0].path", "read-only"),
    Row("resume-not-passed", put("spec.failurePolicy", {"maxRestarts": 2, "resume": True}),
        "ResumeNotPassed", "spec.failurePolicy.resume", "RLARK_RLINF_OVERRIDES"),
    Row("api-version-wrong", put("apiVersion", "rlark.io/v2"), "InvalidValue", "apiVersion", "rlark.io/v2"),
    Row("kind-wrong", put("kind", "Pod"), "InvalidValue", "kind", "Pod"),
]

VALID: list[tuple[str, Callable[[dict], None]]] = [
    ("image-digest-only", put("spec.roles.0.image", f"docker.io/rlinf/rlinf@{DIGEST}")),
    ("image-latest-pinned-by-digest", put("spec.roles.0.image", f"rlinf/rlinf:latest@{DIGEST}")),
    ("image-registry-port-and-tag", put("spec.roles.0.image", "localhost:5000/rlinf/rlinf:0.3.0")),
    ("image-no-registry", put("spec.roles.0.image", "rlinf:0.3.0")),
    *[(f"memory-{v}", put("spec.roles.0.resources", {"memory": v})) for v in ("512Mi", "8Gi", "1G", 8 * 2**30)],
    *[(f"cpu-{v}", put("spec.roles.0.resources", {"cpu": v})) for v in ("1000m", 2, 3.0, "1")],
    ("gpu-and-device", put("spec.roles.0.resources", {"gpu": 8, "devices": {"rdma/hca": 1}})),
    ("names-at-63-characters", put("metadata.name", "a" * 56)),  # '<56>-head-0' and '<56>-pool-1'
    ("role-name-starting-with-digit", both(put("spec.roles.1.name", "1pool"))),
    ("mounts-all-kinds", put("spec.roles.0.mounts", [
        mount("a", "/a"),
        mount("b", "/b", "pvc", "my-claim"),
        mount("c", "/c", "objectStorage", "s3://bucket/prefix"),
    ])),
    ("same-mount-path-in-two-roles", both(
        put("spec.roles.0.mounts", [mount("a", "/data")]),
        put("spec.roles.1.mounts", [mount("a", "/data")]),
    )),
    ("env-ordinary", put("spec.roles.0.env", env("FOO", "_x1", "rlark_lower_is_not_reserved"))),
    ("working-dir-absolute", put("spec.workingDir", "/home/me/proj")),
    ("grace-period-zero", put("spec.terminationGracePeriodSeconds", 0)),
    ("labels-prefixed-and-empty-value", put("metadata.labels", {"rlark.io/team": "ml", "empty": ""})),
    ("node-selector", put("spec.roles.1.nodeSelector", {"kubernetes.io/hostname": "node-1"})),
    ("local-python-absolute", put("spec.roles.0.local", {"python": "/opt/venv"})),
    ("rlinf-ref", put("spec.rlinf", {"configDir": "config", "configName": "ppo", "overrides": ["a=1"]})),
    ("head-role-listed-second", both(put("spec.roles.0.name", "pool0"), put("spec.roles.1.name", "head"))),
    ("outputs-on-mounts", both(
        put("spec.roles.0.mounts", [mount("c", "/ckpt", "pvc", "ckpt"),
                                    mount("deep", "/ckpt/tb", "hostPath", "/srv/tb")]),
        put("spec.roles.1.mounts", [mount("c", "/ckpt", "pvc", "ckpt")]),
        put("spec.outputs", [{"name": "ckpt", "path": "/ckpt/logs/"},
                             {"name": "tb", "path": "/ckpt/tb/x"},
                             {"name": "pool", "path": "/ckpt", "role": "pool"}]))),
    ("resume-passed", both(put("spec.failurePolicy", {"maxRestarts": 1, "resume": True}),
                           put("spec.runScript", "python train.py ${RLARK_RLINF_OVERRIDES}"))),

]


def _params(rows: list[Row], message_rule: bool = False):
    return [pytest.param(r, id=r.id) for r in rows]


def test_base_is_valid():
    job, findings = parse_job(base())
    assert job is not None and findings == []
    assert check_job(job) == []
    assert findings_of(base()) == []


@pytest.mark.parametrize("name, mutate", VALID, ids=[v[0] for v in VALID])
def test_valid_variations_have_no_findings(name, mutate):
    data = base()
    mutate(data)
    assert [f.one_line() for f in findings_of(data)] == []


@pytest.mark.parametrize("row", _params(ROWS))
def test_rule(row: Row):
    data = base()
    row.mutate(data)
    findings = findings_of(data)
    assert {(f.code, f.path) for f in findings} == {(row.code, row.path), *row.also}
    main = [f for f in findings if (f.code, f.path) == (row.code, row.path)]
    assert all(f.severity == row.severity for f in main)
    if row.value is not None:
        assert any(row.value in f.message for f in main), [f.message for f in main]
    assert has_errors(findings) == (row.severity == Severity.error or bool(row.also))


@pytest.mark.parametrize("row", _params(ROWS, message_rule=True))
def test_every_message_names_its_path_and_every_error_has_a_hint(row: Row):
    data = base()
    row.mutate(data)
    findings = findings_of(data)
    assert findings
    for f in findings:
        assert f.path in f.message, f.one_line()
        assert "\n" not in f.message, f.one_line()
        if f.severity == Severity.error:
            assert f.hint.strip(), f.one_line()


@pytest.mark.parametrize("row", _params(ROWS))
def test_json_input_gives_the_same_findings_as_yaml(row: Row):
    data = base()
    row.mutate(data)
    _, from_json = validate_document(json.dumps(data))
    assert [f.model_dump() for f in from_json] == [f.model_dump() for f in findings_of(data)]


def test_findings_come_in_spec_order_and_all_are_reported():
    data = base()
    put("metadata.name", "Bad_Name")(data)
    put("spec.roles.0.image", "rlinf/rlinf")(data)
    put("spec.roles.1.workers", 0)(data)
    put("spec.roles.1.resources", {"memory": "8GB"})(data)
    codes = [f.code for f in findings_of(data)]
    assert codes == ["InvalidName", "ImageNoVersion", "WorkersBelowOne", "InvalidMemory"]


def test_structural_findings_are_reported_together():
    data = base()
    put("foo", 1)(data)
    drop("spec.roles.1.image")(data)
    put("spec.roles.0.workers", "two")(data)
    got = {(f.code, f.path) for f in findings_of(data)}
    assert got == {
        ("UnknownField", "foo"),
        ("MissingField", f"{R1}.image"),
        ("InvalidValue", f"{R0}.workers"),
    }


def test_unknown_fields_do_not_hide_the_value_errors():
    """One pass shows everything to fix: with only unknown fields wrong structurally, the value
    rules run on the rest; the Job is still refused. Any other structural problem stops there."""
    data = base()
    put("spec.roles.0.imagee", "x")(data)
    put("spec.failurePolicy", {"retries": 2})(data)
    put("metadata.name", "Bad_Name")(data)
    put("spec.roles.1.workers", 0)(data)
    job, findings = validate_document(yaml.safe_dump(data, sort_keys=False))
    assert job is None
    assert {(f.code, f.path) for f in findings} == {
        ("UnknownField", f"{R0}.imagee"), ("UnknownField", "spec.failurePolicy.retries"),
        ("InvalidName", "metadata.name"), ("WorkersBelowOne", f"{R1}.workers")}
    from rlark.services.jobs import JobService

    assert JobService.validate(data)[1] == findings  # a parsed document: the same Findings
    drop("spec.headRole")(data)  # now a missing field too: structural Findings only
    assert {f.code for f in findings_of(data)} == {"UnknownField", "MissingField"}


def test_json_document_is_accepted():
    job, findings = validate_document(json.dumps(BASE))
    assert findings == [] and job is not None
    assert job.spec.roles[1].workers == 2


@pytest.mark.parametrize(
    "text, got",
    [
        pytest.param("- a\n- b\n", "list", id="list"),
        pytest.param("42\n", "int", id="scalar-int"),
        pytest.param("just some words\n", "str", id="scalar-str"),
        pytest.param("", "empty", id="empty"),
        pytest.param("# only a comment\n", "empty", id="comment-only"),
        pytest.param("[1, 2]", "list", id="json-list"),
    ],
)
def test_non_mapping_document_is_one_invalid_document_finding(text, got):
    job, findings = load_job(text)
    assert job is None
    assert [(f.code, f.path, f.severity) for f in findings] == [("InvalidDocument", "$", Severity.error)]
    assert got in findings[0].message
    assert "\n" not in findings[0].message and findings[0].hint
    assert validate_document(text) == (None, findings)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{{{", id="braces"),
        pytest.param("a: [1, 2\n", id="unclosed-list"),
        pytest.param("a: b\n\tc: d\n", id="tab-indent"),
        pytest.param('{"apiVersion": "rlark.io/v1",}x', id="broken-json"),
        pytest.param(b"\xff\xfe\x00", id="not-utf8"),
    ],
)
def test_text_that_is_not_yaml_is_one_invalid_document_finding(text):
    job, findings = load_job(text)
    assert job is None
    assert [(f.code, f.path) for f in findings] == [("InvalidDocument", "$")]
    assert findings[0].message and "\n" not in findings[0].message
    assert findings[0].hint


def test_yaml_syntax_error_names_the_line():
    _, findings = load_job("apiVersion: rlark.io/v1\nkind: Job\nmetadata: [\n")
    assert "line" in findings[0].message


# --- edge values (each was once accepted by mistake) -----------------------------------------------


@dataclass
class Bug:
    id: str
    mutate: Callable[[dict], None]
    path: str  # an error Finding must be reported at this path
    reason: str = ""


BUGS = [
    Bug(
        "label-key-with-empty-prefix", put("metadata.labels", {"/team": "rl"}), "metadata.labels./team",
        "BUG: label key '/team' (empty prefix) is accepted; Kubernetes rejects it",
    ),
    Bug(
        "join-timeout-nan", put("spec.failurePolicy", {"joinTimeoutSeconds": float("nan")}),
        "spec.failurePolicy.joinTimeoutSeconds",
        "BUG: joinTimeoutSeconds .nan passes (NaN <= 0 is False)",
    ),
    Bug(
        "cpu-infinite", put("spec.roles.0.resources", {"cpu": float("inf")}), f"{R0}.resources.cpu",
        "BUG: cpu .inf passes preflight; ray_resources() then raises OverflowError at launch",
    ),
    Bug(
        "memory-boolean", put("spec.roles.0.resources", {"memory": True}), f"{R0}.resources.memory",
        "BUG: memory: true becomes 1 byte (pydantic coerces bool to int before the bool check)",
    ),
    Bug(
        "map-key-named-like-a-type", put("spec.roles.0.nodeSelector", {"str": 5}), f"{R0}.nodeSelector.str",
        "BUG: _pydantic_finding strips a map key named 'str'/'int'/'float'/'bool' from the path",
    ),
]


@pytest.mark.parametrize(
    "bug", [pytest.param(b, id=b.id) for b in BUGS]
)
def test_edge_value_is_an_error(bug: Bug):
    data = base()
    bug.mutate(data)
    findings = findings_of(data)
    assert any(f.path == bug.path and f.severity == Severity.error for f in findings), [
        f.one_line() for f in findings
    ]
