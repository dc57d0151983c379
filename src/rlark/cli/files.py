"""Commands about Job files and RLinf configs: ``validate``, ``schema``, ``plan``, ``check`` and
``render`` (a Job's Kubernetes objects). They ask the server's check when one answers, else run
the checks this machine can (saying which were not run).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
import httpx

from rlark import settings
from rlark.cli.base import (ProjectOpt, ServerOpt, _emit, _fail, _output, _output_option,
                            _print_findings, dump_yaml, out)
from rlark.cli.client import Client, ClientError, resolve_project, resolve_server
from rlark.words import plural

if TYPE_CHECKING:
    from rlark.findings import Finding
    from rlark.spec import Job


MAX_JOB_FILE_BYTES = 1024 * 1024  # as the API's body limit


def _load_job_file(path: Path) -> tuple[dict | None, list[Finding]]:
    """Read and parse a Job file: ``(document, [])`` with relative workingDir and hostPath
    sources made absolute against the file's directory (whether or not the rest is valid: a
    typo elsewhere must not turn ``workingDir: .`` into an error), or ``(None, [the
    InvalidDocument Finding])`` when it is not YAML/JSON. Exits when the file cannot be read."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_JOB_FILE_BYTES + 1)
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror}")
    if len(text) > MAX_JOB_FILE_BYTES:
        _fail(f"{path} is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; a Job file is a few KiB")
    from rlark.spec import SpecSyntaxError, load_document, load_job, resolve_document_paths

    try:
        data = load_document(text)
    except SpecSyntaxError:
        return None, load_job(text)[1]
    return resolve_document_paths(data, str(path.resolve().parent)), []


def _read_job_file(path: Path) -> tuple[Job | None, list[Finding]]:
    """:func:`_load_job_file`, then the spec's own checks here (no server): for commands that
    work without one (render)."""
    from rlark.preflight.job import check_document

    data, findings = _load_job_file(path)
    if data is None:
        return None, findings
    return check_document(data)


def _document_body(data: dict) -> bytes | None:
    """A parsed Job document as YAML for the API (YAML keeps what JSON cannot say, such as
    dates, so the server reads exactly what the file holds); None when it cannot be encoded
    (text that is not valid Unicode)."""
    import yaml

    try:
        return dump_yaml(data).encode("utf-8")
    except (UnicodeEncodeError, yaml.YAMLError):
        return None


#: what only the server can check (its runtime's preflight), for the Finding that says so
RUNTIME_CHECKS = ("this machine's capacity (CPU, memory, GPUs) and Ray port blocks, "
                  "local.python and workingDir on the server's machine (local runtime); "
                  "node capacity, selectors and quotas (kubernetes)")


class Checked:
    """The Findings for a Job file and who produced them (``server``: its URL, or None when
    no server could be asked; ``why``: why not)."""

    def __init__(self, document: dict | None, findings: list[Finding], server: str | None,
                 why: str | None = None):
        self.document = document
        self.findings = findings
        self.server = server
        self.why = why

    @property
    def valid(self) -> bool:
        """What submitting would decide: a Job without error Findings."""
        from rlark.findings import has_errors

        return self.document is not None and not has_errors(self.findings)


def _check_file(file: Path, server: Optional[str], project: Optional[str], *,
                rlinf_config: tuple[str, str] | None = None,
                overrides: list[str] | None = None) -> Checked:
    """Every Finding ``rlark submit`` would get for ``file``: the server's
    (``POST /api/v1/check``: the spec, its runtime, the RLinf config in ``spec.rlinf``) when a
    server answers, else the checks this machine can run, plus an ``info`` Finding
    ``RuntimeNotChecked`` naming what only the server checks.

    ``rlinf_config``/``overrides`` (``rlark check --rlinf-config/-O``): check the RLinf part
    against that config here, instead of the server's check of ``spec.rlinf``.
    """
    from rlark.findings import Finding, Severity
    from rlark.preflight.job import check_document
    from rlark.rlinf_config import preflight_job

    data, findings = _load_job_file(file)
    if data is None:
        return Checked(None, findings, None)
    own_rlinf = rlinf_config is not None or bool(overrides)
    body = _document_body(data)
    why = None
    url = None
    if body is None:
        why = "the document holds text that is not valid Unicode"
    else:
        try:
            client = Client(server, timeout=httpx.Timeout(120.0, connect=5.0),
                            project=resolve_project(resolve_server(server), project))
            url = client.base
            answer = client.post("/api/v1/check" + ("?rlinf=false" if own_rlinf else ""), body)
            findings = [Finding.model_validate(f) for f in answer["findings"]]
        except ClientError as exc:
            if exc.status is not None and exc.status not in (401, 403):
                _fail(exc.message)
            why = exc.message
        else:
            job = None
            if own_rlinf:
                job, _ = check_document(data)
    if why is not None:
        job, findings = check_document(data)
        if not own_rlinf and job is not None:
            findings = findings + preflight_job(job)
        url = None
    if own_rlinf and job is not None:
        ref = job.spec.rlinf
        all_overrides = [*(ref.overrides if ref else []), *(overrides or [])]
        findings = findings + preflight_job(job, config=rlinf_config, overrides=all_overrides,
                                            missing_is_error=rlinf_config is not None)
    if why is not None:  # never silently fewer checks than submit runs
        findings = findings + [Finding(
            code="RuntimeNotChecked", severity=Severity.info, path="$",
            message=f"checked here without a server ({why.rstrip('.')}): the spec and its RLinf "
                    f"config only; not checked: {RUNTIME_CHECKS}",
            hint="run the check with the server running (or --server URL); submit runs every "
                 "check")]
    return Checked(data, findings, url, why)


