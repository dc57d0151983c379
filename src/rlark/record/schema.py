"""The run record's format: typed, closed pydantic models that the builder
(:func:`rlark.record.build.build_record`) produces every record through, that the store checks
every record against before it keeps one (:func:`validate_record`), and that publish the
record's JSON Schema (``rlark schema record``, ``GET /api/v1/record/schema``): one source, so
the schema cannot drift from what is built and stored.

Closed: every object whose keys RLark chooses forbids any other key (``additionalProperties:
false``). Free-form places are typed as JSON values on purpose (:data:`JsonValue`, documented
by their field's description): what a Worker reported about itself (``facts``, its code,
versions and resources as seen; a Worker's own code may report anything, so the record keeps
it as reported, and a value of an unexpected type can never keep a Run's record from being
stored), the user's Hydra config and the Job's spec snapshot (whose own schema is ``rlark schema
job``).

:class:`RecordV2` is the version RLark builds (:data:`RECORD_VERSION`); :class:`RecordV1` is the
version records stored before it have, still read everywhere. :func:`record_schema` accepts
either (``oneOf`` on ``recordVersion``). Fields that records of version 2 stored by an earlier
RLark may lack are optional, so every stored record still validates.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

#: the record version RLark builds
RECORD_VERSION = 2

#: a value as a Worker reported it, or as the user wrote it (any JSON value)
Reported = JsonValue


class _Closed(BaseModel):
    # extra keys are refused, and values are never coerced into another type: what the builder
    # makes is exactly what is validated and kept
    model_config = ConfigDict(extra="forbid", strict=True)


class Result(_Closed):
    phase: str
    reason: str
    message: str | None = None
    exitCode: int | None = None


class Times(_Closed):
    created: str | None = Field(default=None, description="ISO 8601, UTC")
    started: str | None = None
    running: str | None = None
    finished: str | None = None
    durationSeconds: float | None = Field(default=None, description="seconds, started to finished")


class Code(_Closed):
    workingDir: dict[str, Reported] | None = Field(
        default=None, description="the head's working directory as a git checkout, as it "
        "reported it: path, root, commit, branch, remote (origin's URL without credentials), "
        "dirty, changed, untracked, diffSha256 (sha256 of `git diff HEAD --binary`; the diff "
        "itself is in `diffs` under this key), diffCut; or absent (why there is none)")
    rlinf: dict[str, Reported] | None = Field(
        default=None, description="the installed RLinf as the head reported it: version, "
        "directUrl (pip's direct_url.json, PEP 610), packageDir, git (as workingDir), absent")


class RayNode(_Closed):
    """What a Worker's bootstrap told ``ray start`` (its report)."""

    numCpus: Reported = None
    numGpus: Reported = None
    memoryBytes: Reported = None
    objectStoreBytes: Reported = None
    workerPorts: Reported = Field(default=None, description="[min, max]; null: Ray's own range")


class RayReportedRank(_Closed):
    label: Reported = Field(default=None, description="the node's rlark.io/node-rank label in "
                            "Ray's node table")
    rayletEnv: Reported = Field(default=None, description="RLINF_NODE_RANK in its raylet's "
                                "environment")
    absent: Reported = Field(default=None, description="why the raylet's environment was not read")


class Asked(_Closed):
    """The role's resources as the Job's spec gives them."""

    cpu: Reported = None
    memory: Reported = None
    gpu: Reported = None
    devices: Reported = None


class Seen(_Closed):
    """What the Worker saw of its machine (its report) and what Ray counts on its node."""

    cpus: Reported = Field(default=None, description="CPUs it may run on")
    memoryBytes: Reported = Field(default=None, description="bytes: the cgroup limit, else MemTotal")
    gpus: int = Field(description="GPUs visible to it")
    gpuUuids: list[Reported] | None = None
    gpuModels: list[str]
    deviceFiles: Reported = None
    ray: Reported = Field(default=None, description="the resources Ray counts on its node "
                          "(the head's node table)")


class Resources(_Closed):
    asked: Asked
    seen: Seen


class WorkerCode(_Closed):
    """One Worker's code, from its report."""

    workingDirCommit: Reported = None
    workingDirBranch: Reported = None
    workingDirDirty: Reported = None
    workingDirDiffSha256: Reported = None
    rlinfVersion: Reported = None
    rlinfCommit: Reported = None
    rlinfDirty: Reported = None
    rlinfDiffSha256: Reported = None
    rlinfSource: Reported = None


