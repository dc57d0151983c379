"""No module of ``src/rlark`` over ~600 lines without the reason at its top (issue 20, item 1):
a ``Long because:`` line in its module docstring. A newcomer reads a module whole; one that
grew past that either splits by responsibility or says why it must not.

Pure: reads the source files, imports nothing of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "rlark"
#: lines above which a module needs its reason
LIMIT = 600

#: modules long without a reason that another branch is splitting; none today (the Runtime
#: seam branch of issue 20 landed). Each entry must still be long and without a reason: the test
#: names an entry to remove, so the list cannot outlive the work.
PENDING: set[str] = set()


def has_reason(path: Path) -> bool:
    """Whether the module docstring of ``path`` has a line starting ``Long because:``."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return any(line.strip().startswith("Long because:") for line in doc.splitlines())


def long_without_reason() -> set[str]:
    out = set()
    for path in SRC.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > LIMIT and not has_reason(path):
            out.add(path.relative_to(SRC).as_posix())
    return out


def test_every_long_module_says_why_at_its_top():
    found = long_without_reason()
    assert found - PENDING == set(), (
        f"over {LIMIT} lines without a 'Long because:' line in the module docstring: "
        f"{sorted(found - PENDING)}; split it by responsibility or give the real reason")


def test_the_pending_list_holds_only_modules_still_pending():
    stale = PENDING - long_without_reason()
    assert not stale, f"no longer long without a reason: remove {sorted(stale)} from PENDING"


def test_a_reason_is_read_from_the_docstring_only(tmp_path):
    with_reason = tmp_path / "a.py"
    with_reason.write_text('"""Things.\n\nLong because: one table per kind.\n"""\nx = 1\n')
    in_a_comment = tmp_path / "b.py"
    in_a_comment.write_text('"""Things."""\n# Long because: not in the docstring\nx = 1\n')
    assert has_reason(with_reason) and not has_reason(in_a_comment)
