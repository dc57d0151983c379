"""Reading RLinf Hydra configs to plan and to check (``rlark plan``, ``rlark check``, preflight).

Named ``rlinf_config`` so it never shadows the ``rlinf`` package, and it never imports RLinf:
RLark works where RLinf is not installed. RLark reads the config; it never rewrites it.

* :mod:`.compose` - compose a config offline with hydra-core (I/O).
* :mod:`.ranks` - RLinf's rank syntax (pure).
* :mod:`.cluster` - the ``cluster:`` section as RLinf 0.3.0 reads it, and where components land
  (pure).
* :mod:`.plan` - config -> node ranks, components, suggested roles and a Job (pure).
* :mod:`.check` - Job + config -> Findings (pure).
* :mod:`.script` - the config names the run script gives Hydra, against ``spec.rlinf``
  (pure; part of every Job's own checks, :func:`rlark.preflight.job.check_job`).
* :func:`plan_config` - what ``rlark plan`` runs (compose + plan).
* :func:`preflight_job` - what ``JobService.create`` and ``rlark check`` run for a Job that
  names its config in ``spec.rlinf``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from rlark.findings import Finding, Severity
from rlark.spec import Job

if TYPE_CHECKING:
    from rlark.rlinf_config.locations import Filesystem

__all__ = ["config_location", "plan_config", "preflight_job"]


def _inside(path: str, roots: Sequence[str]) -> bool:
    """``path``, symlinks resolved, is one of ``roots`` (resolved too) or below one."""
    full = os.path.realpath(path)
    for root in roots:
        real = os.path.realpath(root)
        if full == real or full.startswith(real.rstrip("/") + "/"):
            return True
    return False


def config_location(job: Job) -> tuple[str, str] | None:
    """``(config_dir, config_name)`` of the config ``job.spec.rlinf`` names, with a relative
    ``configDir`` joined to ``spec.workingDir``; None when the Job names no config
    (``configName`` unset). ``config_dir`` stays relative when ``workingDir`` is unset or
    relative."""
    ref = job.spec.rlinf
    if ref is None or not ref.config_name:
        return None
    config_dir = ref.config_dir or "."
    if not os.path.isabs(config_dir) and job.spec.working_dir:
        config_dir = os.path.normpath(os.path.join(job.spec.working_dir, config_dir))
    return config_dir, ref.config_name


def plan_config(
    config: str | os.PathLike,
    config_name: str | None = None,
    overrides: Sequence[str] = (),
    *,
    gpus_per_node: int | None = None,
    image: str | None = None,
    job_name: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
):
    """Compose a config (a YAML file, or a directory plus ``config_name``) and plan it: what
    ``rlark plan`` runs. Returns a :class:`.plan.Plan` whose Findings start with the compose
    problems. ``cwd`` (default: the current directory) is where the suggested Job will be saved.
    Never raises for a bad config."""
    from rlark.rlinf_config.compose import compose, locate
    from rlark.rlinf_config.plan import DEFAULT_IMAGE, launch_settings, plan

    config_dir, name = locate(config, config_name)
    composed = compose(config_dir, name, overrides, env=env, path="config")
    launch = launch_settings(os.path.abspath(config_dir), name, overrides,
                             os.path.abspath(cwd or os.getcwd()))
    result = plan(composed.data, source=composed.source, gpus_per_node=gpus_per_node,
                  config_name=name, job_name=job_name, image=image or DEFAULT_IMAGE,
                  launch=launch)
    result.findings[:0] = composed.findings
    if composed.data:
        # the layout does not depend on them, but `rlark check` and submit refuse a config with
        # placeholders: say so here already, as warnings
        from rlark.rlinf_config.check import placeholder_findings

        reported = {f.path for f in result.findings}
        for f in placeholder_findings(composed.data, skip=reported):
            result.findings.append(f.model_copy(update={
                "severity": Severity.warning,
                "hint": f.hint + " (rlark check and submit refuse the config until then)"}))
    if result.job is not None and not launch["entry_known"]:
        result.findings.append(Finding(
            code="RunScriptToEdit", severity=Severity.info, path="spec.runScript",
            message="the suggested runScript runs train.py: RLark does not know this config's "
                    "RLinf entry point",
            hint="replace train.py with the script that starts RLinf for this config"))
    return result


def preflight_job(
    job: Job,
    *,
    config: tuple[str, str] | None = None,
    overrides: Sequence[str] | None = None,
    missing_is_error: bool = False,
    isolated: bool = False,
    roots: Sequence[str] | None = None,
    filesystem: Filesystem | None = None,
    here_only: bool = False,
) -> list[Finding]:
    """Compose the RLinf config of ``job`` and check the Job against it.

    Args:
        config: ``(config_dir, config_name)`` to use instead of ``spec.rlinf``.
        overrides: Hydra overrides (default: ``spec.rlinf.overrides``).
        missing_is_error: when False (submit, and ``rlark check`` without ``--rlinf-config``), a
            config that is not here (``RLinfConfigNotFound``) or that needs files or variables
            that are not here (``RLinfConfigIncomplete``) is a *warning*: it may exist only inside
            the image. When True (an explicit ``--rlinf-config``) they are errors.
        isolated: compose in a child process with time and memory limits (the server does;
            see :mod:`.isolated`).
        roots: directories the config may be read from (the server: the Job's ``workingDir``
            and its ``--config-root`` directories; symlinks resolved). A config elsewhere is not
            read at all: one ``RLinfConfigNotChecked`` warning, the same whether it exists or
            not; files it pulls in from elsewhere read as missing. None: anywhere (the CLI on
            the caller's own machine).
        filesystem: what backs a path under no mount on the runtime the Job will run on
            (:attr:`rlark.runtimes.base.RuntimeProfile.filesystem`, for ``OutputNotPersistent``);
            None: unknown (that check is left out).
        here_only: the Workers read this machine's files and no image (the local runtime): a
            config that is not here (``RLinfConfigNotFound``) is an error, as with
            ``missing_is_error``, and no Finding says it may be inside an image.

    Returns:
        Findings: the compose problems, then :func:`.check.check_config`'s. Empty when the Job
        names no config. Never raises for a bad config.
    """
    from rlark.rlinf_config.check import check_config
    from rlark.rlinf_config.compose import INCOMPLETE, NOT_FOUND, RLINF_PATH_VARS, compose

    where = config or config_location(job)
    if where is None:
        return []
    config_dir, config_name = where
    if not os.path.isabs(config_dir) and config is None:
        return [Finding(
            code="RLinfConfigNotChecked", severity=Severity.warning, path="spec.rlinf.configDir",
            message=f"spec.rlinf.configDir = {config_dir!r} is relative and spec.workingDir is not "
                    "set, so RLark cannot find the config to check it",
            hint="set spec.workingDir (`rlark submit FILE` resolves a relative one against FILE's "
                 "directory) or make configDir absolute")]
    image = "" if here_only else " (it may exist only inside the image)"
    if roots is not None and not _inside(
            os.path.join(config_dir, f"{config_name.removesuffix('.yaml')}.yaml"), roots):
        return [Finding(
            code="RLinfConfigNotChecked", severity=Severity.warning, path="spec.rlinf.configDir",
            message=f"spec.rlinf.configDir = {config_dir!r} (configName {config_name!r}) is not "
                    "under spec.workingDir or a config root of this server, so RLark did not "
                    f"read it to check the Job against it{image}",
            hint="keep the config under spec.workingDir, or ask the server's operator for a "
                 "`rlark server --config-root DIR`; `rlark check FILE --rlinf-config PATH` checks "
                 "it on your own machine")]
    if overrides is None:
        overrides = job.spec.rlinf.overrides if job.spec.rlinf else []
    head = job.role(job.spec.head_role)
    # plain values only: a value from a secret never reaches the composer (nor a Finding)
    plain = {e.name: e.value or "" for e in (head.env if head else []) if e.secret_ref is None}
    env = {name: value for name, value in plain.items()
           if name in RLINF_PATH_VARS and os.path.isabs(value)
           and (roots is None or _inside(value, roots)) and os.path.isdir(value)}
    if isolated:
        from rlark.rlinf_config.isolated import compose_isolated

        # the child sees the head role's env and nothing of this process's environment
        composed = compose_isolated(config_dir, config_name, overrides, env=env, path="spec.rlinf",
                                    child_env=plain, roots=roots)
    else:
        composed = compose(config_dir, config_name, overrides, env=env, path="spec.rlinf")
    findings: list[Finding] = []
    for f in composed.findings:
        if here_only and f.code == NOT_FOUND:
            f = f.model_copy(update={
                "message": f.message + ": the Workers run on this machine, with its files (no "
                                       "image), so the Run could not load it either"})
        elif not missing_is_error and f.code in (NOT_FOUND, INCOMPLETE):
            f = f.model_copy(update={
                "severity": Severity.warning,
                "message": f.message + " - RLark could not check the Job against it here"
                           + (" (the Workers may set what it needs: a secret's value, the run "
                              "script)" if here_only else image)})
        findings.append(f)
    findings.extend(check_config(job, composed.data, source=composed.source,
                                 unresolved=composed.unresolved,
                                 known_dirs=list(composed.env.values()), filesystem=filesystem))
    return findings