class Worker(_Closed):
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
    startedAt: str | None = None
    finishedAt: str | None = None
    log: str | None = None
    rayVersion: Reported = Field(default=None, description="the Ray version its node ran (its report)")
    rayNode: RayNode | None = None
    rayReportedRank: RayReportedRank
    resources: Resources
    code: WorkerCode
    packagesSha256: Reported = None
    factsSeconds: Reported = Field(default=None, description="seconds its bootstrap took to "
                                   "gather the record's facts (beside `ray start`, at idle CPU "
                                   "priority: waits for a free CPU included)")
    facts: dict[str, Reported] = Field(description="everything it reported, but what the "
                                       "record keeps once elsewhere (diffs, package lists, the "
                                       "Hydra snapshot and output)")


class Workers(_Closed):
    expected: int
    actual: int = Field(description="Workers whose Ray node joined")
    items: list[Worker]


class Versions(_Closed):
    """Distinct values over the Workers, as they reported them (text from RLark's bootstrap)."""

    python: list[Reported]
    ray: list[Reported]
    rlinf: list[Reported]
    torch: list[Reported]
    cuda: list[Reported]
    nvidiaDriver: list[Reported]
    nccl: list[Reported]
    deviceLibs: dict[str, list[Reported]]
    packageLists: list[Reported] = Field(description="sha256 of each distinct package list")


class PackageList(_Closed):
    count: int
    packages: list[Reported] = Field(description="name==version, PEP 503 names, sorted")


class SameInputs(_Closed):
    same: bool | None
    differ: list[str] | None = None
    why: str | None = None


class Resolved(_Closed):
    """The resolved final config: from Hydra's output directory the run script wrote
    (``hydra-output``), RLark's own isolated composition (``rlark-composition``), or none
    (``absent``)."""

    source: Literal["hydra-output", "rlark-composition", "absent"]
    note: str | None = None
    dir: Reported = Field(default=None, description="hydra-output: where the head found it")
    sha256: Reported = None
    cut: bool | None = None
    data: dict[str, Reported] | None = Field(default=None, description="the config itself")
    overrides: list[Reported] | None = None
    error: str | None = None
    configDir: str | None = None
    configName: str | None = None
    inputs: dict[str, Reported] | None = Field(
        default=None, description="rlark-composition: the sha256 of each Hydra file RLark "
        "composed from, `{files: {path: sha256}, cut}`, or `{absent}`")
    sameInputs: SameInputs | None = Field(
        default=None, description="rlark-composition: whether those are the files the head saw "
        "when the Run started")


class Overrides(_Closed):
    spec: list[str] = Field(description="spec.rlinf.overrides")
    runScript: list[str] = Field(description="the Hydra overrides visible in the run script")
    notInRunScript: list[str]
    resume: list[str] | None = Field(default=None, description="what RLark gave the run script "
                                     "in $RLARK_RLINF_OVERRIDES to resume (see `resume`)")


class Configs(_Closed):
    original: dict[str, Reported] | None = Field(
        default=None, description="the head's snapshot of the Hydra files: dir, name, "
        "files[{path, sha256, bytes, text?}], filesCut")
    overrides: Overrides
    resolved: Resolved


class Location(_Closed):
    key: str
    kind: Literal["dataset", "model", "checkpoint", "output"]
    value: str
    path: str | None = None
    rlinfSource: str
    byRole: dict[str, dict[str, Reported]] = Field(description="role -> the mount that backs "
                                                   "the path on its Workers, and why")
    persistent: bool | None = None


class OutputFile(_Closed):
    path: str = Field(description="below the output")
    bytes: int
    mtime: float | None = Field(default=None, description="modification time, seconds since the "
                                "epoch (an object's kept `mtime`, else its upload time)")
    sha256: str | None = None
    why: str | None = Field(default=None, description="why it has no sha256")


class ReadBack(_Closed):
    via: str = Field(description="hostPath | pvc | objectStorage: the mount's source it was read "
                     "from; filesystem: a location under no mount, where the runtime keeps it")
    at: str | None = Field(default=None, description="the directory here, or s3://bucket/prefix")
    ok: bool
    why: str | None = None
    unseen: bool | None = Field(default=None, description="the server cannot see that place "
                                "(a node's directory, a claim on Kubernetes): not verified")


class CheckpointDir(_Closed):
    dir: str = Field(description="below the output: .../checkpoints/global_step_<step>")
    step: int
    files: int
    bytes: int
    actor: bool = Field(description="it holds actor/, which RLinf resumes from")
    newest: float | None = Field(default=None, description="its newest file's time")


