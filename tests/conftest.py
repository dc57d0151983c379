"""Shared fixtures.

* ``rlark_home``: a fresh ``RLARK_HOME`` per test (SQLite database and logs live there).
* ``postgres_url``: a real PostgreSQL server for the session (see tests/pg.py); tests that use it
  are skipped only when no PostgreSQL binaries exist on the machine. ``.ci/run`` installs them.
* ``db_url``: parametrised over SQLite and PostgreSQL, each test gets an empty database.
* ``k8s_testbed`` (session), ``k8s_namespace``: a real Kubernetes control plane and a fresh
  namespace in it (tests/k8s_testbed.py).

Parallel runs (``scripts/test`` runs pytest-xdist: ``-n 2 --dist loadgroup``):
:func:`pytest_collection_modifyitems` puts every test into an ``xdist_group``, so that

* every module with a test marked ``@pytest.mark.ray`` (it starts real Workers, i.e. Ray nodes,
  usually through a real ``rlark server``) runs in the one ``ray`` group: one Ray test at a time
  on the whole machine, as they were written for (their deadlines assume the other worker is
  busy with at most one CPU's worth of other tests, never with more Ray nodes). **A new module
  that starts Workers must mark at least one of its tests** ``@pytest.mark.ray``;
* every module that uses the Kubernetes test bed (``k8s_testbed``) runs in the one ``k8s`` group,
  so the session starts one test bed, not one per worker;
* a module with module- or session-scoped fixtures of its own is its own group (set up once);
* every other test is a unit of its own, spread over the workers as they free up.

The two serial groups run first (the longest first), then the modules' own groups, then the
rest (``--no-loadscope-reorder`` keeps this order); each xdist worker is a separate process
with its own session fixtures (its own PostgreSQL server, ``RLARK_RAY_TMP`` directories...).
Checks for what a Run left behind (tests/server.py) look only at that Run's processes and
ports, never at the whole host, so the other worker's tests never disturb them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.server import ray_tmp_dir, remove_ray_tmp_dirs

#: the Kubernetes test bed's fixtures (``k8s_testbed``, ``k8s_namespace``) for every module
pytest_plugins = ["tests.k8s_testbed"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


#: xdist groups in the order they are handed out (first: the longest serial work)
SERIAL_GROUPS = ("ray", "k8s")


def _module_group(items: list[pytest.Item]) -> str | None:
    """The xdist group of a module's tests (see the module docstring)."""
    if any(item.get_closest_marker("ray") for item in items):
        return "ray"
    if any("k8s_testbed" in item.fixturenames for item in items):
        return "k8s"
    module = items[0].module.__name__ if hasattr(items[0], "module") else None
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info else ()):
            fixturedef = defs[-1]
            if fixturedef.scope != "function" and getattr(fixturedef.func, "__module__", None) == module:
                return items[0].nodeid.split("::", 1)[0]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for pytest-xdist (module docstring) and run the serial groups first;
    the order within a module is kept, and without xdist only that order changes."""
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    rank = {}
    for module_items in by_module.values():
        group = _module_group(module_items)
        for item in module_items:
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
            rank[item.nodeid] = (SERIAL_GROUPS.index(group) if group in SERIAL_GROUPS
                                 else len(SERIAL_GROUPS) + (group is None))
    items.sort(key=lambda item: rank[item.nodeid])  # stable: modules stay in one piece


@pytest.fixture
def rlark_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "rlark-home"
    home.mkdir()
    monkeypatch.setenv("RLARK_HOME", str(home))
    monkeypatch.delenv("RLARK_DATABASE_URL", raising=False)
    monkeypatch.setenv("RLARK_RAY_TMP", ray_tmp_dir())
    return home


@pytest.fixture(scope="session", autouse=True)
def _ray_tmp_dirs_are_removed():
    yield
    remove_ray_tmp_dirs()


@pytest.fixture(scope="session")
def postgres_server():
    from tests.pg import PostgresServer

    server = PostgresServer.start_or_skip()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """URL of a new, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, rlark_home) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{rlark_home / 'rlark.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(db_url):
    """A migrated Store on ``db_url`` (SQLite and PostgreSQL)."""
    from rlark.store import Store

    st = Store(db_url)
    yield st
    st.dispose()
