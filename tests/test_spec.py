"""The Job spec: load/dump round trips, JSON Schema export, relative paths, node-rank planning."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from rlark.ranks import PlannedWorker, plan_workers, rank_ranges
from rlark.spec import (
    Job,
    dump_job,
    head_service_name,
    job_to_dict,
    json_schema,
    load_job,
    parse_job,
    resolve_relative_paths,
    worker_name,
)

MINIMAL_YAML = """\
apiVersion: rlark.io/v1
kind: Job
metadata:
  name: ppo
spec:
  headRole: head
  runScript: python train.py
  roles:
    - name: head
      image: docker.io/rlinf/rlinf:0.3.0
    - name: pool
      workers: 2
      image: docker.io/rlinf/rlinf:0.3.0
      resources: {cpu: 500m, memory: 8Gi, gpu: 1, devices: {rdma/hca: 1}}
      prepareScript: pip list
      env: [{name: FOO, value: bar}]
      mounts:
        - {name: data, type: hostPath, source: /srv/data, mountPath: /data, readOnly: true}
      nodeSelector: {zone: a}
      local: {python: /opt/venv}
"""


def load(text: str) -> Job:
    job, findings = load_job(text)
    assert findings == [] and job is not None
    return job


def make_job(roles: list[dict], head: str = "head", name: str = "ppo", **spec) -> Job:
    job, findings = parse_job(
        {
            "apiVersion": "rlark.io/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"headRole": head, "runScript": "true", "roles": roles, **spec},
        }
    )
    assert findings == [], findings
    return job


def role(name: str, workers: int = 1, **kw) -> dict:
    return {"name": name, "workers": workers, "image": "rlinf:1", **kw}


# --- load / dump ---------------------------------------------------------------------------------


def test_load_reads_camel_case_into_snake_case_attributes():
    job = load(MINIMAL_YAML)
    pool = job.role("pool")
    assert job.name == "ppo" and job.spec.head_role == "head"
    assert job.spec.run_script == "python train.py"
    assert pool.prepare_script == "pip list"
    assert pool.mounts[0].mount_path == "/data" and pool.mounts[0].read_only is True
    assert pool.node_selector == {"zone": "a"}
    assert pool.local.python == "/opt/venv"
    assert pool.resources.devices == {"rdma/hca": 1}
    assert job.total_workers == 3
    assert job.role("nope") is None


def test_defaults_are_filled_and_dumped():
    data = job_to_dict(load(MINIMAL_YAML))
    head = data["spec"]["roles"][0]
    assert head["workers"] == 1
    assert head["resources"] == {"gpu": 0, "devices": {}}  # cpu/memory None are left out
    assert head["prepareScript"] == "" and head["env"] == [] and head["mounts"] == []
    assert data["spec"]["failurePolicy"] == {
        "joinTimeoutSeconds": 300,
        "prepareTimeoutSeconds": 1800,
        "maxRestarts": 0,
        "unresponsiveTimeoutSeconds": 300,
        "onPreemption": "Requeue",  # queueTimeoutSeconds None (no bound) is left out
        "maxRequeues": 3,
        "resume": False,
    }
    assert data["spec"]["priority"] == 0
    assert data["spec"]["terminationGracePeriodSeconds"] == 10
    assert "workingDir" not in data["spec"] and "rlinf" not in data["spec"]
    assert data["metadata"] == {"name": "ppo", "labels": {}}


def _keys(obj, skip=("labels", "nodeSelector", "devices")):
    """Every field name in a dumped Job (not the keys of user maps)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            if k not in skip:
                yield from _keys(v, skip)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v, skip)


def test_dump_uses_camel_case_keys_only():
    keys = set(_keys(job_to_dict(load(MINIMAL_YAML))))
    assert {"apiVersion", "headRole", "runScript", "prepareScript", "mountPath", "readOnly",
            "nodeSelector", "failurePolicy", "joinTimeoutSeconds",
            "terminationGracePeriodSeconds"} <= keys
    assert not [k for k in keys if "_" in k]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip(fmt):
    job = load(MINIMAL_YAML)
    text = dump_job(job, fmt)
    again = load(text)
    assert again == job
    assert dump_job(again, fmt) == text
    parsed = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    assert parsed == job_to_dict(job)


