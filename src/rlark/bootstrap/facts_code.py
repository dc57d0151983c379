"""Record facts about code (issue 14): the git checkout of the working directory and where the
installed RLinf comes from, read with bounded probes (:class:`Budget`, :func:`probe`). Never
fatal: what cannot be learnt is ``{"absent": why}``. The parsers are pure.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time

#: seconds one probe (a git or nvidia-smi call) may take (all of them together:
#: config.FACT_BUDGET_SECONDS). A probe that runs out of time is recorded as absent with the
#: reason, like a missing tool: a fact never fails the Run.
FACT_PROBE_SECONDS = 5.0
#: the most of an uncommitted diff a Worker reports (bytes; its sha256 covers all of it)
DIFF_CAP_BYTES = 64 * 1024


class Budget:
    """A time budget (seconds, monotonic) shared by the probes of one Worker."""

    def __init__(self, seconds: float, probe_seconds: float = FACT_PROBE_SECONDS):
        self.deadline = time.monotonic() + seconds
        self.probe_seconds = probe_seconds

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def probe_timeout(self) -> float:
        return min(self.probe_seconds, self.left())


def strip_credentials(url: str) -> str:
    """``url`` without credentials: the user and password of an ``http(s)``/``ftp`` URL (a token
    often sits there: ``https://x-access-token:T@github.com/o/r``) and its query; an ``ssh://``
    URL keeps its user and loses its password; scp-like ``git@host:path`` is kept (``git`` is
    not a credential). Pure."""
    from urllib.parse import urlsplit, urlunsplit

    url = url.strip()
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if parts.scheme in ("ssh", "git+ssh") and parts.username:
        host = f"{parts.username}@{host}"
    query = "" if parts.scheme.startswith(("http", "ftp", "git+http")) else parts.query
    return urlunsplit((parts.scheme, host, parts.path, query, ""))


def parse_direct_url(text: str) -> dict:
    """pip's ``direct_url.json`` of an installed distribution (PEP 610,
    https://packaging.python.org/en/latest/specifications/direct-url-data-structure/) as
    ``{"source": "vcs"|"dir"|"archive", "url", "vcs", "commit", "requestedRevision",
    "editable"}`` (keys without a value left out; the URL without credentials). Pure.

    Raises:
        ValueError: not JSON, or not an object with a ``url``.
    """
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise ValueError("direct_url.json has no url")
    out: dict = {"url": strip_credentials(data["url"])}
    vcs, dir_info, archive = data.get("vcs_info"), data.get("dir_info"), data.get("archive_info")
    if isinstance(vcs, dict):
        out.update(source="vcs", vcs=vcs.get("vcs"), commit=vcs.get("commit_id"),
                   requestedRevision=vcs.get("requested_revision"))
    elif isinstance(dir_info, dict):
        out.update(source="dir", editable=bool(dir_info.get("editable")))
    elif isinstance(archive, dict):
        out.update(source="archive", hash=archive.get("hash") or (archive.get("hashes") or None))
    return {k: v for k, v in out.items() if v is not None}


def parse_git_status(text: str) -> dict:
    """``git status --porcelain=v2 --branch --untracked-files=normal`` output as ``{"commit",
    "branch", "dirty", "changed", "untracked"}``: ``branch`` None when detached, ``commit`` None
    before the first commit; ``dirty`` when a tracked file differs from the commit (staged or
    not); ``changed``/``untracked``: how many entries of each. Pure (git-status(1), "Porcelain
    Format Version 2")."""
    commit = branch = None
    changed = untracked = 0
    for line in text.splitlines():
        if line.startswith("# branch.oid "):
            oid = line.split(" ", 2)[2].strip()
            commit = None if oid == "(initial)" else oid
        elif line.startswith("# branch.head "):
            head = line.split(" ", 2)[2].strip()
            branch = None if head == "(detached)" else head
        elif line.startswith("?"):
            untracked += 1
        elif line[:1] in ("1", "2", "u"):
            changed += 1
    return {"commit": commit, "branch": branch, "dirty": changed > 0, "changed": changed,
            "untracked": untracked}


def cap_bytes(data: bytes, cap: int) -> tuple[str, bool]:
    """``data`` as text (UTF-8, bad bytes replaced), at most ``cap`` bytes of it, and whether it
    was cut. Pure."""
    return data[:cap].decode("utf-8", errors="replace"), len(data) > cap


def probe(argv: list[str], budget: Budget, cwd: str | None = None,
          cap: int = 1 << 20) -> tuple[int, bytes, str, bool] | str:
    """Run ``argv`` within the budget: ``(exit code, first cap bytes of stdout, sha256 of all
    of stdout, cut)`` or why not (text: not installed, timed out, no budget left). stdout is
    hashed while it is read, so memory stays at ``cap`` whatever the command prints."""
    import hashlib

    timeout = budget.probe_timeout()
    if timeout <= 0:
        return "no time left in the facts budget"
    # GIT_DISCOVERY_ACROSS_FILESYSTEM: a local Worker's workingDir is an overlay mount, and git
    # stops looking for the checkout's .git at a file system boundary (git(1), ENVIRONMENT)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0",
           "LC_ALL": "C", "GIT_DISCOVERY_ACROSS_FILESYSTEM": "1"}
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}"
    digest, kept, size = hashlib.sha256(), bytearray(), 0

    def read() -> None:
        nonlocal size
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read(65536), b""):  # type: ignore[union-attr]
            digest.update(chunk)
            size += len(chunk)
            if len(kept) < cap:
                kept.extend(chunk[:cap - len(kept)])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(1.0)
        return f"{shlex.join(argv[:4])} took longer than {timeout:.1f} s"
    reader.join(max(0.1, budget.probe_timeout()))
    return code, bytes(kept), digest.hexdigest(), size > cap


