"""JobService: everything the API, the CLI and the console do with Jobs (validate -> persist ->
enqueue; stop, start, restart, delete; read back Jobs, Runs, Workers, Events and records).

What it answers is built by :mod:`rlark.services.views`, so every front end shows the same
fields.

Long because: JobService is the one object routes, CLI and console call for Jobs, and its
operations share the store's transactions and its bookkeeping; the views
(:mod:`rlark.services.views`), the record's finishing (:mod:`rlark.record.finish`) and the
runtime's part (:class:`rlark.runtimes.base.RuntimeProfile`) are already out.
"""

from __future__ import annotations

import builtins
import logging
import os
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from rlark.findings import Finding, Severity, has_errors
from rlark import runtimes
from rlark.preflight.job import check_document, validate_document
from rlark.record.build import build_record, public_record
from rlark.rlinf_config import preflight_job
from rlark.spec import DNS1123_LABEL, Job, job_to_dict, secret_refs
from rlark.services import audit
from rlark.services.accounts import check_not_server_namespace, project_namespace
from rlark.services.audit import SYSTEM, Actor
from rlark.services.auth import DEFAULT_PROJECT
from rlark.services import quotas
from rlark.services.errors import Conflict, Invalid, NotFound, QuotaExceeded, TooManyRequests
from rlark.services.views import event_view, job_summary, run_view, worker_view
from rlark.store.files import job_log_dirs, remove_dirs
from rlark import settings
from rlark.words import plural
from rlark.status import ACTIVE, Cause, Desired, EventType, Phase, Reason, text_of
from rlark.store import EventRow, JobRow, ProjectRow, RunRow, Store
from rlark.store.db import retry_on_conflict
from rlark.store.runs import add_event, new_run

if TYPE_CHECKING:
    from rlark.runtimes.base import RuntimeProfile
    from rlark.secretbox import SecretBox

log = logging.getLogger("rlark.jobs")


# --- the service -------------------------------------------------------------------------------------


def _record_of(job: JobRow, r: RunRow) -> dict[str, Any]:
    """A Run's record as the server reads it: the stored one of an ended Run, else a live one
    built from its rows; never with the Run's event token (record.public_record)."""
    if r.record is not None:
        return public_record(r.record)
    return build_record(job, r, r.workers, settings.logs_dir())


