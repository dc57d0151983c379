"""Composing an RLinf Hydra config offline, the way RLinf's run scripts do, into plain data.

RLinf's examples are started by scripts such as ``examples/embodiment/run_embodiment.sh``, which
export ``EMBODIED_PATH`` (the directory of the script, ``<repo>/examples/embodiment``) and
``REPO_PATH`` (the repository root) and then run
``python <entry>.py --config-path <dir> --config-name <name> [overrides]`` with
``@hydra.main(version_base="1.1")``. Configs use those variables in ``hydra.searchpath``
(``file://${oc.env:EMBODIED_PATH}/config/``), and some use ``DIFFUSION_PATH`` / ``REWARD_PATH``
the same way. :func:`compose` does the same with hydra-core's compose API.

Only what RLark needs is resolved: every interpolation is tried one value at a time, and a value
that cannot be resolved here (an unset ``${oc.env:X}``, a ``${hydra:...}`` value) is kept as
written and listed in ``unresolved``. RLinf's own resolvers (``multiply``, ``int_div``,
``subtract``, ``not``, ``torch.dtype``; rlinf/utils/omega_resolver.py) are replaced by
equivalents while composing (``torch.dtype`` gives the text ``torch.<name>``: RLark does not
import torch), and the resolvers registered before are restored afterwards.

Every problem becomes a Finding; nothing here raises for a bad config.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from rlark.findings import Finding, Severity

#: Variables RLinf's configs read in ``hydra.searchpath`` / values, and where RLinf's run scripts
#: point them inside an RLinf checkout (relative to the repository root).
RLINF_PATH_VARS: dict[str, str] = {
    "REPO_PATH": ".",
    "EMBODIED_PATH": "examples/embodiment",
    "DIFFUSION_PATH": "examples/diffusion",
    "REWARD_PATH": "examples/reward",
}

#: Finding codes of :func:`compose`.
NOT_FOUND = "RLinfConfigNotFound"  # no such file / directory
INCOMPLETE = "RLinfConfigIncomplete"  # a defaults entry or an env var it needs is not here
INVALID = "RLinfConfigInvalid"  # YAML/Hydra/override error

# Hydra keeps global state (GlobalHydra) and we swap OmegaConf's oc.env resolver while composing:
# one composition at a time per process.
_LOCK = threading.RLock()


@dataclass
class ComposedConfig:
    """The result of :func:`compose`.

    ``data`` is the composed config as plain dicts/lists/scalars (None when composing failed);
    ``unresolved`` maps key paths (``env.train.usd_file``) to why their interpolation could not be
    resolved here; ``env`` holds the RLinf path variables used.
    """

    source: str
    config_dir: str
    config_name: str
    overrides: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    unresolved: dict[str, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.data is not None


def find_rlinf_repo(config_dir: str | os.PathLike) -> Path | None:
    """The RLinf checkout a config directory lives in: the parent of the nearest ancestor named
    ``examples`` (``<repo>/examples/embodiment/config`` -> ``<repo>``) when that parent looks like
    RLinf (it has ``rlinf/`` or ``examples/embodiment/``), else None."""
    path = Path(os.path.abspath(config_dir))
    for parent in [path, *path.parents]:
        if parent.name == "examples" and parent.parent != parent:
            repo = parent.parent
            if (repo / "rlinf").is_dir() or (parent / "embodiment").is_dir():
                return repo
    return None


def rlinf_env(config_dir: str | os.PathLike, given: Mapping[str, str] | None = None,
              environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values for RLinf's path variables when composing a config in ``config_dir``.

    Precedence: ``given`` (e.g. ``rlark plan --env``), then ``environ`` (default: this process's
    environment), then what RLinf's run scripts would export for a config inside an RLinf checkout
    (``REPO_PATH=<repo>``, ``EMBODIED_PATH=<repo>/examples/embodiment``, ...).
    """
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    repo = find_rlinf_repo(config_dir)
    if repo is not None:
        for name, sub in RLINF_PATH_VARS.items():
            out[name] = str((repo / sub).resolve()) if sub != "." else str(repo)
    for name in RLINF_PATH_VARS:
        if environ.get(name):
            out[name] = environ[name]
    out.update(given or {})
    return out


