"""The bootstrap travels as one file: a runnable zip archive of ``rlark/bootstrap``
(``rlark.bootstrap.archive``). Built the same way twice it is the same bytes (its sha256 names
its content); it runs with any Python that has nothing of RLark installed; it holds nothing of
RLark but the bootstrap; and it is written where a runtime ships it from without following
anything planted there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rlark.bootstrap import archive

#: a Python that is not the server's and has no RLark installed, as in a Worker's image
OTHER_PYTHON = "/usr/bin/python3"


def sources() -> dict[str, bytes]:
    return archive.package_sources()


# --- pure: the same sources, the same bytes ------------------------------------------------------


def test_the_same_sources_give_the_same_bytes_in_any_order():
    src = sources()
    first = archive.build(src)
    assert archive.build(dict(reversed(list(src.items())))) == first
    assert archive.build(dict(sorted(src.items()))).data == first.data
    assert len(first.sha256) == 64 and first.name == f"rlark-bootstrap-{first.sha256[:16]}.pyz"


def test_one_changed_byte_changes_the_hash():
    src = sources()
    changed = {**src, "worker.py": src["worker.py"] + b"\n"}
    assert archive.build(changed).sha256 != archive.build(src).sha256


def test_entries_carry_no_time_owner_or_order_of_the_machine_that_built_them():
    built = archive.build(sources())
    with zipfile.ZipFile(io.BytesIO(built.data)) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert {i.date_time for i in infos} == {archive.EPOCH}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}  # no zlib to run it
        assert zf.read("__main__.py") == sources()["__main__.py"]
        assert zf.read("rlark/__init__.py") == b""  # not the server's package
    assert "rlark/bootstrap/worker.py" in names and "rlark/bootstrap/keeper.py" in names
    assert "rlark/bootstrap/archive.py" not in names  # the builder stays on the server
    assert not [n for n in names if n.startswith("rlark/") and not n.startswith(
        ("rlark/bootstrap/", "rlark/__init__.py"))]


@pytest.mark.parametrize("bad", [{"x.txt": b""}, {"sub/x.py": b""}, {".hidden.py": b""}])
def test_only_module_files_of_the_package_go_in(bad):
    with pytest.raises(ValueError, match="module file name"):
        archive.build({**sources(), **bad})
    with pytest.raises(ValueError, match="__main__"):
        archive.build({"worker.py": b""})


# --- it runs alone -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    return Path(archive.install(str(tmp_path_factory.mktemp("pyz"))))


@pytest.mark.parametrize("python", [sys.executable, OTHER_PYTHON])
def test_it_runs_with_python_alone(pyz, python):
    done = subprocess.run([python, "-I", "-S", str(pyz), "--help"], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "keeper" in done.stdout and "worker" in done.stdout
    wrong = subprocess.run([python, "-I", "-S", str(pyz), "run"], capture_output=True, text=True,
                           timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert wrong.returncode == 2 and "usage:" in wrong.stderr


#: imports every module of the archive (argv[1]) and prints where each came from, and whether
#: anything of RLark outside the bootstrap can be imported
IMPORT_ALL = r"""
import importlib, json, sys, zipfile
pyz = sys.argv[1]
sys.path.insert(0, pyz)
names = [n[:-3].replace("/", ".") for n in zipfile.ZipFile(pyz).namelist()
         if n.startswith("rlark/bootstrap/") and n.endswith(".py")]
where = {n: importlib.import_module(n.removesuffix(".__init__")).__file__ for n in names}
try:
    import rlark.spec
    other = rlark.spec.__file__
except ImportError as exc:
    other = None
print(json.dumps({"where": where, "other": other}))
"""


def test_every_module_imports_from_the_archive_and_nothing_else_of_rlark_is_there(pyz, tmp_path):
    """With a Python that has no RLark (the system's, isolated: no site-packages, no
    PYTHONPATH), every module of the archive imports, each from the archive."""
    done = subprocess.run([OTHER_PYTHON, "-I", "-S", "-c", IMPORT_ALL, str(pyz)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert len(seen["where"]) >= 15
    assert all(path.startswith(str(pyz) + "/rlark/bootstrap/") for path in seen["where"].values())
    assert seen["other"] is None


def test_the_worker_runs_from_the_archive_and_fails_closed_without_its_settings(pyz, tmp_path):
    """``worker`` without a keeper and without RLINF_NODE_RANK: one ``failed`` lifecycle line
    (BadConfig, naming the variable) and the bootstrap's own exit status."""
    from rlark.bootstrap.config import EXIT_BAD_CONFIG
    from rlark.controller.lifecycle import parse_lifecycle

    done = subprocess.run([OTHER_PYTHON, str(pyz), "worker"], capture_output=True, timeout=60,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "RLARK_NUM_NODES": "1"})
    assert done.returncode == EXIT_BAD_CONFIG, done.stderr
    events, _ = parse_lifecycle(done.stdout, 0)
    assert [(e["event"], e["reason"]) for e in events] == [("failed", "BadConfig")]
    assert "RLINF_NODE_RANK" in events[0]["message"]