def test_yaml_dump_keeps_field_order():
    text = dump_job(load(MINIMAL_YAML), "yaml")
    top = [line.split(":")[0] for line in text.splitlines() if line and not line[0].isspace()]
    assert top == ["apiVersion", "kind", "metadata", "spec"]


def test_json_text_loads_like_yaml():
    job = load(MINIMAL_YAML)
    assert load(json.dumps(job_to_dict(job))) == job


def test_derived_names():
    assert worker_name("ppo", "pool", 3) == "ppo-pool-3"
    assert head_service_name("ppo") == "ppo-head"


# --- JSON Schema -----------------------------------------------------------------------------------


def _object_schemas(node):
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for v in node.values():
            yield from _object_schemas(v)
    elif isinstance(node, list):
        for v in node:
            yield from _object_schemas(v)


def test_json_schema_is_valid_and_forbids_unknown_fields():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    objects = list(_object_schemas(schema))
    assert len(objects) >= 8  # Job, Metadata, JobSpec, Role, Resources, Mount, EnvVar, ...
    assert all(o.get("additionalProperties") is False for o in objects), [
        o.get("title") for o in objects if o.get("additionalProperties") is not False
    ]
    text = json.dumps(schema)
    for name in ("headRole", "runScript", "prepareScript", "nodeSelector", "mountPath"):
        assert f'"{name}"' in text
    assert "head_role" not in text


def test_json_schema_accepts_a_job_and_rejects_a_typo():
    validator = jsonschema.Draft202012Validator(json_schema())
    data = job_to_dict(load(MINIMAL_YAML))
    assert list(validator.iter_errors(data)) == []
    data["spec"]["roles"][0]["wrokers"] = 2
    errors = list(validator.iter_errors(data))
    assert errors and "wrokers" in errors[0].message
    assert list(validator.iter_errors({"apiVersion": "rlark.io/v1", "kind": "Job"}))


# --- relative paths --------------------------------------------------------------------------------


def test_resolve_relative_paths():
    job = make_job(
        [
            role("head", mounts=[
                {"name": "a", "type": "hostPath", "source": "data", "mountPath": "/a"},
                {"name": "b", "type": "hostPath", "source": "/abs/data", "mountPath": "/b"},
                {"name": "c", "type": "hostPath", "source": "../shared", "mountPath": "/c"},
                {"name": "d", "type": "pvc", "source": "claim", "mountPath": "/d"},
                {"name": "e", "type": "objectStorage", "source": "s3://b/p", "mountPath": "/e"},
                {"name": "f", "type": "hostPath", "source": "", "mountPath": "/f"},
            ]),
        ],
        workingDir=".",
    )
    out = resolve_relative_paths(job, "/home/me/proj")
    assert out.spec.working_dir == "/home/me/proj"
    assert [m.source for m in out.spec.roles[0].mounts] == [
        "/home/me/proj/data",
        "/abs/data",
        "/home/me/shared",
        "claim",
        "s3://b/p",
        "",  # left empty so preflight still reports EmptyMountSource
    ]
    # the original is untouched
    assert job.spec.working_dir == "." and job.spec.roles[0].mounts[0].source == "data"


@pytest.mark.parametrize(
    "working_dir, expected",
    [("/abs/dir", "/abs/dir"), ("sub/dir", "/base/sub/dir"), (None, None)],
    ids=["absolute-kept", "relative", "absent"],
)
def test_resolve_working_dir(working_dir, expected):
    extra = {} if working_dir is None else {"workingDir": working_dir}
    out = resolve_relative_paths(make_job([role("head")], **extra), "/base")
    assert out.spec.working_dir == expected


