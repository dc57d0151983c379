"""Helpers for the tests that read the corpus of real RLinf configs (../shared/corpus).

The corpus is ``<corpus>/rlinf/`` (every YAML under RLinf's ``examples/``) and
``<corpus>/rlinf-oracle.json`` (what RLinf 0.3.0's own code made of each config). It is found at
``$RLARK_CORPUS`` or at ``../shared/corpus`` next to the repository; tests skip with a clear
message only when it is absent. Planning the whole corpus takes ~25 s, so it runs once per test
process (:func:`plan_corpus` is cached) and every test that needs it shares the result.
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


#: where this project's machines keep the shared corpus, for a clone made elsewhere (e.g. /tmp)
WORKPLACE_CORPUS = Path("/work/shared/corpus")


def find_corpus() -> Path:
    """The corpus directory: ``$RLARK_CORPUS``, else ``<repo>/../shared/corpus``, else the
    workplace copy at /work/shared/corpus."""
    env = os.environ.get("RLARK_CORPUS")
    if env:
        return Path(env)
    beside = REPO.parent / "shared" / "corpus"
    return beside if beside.exists() or not WORKPLACE_CORPUS.exists() else WORKPLACE_CORPUS


def corpus_or_skip() -> Path:
    path = find_corpus()
    if not (path / "rlinf").is_dir() or not (path / "rlinf-oracle.json").is_file():
        pytest.skip(f"the RLinf config corpus is not at {path} (needs rlinf/ and "
                    "rlinf-oracle.json): set RLARK_CORPUS or put it at ../shared/corpus")
    return path


def load_oracle(corpus: Path) -> dict:
    return json.loads((corpus / "rlinf-oracle.json").read_text())


def corpus_files(corpus: Path) -> list[str]:
    """Every YAML config of the corpus, relative to ``<corpus>/rlinf``."""
    root = corpus / "rlinf"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml"))


@dataclass
class CorpusRun:
    plans: dict = field(default_factory=dict)  # rel path -> Plan
    tracebacks: dict = field(default_factory=dict)  # rel path -> traceback text
    seconds: float = 0.0


@functools.lru_cache(maxsize=2)
def plan_corpus(corpus: str) -> CorpusRun:
    """``rlark plan`` (the same function the CLI calls) over every config, timed."""
    from rlark.rlinf_config import plan_config

    root = Path(corpus) / "rlinf"
    run = CorpusRun()
    started = time.perf_counter()
    for rel in corpus_files(Path(corpus)):
        try:
            run.plans[rel] = plan_config(root / rel)
        except Exception:  # recorded: the test asserts there are none
            run.tracebacks[rel] = traceback.format_exc()
    run.seconds = time.perf_counter() - started
    return run