def locate(config: str | os.PathLike, config_name: str | None = None) -> tuple[str, str]:
    """``(config_dir, config_name)`` from a YAML file path, or a directory plus a name.

    ``locate("a/b/ppo.yaml")`` -> ``("a/b", "ppo")``; ``locate("a/b", "ppo.yaml")`` ->
    ``("a/b", "ppo")``. Paths are returned as given (not made absolute).
    """
    text = os.fspath(config)
    if config_name:
        name = config_name[:-5] if config_name.endswith(".yaml") else config_name
        return text, name
    head, tail = os.path.split(text.rstrip("/"))
    for ext in (".yaml", ".yml"):
        if tail.endswith(ext):
            return head or ".", tail[: -len(ext)]
    return head or ".", tail


_UNSET = object()


def _rlinf_resolvers() -> dict[str, Any]:
    """Equivalents of RLinf's resolvers (rlinf/utils/omega_resolver.py); ``torch.dtype`` gives
    the text ``torch.<name>`` (RLark does not import torch)."""
    return {
        "multiply": lambda x, y: x * y,
        "int_div": lambda x, y: x // y,
        "subtract": lambda x, y: x - y,
        "not": lambda x: not bool(x),
        "torch.dtype": lambda name: f"torch.{name}",
    }


@contextmanager
def _resolvers(env_values: Mapping[str, str]) -> Iterator[None]:
    """While composing: RLinf's resolvers are RLark's equivalents (even where RLinf itself is
    imported and registered its own), and ``${oc.env:NAME}`` sees ``env_values`` first, then the
    process environment. Nothing global stays changed: the process environment is never touched
    (a server may be starting Workers from it meanwhile) and the previous resolvers are put back
    (OmegaConf 2.3 keeps them in ``BaseContainer._resolvers``)."""
    from omegaconf import OmegaConf
    from omegaconf.basecontainer import BaseContainer
    from omegaconf.resolvers import oc

    def env(key: str, default: Any = _UNSET) -> Any:
        if key in env_values:
            return env_values[key]
        return oc.env(key) if default is _UNSET else oc.env(key, default)

    ours = {**_rlinf_resolvers(), "oc.env": env}
    registry = BaseContainer._resolvers
    saved = {name: registry.get(name) for name in ours}
    for name, fn in ours.items():
        OmegaConf.register_new_resolver(name, fn, replace=True)
    try:
        yield
    finally:
        for name, previous in saved.items():
            if previous is None:
                registry.pop(name, None)
            else:
                registry[name] = previous


def _first_lines(exc: BaseException, n: int = 3, width: int = 400) -> str:
    """``Type: message`` of an exception and of what caused it (Hydra wraps the real cause),
    on one line, at most ``n`` lines of each and ``width`` characters in all."""
    parts: list[str] = []
    e: BaseException | None = exc
    while e is not None and len(parts) < 4:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        text = " ".join(lines[:n])
        if text and not any(text in p for p in parts):
            parts.append(f"{type(e).__name__}: {text}")
        e = e.__cause__ or (e.__context__ if not e.__suppress_context__ else None)
    out = " <- ".join(parts) or type(exc).__name__
    return out if len(out) <= width else out[: width - 3] + "..."


def _classify(exc: BaseException) -> str:
    from hydra.errors import MissingConfigException

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 10:
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        if isinstance(e, MissingConfigException):
            return INCOMPLETE
        if "Environment variable" in str(e) and "not found" in str(e):
            return INCOMPLETE
    return INVALID


