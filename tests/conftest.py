"""Shared fixtures.

* ``rlark_home``: a fresh ``RLARK_HOME`` per test (SQLite database and logs live there).
* ``postgres_url``: a real PostgreSQL server for the session (see tests/pg.py); tests that use it
  are skipped only when no PostgreSQL binaries exist on the machine. ``.ci/run`` installs them.
* ``db_url``: parametrised over SQLite and PostgreSQL, each test gets an empty database.
* ``k8s_testbed`` (session), ``k8s_namespace``: a real Kubernetes control plane and a fresh
  namespace in it (tests/k8s_testbed.py).

Under ``CI=true`` any skip (skip, skipif, importorskip, xfail) fails the session and the summary
names each one with its reason (tests/ci_skips.py): the fixtures above skip only where a
developer's machine lacks a part, never in CI.

Parallel runs: ``scripts/test`` runs pytest-xdist (``-n 2 --dist loadgroup``); the hooks below
put the tests in groups (tests/xdist_groups.py): the tests that start Ray nodes run one at a time
(**a new module that starts Workers must mark at least one test** ``@pytest.mark.ray``), the
Kubernetes test-bed tests share one test bed, the rest is spread over both workers. Each worker
is a separate process with its own session fixtures (its own PostgreSQL server,
``RLARK_RAY_TMP`` directories...); the checks for what a Run left behind (tests/server.py) look
only at that Run's processes and ports, never at the whole host.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import xdist_groups
from tests.server import ray_tmp_dir, remove_ray_tmp_dirs

#: the Kubernetes test bed's fixtures (``k8s_testbed``, ``k8s_namespace``) for every module; under
#: ``CI=true`` a skip fails the session, whoever runs pytest (tests/ci_skips.py); ``pytester``
#: for the tests of that plugin (tests/test_ci_skips.py)
pytest_plugins = ["tests.k8s_testbed", "tests.ci_skips", "pytester"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def pytest_configure(config: pytest.Config) -> None:
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and config.getoption("dist", "no") == "loadgroup" and config.getoption("numprocesses", None)):
        config.pluginmanager.register(xdist_groups.GroupScheduling(), "rlark-xdist-groups")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's xdist group, and the groups in scheduling order (tests/xdist_groups.py).
    First: before ``-k``/``-m`` deselect, so a module's group never depends on which of its
    tests run."""
    xdist_groups.group_items(items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker: the groups for the controller's scheduler, before the worker reports
    its collection."""
    xdist_groups.write_groups(session.config, session.items)


@pytest.fixture
def rlark_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "rlark-home"
    home.mkdir()
    monkeypatch.setenv("RLARK_HOME", str(home))
    monkeypatch.delenv("RLARK_DATABASE_URL", raising=False)
    monkeypatch.setenv("RLARK_RAY_TMP", ray_tmp_dir())
    return home


@pytest.fixture(scope="session", autouse=True)
def _workers_may_read_the_tests_files(tmp_path_factory):
    """Workers of local Runs run under a uid of their own (a root server: runtimes/local/identity)
    and are given only what other users of the machine may read, or what lies under the roots the
    server's administrator allows (``--worker-read-path``). The tests' working directories lie
    under pytest's own temporary directory (mode 0700) and the Ray matrix's environments under
    ~/.cache with pyenv's interpreters: allowed here for every server and runtime the tests
    start, as an administrator would. Tests of the rule set their own."""
    roots = [str(tmp_path_factory.getbasetemp()), str(Path.home() / ".cache" / "rlark-test-envs"),
             str(Path.home() / ".pyenv")]
    before = os.environ.get("RLARK_WORKER_READ_PATHS")
    os.environ["RLARK_WORKER_READ_PATHS"] = ",".join(roots + ([before] if before else []))
    yield
    if before is None:
        os.environ.pop("RLARK_WORKER_READ_PATHS", None)
    else:
        os.environ["RLARK_WORKER_READ_PATHS"] = before


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
def app_store(rlark_home):
    """``(app, store)``: the API and console ``rlark server`` serves (``create_app``, no
    controller) on a fresh SQLite store in ``$RLARK_HOME`` (tests/db_templates.py), for tests
    that drive routes in-process."""
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests import db_templates

    url = f"sqlite:///{rlark_home / 'rlark.db'}"
    db_templates.fill(url)
    st = Store(url)
    yield create_app(JobService(st)), st
    st.dispose()


@pytest.fixture
def store(request, db_url):
    """A migrated Store on ``db_url`` (SQLite and PostgreSQL), copied from a database this
    process migrated once (tests/db_templates.py says why and how)."""
    from rlark.store import Store
    from tests import db_templates

    server = request.getfixturevalue("postgres_server") if db_url.startswith("postgresql") else None
    db_templates.fill(db_url, server)
    st = Store(db_url)
    yield st
    st.dispose()
