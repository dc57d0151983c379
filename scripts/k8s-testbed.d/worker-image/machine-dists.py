"""Copy Python distributions from this machine's environment into the Worker image (its layer 3).

Run by scripts/k8s-testbed.d/image.sh with the Python of RLark's environment (.venv): the
distributions are found where that interpreter finds them (``importlib.metadata``), with their
requirements (``Requires-Dist``, markers evaluated here: Linux, this machine's Python minor, which
must be the image's), as worker-image/from-machine.txt lists them.

    machine-dists.py key LIST
        one line per distribution of the closure: name, version and the sha256 of its RECORD
        (the RECORD holds every file's hash, so this names the content); for the image's key
    machine-dists.py copy LIST --python 3.11 --root ROOT --site SITE --files OUT
        hard-link (or copy) every file each distribution's RECORD lists under site-packages into
        ROOT/SITE, each checked against its RECORD hash first; a distribution the image already
        has at a version every requirer accepts is left as it is. OUT gets the new paths (relative
        to ROOT, directories before what they hold), for tar.

Exit status 2 with one line saying what is wrong and how to fix it: a distribution missing or at
another version here, a file that does not match its RECORD, a version the image has that a
requirement refuses, another Python minor.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


class Refused(Exception):
    """What stops the copy; the message names the distribution and the fix."""


@dataclass
class Wanted:
    dist: metadata.Distribution
    #: (who asked, the requirement as written): to say why it is here and to judge the image's own
    asked_by: list[tuple[str, Requirement]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return canonicalize_name(self.dist.metadata["Name"])


def read_list(path: Path) -> tuple[list[tuple[Requirement, bool]], set[str]]:
    """The requirements of LIST (with whether ``--no-deps``) and the names to ``keep``."""
    reqs: list[tuple[Requirement, bool]] = []
    keep: set[str] = set()
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] == "keep" and len(words) == 2:
            keep.add(canonicalize_name(words[1]))
        elif len(words) == 1 or (len(words) == 2 and words[1] == "--no-deps"):
            reqs.append((Requirement(words[0]), len(words) == 2))
        else:
            raise Refused(f"{path}:{n}: expected NAME[==VERSION] [--no-deps] or keep NAME, got {raw.strip()!r}")
    return reqs, keep


def closure(reqs: list[tuple[Requirement, bool]], keep: set[str]) -> dict[str, Wanted]:
    """Every distribution the requirements need here, by canonical name (``keep`` names left out)."""
    out: dict[str, Wanted] = {}
    queue: list[tuple[str, Requirement, bool]] = [("from-machine.txt", r, nd) for r, nd in reqs]
    while queue:
        who, req, no_deps = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in keep:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise Refused(f"{req.name} (asked by {who}: {req}) is not installed in {sys.prefix}: "
                          "run scripts/setup-env, or name RLark's environment with RLARK_TESTBED_PYTHON") from None
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            raise Refused(f"{who} asks {req}, but {sys.prefix} has {req.name} {dist.version}: run scripts/setup-env")
        seen = out.get(name)
        if seen is None:
            out[name] = seen = Wanted(dist)
        seen.asked_by.append((who, req))
        if no_deps or len(seen.asked_by) > 1:
            continue
        extras = [""] + sorted(req.extras)
        for text in dist.requires or []:
            dep = Requirement(text)
            if dep.marker is not None and not any(dep.marker.evaluate({"extra": e}) for e in extras):
                continue
            queue.append((f"{name} {dist.version}", dep, False))
    return out


def record_sha(dist: metadata.Distribution) -> str:
    text = dist.read_text("RECORD")
    if text is None:
        raise Refused(f"{dist.metadata['Name']} {dist.version} has no RECORD: its files cannot be checked")
    return hashlib.sha256(text.encode()).hexdigest()


def cmd_key(args) -> None:
    reqs, keep = read_list(args.list)
    for name, w in sorted(closure(reqs, keep).items()):
        print(name, w.dist.version, record_sha(w.dist))


def image_has(site: Path) -> dict[str, str]:
    """What the image's site-packages holds already: canonical name -> version."""
    return {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=[str(site)])}


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def cmd_copy(args) -> None:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if args.python != here:
        raise Refused(f"the image's python is {args.python}, this machine's ({sys.executable}) {here}: "
                      "its compiled modules would not load there; use a Python of the image's minor")
    reqs, keep = read_list(args.list)
    wanted = closure(reqs, keep)
    root = args.root
    site = root / args.site.lstrip("/")
    have = image_has(site)
    new_paths: list[str] = []
    made_dirs: set[Path] = set()
    copied = linked = 0
    for name, w in sorted(wanted.items()):
        if name in have:
            bad = [f"{who}: {req}" for who, req in w.asked_by
                   if req.specifier and not req.specifier.contains(have[name], prereleases=True)]
            if bad:
                raise Refused(f"the image has {name} {have[name]}, which {'; '.join(bad)} refuses: "
                              f"add `keep {name}` with the reason, or change requirements.txt")
            print(f"kept the image's {name} {have[name]} (this machine has {w.dist.version})", file=sys.stderr)
            continue
        files = w.dist.files or []
        if not files:
            raise Refused(f"{name} {w.dist.version} lists no files (no RECORD)")
        for entry in files:
            if entry.parts[0] == "..":  # console scripts (bin/): their #! names this machine's python
                continue
            src = Path(str(w.dist.locate_file(entry)))
            if not src.exists():
                if entry.hash is None:  # a .pyc the RECORD names but was never written
                    continue
                raise Refused(f"{src} ({name} {w.dist.version}) is missing: reinstall it (scripts/setup-env)")
            if entry.hash is not None:
                if entry.hash.mode != "sha256" or file_hash(src) != entry.hash.value:
                    raise Refused(f"{src} does not match the RECORD of {name} {w.dist.version}: reinstall it")
            dst = site / str(entry)
            for parent in reversed(dst.relative_to(root).parents[:-1]):
                p = root / parent
                if not p.exists():
                    p.mkdir(mode=0o755)
                    made_dirs.add(p)
                if p in made_dirs:
                    new_paths.append(str(parent))
            if dst.exists():
                raise Refused(f"{dst.relative_to(root)} of {name} is in the image already (another distribution's?)")
            try:
                os.link(src, dst)
                linked += 1
            except OSError:
                shutil.copy2(src, dst)
                copied += 1
            new_paths.append(str(dst.relative_to(root)))
        print(f"{name} {w.dist.version}", file=sys.stderr)
    # each directory once, before what it holds (tar --no-recursion keeps this order)
    seen: set[str] = set()
    ordered = [p for p in new_paths if not (p in seen or seen.add(p))]
    args.files.write_text("".join(f"./{p}\0" for p in ordered))
    print(f"{linked + copied} files ({linked} hard links, {copied} copies) from {sys.prefix}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("key")
    k.add_argument("list", type=Path)
    c = sub.add_parser("copy")
    c.add_argument("list", type=Path)
    c.add_argument("--python", required=True, help="the image's Python minor, e.g. 3.11")
    c.add_argument("--root", type=Path, required=True)
    c.add_argument("--site", required=True, help="site-packages inside ROOT, e.g. /opt/venv/lib/python3.11/site-packages")
    c.add_argument("--files", type=Path, required=True)
    args = ap.parse_args()
    try:
        (cmd_key if args.cmd == "key" else cmd_copy)(args)
    except Refused as e:
        print(f"machine-dists: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