class JobService:
    """Job operations on a :class:`Store`. ``wake`` is called after every change so the
    controller acts at once."""

    def __init__(self, store: Store, wake: Callable[[], None] = lambda: None, runtime: str = runtimes.DEFAULT,
                 *, namespace: str | None = None, secret_box: "SecretBox | None" = None,
                 isolation: dict[str, Any] | None = None,
                 quota_defaults: quotas.Quotas | None = None,
                 profile: "RuntimeProfile | None" = None, **runtime_options: Any):
        """``runtime``: the name of the server's runtime (each new Run's ``runtime``);
        ``profile``: what differs between runtimes (:class:`rlark.runtimes.base.RuntimeProfile`;
        default: :func:`rlark.runtimes.profile` of ``runtime`` with ``runtime_options``: the
        local runtime's ``host``, ``path_reachable``, ``runtime_checks``; Kubernetes'
        ``inventory``, ``pending_timeout``, ``pod_policy``, ``kube_secret_info``)."""
        self.store = store
        #: the server's per-project quotas (a project's own override them); bad settings fail here
        self.quota_defaults = quota_defaults or quotas.server_defaults()
        #: what keeps each Worker's processes together (the local runtime's
        #: Isolation.view(), with who they run as); None: the runtime's own business
        self.isolation = isolation
        #: opens the project's secrets to mask their values in what reads answer (None: ask
        #: ``secret_source`` when a Job refers to one; neither: nothing is masked)
        self.secret_box = secret_box
        self.secret_source: Callable[[], "SecretBox"] | None = None
        #: the server's namespace, where Runs go to their projects' namespaces
        #: (accounts.project_namespace); None: the runtime has none
        self.namespace = namespace
        self.wake = wake
        self.runtime = runtime
        self.profile: RuntimeProfile = profile or runtimes.profile(runtime, isolation=isolation,
                                                                   **runtime_options)
        #: run id -> what its Workers ask of the machine they share (see nodes())
        self._run_requests: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()

    # validation -------------------------------------------------------------------------------

    @staticmethod
    def validate(document: str | bytes | dict) -> tuple[Job | None, list[Finding]]:
        """Findings for a Job document (YAML/JSON text or an already parsed mapping)."""
        if isinstance(document, dict):
            return check_document(document)
        return validate_document(document)

    # create -----------------------------------------------------------------------------------

    def preflight(self, document: str | bytes | dict, *, rlinf: bool = True,
                  project: str = DEFAULT_PROJECT) -> tuple[Job | None, list[Finding]]:
        """Every Finding a submission gets: the spec's, this server's runtime's, whether the
        secrets its ``env[].valueFrom`` names exist in ``project`` (:meth:`secret_findings`),
        what the queue its Runs wait in refuses (:meth:`queue_findings`), and those of the RLinf config the Job names in ``spec.rlinf`` when this server can read
        it (:func:`rlark.rlinf_config.preflight_job`; a config it cannot find is a warning).
        ``rlinf=False`` leaves the RLinf config out (``rlark check --rlinf-config`` checks
        another config on the caller's machine)."""
        job, findings = self.validate(document)
        if job is not None:
            findings = findings + self.secret_findings(job, project) + self.queue_findings(job, project)
            checked = job
            findings = findings + self.profile.preflight(
                job, errors=has_errors(findings), neighbours=lambda: self.neighbours(checked, project))
        if job is not None and rlinf:
            from rlark.rlinf_config.isolated import ComposerBusy

            try:
                # local Workers use this machine's files and no image: a config missing here
                # is missing for the Run too
                findings = findings + preflight_job(job, isolated=True,
                                                    filesystem=self.profile.filesystem,
                                                    roots=self.config_roots(job),
                                                    here_only=self.profile.here_only)
            except ComposerBusy as exc:
                raise TooManyRequests(f"{exc}; try again in {exc.retry_after} s",
                                      exc.retry_after) from None
        return job, findings

    def placement(self, job: Job) -> dict[str, Any] | None:
        """Where RLinf will place ``job``'s components, as ``rlark plan`` computes it
        (:func:`rlark.rlinf_config.plan.plan` on the config ``spec.rlinf`` names):
        ``{"components": {name: {node_group, node_ranks, processes, resource,
        placement_entry}}, "nodes": [{node_rank, role, components, ...}], "gpus_per_node"}``
        (the shapes of ``rlark plan -o json``), each node rank under the role RLark gives it.

        The config is read as submit reads it (:meth:`preflight`): in the isolated composer,
        only under :meth:`config_roots`, with the head role's plain ``env``; GPUs per node: the
        most any role asks for. None when the Job names no config, the config is not under a
        root, or it does not compose (the preflight's Findings say why).

        Raises:
            TooManyRequests: no composer came free in time.
        """
        from rlark.ranks import plan_workers
        from rlark.rlinf_config import config_location
        from rlark.rlinf_config.compose import RLINF_PATH_VARS
        from rlark.rlinf_config.isolated import ComposerBusy, compose_isolated
        from rlark.rlinf_config.plan import plan

        where = config_location(job)
        if where is None or not os.path.isabs(where[0]):
            return None
        head = job.role(job.spec.head_role)
        # as preflight_job: plain values only, and RLinf's path variables that name a
        # directory under a root
        plain = {e.name: e.value or "" for e in (head.env if head else []) if e.secret_ref is None}
        roots = [os.path.realpath(r) for r in self.config_roots(job)]
        env = {k: v for k, v in plain.items()
               if k in RLINF_PATH_VARS and os.path.isabs(v) and os.path.isdir(v)
               and any((os.path.realpath(v) + "/").startswith(r.rstrip("/") + "/") for r in roots)}
        try:
            composed = compose_isolated(where[0], where[1], job.spec.rlinf.overrides if job.spec.rlinf
                                        else [], env=env, path="spec.rlinf", child_env=plain,
                                        roots=roots)
        except ComposerBusy as exc:
            raise TooManyRequests(f"{exc}; try again in {exc.retry_after} s",
                                  exc.retry_after) from None
        if composed.data is None:
            return None
        gpus = max((int(r.resources.gpu or 0) for r in job.spec.roles), default=0)
        found = plan(composed.data, source=composed.source, gpus_per_node=gpus).to_dict()
        if not found["components"]:
            return None
        role_of = {w.node_rank: w.role for w in plan_workers(job)}
        for node in found["nodes"]:
            node["role"] = role_of.get(node["node_rank"])  # the Job's roles, not the suggested
        return {"components": found["components"], "nodes": found["nodes"],
                "gpus_per_node": found["gpus_per_node"]}

    def neighbours(self, job: Job, project: str) -> list[tuple[str, str, dict[str, Any]]]:
        """Kubernetes: ``(project, name, spec)`` of the other stored Jobs whose Runs go to the
        namespace ``job``'s would (projects map to namespaces: ``project_namespace``; two
        projects may share one) and whose names could give an object ``job``'s name (equal, or
        one beginning with the other and '-'), for
        :func:`rlark.runtimes.kubernetes.preflight.check_name_collisions`. Not ``job`` itself
        (a replaced spec keeps its names). Deleted Jobs whose deletion is under way count:
        their objects may still be there."""
        name = job.name
        prefixes = [name[:i] for i, c in enumerate(name) if c == "-" and i]
        with self.store.session() as s:
            projects = list(s.scalars(select(ProjectRow)))
            mine = next((p for p in projects if p.name == project), None)
            if mine is None:
                return []
            ns = project_namespace(mine, mine.namespace, self.namespace)
            same = {p.id: p.name for p in projects
                    if project_namespace(p, p.namespace, self.namespace) == ns}
            # job names are DNS-1123 labels: no LIKE wildcard in them
            rows = s.execute(select(JobRow.project_id, JobRow.name, JobRow.spec).where(
                JobRow.project_id.in_(list(same)),
                (JobRow.name == name) | JobRow.name.like(name + "-%") | JobRow.name.in_(prefixes),
            )).all()
        return [(same[pid], other, spec) for pid, other, spec in rows
                if not (pid == mine.id and other == name)]

    def config_roots(self, job: Job) -> list[str]:
        """Where this server may read the RLinf config ``job`` names: the server's config roots
        (``rlark server --config-root``, :func:`rlark.settings.config_roots`) and, on the local
        runtime, the Job's own absolute ``spec.workingDir`` (its Workers run on this machine's
        filesystem). On Kubernetes ``workingDir`` is a path inside the image, not here. A
        ``workingDir`` that is ``/`` or a system directory (:func:`system_dir`) is no root: it
        would let a Job read any file of the server. (:func:`rlark.record.finish.config_roots`,
        which the run record's composition uses too.)"""
        from rlark.record.finish import config_roots

        return config_roots(job_to_dict(job), self.profile)

    def secret_findings(self, job: Job, project: str) -> list[Finding]:
        """Errors for the ``valueFrom.secretKeyRef`` references ``project`` may not use: every
        reference must name an RLark-managed secret and key (``rlark secret set``;
        ``SecretNotFound``), except, where the runtime has secrets of its own
        (:attr:`rlark.runtimes.base.RuntimeProfile.own_secrets`: Kubernetes), a name RLark does
        not manage, which the runtime judges
        (:meth:`~rlark.runtimes.base.RuntimeProfile.own_secret_findings`). Never opens a
        secret; never names a value, nor a key of a Secret the project may not use."""
        from rlark.store.secrets import managed_names, missing_refs

        refs = secret_refs(job)
        if not refs:
            return []
        with self.store.session() as s:
            prow = s.scalar(select(ProjectRow).where(ProjectRow.name == project)) \
                if DNS1123_LABEL.match(project or "") else None
            if prow is None:
                return []  # the request's project is checked (404) where it is used
            managed = managed_names(s, prow.id, (n for n, _ in refs))
            missing = set(missing_refs(s, prow.id, [r for r in refs if r[0] in managed]))
            namespace = (project_namespace(prow, prow.namespace, self.namespace)
                         if self.profile.namespaced else None)
        out: list[Finding] = []
        # (field path of the name, of the key, what would lack the value, secret, key)
        uses: list[tuple[str, str, str, str, str]] = []
        for i, role in enumerate(job.spec.roles):
            for j, env in enumerate(role.env):
                ref = env.secret_ref
                if ref is not None:
                    path = f"spec.roles[{i}].env[{j}].valueFrom.secretKeyRef"
                    uses.append((f"{path}.name", f"{path}.key", env.name, ref.name, ref.key))
            for j, mount in enumerate(role.mounts):
                path = f"spec.roles[{i}].mounts[{j}].objectStorage.secret"
                uses += [(path, path, f"mount {mount.name!r}", name, key)
                         for name, key in mount.secret_refs()]
        said: set[tuple[str, str]] = set()  # a mount's missing secret: once, not per key
        for name_path, key_path, user, name, key in uses:
            if name not in managed and self.profile.own_secrets:
                continue
            if name not in managed:
                if (name_path, name) in said:
                    continue
                said.add((name_path, name))
                out.append(Finding(
                    code="SecretNotFound", severity=Severity.error, path=name_path,
                    message=f"{name_path} = {name!r}: project {project!r} has no "
                            f"secret of that name ({user} would have no value)",
                    hint=f"create it: `rlark secret set {name} {key} -p "
                         f"{project}` (reads the value from stdin)"))
            elif (name, key) in missing:
                # an env reference names its key; a mount's secret has keys of fixed names
                what = (f"{key_path} = {key!r}: secret {name!r} has no such key"
                        if key_path != name_path else
                        f"{key_path} = {name!r}: secret {name!r} has no key {key!r}")
                out.append(Finding(
                    code="SecretNotFound", severity=Severity.error, path=key_path,
                    message=f"{what} ({user} would have no value)",
                    hint=f"add it: `rlark secret set {name} {key} -p {project}`, "
                         "or use one of the keys `rlark secret list` shows"))
        if self.profile.own_secrets:
            out += self.profile.own_secret_findings(job, {r for r in refs if r[0] in managed},
                                                    project, namespace)
        return out

    def _checked(self, document: str | bytes | dict,
                 project: str = DEFAULT_PROJECT) -> tuple[Job, list[Finding]]:
        """Parse and check a Job for this server's runtime (see :meth:`preflight`).

        Raises:
            Invalid: the spec has error Findings (all Findings are attached).
        """
        job, findings = self.preflight(document, project=project)
        if job is None or has_errors(findings):
            n = sum(1 for f in findings if f.severity == Severity.error)
            raise Invalid(f"the Job spec has {n} error{'s' if n != 1 else ''}", findings)
        return job, findings

    def create(self, document: str | bytes | dict, *, project: str = DEFAULT_PROJECT,
               actor: Actor = SYSTEM) -> dict[str, Any]:
        """Validate and store a Job in ``project``, with its first Run (Pending).

        Raises:
            Invalid: the spec has error Findings (all Findings are attached).
            NotFound: no such project.
            Conflict: a Job of that name exists in the project.
        """
        job, findings = self._checked(document, project)
        with self._quota_audited(actor, "job.create", project, job.name), self.store.session() as s:
            prow = self._project(s, project, lock=True)
            if s.scalar(select(JobRow.id).where(JobRow.project_id == prow.id,
                                                JobRow.name == job.name)) is not None:
                raise Conflict(
                    f"a Job named {job.name!r} already exists in project {project!r}; use "
                    "`rlark apply` to give it this spec, delete it, or choose another metadata.name"
                )
            quotas.check_new_job(s, prow, self.quota_defaults)
            quotas.check_new_run(s, prow, job.total_workers, defaults=self.quota_defaults)
            row = JobRow(
                project_id=prow.id,
                project=prow,
                name=job.name,
                spec=job_to_dict(job),
                labels=dict(job.metadata.labels),
                findings=[f.model_dump(mode="json") for f in findings],
                phase=Phase.Pending,
                reason=Reason.Submitted,
            )
            s.add(row)
            try:
                s.flush()
            except IntegrityError:
                raise Conflict(f"a Job named {job.name!r} already exists in project {project!r}") from None
            run = self._make_run(row, Cause.Submitted)
            s.add(run)
            s.flush()
            row.current_run_id = run.id
            add_event(s, row.id, Reason.Submitted,
                      f"Job accepted: {plural(job.total_workers, 'Worker')} in "
                      f"{plural(len(job.spec.roles), 'role')}"
                      + _by(actor), run_number=run.number, actor=actor.name)
            for f in findings:  # messages name their field path already
                add_event(s, row.id, f.code, f.message, type=EventType.Warning)
            audit.record(s, actor, "job.create", project=project, target=job.name,
                         detail=f"run {run.number}")
            out = self._detail(s, row)
        self.wake()
        return out

    def _make_run(self, job: JobRow, cause: Cause) -> RunRow:
        """A new Run of ``job``, in its project's namespace where the runtime has namespaces.

        Raises:
            Invalid: that namespace is the server's own (:func:`check_not_server_namespace`).
        """
        run = new_run(job, cause, self.runtime)
        if self.profile.namespaced:
            run.namespace = project_namespace(job.project, job.project.namespace, self.namespace)
            check_not_server_namespace(job.project.name, run.namespace, self.namespace)
        return run

    # node inventory ---------------------------------------------------------------------------

    def nodes(self) -> dict[str, Any]:
        """The machines Workers can run on: ``{"runtime", "freeBasis", "error", "items": [{"name",
        "ready", "schedulable", "labels", "taints", "allocatable", "requested", "free"}],
        "totals": {resource: allocatable}}``. Amounts: cpu in cores, memory in bytes, GPUs and
        devices as counts. Kubernetes: the cluster's nodes (``error`` set when the API could not
        be read; ``freeBasis`` ``cluster``, ``namespace`` or ``none``: whose Pods' requests
        ``requested`` counts); local: this machine, ``requested`` being what the Workers of
        active local Jobs ask for (``freeBasis`` ``rlark``)."""
        items, basis, error = self.profile.nodes(self._active_requests)
        totals: dict[str, float] = {}
        for item in items:
            for k, v in item["allocatable"].items():
                totals[k] = totals.get(k, 0) + v
        return {"runtime": self.runtime, "freeBasis": basis, "error": error, "items": items,
                "totals": totals}

    def _active_requests(self) -> builtins.list[dict[str, float]]:
        """What the Workers of every active Run of this server's runtime ask of the machine
        they share (:meth:`rlark.runtimes.base.RuntimeProfile.request_of`, worked out once per
        Run: a Run's spec never changes)."""
        with self.store.session() as s:
            active = set(s.scalars(
                select(RunRow.id).join(JobRow, JobRow.current_run_id == RunRow.id)
                .where(JobRow.phase.in_(ACTIVE), RunRow.runtime == self.runtime)))
            with self._lock:
                missing = active - self._run_requests.keys()
            found = {run_id: self.profile.request_of(spec) for run_id, spec in (
                s.execute(select(RunRow.id, RunRow.spec).where(RunRow.id.in_(missing)))
                if missing else ())}
        with self._lock:
            self._run_requests.update(found)
            for run_id in self._run_requests.keys() - active:
                del self._run_requests[run_id]
            return [self._run_requests[r] for r in active if r in self._run_requests]

    # reads --------------------------------------------------------------------------------------

    @staticmethod
    def _project(s: Session, name: str, lock: bool = False) -> ProjectRow:
        """The project ``name``; ``lock``: its row locked for this transaction (PostgreSQL), so
        two requests cannot both take the last room in its quotas."""
        stmt = select(ProjectRow).where(ProjectRow.name == name)
        if lock:
            stmt = stmt.with_for_update()
        row = s.scalar(stmt) if DNS1123_LABEL.match(name or "") else None
        if row is None:
            raise NotFound(f"no project named {name!r} that you can see; `rlark project list` shows yours")
        return row

    def _job(self, s: Session, name: str, project: str) -> JobRow:
        # a name that cannot be a Job's is not looked up (NUL bytes would upset PostgreSQL)
        job = s.scalar(
            select(JobRow).join(ProjectRow, ProjectRow.id == JobRow.project_id)
            .where(JobRow.name == name, ProjectRow.name == project)
        ) if DNS1123_LABEL.match(name) and DNS1123_LABEL.match(project or "") else None
        if job is None:
            where = "" if project == DEFAULT_PROJECT else f" in project {project!r}"
            raise NotFound(f"no Job named {name!r}{where}; `rlark get jobs` lists them")
        return job

    @staticmethod
    def _current(s: Session, job: JobRow) -> RunRow | None:
        return s.get(RunRow, job.current_run_id) if job.current_run_id else None

    def _run(self, s: Session, job: JobRow, number: int | None) -> RunRow:
        if number is None:
            run = self._current(s, job)
            if run is None:
                raise NotFound(f"Job {job.name!r} has no Run yet")
            return run
        run = s.scalar(select(RunRow).where(RunRow.job_id == job.id, RunRow.number == number))
        if run is None:
            raise NotFound(f"Job {job.name!r} has no run {number}")
        return run

    def _detail(self, s: Session, job: JobRow) -> dict[str, Any]:
        run = self._current(s, job)
        out = job_summary(job, run)
        out["spec"] = job.spec
        out["findings"] = job.findings
        out["currentRun"] = run_view(run, with_workers=True) if run else None
        out["runs"] = [run_view(r) for r in job.runs]
        return out

    def list(
        self,
        phase: Phase | None = None,
        q: str | None = None,
        limit: int = 100,
        offset: int = 0,
        projects: builtins.list[str] | None = None,
    ) -> dict[str, Any]:
        """Jobs newest first, optionally filtered by phase and a name substring. ``projects``:
        only Jobs of these projects (None: every project)."""
        with self.store.session() as s:
            stmt = select(JobRow.id)
            if projects is not None:
                stmt = stmt.join(ProjectRow, ProjectRow.id == JobRow.project_id).where(
                    ProjectRow.name.in_(projects))
            if phase:
                stmt = stmt.where(JobRow.phase == phase)
            if q:
                stmt = stmt.where(JobRow.name.icontains(q, autoescape=True))
            total = s.scalar(select(func.count()).select_from(stmt.subquery()))
            # page on the narrow (created_at, id) columns, then load only that page's rows: sorting
            # whole rows (spec JSON and all) costs ~10x more with 1,000 Jobs (bench/console.py)
            ids = s.scalars(
                stmt.order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit).offset(offset)
            ).all()
            by_id = {j.id: j for j in s.scalars(
                select(JobRow).where(JobRow.id.in_(ids)).options(selectinload(JobRow.project)))} if ids else {}
            jobs = [by_id[i] for i in ids if i in by_id]
            run_ids = [j.current_run_id for j in jobs if j.current_run_id]
            # the page's Runs' Tasks in one query, not one per row; no Worker rows (job_summary)
            runs = {r.id: r for r in s.scalars(
                select(RunRow).where(RunRow.id.in_(run_ids))
                .options(selectinload(RunRow.tasks)))} if run_ids else {}
            from rlark.services.secrets import mask_data

            items = [mask_data(job_summary(j, runs.get(j.current_run_id)
                                           if j.current_run_id else None),
                               self._mask(s, j, with_runs=False,
                                          current=runs.get(j.current_run_id or 0))) for j in jobs]
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    def _mask(self, s: Session, job: JobRow, with_runs: bool = True,
              current: RunRow | None = None) -> Callable[[str], str]:
        """A function that masks (``***``) the values of the RLark-managed secrets ``job``'s
        spec (and, ``with_runs``, its Runs' spec snapshots) refers to, and those its Runs (or
        only ``current``, a Run already loaded) were launched with, in any text: a script may
        print its own secrets, and log tails reach messages and Events. The identity when
        nothing is referred to."""
        from rlark.services.secrets import masker
        from rlark.store.secrets import open_refs
        from rlark.spec import document_secret_refs

        refs = set(document_secret_refs(job.spec))
        runs = list(job.runs) if with_runs else [current] if current is not None else []
        for r in runs:
            refs.update(document_secret_refs(r.spec))
        sealed = [r.sealed_secrets for r in runs if r.sealed_secrets]
        if not refs and not sealed:
            return _same
        if self.secret_box is None and self.secret_source is not None:
            self.secret_box = self.secret_source()
        if self.secret_box is None:
            return _same
        try:
            values = list(open_refs(s, job.project_id, refs, self.secret_box).values())
            # the values each Run was launched with: a secret deleted or given a new value since
            # stays masked in the logs of the Runs that used it
            for token in sealed:
                values += self.secret_box.open(token, f"the secrets of a Run of Job {job.name!r}").values()
        except ValueError as exc:  # SecretKeyError: the server checked its key at start
            log.warning("cannot mask the secrets of Job %s: %s", job.name, exc)
            return _same
        return masker(values)

    def get(self, name: str, project: str = DEFAULT_PROJECT) -> dict[str, Any]:
        with self.store.session() as s:
            job = self._job(s, name, project)
            return _masked(self._detail(s, job), self._mask(s, job))

    def runs(self, name: str, project: str = DEFAULT_PROJECT) -> builtins.list[dict[str, Any]]:
        from rlark.services.secrets import mask_data

        with self.store.session() as s:
            job = self._job(s, name, project)
            return mask_data([run_view(r) for r in job.runs], self._mask(s, job))

    def run(self, name: str, number: int | None = None,
            project: str = DEFAULT_PROJECT) -> dict[str, Any]:
        """One Run (default: the current one) in the shape of a Job's ``currentRun`` (the same
        builder: :func:`run_view` with its Workers and each Task's Ray node), plus ``spec``:
        the spec snapshot that Run was started with.

        Raises:
            NotFound: no such Job, or it has no such Run.
        """
        from rlark.services.secrets import mask_data

        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, number)
            return mask_data({**run_view(r, with_workers=True), "spec": r.spec},
                             self._mask(s, job))

    def workers(self, name: str, run: int | None = None,
                project: str = DEFAULT_PROJECT) -> builtins.list[dict[str, Any]]:
        from rlark.services.secrets import mask_data

        with self.store.session() as s:
            job = self._job(s, name, project)
            return mask_data([worker_view(w) for w in self._run(s, job, run).workers],
                             self._mask(s, job))

    def events(self, name: str, run: int | None = None,
               project: str = DEFAULT_PROJECT) -> builtins.list[dict[str, Any]]:
        from rlark.services.secrets import mask_data

        with self.store.session() as s:
            job = self._job(s, name, project)
            stmt = select(EventRow).where(EventRow.job_id == job.id)
            if run is not None:
                self._run(s, job, run)  # NotFound for a Run the Job never had
                stmt = stmt.where(EventRow.run_number == run)
            return mask_data([event_view(e) for e in s.scalars(stmt.order_by(EventRow.id))],
                             self._mask(s, job))

    def record(self, name: str, run: int | None = None,
               project: str = DEFAULT_PROJECT) -> dict[str, Any]:
        """The stored run record of a finished Run, or a live one for an active Run; never
        with the Run's event token (record.public_record)."""
        from rlark.services.secrets import mask_data

        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, run)
            rec = _record_of(job, r)
            return mask_data(rec, self._mask(s, job))

    def record_for_curves(self, name: str, run: int | None = None,
                          project: str = DEFAULT_PROJECT
                          ) -> tuple[dict[str, Any], str, bool, Callable[[str], str]]:
        """What :func:`rlark.services.curves.run_scalars` needs of a Run (default: the current
        one): its record as :meth:`record` reads it (unmasked: for the server's own look at the
        Run's files), its phase, whether its Workers had a uid of their own (the Run's
        ``worker_uid``, set by the runtime, never taken from the Workers' reports), and the
        mask every text shown must go through.

        Raises:
            NotFound: no such Job, or it has no such Run.
        """
        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, run)
            rec = _record_of(job, r)
            return rec, text_of(r.phase), r.worker_uid is not None, self._mask(s, job)

    def record_for_outputs(self, name: str, run: int | None = None,
                           project: str = DEFAULT_PROJECT
                           ) -> tuple[dict[str, Any], bool, dict[tuple[str, str], str] | None]:
        """What reading a Run's outputs again needs (:func:`rlark.services.outputs.output_file`):
        its record as :meth:`record` reads it (unmasked: the server's own look at its outputs),
        whether its Workers had a uid of their own (``worker_uid``, set by the runtime), and the
        values of the project's secrets its ``objectStorage`` mounts take credentials from (None
        where the server cannot open them).

        Raises:
            NotFound: no such Job, or it has no such Run.
        """
        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, run)
            return _record_of(job, r), r.worker_uid is not None, self._mount_keys(s, job, r)

    def mount_keys(self, name: str, run: int | None = None, project: str = DEFAULT_PROJECT
                   ) -> dict[tuple[str, str], str] | None:
        """The values of the project's secrets a Run's ``objectStorage`` mounts take their
        credentials from: ``(secret, key)`` -> value (None where the server cannot open them;
        empty where no mount names one). For the server's own reads of the mounts' buckets
        (:func:`rlark.services.curves.run_scalars`); never shown.

        Raises:
            NotFound: no such Job, or it has no such Run.
        """
        with self.store.session() as s:
            job = self._job(s, name, project)
            return self._mount_keys(s, job, self._run(s, job, run))

    def _mount_keys(self, s: Session, job: JobRow, r: RunRow
                    ) -> dict[tuple[str, str], str] | None:
        from rlark.store.secrets import open_refs

        refs: list[tuple[str, str]] = []
        try:
            spec = Job.model_validate(r.spec)
            refs = [p for role in spec.spec.roles for m in role.mounts for p in m.secret_refs()]
        except ValueError:
            pass
        if not refs:
            return {}
        if self.secret_box is None and self.secret_source is not None:
            self.secret_box = self.secret_source()
        try:
            return open_refs(s, job.project_id, refs, self.secret_box) \
                if self.secret_box is not None else None
        except ValueError:
            return None

    def timeline(self, name: str, run: int | None = None,
                 project: str = DEFAULT_PROJECT) -> dict[str, Any]:
        """The timeline of a Run (default: the current one) as
        :func:`rlark.services.timeline.build_timeline` builds it (times: Unix seconds), a
        failure's message masked as every read path masks it.

        Raises:
            NotFound: no such Job, or it has no such Run.
        """
        import time

        from rlark.services.timeline import build_timeline, lives_of

        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, run)
            life, workers = lives_of(r)
            return _masked(build_timeline(life, workers, time.time()), self._mask(s, job))

    def usage(self, name: str, run: int | None = None,
              project: str = DEFAULT_PROJECT) -> dict[str, Any]:
        """The resource use of a Run's Workers (default: the current Run) as
        :func:`rlark.services.usage.build_usage` builds it.

        Raises:
            NotFound: no such Job, or it has no such Run.
        """
        from rlark.services.usage import build_usage

        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, run)
            workers = [{"name": w.name, "role": w.role, "rank": w.node_rank,
                        "usage": (w.lifecycle or {}).get("usage")} for w in r.workers]
            number = r.number
        return build_usage(number, workers)

    def worker_logs(self, name: str, run: int | None, worker: str | None, role: str | None,
                    rank: int | None, project: str = DEFAULT_PROJECT
                    ) -> builtins.list[dict[str, Any]]:
        """The Workers (name, role, rank, log path) whose logs match the filters, rank order;
        ``mask``: what every line shown must go through (:func:`rlark.services.logs.redact`
        with it masks the values of the Job's secrets).

        Raises:
            NotFound: no Worker matches.
        """
        with self.store.session() as s:
            job = self._job(s, name, project)
            r = self._run(s, job, run)
            mask = self._mask(s, job)
            chosen = [
                w for w in r.workers
                if (worker is None or w.name == worker)
                and (role is None or w.role == role)
                and (rank is None or w.node_rank == rank)
            ]
            if not chosen:
                names = ", ".join(f"{w.name} (rank {w.node_rank}, role {w.role})" for w in r.workers)
                raise NotFound(f"no Worker of {name!r} run {r.number} matches; Workers: {names}")
            return [
                {"name": w.name, "role": w.role, "nodeRank": w.node_rank, "log": w.log_path,
                 # a Worker that never started (its Run failed first) writes nothing more
                 "active": r.phase in ACTIVE or (w.launched and not w.released),
                 "run": r.number, "mask": mask}
                for w in chosen
            ]

    # changes --------------------------------------------------------------------------------------

    @retry_on_conflict
    def stop(self, name: str, project: str = DEFAULT_PROJECT, actor: Actor = SYSTEM) -> dict[str, Any]:
        """Stop the current Run (SIGTERM, then SIGKILL after the grace period). Idempotent."""
        with self.store.session() as s:
            job = self._job(s, name, project)
            job.desired = Desired.Stopped
            self._request_stop(s, job, "stop requested" + _by(actor), actor)
            audit.record(s, actor, "job.stop", project=project, target=name)
            out = self._detail(s, job)
        self.wake()
        return out

    @retry_on_conflict
    def start(self, name: str, project: str = DEFAULT_PROJECT, actor: Actor = SYSTEM) -> dict[str, Any]:
        """Start a new Run of a Job that is not running.

        Raises:
            Conflict: the current Run is still active (use restart).
            Invalid: the stored spec asks for what the server's policy no longer allows
                (:meth:`launch_findings`).
        """
        self._refuse_unlaunchable(name, project)
        with self._quota_audited(actor, "job.start", project, name), self.store.session() as s:
            job = self._job(s, name, project)
            if job.delete_requested:
                raise Conflict(f"Job {name!r} is being deleted")
            run = self._current(s, job)
            if run is not None and run.phase in ACTIVE:
                raise Conflict(
                    f"Job {name!r} is {run.phase} (run {run.number}); stop it first or use restart"
                )
            self._check_run_quota(s, job)
            out = self._new_run(s, job, Cause.Started, actor)
            audit.record(s, actor, "job.start", project=project, target=name,
                         detail=f"run {out['currentRun']['number']}")
        self.wake()
        return out

    @retry_on_conflict
    def restart(self, name: str, project: str = DEFAULT_PROJECT, actor: Actor = SYSTEM,
                resume: bool = False) -> dict[str, Any]:
        """Stop the current Run if active, then start a new Run with the same spec; with
        ``resume``, one that resumes from the last checkpoint the current Run wrote in its
        outputs (:meth:`resume_source`; resolved at its launch, once that Run's outputs are read
        back: docs/data.md, "Resume").

        Raises:
            Invalid: the stored spec asks for what the server's policy no longer allows
                (:meth:`launch_findings`), or ``resume`` cannot be honoured
                (:meth:`resume_source`); the current Run is left as it is.
        """
        self._refuse_unlaunchable(name, project)
        source = self.resume_source(name, project) if resume else None
        with self._quota_audited(actor, "job.restart", project, name), self.store.session() as s:
            job = self._job(s, name, project)
            if job.delete_requested:
                raise Conflict(f"Job {name!r} is being deleted")
            self._check_run_quota(s, job)
            self._request_stop(s, job, "restart requested" + _by(actor), actor)
            out = self._new_run(s, job, Cause.Restarted, actor, resume=None if source is None else
                                {"fromRun": source, "automatic": False, "by": actor.name})
            audit.record(s, actor, "job.restart", project=project, target=name,
                         detail=f"run {out['currentRun']['number']}"
                                + (f", resuming from run {source}" if source is not None else ""))
        self.wake()
        return out

    def resume_source(self, name: str, project: str = DEFAULT_PROJECT) -> int:
        """The number of the Run a resumed restart of Job ``name`` resumes from: its latest
        Run. Its checkpoint is found at the new Run's launch in the outputs that Run's record
        read back (:func:`rlark.record.outputs.resume_point`); where that record is already
        stored, a Run without one is refused now.

        Raises:
            NotFound: no such Job. Invalid: the Job has no Run yet, its run script does not
                pass a resume on to RLinf (``$RLARK_RLINF_OVERRIDES`` or ``$RLARK_RESUME_DIR``),
                or its finished latest Run left no checkpoint (the message says what was
                looked at).
        """
        from rlark.preflight.job import passes_resume
        from rlark.record.outputs import resume_point

        with self.store.session() as s:
            job = self._job(s, name, project)
            script = str((job.spec.get("spec") or {}).get("runScript") or "")
            latest = max(job.runs, key=lambda r: r.number, default=None)
            if not passes_resume(script):
                raise Invalid(
                    f"Job {name!r} cannot resume: its run script uses neither "
                    "$RLARK_RLINF_OVERRIDES nor $RLARK_RESUME_DIR, so the checkpoint would not "
                    "reach RLinf", [Finding(
                        code="ResumeNotPassed", severity=Severity.error, path="spec.runScript",
                        message="spec.runScript uses neither $RLARK_RLINF_OVERRIDES nor "
                                "$RLARK_RESUME_DIR: a resumed Run would start afresh",
                        hint="append $RLARK_RLINF_OVERRIDES to the RLinf command (RLark puts "
                             "runner.resume_dir=<checkpoint> there) and apply the Job again")])
            if latest is None:
                raise Invalid(f"Job {name!r} has no Run yet to resume from")
            if latest.record is not None:
                point, notes = resume_point(latest.record.get("outputs") or [],
                                            latest.phase == Phase.Succeeded)
                if point is None:
                    raise Invalid(f"run {latest.number} of Job {name!r} left no checkpoint to "
                                  f"resume from: {'; '.join(notes[:3])}; `rlark outputs "
                                  f"{name}:{latest.number}` lists what it wrote")
            return latest.number

    def launch_findings(self, job: Job, project: str) -> builtins.list[Finding]:
        """What would refuse a new Run of the stored ``job`` on this server today
        (:meth:`rlark.runtimes.base.RuntimeProfile.launch_findings`: on Kubernetes the Pod
        policy, a policy made stricter since the Job was stored applying, and the secrets its
        env names, :meth:`secret_findings`; and :meth:`queue_findings`: the project's queue may
        have changed since). Errors only. The runtime checks them again at launch, so an
        automatic retry is held to them too."""
        found = (self.profile.launch_findings(job, lambda: self.secret_findings(job, project))
                 + self.queue_findings(job, project))
        return [f for f in found if f.severity == Severity.error]

    def queue_findings(self, job: Job, project: str) -> builtins.list[Finding]:
        """What the queue a new Run of ``job`` in ``project`` waits in refuses
        (:meth:`rlark.runtimes.base.RuntimeProfile.queue_findings` of the project's queue, else
        the server's; a project that does not exist: the server's), e.g. on Kubernetes with
        Kueue a ``spec.priority`` no WorkloadPriorityClass has (``PriorityUnmapped``). One
        read of the project, in a session of its own."""
        with self.store.session() as s:
            row = (s.scalar(select(ProjectRow).where(ProjectRow.name == project))
                   if DNS1123_LABEL.match(project or "") else None)
            setting = row.queue if row is not None else None
        return self.profile.queue_findings(job, self.profile.queue_of(setting))

    def _refuse_unlaunchable(self, name: str, project: str) -> None:
        """Refuse a start or restart of Job ``name`` that :meth:`launch_findings` refuses (read
        in a session of its own, closed before any Kubernetes API call).

        Raises:
            NotFound: no such Job. Invalid: with the Findings.
        """
        with self.store.session() as s:
            spec = self._job(s, name, project).spec
        try:
            job = Job.model_validate(spec)
        except ValueError:  # a spec this version cannot read: the controller says so (SpecUnreadable)
            return
        found = self.launch_findings(job, project)
        if found:
            n = len(found)
            raise Invalid(f"Job {name!r} cannot start a new Run on this server: its stored spec "
                          f"has {n} error{'s' if n != 1 else ''} under the server's policy; "
                          "replace it (`rlark apply`) with one that passes `rlark check`", found)

    def _check_run_quota(self, s: Session, job: JobRow, workers: int | None = None) -> None:
        """Room in the Job's project for a new Run of it (``workers``: default its stored spec's).

        Raises:
            QuotaExceeded: see :func:`rlark.services.quotas.check_new_run`.
        """
        if workers is None:
            workers = sum(int(r.get("workers", 1)) for r in job.spec.get("spec", {}).get("roles", []))
        prow = self._project(s, job.project.name, lock=True)
        quotas.check_new_run(s, prow, workers, job_id=job.id, defaults=self.quota_defaults)

    @contextmanager
    def _quota_audited(self, actor: Actor, action: str, project: str, target: str):
        """A refusal for a quota is audited (``outcome=denied``) in a transaction of its own:
        the refused change's own transaction is rolled back. The block runs serialised with the
        store's other quota checks (:meth:`Store.serialized`): two requests never both take the
        last room in a quota."""
        try:
            with self.store.serialized():
                yield
        except QuotaExceeded as exc:
            with self.store.session() as s:
                audit.record(s, actor, action, project=project, target=target, outcome="denied",
                             detail=f"{exc.quota['name']}: {exc.message}")
            raise

    def _request_stop(self, s: Session, job: JobRow, why: str, actor: Actor = SYSTEM) -> None:
        """Ask the controller to stop the Job's current Run if it is active (once)."""
        run = self._current(s, job)
        if run is not None and run.phase in ACTIVE and not run.stop_requested:
            run.stop_requested = True
            add_event(s, job.id, Reason.StopRequested, why, run_number=run.number, actor=actor.name)

    def _new_run(self, s: Session, job: JobRow, cause: Cause, actor: Actor = SYSTEM,
                 resume: dict[str, Any] | None = None) -> dict[str, Any]:
        job.desired = Desired.Running
        run = self._make_run(job, cause)
        run.resume = resume
        s.add(run)
        s.flush()
        job.current_run_id = run.id
        # a new Run's cause is the Job's reason until the Run moves (every Cause is a Reason)
        job.phase, job.reason, job.message = run.phase, Reason(cause.value), ""
        add_event(s, job.id, Reason(cause.value), f"run {run.number} created" + _by(actor),
                  run_number=run.number, actor=actor.name)
        return self._detail(s, job)

    @retry_on_conflict
    def replace(self, name: str, document: str | bytes | dict, project: str = DEFAULT_PROJECT,
                actor: Actor = SYSTEM) -> dict[str, Any]:
        """Give a Job a new spec and start a new Run with it (the current Run, if active, is
        stopped first; earlier Runs keep their own spec snapshots and records). A spec equal to
        the stored one changes nothing and starts nothing, as ``kubectl apply`` of an unchanged
        object: the answer then has ``unchanged: true`` (else false).

        Raises:
            NotFound: no such Job.
            Invalid: the spec has error Findings, or names another Job.
            Conflict: the Job is being deleted.
        """
        with self.store.session() as s:  # a Job the caller cannot see is 404 before any check
            self._job(s, name, project)
        job, findings = self._checked(document, project)
        if job.name != name:
            raise Invalid(
                f"metadata.name = {job.name!r} does not match the Job {name!r} being replaced",
                [Finding(code="NameMismatch", path="metadata.name",
                         message=f"metadata.name = {job.name!r}, but the request replaces {name!r}",
                         hint=f"set metadata.name to {name!r}, or create a new Job")],
            )
        with self._quota_audited(actor, "job.replace", project, name), self.store.session() as s:
            row = self._job(s, name, project)
            if row.delete_requested:
                raise Conflict(f"Job {name!r} is being deleted")
            if row.spec == job_to_dict(job):
                return {**self._detail(s, row), "unchanged": True}
            self._check_run_quota(s, row, job.total_workers)
            row.spec = job_to_dict(job)
            row.labels = dict(job.metadata.labels)
            row.findings = [f.model_dump(mode="json") for f in findings]
            add_event(s, row.id, Reason.SpecUpdated, "the Job spec was replaced" + _by(actor),
                      actor=actor.name)
            self._request_stop(s, row, "stopped to run the new spec", actor)
            out = self._new_run(s, row, Cause.Updated, actor)
            audit.record(s, actor, "job.replace", project=project, target=name,
                         detail=f"run {out['currentRun']['number']}")
        self.wake()
        return {**out, "unchanged": False}

    @retry_on_conflict
    def delete(self, name: str, project: str = DEFAULT_PROJECT, actor: Actor = SYSTEM) -> dict[str, Any]:
        """Delete a Job with its Runs, Events, records and logs. An active Job is stopped first
        and removed once its Workers are gone (``deleting: true`` until then)."""
        with self.store.session() as s:
            job = self._job(s, name, project)
            audit.record(s, actor, "job.delete", project=project, target=name)
            busy = any(
                r.phase in ACTIVE or any(not w.released and w.launched for w in r.workers)
                for r in job.runs
            )
            if not busy:
                logs = job_log_dirs(job)
                s.delete(job)
            else:
                job.delete_requested = True
                job.desired = Desired.Stopped
                for r in job.runs:
                    if r.phase in ACTIVE:
                        r.stop_requested = True
                add_event(s, job.id, Reason.DeleteRequested, "delete requested" + _by(actor)
                          + "; stopping Workers first", actor=actor.name)
        if not busy:  # only once the delete is committed
            remove_dirs(logs)
            return {"name": name, "project": project, "deleted": True}
        self.wake()
        return {"name": name, "project": project, "deleted": False, "deleting": True}


def _same(text: str) -> str:
    return text


def _masked(data: Any, mask: Callable[[str], str]) -> Any:
    """``data`` (freshly built for one answer) with ``mask`` applied to every string; as it is
    when there is nothing to mask: walking a 1,000-Worker Run's view for nothing took 60 ms a
    page (bench/console_charts.py)."""
    from rlark.services.secrets import mask_data

    return data if mask is _same else mask_data(data, mask)


def _by(actor: Actor) -> str:
    """`` by <user>`` for event messages (nothing for RLark's own changes)."""
    return f" by {actor.name}" if actor.name else ""