def _report(file: Path, checked: Checked, output: str) -> None:
    """Print a check's Findings (text: one line each and a summary; json/yaml: ``{"valid",
    "findings", "server"}``) and exit 0 when valid, else 1."""
    from rlark.findings import Severity

    valid = checked.valid
    if output != "text":
        _emit({"valid": valid, "findings": [f.model_dump(mode="json") for f in checked.findings],
               "server": checked.server}, output)
        raise typer.Exit(0 if valid else 1)
    _print_findings(checked.findings, out)
    if not valid:
        n = sum(1 for f in checked.findings if f.severity == Severity.error)
        out.print(f"[red]invalid[/red]: {file} ({plural(n, 'error')})", soft_wrap=True)
        raise typer.Exit(1)
    doc = checked.document or {}
    roles = ((doc.get("spec") or {}).get("roles")) or []
    workers = sum(r.get("workers", 1) for r in roles if isinstance(r, dict))
    n = sum(1 for f in checked.findings if f.severity == Severity.warning)
    parts = [plural(workers, "Worker"), plural(len(roles), "role")] + ([plural(n, "warning")] if n else [])
    where = f"checked by {checked.server}" if checked.server else "checked here, without a server"
    out.print(f"[green]valid[/green]: {file} ({', '.join(parts)}; {where})", soft_wrap=True)
    raise typer.Exit(0)


# --- checking Job files -------------------------------------------------------------------------


