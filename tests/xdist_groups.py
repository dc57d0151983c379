"""How the suite is split over pytest-xdist workers (``scripts/test``: ``-n 2 --dist loadgroup``).

:func:`group_items` (tests/conftest.py's ``pytest_collection_modifyitems``) gives every test its
``xdist_group`` mark:

* ``k8s``: every module that uses a Kubernetes test bed (``k8s_testbed``; ``k8s_real_node``,
  whose Pods really run; ``k8s_kueue_testbed``, with Kueue), one test at a time on one worker,
  so the session starts each test bed once, not once per worker, and stops it after the last
  module that uses it (tests/k8s_testbed.py, ``release_points``). The modules stay in the
  order of their names. (Ordered by test bed, tests/test_lifecycle_trust.py failed every time
  after the kwok modules, the kwok Nodes left with no ``status.addresses``, "no preferred
  addresses found" for every Pod log; so did CI on 2026-12-07 when the real node's modules
  failed at once. The cause was the test bed's: kwok's node-initialize Stage, run again for a
  Node that had been NotReady, e.g. through tests/test_k8s_testbed_smoke.py's API server
  restarts, emptied the address list of a Node that had an InternalIP and no Hostname; the
  Nodes now have both, scripts/k8s-testbed ``add_node``.) It runs beside the ``ray`` group (on the other worker): the two are
  the longest groups, and kept together on one worker they were the whole suite's critical path
  (about 25 minutes against 15 for the rest). The real node's modules start Ray nodes too (in
  Pods), so they are also marked ``ray``; they still go here: in the ``ray`` group their
  16 minutes made it the critical path (53 of the suite's 55 minutes, 2026-12-02). Their Pods
  share the cores by their requests (``cpu.shares``; the real node sets no CFS quota,
  docs/kubernetes.md "CPU: requests, not quotas"), so they take what the ``ray`` group's
  worker leaves idle rather than waiting on a throttle;
* ``ray``: every other module with a test marked ``@pytest.mark.ray`` (it starts real Workers,
  i.e. Ray nodes, usually through a real ``rlark server``), one test at a time on one worker:
  their deadlines assume no other test's local Ray nodes start beside theirs. **A new module
  that starts Workers must mark at least one of its tests** ``@pytest.mark.ray`` (the whole
  module then joins the group);
* ``rlinf-corpus``: the modules that plan the RLinf corpus (:func:`tests.rlinf_corpus.plan_corpus`,
  about 80 s, cached for the process), so it is planned once, not once per worker;
* the module's own node id: a module with module- or session-scoped fixtures of its own (so they
  are set up once, not once per worker);
* none: every other test is a unit of its own, spread over the workers as they free up.

The shared groups come first (the longest first), then the modules' own groups, then the
rest; ``--no-loadscope-reorder`` keeps that order. The order within a module never changes.

pytest-xdist 3.8 passes a test's group from the worker to the scheduler by appending
``@group`` to its node id, which pytest 9.2 no longer lets a plugin change (pytest-xdist issue
1386: the marks are silently ignored). So :class:`GroupScheduling` does the same scheduling
(xdist's ``LoadScopeScheduling``, one scope per group) from a table the workers write while
collecting (:func:`write_groups`): ``node id -> group``, in a directory the controller names in
``$RLARK_XDIST_GROUPS`` before it starts them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

#: groups shared by several modules, in the order they are handed out (first: the longest)
SERIAL_GROUPS = ("ray", "k8s", "rlinf-corpus")
ENV = "RLARK_XDIST_GROUPS"


def module_group(items: list[pytest.Item]) -> str | None:
    """The xdist group of one module's tests (module docstring)."""
    # imported here: tests.k8s_testbed is a plugin (tests/conftest.py), imported by pytest after
    # this module, so that its asserts are rewritten
    from tests.k8s_testbed import FIXTURE_UP_ARGS

    if any(FIXTURE_UP_ARGS.keys() & set(item.fixturenames) for item in items):
        return "k8s"
    if any(item.get_closest_marker("ray") for item in items):
        return "ray"
    module = getattr(items[0], "module", None)
    from tests import rlinf_corpus

    if module is not None and getattr(module, "plan_corpus", None) is rlinf_corpus.plan_corpus:
        return "rlinf-corpus"
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        for defs in (info.name2fixturedefs.values() if info else ()):
            fixturedef = defs[-1]
            if (fixturedef.scope != "function" and module is not None
                    and getattr(fixturedef.func, "__module__", None) == module.__name__):
                return items[0].nodeid.split("::", 1)[0]
    return None


def group_items(items: list[pytest.Item]) -> None:
    """Mark every test with its group and put the groups in scheduling order (stable sort:
    each module stays in one piece, in its own order)."""
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    rank: dict[str, int] = {}
    for module_items in by_module.values():
        group = module_group(module_items)
        for item in module_items:
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
            rank[item.nodeid] = (SERIAL_GROUPS.index(group) if group in SERIAL_GROUPS
                                 else len(SERIAL_GROUPS) + (group is None))
    items.sort(key=lambda item: rank[item.nodeid])


def item_group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker of a ``--dist loadgroup`` run: the table :class:`GroupScheduling`
    reads (``node id -> group`` of the grouped tests)."""
    directory = os.environ.get(ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not directory or not worker or not hasattr(config, "workerinput"):
        return
    table = {item.nodeid: group for item in items if (group := item_group(item))}
    path = Path(directory) / f"{worker}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table))
    tmp.replace(path)


class GroupScheduling:
    """The controller's side (registered by tests/conftest.py when xdist runs with
    ``--dist loadgroup``): names the directory the workers write their tables to, and makes the
    scheduler that reads them."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="rlark-xdist-groups-")
        os.environ[ENV] = self.dir  # the workers, started after this, inherit it

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        from xdist.scheduler import LoadScopeScheduling

        directory = Path(self.dir)

        class Scheduling(LoadScopeScheduling):
            groups: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self.groups is None:
                    tables = sorted(directory.glob("*.json"))
                    if not tables:
                        raise RuntimeError(f"no worker wrote its xdist groups to {directory}")
                    self.groups = json.loads(tables[0].read_text())
                return self.groups.get(nodeid, nodeid)

        return Scheduling(config, log)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)