# --- with its bytecode (the local runtime's copy) ------------------------------------------------


#: imports every module of the archive (argv[1]) with compile() refused for its files, so only
#: what comes from bytecode imports; prints the modules that had to be compiled
IMPORT_UNCOMPILED = r"""
import builtins, importlib, json, sys, zipfile
pyz = sys.argv[1]
sys.path.insert(0, pyz)
compiled, real = [], builtins.compile
def compile(source, path, *args, **kwargs):
    if str(path).startswith(pyz):
        compiled.append(str(path)[len(pyz) + 1:])
    return real(source, path, *args, **kwargs)
builtins.compile = compile
names = [n[:-3].replace("/", ".") for n in zipfile.ZipFile(pyz).namelist()
         if n.startswith("rlark/bootstrap/") and n.endswith(".py")]
mods = {n: importlib.import_module(n.removesuffix(".__init__")) for n in names}
print(json.dumps({"compiled": compiled,
                  "stale": getattr(mods["rlark.bootstrap.report"], "STALE_CHECK", None)}))
"""


def _import_uncompiled(pyz: Path, python: str = sys.executable) -> dict:
    done = subprocess.run([python, "-I", "-S", "-c", IMPORT_UNCOMPILED, str(pyz)],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _rewritten(src: Path, dst: Path, change: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, change.get(info.filename, zin.read(info.filename)))
    return dst


def test_the_local_archive_runs_its_bytecode_and_never_stale_or_foreign_bytecode(tmp_path):
    """The local runtime's copy holds each module's bytecode, checked against its source's hash:
    this interpreter compiles nothing of it (Python writes no bytecode for a zip's modules, so
    without it every keeper and bootstrap compiles them again); bytecode of another source, or
    of another Python version (its magic number), is passed over and the source compiled."""
    built = archive.local_archive()
    assert archive.local_archive() is built and built.data != archive.bootstrap_archive().data
    with zipfile.ZipFile(io.BytesIO(built.data)) as zf:
        names = zf.namelist()
        pyc = zf.read("rlark/bootstrap/report.pyc")
    py = [n for n in names if n.endswith(".py")]
    assert sorted(n for n in names if n.endswith(".pyc")) == sorted(n + "c" for n in py)
    assert archive.build(sources(), compiled=True) == built  # deterministic for one Python
    pyz = Path(archive.install(str(tmp_path), built))
    assert _import_uncompiled(pyz) == {"compiled": [], "stale": None}
    assert _import_uncompiled(pyz, OTHER_PYTHON)["stale"] is None  # runs there too
    stale = _rewritten(pyz, tmp_path / "stale.pyz", {"rlark/bootstrap/report.py": sources()[
        "report.py"] + b"\nSTALE_CHECK = 1\n"})
    got = _import_uncompiled(stale)
    assert set(got["compiled"]) == {"rlark/bootstrap/report.py"} and got["stale"] == 1
    foreign = _rewritten(pyz, tmp_path / "foreign.pyz",
                         {"rlark/bootstrap/report.pyc": b"\0\0\r\n" + pyc[4:]})
    assert set(_import_uncompiled(foreign)["compiled"]) == {"rlark/bootstrap/report.py"}


# --- installing it ---------------------------------------------------------------------------------


def test_install_writes_it_read_only_under_its_hash_and_keeps_an_equal_copy(tmp_path):
    built = archive.build(sources())
    path = Path(archive.install(str(tmp_path), built))
    assert path == tmp_path / built.name and path.read_bytes() == built.data
    assert path.stat().st_mode & 0o777 == 0o444
    inode = path.stat().st_ino
    assert archive.install(str(tmp_path), built) == str(path)
    assert path.stat().st_ino == inode  # kept, not written again
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no temporary file left


def test_install_replaces_a_damaged_copy(tmp_path):
    built = archive.build(sources())
    (tmp_path / built.name).write_bytes(built.data[:100])
    path = Path(archive.install(str(tmp_path), built))
    assert path.read_bytes() == built.data


def test_install_never_follows_what_holds_its_name(tmp_path):
    """A link (or a FIFO) under the archive's name is refused, and what it points at untouched:
    a directory a Worker could once write must not lead the server's write elsewhere."""
    built = archive.build(sources())
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / built.name).symlink_to(victim)
    with pytest.raises(OSError):
        archive.install(str(tmp_path), built)
    assert victim.read_text() == "keep me"
    (tmp_path / built.name).unlink()
    os.mkfifo(tmp_path / built.name)
    with pytest.raises(OSError, match="not a regular file"):
        archive.install(str(tmp_path), built)


# --- what ships it ----------------------------------------------------------------------------------


def test_the_runs_config_map_stays_within_kubernetes_limit():
    """A ConfigMap holds at most 1 MiB (its data and binaryData together); the archive travels
    in one, base64-encoded, so it must stay well under."""
    from rlark.runtimes.kubernetes import render
    from tests.k8s_jobs import job

    cm = render.render_config_map(job(3), "r1", render.RenderOptions())
    size = len(json.dumps(cm))
    assert size < render.CONFIG_MAP_MAX_BYTES // 2, size
