"""Composing an RLinf config in a child process with time and memory limits.

The server composes configs named by submitted Jobs. Hydra/OmegaConf expand YAML aliases and
interpolations eagerly, so a few hundred bytes of YAML can ask for gigabytes and minutes; in the
server that would stall every request. The child gets ``RLIMIT_AS`` and a wall-clock timeout and
answers with the :class:`~rlark.rlinf_config.compose.ComposedConfig` as JSON; a child that runs
out of either becomes an ``RLinfConfigInvalid`` Finding. The CLI composes in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import asdict
from typing import Callable, Iterator, Mapping, Sequence

from rlark.findings import Finding, Severity
from rlark.rlinf_config.compose import INVALID, ComposedConfig, compose

TIMEOUT_SECONDS = 60.0
MEMORY_BYTES = 2 * 1024**3
#: a full queue answers ``Retry-After`` this many seconds (a composition takes about one)
RETRY_AFTER_SECONDS = 5


class ComposerBusy(RuntimeError):
    """Every composer slot is taken and the queue is full (or the wait ran out). The API
    answers 429 with ``Retry-After: retry_after``."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_SECONDS):
        super().__init__(message)
        self.retry_after = retry_after


class ComposerSlots:
    """Bounds the composer children of one process: at most ``slots`` at once (each may take
    :data:`MEMORY_BYTES` and a core), at most ``queue`` callers waiting for one, each at most
    ``wait_seconds``; anyone beyond that gets :class:`ComposerBusy` at once."""

    def __init__(self, slots: int, queue: int, wait_seconds: float):
        self.slots, self.queue, self.wait_seconds = slots, queue, wait_seconds
        self._free = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self.waiting = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot while the block runs.

        Raises:
            ComposerBusy: none came free in time, or the queue is full.
        """
        if not self._free.acquire(blocking=False):
            with self._lock:
                if self.waiting >= self.queue:
                    raise ComposerBusy(
                        f"the server is composing {self.slots} RLinf configs and {self.waiting} "
                        "more are waiting")
                self.waiting += 1
            try:
                got = self._free.acquire(timeout=self.wait_seconds)
            finally:
                with self._lock:
                    self.waiting -= 1
            if not got:
                raise ComposerBusy(f"no composer slot came free within {self.wait_seconds:g} s "
                                   f"({self.slots} RLinf configs are being composed)")
        try:
            yield
        finally:
            self._free.release()


_slots: ComposerSlots | None = None
_slots_lock = threading.Lock()

#: ``roots -> (argv prefix, its environment) or None``: how this server runs the composer child
#: so it reads what a Job's Workers may and nothing more (the local runtime's
#: ``LocalRuntime.composer_jail``: a mount namespace and an unprivileged uid); None: as itself
_jail: Callable[[Sequence[str]], tuple[list[str], dict[str, str]] | None] | None = None


def set_jail(jail: Callable[[Sequence[str]], tuple[list[str], dict[str, str]] | None] | None) -> None:
    """Run every composer child of this process through ``jail`` (None: as the process itself)."""
    global _jail
    _jail = jail


def composer_slots() -> ComposerSlots:
    """This process's :class:`ComposerSlots`, from ``RLARK_COMPOSE_SLOTS`` (default 2),
    ``RLARK_COMPOSE_QUEUE`` (8) and ``RLARK_COMPOSE_WAIT_SECONDS`` (10), read once.

    Raises:
        ValueError: a setting is not a positive number.
    """
    global _slots
    with _slots_lock:
        if _slots is None:
            from rlark import settings

            _slots = ComposerSlots(int(settings.positive_float_env("RLARK_COMPOSE_SLOTS", 2)),
                                   int(settings.positive_float_env("RLARK_COMPOSE_QUEUE", 8)),
                                   settings.positive_float_env("RLARK_COMPOSE_WAIT_SECONDS", 10.0))
        return _slots


def compose_isolated(
    config_dir: str,
    config_name: str,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    path: str = "rlinf",
    timeout: float = TIMEOUT_SECONDS,
    memory_bytes: int = MEMORY_BYTES,
    child_env: Mapping[str, str] | None = None,
    roots: Sequence[str] | None = None,
    slots: ComposerSlots | None = None,
) -> ComposedConfig:
    """:func:`~rlark.rlinf_config.compose.compose` in a child process limited to ``timeout``
    seconds and ``memory_bytes`` of address space, one of at most ``slots``'s children at once
    (default :func:`composer_slots`). Never raises for a bad config.

    The child's environment is ``child_env`` (e.g. the Job's head role ``env``) and nothing of
    the server's: ``${oc.env:NAME}`` in a submitted config or override must never read the
    server's own variables (its database URL, tokens) and echo them back in a Finding.
    ``roots``: directories the child's Hydra may read config files from (every file, defaults
    entry and search path; symlinks resolved); anything elsewhere reads as missing, whether it
    exists or not. None: anywhere.

    Raises:
        ComposerBusy: no composer slot came free in time.
    """
    request = {"config_dir": os.path.abspath(config_dir), "config_name": config_name,
               "overrides": list(overrides), "env": dict(env or {}), "path": path,
               "roots": [os.path.realpath(r) for r in roots] if roots is not None else None}
    source = os.path.join(config_dir, f"{config_name.removesuffix('.yaml')}.yaml")

    def limit() -> None:  # runs in the child before exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    argv = [sys.executable, "-m", "rlark.rlinf_config.isolated"]
    env = {"LANG": "C.UTF-8", **{k: v for k, v in (child_env or {}).items() if "\0" not in k + v}}
    jailed = _jail([os.path.realpath(r) for r in roots or ()]) if _jail is not None else None
    try:
        with (slots or composer_slots()).slot():
            if jailed is None:
                proc = subprocess.run(argv, input=json.dumps(request), capture_output=True,
                                      text=True, timeout=timeout, preexec_fn=limit, cwd="/",
                                      env=env)
            else:
                proc = _run_jailed(jailed, argv, env, json.dumps(request), timeout, limit)
        reply = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except subprocess.TimeoutExpired:
        return _failed(source, config_dir, config_name, overrides, path,
                       f"composing took longer than {timeout:g} s (a YAML alias chain or a "
                       "self-referencing interpolation?)")
    except (ValueError, IndexError):
        reply = None
    if reply is None:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        why = ("it needs more than 2 GiB of memory (a YAML alias chain?)"
               if "MemoryError" in (proc.stderr or "") else f"the composer failed: {tail[0][:300]}")
        return _failed(source, config_dir, config_name, overrides, path, why)
    reply["findings"] = [Finding.model_validate(f) for f in reply["findings"]]
    reply["overrides"] = tuple(reply["overrides"])
    return ComposedConfig(**reply)


def _run_jailed(jailed: tuple[list[str], dict[str, str]], argv: list[str], env: dict[str, str],
                request: str, timeout: float, limit) -> subprocess.CompletedProcess:
    """The composer child through the jail (keeper.py ``--exec``): the jail's own command line
    and environment, the child's argv in ``RLARK_KEEPER_EXEC`` and its environment through a
    pipe (``RLARK_KEEPER_ENV_FD``), never through the jail's own environment.

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout`` (it is killed).
    """
    prefix, own = jailed
    read_end, write_end = os.pipe()
    own = {**own, "RLARK_KEEPER_EXEC": json.dumps(argv), "RLARK_KEEPER_ENV_FD": str(read_end)}
    try:
        proc = subprocess.Popen(prefix, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=own, cwd="/",
                                preexec_fn=limit, pass_fds=(read_end,))
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    data = json.dumps(env).encode()

    def feed() -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
        except OSError:
            pass
        finally:
            os.close(write_end)

    threading.Thread(target=feed, name="composer-env", daemon=True).start()
    try:
        out, err = proc.communicate(request, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(prefix, proc.returncode, out, err)


def _failed(source, config_dir, config_name, overrides, path, why) -> ComposedConfig:
    return ComposedConfig(
        source=source, config_dir=config_dir, config_name=config_name, overrides=tuple(overrides),
        findings=[Finding(code=INVALID, severity=Severity.error, path=path,
                          message=f"cannot compose RLinf config {source}: {why}",
                          hint="RLinf configs compose in about a second; simplify the config")])


def confine_hydra(roots: Sequence[str]) -> None:
    """In the composer child: Hydra's file config source (``file://`` search path entries, the
    primary config's directory) sees only files and directories under ``roots`` (real paths);
    everything else is "not there", so an answer never tells whether another path exists.
    Hydra facts: hydra/_internal/core_plugins/file_config_source.py (hydra-core 1.3) resolves
    each path with ``os.path.realpath(os.path.join(self.path, config_path))``."""
    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.plugins import Plugins
    from hydra.plugins.config_source import ConfigLoadError

    # the class Hydra uses: its plugin scan loads core_plugins anew, so the registered class is
    # not the one an import would give
    Plugins.instance()
    FileConfigSource = SourcesRegistry.instance().resolve("file")
    allowed = [os.path.realpath(r) for r in roots]

    def inside(source, config_path: str) -> bool:
        full = os.path.realpath(os.path.join(source.path, config_path))
        return any(full == r or full.startswith(r.rstrip("/") + "/") for r in allowed)

    load, is_group, is_config, listing = (FileConfigSource.load_config, FileConfigSource.is_group,
                                          FileConfigSource.is_config, FileConfigSource.list)

    def load_config(self, config_path):
        if not inside(self, self._normalize_file_name(config_path)):
            raise ConfigLoadError(f"Config not found : {config_path}")
        return load(self, config_path)

    def is_group_(self, config_path):
        return inside(self, config_path) and is_group(self, config_path)

    def is_config_(self, config_path):
        return inside(self, self._normalize_file_name(config_path)) and is_config(self, config_path)

    def list_(self, config_path, results_filter):
        return listing(self, config_path, results_filter) if inside(self, config_path) else []

    # Hydra's own class, patched in place (only in the composer child, which exits after one
    # composition): setattr, since assigning to a method is what this means to do
    for attr, fn in (("load_config", load_config), ("is_group", is_group_),
                     ("is_config", is_config_), ("list", list_)):
        setattr(FileConfigSource, attr, fn)


def _main() -> None:
    request = json.loads(sys.stdin.read())
    if request.get("roots") is not None:
        confine_hydra(request["roots"])
    composed = compose(request["config_dir"], request["config_name"], request["overrides"],
                       env=request["env"], path=request["path"])
    out = asdict(composed)
    out["findings"] = [f.model_dump(mode="json") for f in composed.findings]
    sys.stdout.write("\n" + json.dumps(out, default=str) + "\n")


if __name__ == "__main__":
    _main()