def git_facts(path: str, budget: Budget, diff_cap: int = DIFF_CAP_BYTES) -> dict:
    """The git checkout ``path`` is in: ``{"path", "root", "commit", "branch", "remote", "dirty",
    "changed", "untracked", "diffSha256", "diffBytes", "diff", "diffCut"}`` (the diff is ``git
    diff HEAD --binary`` of tracked files: what ``git apply`` restores on the commit), or
    ``{"path", "absent": why}`` when ``path`` is no checkout, git is missing or time ran out."""
    # safe.directory: the Worker runs under its own uid, which does not own the user's checkout
    # (git refuses such a "dubious ownership" repository otherwise; git-config(1))
    git = ["git", "-c", "core.fsmonitor=false", "-c", "core.quotepath=off", "-c", "safe.directory=*"]
    top = probe(git + ["rev-parse", "--show-toplevel"], budget, cwd=path)
    if isinstance(top, str):
        return {"path": path, "absent": top}
    if top[0] != 0:
        return {"path": path, "absent": "not in a git checkout"}
    out: dict = {"path": path, "root": top[1].decode(errors="replace").strip()}
    status = probe(git + ["status", "--porcelain=v2", "--branch", "--untracked-files=normal"],
                    budget, cwd=path)
    if isinstance(status, str) or status[0] != 0:
        out["absent"] = status if isinstance(status, str) else "git status failed"
        return out
    out.update(parse_git_status(status[1].decode(errors="replace")))
    remote = probe(git + ["config", "--get", "remote.origin.url"], budget, cwd=path)
    out["remote"] = (strip_credentials(remote[1].decode(errors="replace"))
                     if not isinstance(remote, str) and remote[0] == 0 else None)
    if out.get("commit"):
        diff = probe(git + ["diff", "HEAD", "--binary", "--no-color", "--no-ext-diff"],
                      budget, cwd=path, cap=diff_cap)
        if isinstance(diff, str):
            out["diffAbsent"] = diff
        elif diff[0] == 0:
            text, _ = cap_bytes(diff[1], diff_cap)
            out.update(diffSha256=diff[2] if out["dirty"] else None, diff=text or None,
                       diffCut=diff[3])
    return out


def rlinf_code_facts(budget: Budget) -> dict:
    """Where the installed RLinf comes from: pip's ``direct_url.json`` when pip installed it
    from a URL, a directory or a VCS, and the git checkout its package directory is in (an
    editable install or a checkout on PYTHONPATH); ``{"absent": why}`` without RLinf."""
    import importlib.util

    out: dict = {}
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution("rlinf")
            out["version"] = dist.version
            raw = dist.read_text("direct_url.json")
            if raw:
                try:
                    out["directUrl"] = parse_direct_url(raw)
                except ValueError as exc:
                    out["directUrl"] = {"absent": f"unreadable direct_url.json: {exc}"}
            else:
                out["directUrl"] = {"absent": "installed from an index (no direct_url.json)"}
        except PackageNotFoundError:
            out["directUrl"] = {"absent": "no rlinf distribution installed"}
        spec = importlib.util.find_spec("rlinf")  # finds, does not import, a top-level package
    except Exception as exc:  # a broken environment is a fact too, not a failure
        return {**out, "absent": f"{type(exc).__name__}: {exc}"}
    if spec is None or not spec.origin and not spec.submodule_search_locations:
        return {**out, "absent": "rlinf is not importable"} if "version" not in out else out
    where = (list(spec.submodule_search_locations or []) or [os.path.dirname(spec.origin or "")])[0]
    out["packageDir"] = where
    if installed_copy(where):
        # a wheel's copy inside an environment: a checkout around it (a venv inside a project)
        # is not where RLinf came from
        out["git"] = {"path": where, "absent": "installed copy (site-packages), not a checkout"}
    else:
        out["git"] = git_facts(where, budget)
    return out


def installed_copy(path: str) -> bool:
    """Whether ``path`` lies in an environment's ``site-packages`` or ``dist-packages``. Pure."""
    return any(p in ("site-packages", "dist-packages") for p in path.split(os.sep))
