"""The run record's format as pydantic models, and the JSON Schema they give (``rlark schema
record``, ``GET /api/v1/record/schema``).

The models describe record version 2 (:data:`rlark.record.build.RECORD_VERSION`); what a Worker
reported about itself (``facts``) stays open (``additionalProperties``), since older and newer
bootstraps report more or less. A version 1 record is the same minus the version 2 sections;
:func:`record_schema` accepts either (``oneOf`` on ``recordVersion``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlark.record.build import RECORD_VERSION


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Result(_Open):
    phase: str
    reason: str
    message: str | None = None
    exitCode: int | None = None


class Times(_Open):
    created: str | None = None
    started: str | None = None
    running: str | None = None
    finished: str | None = None
    durationSeconds: float | None = Field(default=None, description="seconds")


class GitFacts(_Open):
    """A git checkout as a Worker saw it; ``absent`` says why there is none."""

    path: str | None = None
    root: str | None = None
    commit: str | None = None
    branch: str | None = None
    remote: str | None = Field(default=None, description="origin's URL without credentials")
    dirty: bool | None = None
    diffSha256: str | None = Field(default=None, description="sha256 of `git diff HEAD --binary`; "
                                   "the diff itself is in `diffs` under this key")
    diffCut: bool | None = None
    absent: str | None = None


class RLinfCode(_Open):
    version: str | None = None
    directUrl: dict[str, Any] | None = Field(default=None, description="pip's direct_url.json (PEP 610)")
    packageDir: str | None = None
    git: GitFacts | None = None
    absent: str | None = None


class Code(_Open):
    workingDir: GitFacts | None = None
    rlinf: RLinfCode | None = None


class Resources(_Open):
    asked: dict[str, Any] = Field(description="the role's resources: cpu, memory, gpu, devices")
    seen: dict[str, Any] = Field(description="cpus, memoryBytes, gpus, gpuUuids, gpuModels, "
                                 "deviceFiles, ray (what Ray counts on the node)")


class Worker(_Open):
    name: str
    role: str
    nodeRank: int
    isHead: bool
    host: str | None = None
    ip: str | None = None
    rayNodeId: str | None = None
    joined: bool
    phase: str
    reason: str | None = None
    exitCode: int | None = None
    log: str | None = None
    rayReportedRank: dict[str, Any] = Field(description="label: the node's rlark.io/node-rank "
                                            "label in Ray's node table; rayletEnv: RLINF_NODE_RANK "
                                            "in its raylet's environment")
    resources: Resources
    code: dict[str, Any]
    packagesSha256: str | None = None
    facts: dict[str, Any]


class Workers(_Open):
    expected: int
    actual: int
    items: list[Worker]


class Versions(_Open):
    python: list[str]
    ray: list[str]
    rlinf: list[str]
    torch: list[str]
    cuda: list[str]
    nvidiaDriver: list[str]
    nccl: list[str]
    deviceLibs: dict[str, list[str]]
    packageLists: list[str]


class PackageList(_Open):
    count: int
    packages: list[str] = Field(description="name==version, PEP 503 names, sorted")


class Resolved(_Open):
    source: Literal["hydra-output", "rlark-composition", "absent"]
    data: dict[str, Any] | None = None
    overrides: list[Any] | None = None
    inputs: dict[str, Any] | None = Field(
        default=None, description="rlark-composition: the sha256 of each Hydra file RLark "
        "composed from, `{files: {path: sha256}, cut}`")
    sameInputs: dict[str, Any] | None = Field(
        default=None, description="rlark-composition: whether those are the files the head saw "
        "when the Run started, `{same: true|false|null, differ?: [path], why?}`")


class Configs(_Open):
    original: dict[str, Any] | None = Field(default=None, description="the head's snapshot of "
                                            "the Hydra files: dir, name, files[{path, sha256, bytes, text?}]")
    overrides: dict[str, list[str]] = Field(description="spec, runScript, notInRunScript")
    resolved: Resolved


class Location(_Open):
    key: str
    kind: Literal["dataset", "model", "checkpoint", "output"]
    value: str
    path: str | None = None
    rlinfSource: str
    byRole: dict[str, dict[str, Any]]
    persistent: bool | None = None


class Check(_Open):
    id: str
    item: str
    status: Literal["pass", "warn", "fail"]
    evidence: list[str]


class Checks(_Open):
    status: Literal["pass", "warn", "fail", "provisional"] = Field(
        description="the worst item's status; `provisional` while the record is (the items are "
                    "what it shows so far)")
    items: list[Check]


class Logs(_Open):
    root: str | None = None
    workers: dict[str, str | None]


class RecordV1(_Open):
    """Version 1: what version 2 holds minus code, diffs, packageLists, configs, locations,
    checks and the new per-Worker fields."""

    recordVersion: Literal[1]
    job: str
    run: int
    runUid: str
    runtime: str
    result: Result
    times: Times
    images: dict[str, Any]
    workers: dict[str, Any]
    versions: dict[str, Any]
    logs: Logs
    spec: dict[str, Any]


class RecordV2(_Open):
    recordVersion: Literal[2]
    provisional: bool = Field(
        default=False, description="true while the Run's Workers have not all ended: the record "
        "is built afresh on each read and its checks are not final; false once stored")
    provisionalReason: str | None = None
    job: str
    run: int
    runUid: str
    cause: str
    runtime: str
    result: Result
    times: Times
    runtimeNotes: list[str]
    headRole: str | None = None
    images: dict[str, Any]
    imageDigests: dict[str, dict[str, list[str]]]
    imageDigestMismatch: list[str]
    rlinf: dict[str, Any] | None = None
    workingDir: str | None = None
    code: Code
    diffs: dict[str, str] = Field(description="sha256 -> uncommitted diff (size-capped), once each")
    mounts: list[dict[str, Any]]
    workers: Workers
    versions: Versions
    packageLists: dict[str, PackageList] = Field(description="sha256 -> package list, once each")
    configs: Configs
    locations: list[Location]
    logs: Logs
    spec: dict[str, Any]
    checks: Checks


def record_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a run record: version 2, or version 1 (still read)."""
    v2 = RecordV2.model_json_schema()
    v1 = RecordV1.model_json_schema()
    defs = {**v1.pop("$defs", {}), **v2.pop("$defs", {})}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://rlark.io/v1/record.schema.json",
        "title": f"RLark run record (version {RECORD_VERSION}, or 1)",
        "oneOf": [{"$ref": "#/$defs/RecordV2"}, {"$ref": "#/$defs/RecordV1"}],
        "$defs": {**defs, "RecordV2": v2, "RecordV1": v1},
    }
