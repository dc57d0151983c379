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
from dataclasses import asdict
from typing import Mapping, Sequence

from rlark.findings import Finding, Severity
from rlark.rlinf_config.compose import INVALID, ComposedConfig, compose

TIMEOUT_SECONDS = 60.0
MEMORY_BYTES = 2 * 1024**3


def compose_isolated(
    config_dir: str,
    config_name: str,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    path: str = "rlinf",
    timeout: float = TIMEOUT_SECONDS,
    memory_bytes: int = MEMORY_BYTES,
    child_env: Mapping[str, str] | None = None,
) -> ComposedConfig:
    """:func:`~rlark.rlinf_config.compose.compose` in a child process limited to ``timeout``
    seconds and ``memory_bytes`` of address space. Never raises for a bad config.

    The child's environment is ``child_env`` (e.g. the Job's head role ``env``) and nothing of
    the server's: ``${oc.env:NAME}`` in a submitted config or override must never read the
    server's own variables (its database URL, tokens) and echo them back in a Finding."""
    request = {"config_dir": os.path.abspath(config_dir), "config_name": config_name,
               "overrides": list(overrides), "env": dict(env or {}), "path": path}
    source = os.path.join(config_dir, f"{config_name.removesuffix('.yaml')}.yaml")

    def limit() -> None:  # runs in the child before exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rlark.rlinf_config.isolated"],
            input=json.dumps(request), capture_output=True, text=True, timeout=timeout,
            preexec_fn=limit, cwd=os.getcwd(),
            env={"LANG": "C.UTF-8", **{k: v for k, v in (child_env or {}).items() if "\0" not in k + v}},
        )
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


def _failed(source, config_dir, config_name, overrides, path, why) -> ComposedConfig:
    return ComposedConfig(
        source=source, config_dir=config_dir, config_name=config_name, overrides=tuple(overrides),
        findings=[Finding(code=INVALID, severity=Severity.error, path=path,
                          message=f"cannot compose RLinf config {source}: {why}",
                          hint="RLinf configs compose in about a second; simplify the config")])


def _main() -> None:
    request = json.loads(sys.stdin.read())
    composed = compose(request["config_dir"], request["config_name"], request["overrides"],
                       env=request["env"], path=request["path"])
    out = asdict(composed)
    out["findings"] = [f.model_dump(mode="json") for f in composed.findings]
    sys.stdout.write("\n" + json.dumps(out, default=str) + "\n")


if __name__ == "__main__":
    _main()