def test_resolve_document_paths_works_on_documents_that_are_not_valid_jobs():
    """A typo elsewhere must not make ``workingDir: .`` an error: the paths of a document are
    resolved whether or not it parses (the CLI does this before any check)."""
    from rlark.spec import resolve_document_paths

    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": {"headRole": "h", "workingDir": ".", "bogus": 1, "roles": [
               {"name": "h", "worker": 2, "image": "i:1", "mounts": [
                   {"name": "a", "type": "hostPath", "source": "data", "mountPath": "/a"},
                   {"name": "b", "type": "pvc", "source": "claim", "mountPath": "/b"},
                   {"name": "c", "type": "hostPath", "mountPath": "/c"},
                   "not a mount"]},
               "not a role"]}}
    out = resolve_document_paths(doc, "/base")
    assert out["spec"]["workingDir"] == "/base"
    mounts = out["spec"]["roles"][0]["mounts"]
    assert [m.get("source") if isinstance(m, dict) else m for m in mounts] == [
        "/base/data", "claim", None, "not a mount"]
    assert "source" not in mounts[2]  # a missing source stays missing (MissingField)
    assert doc["spec"]["workingDir"] == "."  # a copy
    for odd in ([], {"spec": []}, {"spec": {"workingDir": 3, "roles": "x"}}):
        assert resolve_document_paths(odd, "/base") == odd


def test_job_changes_leaves_out_the_defaults_and_writes_whole_numbers_as_integers():
    from rlark.spec import job_changes, spec_changes, whole_numbers

    job, _ = load_job(MINIMAL_YAML)
    full = job_to_dict(job)
    assert full["spec"]["failurePolicy"]["joinTimeoutSeconds"] == 300.0
    short = job_changes(job)
    assert "failurePolicy" not in short["spec"] and "terminationGracePeriodSeconds" not in short["spec"]
    assert Job.model_validate(short) == job  # loading it gives the same Job
    assert spec_changes(full) == short
    assert whole_numbers({"a": [1.0, 1.5, True, "2.0"]}) == {"a": [1, 1.5, True, "2.0"]}
    broken = {"apiVersion": "rlark.io/v1", "kind": "Job", "spec": {"x": 2.0}}
    assert spec_changes(broken) == {"apiVersion": "rlark.io/v1", "kind": "Job", "spec": {"x": 2}}


# --- node ranks -------------------------------------------------------------------------------------


def test_plan_workers_head_role_first_even_when_listed_second():
    job = make_job([role("pool", 2), role("head", 1)])
    planned = plan_workers(job)
    assert [(w.name, w.role, w.index, w.node_rank, w.is_head) for w in planned] == [
        ("ppo-head-0", "head", 0, 0, True),
        ("ppo-pool-0", "pool", 0, 1, False),
        ("ppo-pool-1", "pool", 1, 2, False),
    ]


def test_plan_workers_ranks_are_contiguous_and_only_rank_zero_is_head():
    job = make_job([role("env", 3), role("head", 2), role("rollout", 4)])
    planned = plan_workers(job)
    assert [w.node_rank for w in planned] == list(range(9))
    assert [w.is_head for w in planned] == [True] + [False] * 8
    assert [w.role for w in planned] == ["head"] * 2 + ["env"] * 3 + ["rollout"] * 4
    assert planned[1].name == "ppo-head-1"
    assert len({w.name for w in planned}) == 9
    assert rank_ranges(planned) == {"head": (0, 1), "env": (2, 4), "rollout": (5, 8)}
    assert list(rank_ranges(planned)) == ["head", "env", "rollout"]


def test_plan_workers_is_stable_for_the_same_spec():
    job = make_job([role("pool", 2), role("head", 1)])
    again = load(dump_job(job))
    assert plan_workers(job) == plan_workers(again) == plan_workers(job)


def test_plan_workers_unknown_head_role_raises():
    job = make_job([role("pool", 2)], head="head")
    with pytest.raises(ValueError, match="headRole"):
        plan_workers(job)


def test_rank_ranges_of_base_shape():
    planned = plan_workers(make_job([role("head", 1), role("pool", 2)]))
    assert rank_ranges(planned) == {"head": (0, 0), "pool": (1, 2)}
    assert all(isinstance(w, PlannedWorker) for w in planned)
    assert rank_ranges([]) == {}