def validate(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    output: str = _output_option(),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Check a Job file and print its Findings; nothing is started. Exit status 1 on errors.

    The same Findings `rlark check`, `rlark submit`, the API's /api/v1/check and the console's
    review step give: the file is sent to the server's check (its runtime's checks and the RLinf
    config in spec.rlinf included). Without a server the checks this machine can run are run,
    and an info Finding (RuntimeNotChecked) names the ones that were not. Relative workingDir
    and hostPath sources are resolved against the file's directory, as submit does.

    JSON/YAML output: {"valid": bool, "findings": [{"code", "severity", "path", "message",
    "hint"}], "server": URL or null}.
    """
    output = _output(output)
    _report(file, _check_file(file, server, project), output)


def schema(
    what: str = typer.Argument("job", metavar="[job|record]",
                               help="job: the Job document (default); record: the run record."),
) -> None:
    """Print the JSON Schema of the Job document, or of the run record (`rlark schema record`:
    version 2, and version 1 which still reads), for editors and CI checks."""
    if what == "record":
        from rlark.record.schema import record_schema

        _emit(record_schema(), "json")
        return
    if what != "job":
        _fail(f"schema {what!r} is not known; use `rlark schema job` or `rlark schema record`")
    from rlark.spec import json_schema

    _emit(json_schema(), "json")  # as written: no wrapping of long descriptions


# --- RLinf configs: plan and check (logic in rlark.rlinf_config) ------------------------------------


def _pairs(items: Optional[list[str]], option: str) -> dict[str, str]:
    pairs = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"{option} {item!r} is not NAME=VALUE")
        pairs[key] = value
    return pairs


def plan(
    config: Path = typer.Argument(..., metavar="CONFIG",
                                  help="RLinf config: a YAML file, or its directory with --config-name."),
    config_name: Optional[str] = typer.Option(None, "--config-name", "-c",
                                              help="Config name when CONFIG is a directory."),
    override: Optional[list[str]] = typer.Option(
        None, "--override", "-O", metavar="KEY=VALUE",
        help="Hydra override, as on RLinf's command line (repeatable): -O cluster.num_nodes=4"),
    gpus_per_node: Optional[int] = typer.Option(
        None, "--gpus-per-node", "-g", min=0,
        help="GPUs on each node (0 = CPU-only). Default: the fewest that fit every placement."),
    image: Optional[str] = typer.Option(None, "--image", help="Image for the suggested roles."),
    name: Optional[str] = typer.Option(None, "--name", help="Job name (default: from the config name)."),
    env: Optional[list[str]] = typer.Option(
        None, "--env", metavar="NAME=DIR",
        help="RLinf path variable for composing (REPO_PATH, EMBODIED_PATH, ...). Default: your "
             "environment, else what RLinf's run scripts set for a config inside an RLinf checkout."),
    output: str = _output_option("text, json, yaml, or job (only the suggested Job, as YAML)"),
) -> None:
    """Plan RLark roles for an RLinf config: node ranks, node groups, where each component runs,
    suggested roles, and a ready-to-edit Job. Reads the config; never changes it.

    \b
    RLinf places its components (actor, rollout, env...) by node rank: cluster.node_groups map
    labels to RLINF_NODE_RANK values, cluster.component_placement puts components on a group's
    resources (GPUs, robots, or whole nodes). RLark gives ranks in role order - the head role's
    Workers first (rank 0 = Ray head, runs the run script), then the other roles in spec order.
    So the suggested roles are one per contiguous rank range RLinf treats the same, in rank order.
    Role names are only labels: a role called "actor" places nothing.

    \b
    Examples:
      rlark plan RLinf/examples/embodiment/config/maniskill_ppo_openvlaoft.yaml --gpus-per-node 8
      rlark plan config/ -c quickstart -O cluster.num_nodes=3 -o json
      rlark plan my.yaml -o job > job.yaml  # just the Job, ready for `rlark check job.yaml`

    JSON: {"num_nodes", "node_groups": {label: [ranks]}, "components": {name: {"node_group",
    "node_ranks", ...}}, "roles": [{"name", "workers", "node_ranks", ...}], "job": {...},
    "findings": [...]}. Exit status 1 when any Finding is an error.
    """
    from rlark.rlinf_config import plan_config
    from rlark.rlinf_config.plan import render_text

    output = _output(output, ("job",))
    if config.is_dir() and not config_name:
        _fail(f"{config} is a directory: name the config with --config-name NAME")
    result = plan_config(config, config_name, override or [], gpus_per_node=gpus_per_node,
                         image=image, job_name=name, env=_pairs(env, "--env"))
    if output == "text":
        sys.stdout.write(render_text(result))
    elif output == "job":
        if result.job:
            sys.stdout.write(dump_yaml(result.job))
        _print_findings(result.findings)  # stderr, so the Job file stays clean
    else:
        _emit(result.to_dict(), output)
    raise typer.Exit(0 if result.ok else 1)


def check(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    rlinf_config: Optional[Path] = typer.Option(
        None, "--rlinf-config", "-r", metavar="CONFIG",
        help="RLinf config to check against instead of the one spec.rlinf names (a YAML file, or "
             "a directory with --config-name), read on this machine."),
    config_name: Optional[str] = typer.Option(None, "--config-name", "-c",
                                              help="Config name when --rlinf-config is a directory."),
    override: Optional[list[str]] = typer.Option(
        None, "--override", "-O", metavar="KEY=VALUE",
        help="Hydra override added after spec.rlinf.overrides (repeatable); the RLinf part is "
             "then checked on this machine."),
    output: str = _output_option(),
    project: Optional[str] = ProjectOpt,
    server: Optional[str] = ServerOpt,
) -> None:
    """Check a Job against the server's runtime and its RLinf config: everything `rlark
    validate` reports (the two give the same Findings, as do submit, the API's /api/v1/check
    and the console's review step), including whether the roles' Workers add up to
    cluster.num_nodes, line up with node_groups, have the GPUs the placements need, and whether
    the config still holds placeholders (ROBOT_IP, /path/to/model) or paths outside the mounts.

    \b
    Examples:
      rlark check job.yaml                                   # as submit will check it
      rlark check job.yaml --rlinf-config RLinf/examples/embodiment/config/x.yaml -O a.b=1

    JSON output like `rlark validate`: {"valid": bool, "findings": [...], "server": ...}. Exit
    status 1 on any error Finding. A config named only in spec.rlinf that is not on the
    server's machine is a warning (it may exist only in the image); an explicit --rlinf-config
    must exist. Without a server, the checks this machine can run are run and an info Finding
    (RuntimeNotChecked) names the rest.
    """
    from rlark.rlinf_config.compose import locate

    output = _output(output)
    if rlinf_config is not None and rlinf_config.is_dir() and not config_name:
        _fail(f"{rlinf_config} is a directory: name the config with --config-name NAME")
    where = locate(rlinf_config, config_name) if rlinf_config is not None else None
    _report(file, _check_file(file, server, project, rlinf_config=where, overrides=override),
            output)


def render(
    file: Path = typer.Argument(..., metavar="FILE", help="Job file (YAML or JSON)."),
    runtime: str = typer.Option("kubernetes", "--runtime", "-r", help="Only kubernetes renders objects."),
    namespace: str = typer.Option("default", "--namespace", "-n", help="Namespace of the objects."),
    run_id: Optional[str] = typer.Option(
        None, "--run-id", help="Run id (label rlark.io/run, part of names); default: a new one."),
    ray_dashboard: bool = typer.Option(False, "--ray-dashboard",
                                       help="Start Ray's dashboard on the head (needs ray[default])."),
) -> None:
    """Print the Kubernetes objects of one Run of a Job as a YAML stream: a ConfigMap carrying the
    bootstrap, a Secret with a new Ray token for the Run (Ray >= 2.52 then takes only its own
    Pods), the head's headless Service, a NetworkPolicy (only the Run's own Pods reach
    them), PVCs for objectStorage mounts with a StorageClass, and one Pod per Worker
    (<job>-<role>-<index>, RLINF_NODE_RANK and the other variables set explicitly; non-root,
    no capabilities). The Kubernetes Pod policy of this machine's settings applies
    (RLARK_K8S_HOST_PATH_PREFIXES, RLARK_K8S_SERVICE_ACCOUNTS, RLARK_K8S_ALLOW_ROOT,
    RLARK_K8S_CSI_DRIVERS, RLARK_K8S_STORAGE_CLASSES, RLARK_K8S_TOLERATIONS). Nothing is started; `kubectl apply --server-side -f -` of the output runs the Job without
    the RLark server (which adds status, logs, records and stop). Server-side: a client-side
    apply copies each object into an annotation, limited to 256 KiB, and the ConfigMap that
    carries the bootstrap archive is larger.

    \b
    Examples:
      rlark render job.yaml --namespace rl | kubectl apply --server-side -f -
      kubectl delete pods,services,networkpolicies,configmaps,secrets,pvc -n rl -l rlark.io/run=<id>   # clean up
    """
    import secrets
    import uuid

    from rlark.findings import Severity, has_errors
    from rlark.runtimes.kubernetes import render as k8s

    from rlark.runtimes import RENDERS

    if runtime not in RENDERS:
        _fail(f"--runtime {runtime!r}: only {' and '.join(RENDERS)} has objects to render")
    job, findings = _read_job_file(file)
    if job is not None:
        from rlark.runtimes.kubernetes.preflight import check_spec_for_kubernetes

        from rlark.runtimes.kubernetes.settings import pod_policy

        try:
            policy = pod_policy()
        except ValueError as exc:
            _fail(str(exc))
        findings = findings + check_spec_for_kubernetes(job, policy)
    if job is None or has_errors(findings):
        _print_findings(findings)
        _fail(f"{file} is not a valid Job; nothing was rendered")
    _print_findings([f for f in findings if f.severity != Severity.error])
    rid = run_id or uuid.uuid4().hex[:12]
    try:
        k8s.check_run_id(rid)
        # a Ray token of its own, as the server gives each Run: only its Pods join its cluster
        objs = k8s.render_run(job, rid, k8s.RenderOptions(
            namespace=namespace, ray_dashboard=ray_dashboard, run_as_user=policy.run_as_user,
            allow_root=policy.allow_root, policy=policy), ray_token=secrets.token_urlsafe(32))
    except ValueError as exc:
        _fail(str(exc))
    header = (f"RLark Job {job.name}, run {rid}: {job.total_workers} Workers in namespace {namespace}\n"
              f"apply:  kubectl apply -f <this file>\n"
              f"remove: kubectl delete pods,services,networkpolicies,configmaps,secrets,pvc -n "
              f"{namespace} -l {k8s.LABEL_RUN}={rid}")
    sys.stdout.write(k8s.dump_stream(objs, header))