def compose(
    config_dir: str | os.PathLike,
    config_name: str,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    path: str = "rlinf",
) -> ComposedConfig:
    """Compose ``<config_dir>/<config_name>.yaml`` with Hydra (``version_base="1.1"``, as RLinf's
    entry points) and the given overrides, and return it as plain data.

    Args:
        config_dir: directory of the primary config (relative to the current directory, or
            absolute).
        config_name: file name without ``.yaml`` (with it is accepted too).
        overrides: Hydra overrides, ``["cluster.num_nodes=2", "+x=1"]``.
        env: values for RLinf's path variables (see :func:`rlinf_env`; missing ones are filled by
            it).
        path: the Finding path to report problems under (``spec.rlinf`` when it comes from a Job).

    Returns:
        A :class:`ComposedConfig`. On failure ``data`` is None and ``findings`` holds one error:
        ``RLinfConfigNotFound`` (no such file), ``RLinfConfigIncomplete`` (a defaults entry or an
        environment variable it needs is missing here; the file may be complete inside the
        image), or ``RLinfConfigInvalid`` (YAML, Hydra or override error), each naming the file and
        the cause. Never raises for a bad config.
    """
    directory, name = locate(config_dir, config_name)
    abs_dir = os.path.abspath(directory)
    source = os.path.join(directory, f"{name}.yaml")
    used_env = rlinf_env(abs_dir, env)
    result = ComposedConfig(source=source, config_dir=directory, config_name=name,
                            overrides=tuple(overrides), env=used_env)
    file = os.path.join(abs_dir, f"{name}.yaml")
    if not os.path.isfile(file):
        what = "directory" if not os.path.isdir(abs_dir) else "file"
        missing = abs_dir if what == "directory" else file
        result.findings.append(Finding(
            code=NOT_FOUND, severity=Severity.error, path=path,
            message=f"RLinf config {source}: the {what} {missing} does not exist",
            hint="check configDir/configName (configDir is relative to spec.workingDir) or the "
                 "path you passed"))
        return result
    bomb = _oversized_yaml(file)
    if bomb:
        result.findings.append(Finding(
            code=INVALID, path=path,
            message=f"cannot compose RLinf config {source}: {bomb}",
            hint="RLinf configs are a few thousand values; remove the alias chain or the huge file"))
        return result
    try:
        from hydra import compose as hydra_compose
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
    except ImportError as exc:  # pragma: no cover - hydra-core is a dependency
        result.findings.append(Finding(code=INVALID, path=path,
                                       message=f"cannot read RLinf configs: {exc}",
                                       hint="pip install hydra-core omegaconf"))
        return result
    with _LOCK, _resolvers(used_env), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            GlobalHydra.instance().clear()
            with initialize_config_dir(config_dir=abs_dir, version_base="1.1"):
                cfg = hydra_compose(config_name=name, overrides=list(overrides))
            result.data = _plain(cfg, "", result.unresolved)
        except Exception as exc:  # Hydra raises many kinds; each becomes a Finding
            code = _classify(exc)
            hint = ("set the environment variables the config reads (REPO_PATH, EMBODIED_PATH, "
                    "...; `rlark plan --env NAME=DIR`) and make sure every defaults entry exists"
                    if code == INCOMPLETE else
                    "fix the YAML or the override (a new key needs '+key=value')")
            result.findings.append(Finding(
                code=code, path=path,
                message=f"cannot compose RLinf config {source}"
                        f"{' with overrides ' + ' '.join(overrides) if overrides else ''}: "
                        f"{_first_lines(exc)}",
                hint=hint))
        finally:
            GlobalHydra.instance().clear()
    return result


#: limits on the YAML files of a config directory: a few hundred bytes of YAML aliases expand
#: into billions of values inside OmegaConf, which would hold the server for minutes
MAX_CONFIG_VALUES = 200_000
MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024
_scanned: dict[tuple[str, float, int], str | None] = {}


def _oversized_yaml(file: str) -> str | None:
    """A problem with the primary config file (too big, or more than :data:`MAX_CONFIG_VALUES`
    values once YAML aliases are expanded, counted without expanding them), or None. Files it
    pulls in through ``defaults`` are Hydra's to read; the server composes in a child process
    with limits for those (:mod:`.isolated`)."""
    import yaml

    from rlark.spec import tree_problems

    try:
        st = os.stat(file)
    except OSError:
        return None
    key = (file, st.st_mtime, st.st_size)
    if key not in _scanned:
        problem: str | None
        if st.st_size > MAX_CONFIG_FILE_BYTES:
            problem = f"{file} is larger than {MAX_CONFIG_FILE_BYTES // (1024 * 1024)} MiB"
        else:
            try:
                with open(file, errors="replace") as f:
                    data = yaml.safe_load(f)
                fatal, _ = tree_problems(data, max_values=MAX_CONFIG_VALUES, max_depth=400)
                problem = f"{file}: {fatal}" if fatal else None
            except (yaml.YAMLError, RecursionError, OSError):
                problem = None  # Hydra reports broken YAML with its own words
        _scanned[key] = problem
    return _scanned[key]


def _plain(node: Any, path: str, unresolved: dict[str, str]) -> Any:
    """A DictConfig/ListConfig as plain data; interpolations resolved where possible."""
    from omegaconf import DictConfig

    if isinstance(node, DictConfig):
        return {key: _child(node, key, f"{path}.{str(key)}" if path else str(key), unresolved)
                for key in node.keys()}
    return [_child(node, i, f"{path}[{i}]", unresolved) for i in range(len(node))]


def _child(node: Any, key: Any, path: str, unresolved: dict[str, str]) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    child = node._get_node(key)
    if child._is_interpolation():
        try:
            value = node[key]
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=True)
            return value
        except Exception as exc:
            unresolved[path] = _first_lines(exc, n=1, width=300)
            return child._value()
    if isinstance(child, (DictConfig, ListConfig)):
        if child._is_none():
            return None
        if child._is_missing():
            return "???"
        return _plain(child, path, unresolved)
    return child._value()
