"""Record facts about the RLinf config (issue 14): the head's snapshot of the Job's Hydra files
before the run, and the Hydra output directory its run script wrote. Bounded (file counts, text
caps, search depth); what cannot be read is ``{"absent": why}``.
"""

from __future__ import annotations

import os

from rlark.bootstrap.facts_code import cap_bytes

#: the most of the Hydra files (all of them together) and of one Hydra output file a Worker
#: reports as text; every file's sha256 is reported whatever its size
CONFIG_TEXT_CAP_BYTES = 256 * 1024
CONFIG_MAX_FILES = 200
#: how deep and how wide the head looks for Hydra output directories after the run script
HYDRA_SEARCH_DEPTH = 5
HYDRA_SEARCH_ENTRIES = 20000


def config_snapshot(config_dir: str, config_name: str, cap: int = CONFIG_TEXT_CAP_BYTES,
                    max_files: int = CONFIG_MAX_FILES) -> dict:
    """The Hydra files of ``config_dir`` as this Worker sees them: every ``*.yaml``/``*.yml``
    below it (at most ``max_files``, sorted), each ``{"path" (relative), "sha256", "bytes",
    "text"}``; ``text`` only while the texts together stay within ``cap`` bytes (the primary
    config ``config_name`` first). ``{"absent": why}`` when the directory is not there."""
    import hashlib

    if not os.path.isdir(config_dir):
        return {"dir": config_dir, "name": config_name, "absent": "not a directory in this Worker"}
    primary = f"{config_name.removesuffix('.yaml')}.yaml"
    found: list[str] = []
    for root, dirs, names in os.walk(config_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            if n.endswith((".yaml", ".yml")):
                found.append(os.path.relpath(os.path.join(root, n), config_dir))
        if len(found) > max_files:
            break
    found.sort(key=lambda p: (p != primary, p))
    files, used = [], 0
    for rel in found[:max_files]:
        try:
            with open(os.path.join(config_dir, rel), "rb") as f:
                data = f.read(cap + 1) if used < cap else b""
                digest = hashlib.sha256(data)
                size = len(data)
                for chunk in iter(lambda: f.read(65536), b""):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:
            files.append({"path": rel, "absent": exc.strerror or str(exc)})
            continue
        entry: dict = {"path": rel, "sha256": digest.hexdigest(), "bytes": size}
        if size <= cap - used:
            entry["text"] = data.decode("utf-8", errors="replace")
            used += size
        files.append(entry)
    return {"dir": config_dir, "name": config_name, "files": files,
            "filesCut": len(found) > max_files}


def find_hydra_outputs(top: str, since: float, depth: int = HYDRA_SEARCH_DEPTH,
                       max_entries: int = HYDRA_SEARCH_ENTRIES) -> list[str]:
    """Directories below ``top`` (at most ``depth`` levels, ``max_entries`` entries looked at)
    holding a ``.hydra/config.yaml`` written at or after ``since`` (unix seconds): the output
    directories Hydra's ``@hydra.main`` wrote during the run script, newest first."""
    hits: list[tuple[float, str]] = []
    seen = 0
    base = top.rstrip("/").count("/")
    for root, dirs, names in os.walk(top):
        seen += len(dirs) + len(names)
        if ".hydra" in dirs:
            cfg = os.path.join(root, ".hydra", "config.yaml")
            try:
                mtime = os.stat(cfg).st_mtime
            except OSError:
                mtime = -1
            if mtime >= since:
                hits.append((mtime, root))
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__")]
        if root.count("/") - base >= depth:
            dirs[:] = []
        if seen > max_entries:
            break
    return [r for _, r in sorted(hits, reverse=True)]


def hydra_output_facts(directory: str, cap: int = CONFIG_TEXT_CAP_BYTES) -> dict:
    """``.hydra/config.yaml`` and ``overrides.yaml`` of one Hydra output directory: ``{"dir",
    "files": {name: {"sha256", "bytes", "text", "cut"}}}`` (each text cut at ``cap``, so the
    lifecycle line stays well under RLark's 1 MiB line limit; Hydra's own ``hydra.yaml`` is left
    out)."""
    import hashlib

    files = {}
    for name in ("config.yaml", "overrides.yaml"):
        try:
            with open(os.path.join(directory, ".hydra", name), "rb") as f:
                data = f.read()
        except OSError:
            continue
        text, cut = cap_bytes(data, cap)
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                       "text": text, "cut": cut}
    return {"dir": directory, "files": files}
