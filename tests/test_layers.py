"""The shape of src/rlark holds: layers point down only, the Runtime protocol is the one seam,
and the top of the package stays small (a long module says why: tests/test_module_size.py).

The import contracts live in pyproject.toml (``[tool.importlinter]``) and are checked here with
import-linter, on the real package and on a copy with one import pointing up (so the contracts
are shown to catch what they are for). The runtime-name check is an AST walk of every module
outside ``runtimes/``: a comparison of anything with a runtime's name (``runtime == "local"``,
``.name != "kubernetes"``, ``x in ("local", "kubernetes")``) or a ``match`` on one is a branch
on the runtime's name, which belongs behind the protocol (:mod:`rlark.runtimes.base`).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import rlark
from rlark.runtimes import RUNTIMES

PACKAGE = Path(rlark.__file__).resolve().parent
ROOT = PACKAGE.parents[1]
PYPROJECT = ROOT / "pyproject.toml"

#: modules outside runtimes/ allowed to compare with a runtime's name, each with its reason
#: (path relative to src/rlark -> why); empty: none is
ALLOWED_NAME_BRANCHES: dict[str, str] = {}

#: the most modules the top of src/rlark holds besides ``__init__.py`` (issue 20: the vocabulary,
#: settings and the server's entry)
MAX_TOP_MODULES = 12


# --- the import contracts ------------------------------------------------------------------------


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess:
    """import-linter on the package found under ``src`` with pyproject.toml's contracts (no
    cache: a cached graph of another tree would answer)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(PYPROJECT)!r}, no_cache=True))")
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_layers_point_down_only():
    out = lint_imports(PACKAGE.parent, ROOT)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert "BROKEN" not in out.stdout and "KEPT" in out.stdout


def test_an_import_pointing_up_breaks_the_contracts(tmp_path):
    """The same contracts on a copy of the package where one service imports the controller and
    the local runtime imports a service: both are named."""
    copy = tmp_path / "src"
    shutil.copytree(PACKAGE, copy / "rlark", ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "rlark" / "services" / "audit.py", "a") as f:
        f.write("\nfrom rlark.controller import loop as _up  # noqa: E402\n")
    with open(copy / "rlark" / "runtimes" / "local" / "ports.py", "a") as f:
        f.write("\nfrom rlark.services import quotas as _up  # noqa: E402\n")
    out = lint_imports(copy, tmp_path)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "rlark.services.audit -> rlark.controller.loop" in out.stdout, out.stdout[-6000:]
    assert "rlark.runtimes.local.ports -> rlark.services.quotas" in out.stdout, out.stdout[-6000:]


def ignore_entries_without_reason(text: str) -> list[str]:
    """The entries of every ``ignore_imports`` list of a pyproject.toml text with no comment
    saying why: a comment on the lines just above the entry (or above the list, for a list
    written on one line) or after it on its line."""
    lines = text.splitlines()
    bad: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith("ignore_imports"):
            i += 1
            continue
        if "]" in line:  # the whole list on one line: the comment goes above it
            above = lines[i - 1].lstrip() if i else ""
            for entry in re.findall(r'"([^"]+)"', line.split("#")[0]):
                if not above.startswith("#") and "#" not in line:
                    bad.append(entry)
            i += 1
            continue
        commented = False
        i += 1
        while i < len(lines) and not lines[i].lstrip().startswith("]"):
            item = lines[i].strip()
            if item.startswith("#"):
                commented = True
            elif item:
                entry = re.findall(r'"([^"]+)"', item.split("#")[0])
                if not commented and "#" not in item:
                    bad += entry
                commented = False
            i += 1
    return bad


def test_every_ignored_import_says_why():
    assert ignore_entries_without_reason(PYPROJECT.read_text()) == []
    assert ignore_entries_without_reason('a = 1\nignore_imports = [\n    "x -> y",\n]\n') == ["x -> y"]
    assert ignore_entries_without_reason('ignore_imports = ["x -> y"]\n') == ["x -> y"]


def test_the_layers_name_every_part_of_the_package():
    """Every module and package of src/rlark is in a layer (``exhaustive``), so a new one cannot
    slip past the contract."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in config if c["id"] == "layers")
    assert layers.get("exhaustive") is True
    named = {part.strip() for layer in layers["layers"] for part in re.split(r"[:|]", layer)}
    parts = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    assert parts == named


# --- no branch on a runtime's name outside runtimes/ ---------------------------------------------


def _names_in(node: ast.AST) -> set[str]:
    """The runtime names a node is or lists (a string constant, or a tuple, list or set of
    them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RUNTIMES:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names_in(e) for e in node.elts)) if node.elts else set()
    return set()


def name_branches(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every comparison with a runtime's name, or ``match`` case on one, in
    Python ``source``."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                # ``x in ("local", ...)`` tests the name; ``"local" in role`` tests a key of
                # the spec (a role's ``local`` section, a mount's ``kubernetes`` one)
                named = _names_in(right) if isinstance(op, (ast.In, ast.NotIn)) \
                    else _names_in(left) | _names_in(right)
                if named:
                    out.append((node.lineno, ast.unparse(node)))
                    break
                left = right
        elif isinstance(node, ast.MatchValue) and _names_in(node.value):
            out.append((node.value.lineno, f"case {ast.unparse(node.value)}"))
    return out


def runtime_name_branches(package: Path) -> dict[str, list[tuple[int, str]]]:
    """Module (relative to ``package``) -> its runtime-name branches, for every module outside
    ``runtimes/``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("runtimes/"):
            continue
        hits = name_branches(path.read_text())
        if hits:
            found[rel] = hits
    return found


def test_the_checker_sees_each_form_of_a_runtime_name_branch():
    source = '''
if run.runtime == "local": pass
if self.runtime.name != "kubernetes": pass
ok = runtime in ("local", "kubernetes")
match runtime:
    case "kubernetes": pass
if role.get("local") is not None and k == "python": pass
if "kubernetes" not in mount and "local" in role: pass
if "local" != runtime: pass
'''
    assert sorted(line for line, _ in name_branches(source)) == [2, 3, 4, 6, 9]


def test_nothing_outside_runtimes_branches_on_a_runtime_name():
    found = runtime_name_branches(PACKAGE)
    unexplained = {rel: hits for rel, hits in found.items() if rel not in ALLOWED_NAME_BRANCHES}
    assert unexplained == {}
    assert set(ALLOWED_NAME_BRANCHES) <= set(found), "an allow-list entry no longer needed"


# --- the package's shape --------------------------------------------------------------------------


def test_the_top_of_the_package_stays_small():
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_MODULES, top
