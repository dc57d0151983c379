"""The bootstrap as one file: a runnable zip archive of this package (the zipapp format, PEP 441:
a zip with ``__main__.py`` at its root; ``python rlark-bootstrap.pyz worker`` runs it), so it
travels into any image as a single file, as ``worker.py`` alone once did.

* :func:`build` is pure and deterministic: the same sources give the same bytes (entries sorted,
  every timestamp 1980-01-01, fixed permissions, stored uncompressed so no zlib version changes
  them and no zlib is needed to run it), so the archive's sha256 names its content and can be
  recorded and compared. ``zipapp.create_archive`` is not used: it stamps each entry with its
  file's modification time.
* :func:`package_sources` reads the package's modules (this builder is not among them);
  :func:`bootstrap_archive` builds the archive once per process; :func:`install` writes it
  where a runtime ships it from, under a name that carries its hash.
* :func:`local_archive` is the same archive with each module's bytecode beside it, for Workers
  on this machine (the local runtime), which mostly run this interpreter: Python never writes
  bytecode for what it imports from a zip, so without it every keeper and bootstrap compiles
  its modules again (about 45 ms of CPU each, 16 processes for 8 Workers, while their Ray nodes
  start). The bytecode is checked against its source's hash at import (PEP 552); another Python
  version refuses it by its magic number and compiles the source, as before.

Layout inside: ``__main__.py`` (this package's ``__main__.py``), ``rlark/__init__.py`` (empty)
and ``rlark/bootstrap/*.py``, so the modules keep their import names and nothing else of RLark
is importable from it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import marshal
import os
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

#: where the package's modules sit inside the archive
PACKAGE_DIR = "rlark/bootstrap"
#: zip's earliest representable time (MS-DOS dates start in 1980): every entry's timestamp
EPOCH = (1980, 1, 1, 0, 0, 0)
#: the archive's file name: ``rlark-bootstrap-<first 16 hex digits of its sha256>.pyz``
NAME_PREFIX, NAME_SUFFIX = "rlark-bootstrap-", ".pyz"
#: modules of this package that stay out of the archive (the builder runs on the server only)
NOT_SHIPPED = frozenset({"archive.py"})


@dataclass(frozen=True)
class Archive:
    """One built archive: its bytes and their sha256 (hex)."""

    data: bytes
    sha256: str

    @property
    def name(self) -> str:
        """The file name it is installed under (:data:`NAME_PREFIX` + hash + ``.pyz``)."""
        return f"{NAME_PREFIX}{self.sha256[:16]}{NAME_SUFFIX}"


def archive_entries(sources: Mapping[str, bytes]) -> dict[str, bytes]:
    """The archive's entries (path inside it -> bytes) for the package's modules ``sources``
    (file name -> bytes, e.g. ``{"worker.py": b"..."}``), sorted by path. Pure.

    Raises:
        ValueError: ``__main__.py`` is missing, or a name is not a plain ``*.py`` file name.
    """
    if "__main__.py" not in sources:
        raise ValueError("the bootstrap's sources have no __main__.py")
    entries = {"__main__.py": sources["__main__.py"], "rlark/__init__.py": b""}
    for name, data in sources.items():
        if "/" in name or not name.endswith(".py") or name.startswith("."):
            raise ValueError(f"{name!r} is not a module file name of the bootstrap package")
        entries[f"{PACKAGE_DIR}/{name}"] = data
    return dict(sorted(entries.items()))


def checked_pyc(source: bytes, path: str) -> bytes:
    """``source``'s bytecode as this interpreter compiles it, in a ``.pyc`` that its importer
    checks against the source's hash (PEP 552: magic number, flags ``0b11``, the source's
    hash, the marshalled code): a changed source is compiled again, never run stale. ``path``:
    the name its code objects carry. Deterministic for one Python version.

    Raises:
        SyntaxError: ``source`` is not Python.
    """
    code = compile(source, path, "exec", dont_inherit=True)
    return (importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")
            + importlib.util.source_hash(source) + marshal.dumps(code))


def build(sources: Mapping[str, bytes], compiled: bool = False) -> Archive:
    """The archive of the package's modules ``sources`` (file name -> bytes; see
    :func:`archive_entries`). Pure and deterministic: equal ``sources`` give equal bytes,
    whatever their order and whenever it runs. ``compiled``: with a ``.pyc`` beside each
    module (:func:`checked_pyc`), then deterministic for one Python version.

    Raises:
        ValueError: as :func:`archive_entries`.
        SyntaxError: ``compiled`` and a module is not Python.
    """
    entries = archive_entries(sources)
    if compiled:
        entries = dict(sorted({**entries, **{path + "c": checked_pyc(data, path)
                                             for path, data in entries.items()
                                             if path.endswith(".py")}}.items()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for path, data in entries.items():
            info = zipfile.ZipInfo(path, date_time=EPOCH)
            info.create_system = 3  # Unix, so external_attr holds the mode bits
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            info.compress_type = zipfile.ZIP_STORED
            zf.writestr(info, data)
    data = buf.getvalue()
    return Archive(data=data, sha256=hashlib.sha256(data).hexdigest())


def package_sources(package_dir: Path | None = None) -> dict[str, bytes]:
    """The modules of the bootstrap package (``*.py`` in ``package_dir``, default this one's
    directory, minus :data:`NOT_SHIPPED`) as file name -> bytes."""
    where = package_dir or Path(__file__).resolve().parent
    return {p.name: p.read_bytes() for p in sorted(where.glob("*.py"))
            if p.name not in NOT_SHIPPED}


@lru_cache(maxsize=1)
def bootstrap_archive() -> Archive:
    """This installation's archive (built from :func:`package_sources` once per process)."""
    return build(package_sources())


@lru_cache(maxsize=1)
def local_archive() -> Archive:
    """This installation's archive with its modules' bytecode for this interpreter (built once
    per process): what the local runtime's keepers and Workers run."""
    return build(package_sources(), compiled=True)


def install(directory: str, archive: Archive | None = None) -> str:
    """Write ``archive`` (default :func:`bootstrap_archive`) into ``directory`` (which must
    exist) as ``<directory>/<archive.name>``, mode 0444, and return that path; a file of that
    name already holding exactly these bytes is kept. The file appears whole or not at all (a
    temporary file renamed into place), so concurrent installers do not see half of one.

    Raises:
        OSError: ``directory`` cannot be written, or a link or something other than a regular
            file holds the name (it is never followed or replaced).
    """
    archive = archive or bootstrap_archive()
    path = os.path.join(directory, archive.name)
    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the server
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        pass
    else:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise OSError(f"{path} is not a regular file; remove it")
            if f.read(len(archive.data) + 1) == archive.data:
                return path
    tmp = tempfile.NamedTemporaryFile(dir=directory, prefix=".rlark-bootstrap-", delete=False)
    try:
        with tmp:
            tmp.write(archive.data)
            os.fchmod(tmp.fileno(), 0o444)
        os.replace(tmp.name, path)
    except BaseException:
        try:
            os.unlink(tmp.name)
        except OSError:
            pass
        raise
    return path