class OutputListing(_Closed):
    """One output of the Run (`spec.outputs`, or a written location of the config), read back
    after the Run through the mount that holds it (docs/data.md, "Outputs")."""

    name: str
    path: str = Field(description="inside the Workers")
    role: str | None = None
    origin: str = Field(description="spec.outputs[i], or the config key")
    named: bool = Field(description="named in spec.outputs")
    mount: dict[str, Reported] | None = Field(default=None, description="the mount that holds it")
    persistent: bool
    readBack: ReadBack
    fileCount: int | None = None
    bytes: int | None = None
    skipped: int | None = Field(default=None, description="links and other non-files, not read")
    filesCut: bool | None = Field(default=None, description="more files than `files` keeps")
    files: list[OutputFile] | None = None
    checkpoints: list[CheckpointDir] | None = None
    newestOutside: float | None = Field(default=None, description="the newest time of a file "
                                        "in no checkpoint directory")


class Resume(_Closed):
    """Where the Run resumed from (`rlark restart --resume`, `failurePolicy.resume`)."""

    fromRun: int = Field(description="the Run whose outputs were looked in")
    automatic: bool = Field(description="an automatic retry's (failurePolicy.resume)")
    checkpoint: str | None = Field(default=None, description="in-Worker path, None: none found")
    step: int | None = None
    output: str | None = None
    override: str | None = Field(default=None, description="what $RLARK_RLINF_OVERRIDES held")
    notes: list[str] = Field(default_factory=list, description="checkpoints skipped, and why")


class Check(_Closed):
    id: str
    item: str
    status: Literal["pass", "warn", "fail"]
    evidence: list[str]


class Checks(_Closed):
    status: Literal["pass", "warn", "fail", "provisional"] = Field(
        description="the worst item's status; `provisional` while the record is (the items are "
                    "what it shows so far)")
    items: list[Check]


class Logs(_Closed):
    root: str | None = None
    workers: dict[str, str | None]


class RecordV1(_Closed):
    """Version 1: what version 2 holds minus code, diffs, packageLists, configs, locations,
    checks and the later per-Worker fields. Never built any more; records stored with it are
    read, shown and compared."""

    recordVersion: Literal[1]
    provisional: bool = Field(default=False, description="added by every reader: a stored "
                              "record is final")
    job: str
    run: int
    runUid: str
    cause: str | None = None
    runtime: str
    result: dict[str, Reported]
    times: dict[str, Reported]
    runtimeNotes: list[Reported] | None = None
    headRole: str | None = None
    images: dict[str, Reported]
    imageDigests: dict[str, Reported] | None = None
    imageDigestMismatch: list[Reported] | None = None
    rlinf: dict[str, Reported] | None = None
    workingDir: str | None = None
    mounts: list[Reported] | None = None
    workers: dict[str, Reported]
    versions: dict[str, Reported]
    logs: dict[str, Reported]
    spec: dict[str, Reported]


class RecordV2(_Closed):
    """The run record RLark builds and stores (docs/record.md, "Format")."""

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
    images: dict[str, str | None] = Field(description="role -> image reference as given")
    imageDigests: dict[str, dict[str, list[str]]] = Field(
        description="role -> image digest -> the Workers that ran it")
    imageDigestMismatch: list[str] = Field(description="roles whose Workers ran different digests")
    rlinf: dict[str, Reported] | None = Field(default=None, description="spec.rlinf as given")
    workingDir: str | None = None
    project: str | None = None
    code: Code
    diffs: dict[str, Reported] = Field(description="sha256 -> uncommitted diff (size-capped), once each")
    mounts: list[dict[str, Reported]] = Field(description="each role's mounts as its spec gives "
                                              "them, with `role`")
    workers: Workers
    versions: Versions
    packageLists: dict[str, PackageList] = Field(description="sha256 -> package list, once each")
    configs: Configs
    locations: list[Location]
    outputs: list[OutputListing] | None = Field(
        default=None, description="each output read back after the Run (null while "
        "provisional, and in records made before outputs were read back)")
    resume: Resume | None = None
    logs: Logs
    spec: dict[str, Reported] = Field(description="the Run's spec snapshot (`rlark schema job`)")
    checks: Checks


class RecordInvalid(ValueError):
    """A run record that does not match :class:`RecordV2`: the message names each field that
    does not and why (never a value: a record may hold what a Worker reported)."""


def validate_record(rec: Any) -> RecordV2:
    """``rec`` (a record as a JSON-ready dict, or its JSON text) as a :class:`RecordV2`.

    Raises:
        RecordInvalid: it is not a version :data:`RECORD_VERSION` record of this format.
    """
    try:
        if isinstance(rec, (str, bytes)):
            return RecordV2.model_validate_json(rec)
        return RecordV2.model_validate(rec)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}"
                          for e in exc.errors(include_input=False)[:10])
        more = exc.error_count() - 10
        raise RecordInvalid(f"the run record does not match its schema (record version "
                            f"{RECORD_VERSION}): {where}"
                            + (f"; and {more} more" if more > 0 else "")) from None


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
