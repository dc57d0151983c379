"""What a run script tells Hydra, against what ``spec.rlinf`` names (pure: text in, Findings out).

RLark checks and records the config ``spec.rlinf.configName`` names, and never rewrites the run
script; RLinf loads the config the script names with Hydra's ``--config-name`` (``-cn``). When
the two disagree the Run trains with one config and its record names another, so a script that
names only other configs is refused (``RLinfConfigNameMismatch``, error). Only literal names are
compared: a name that comes from the shell (``$CONFIG``, a command substitution) is not known
before the script runs.
"""

from __future__ import annotations

import re
import shlex

from rlark.findings import Finding, Severity
from rlark.spec import Job

#: Hydra's command-line flags for the config name (hydra-core ``_internal/utils.py``,
#: ``get_args_parser``: ``--config-name``/``-cn``)
NAME_FLAGS = ("--config-name", "-cn")
#: characters that make a value the shell's to decide
_SHELL = re.compile(r"[$`*?\[\]{}~]")


def hydra_config_names(script: str) -> list[str]:
    """The literal values ``script`` passes with ``--config-name``/``-cn`` (``--config-name X``,
    ``--config-name=X``, ``-cn X``, ``-cn=X``), in order, quotes removed; values the shell
    expands are left out, and so is everything of a script the shell grammar cannot split
    (unbalanced quotes: bash refuses it anyway)."""
    text = script.replace("\\\n", " ")  # a line continuation joins two lines of one command
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        return []
    names = []
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag not in NAME_FLAGS:
            continue
        if not eq:
            value = words[i + 1] if i + 1 < len(words) else ""
        if value and not _SHELL.search(value) and not value.startswith("-"):
            names.append(value)
    return names


def _same_config(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same config: equal without ``.yaml``, or one is the other below
    a config group (``embodiment/ppo`` against ``ppo``, with the group in ``configDir``)."""
    a, b = a.removesuffix(".yaml").strip("/"), b.removesuffix(".yaml").strip("/")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def config_name_findings(job: Job) -> list[Finding]:
    """``RLinfConfigNameMismatch`` (error) when ``spec.rlinf.configName`` is set, the run script
    passes Hydra literal ``--config-name`` values, and none of them is that config. Nothing when
    either is missing or the script's names come from the shell."""
    ref = job.spec.rlinf
    if ref is None or not ref.config_name:
        return []
    names = hydra_config_names(job.spec.run_script)
    if not names or any(_same_config(ref.config_name, n) for n in names):
        return []
    said = " and ".join(f"--config-name {n}" for n in dict.fromkeys(names))
    return [Finding(
        code="RLinfConfigNameMismatch", severity=Severity.error, path="spec.rlinf.configName",
        message=f"spec.rlinf.configName = {ref.config_name!r} but spec.runScript starts RLinf "
                f"with {said}: the Run would train with another config than the one RLark "
                "checks and records",
        hint=f"name the same config in both: spec.rlinf.configName: {names[0]}, or "
             f"--config-name {ref.config_name} in spec.runScript")]
