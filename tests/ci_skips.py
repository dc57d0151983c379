"""A pytest plugin: under ``CI=true`` a skipped test fails the session.

The suite skips what this machine cannot run (no PostgreSQL binaries, no Chromium, no Kubernetes
test bed, an optional package missing) so that a developer's partial machine still runs the
rest; in CI every one of those is a part the suite needs, and a skip there would hide a test
that never ran. So under ``CI=true`` (also ``1`` or ``yes``, any case) every skip counts:
``pytest.skip`` in a test or a fixture, ``skipif``, ``importorskip`` (also at a module's top,
which skips its collection), and ``xfail`` (marked or called, whether it then fails or passes:
either way its outcome does not count). The session's exit status becomes non-zero (1, tests
failed) and the summary names each skipped test with its reason.

Loaded by ``tests/conftest.py``, so a bare ``CI=true pytest tests/test_x.py`` gets it, with
pytest-xdist too: the controller sees every worker's reports (xdist forwards test reports and
the collection reports that did not pass) and decides there; workers only report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

#: values of $CI that mean "this is CI"
CI_VALUES = frozenset({"true", "1", "yes"})


def under_ci() -> bool:
    """Whether ``$CI`` says this run is CI (``true``, ``1`` or ``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


@dataclass(frozen=True)
class Skipped:
    """One test (or collected file) whose outcome did not count, and why."""

    nodeid: str
    kind: str  # "skipped", "xfailed" or "xpassed"
    reason: str


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return str(wasxfail) or "(no reason given)"
    longrepr = report.longrepr
    # a skip's longrepr is (path, line, "Skipped: reason"); xdist sends it back as a list
    if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text[len("Skipped: "):] if text.startswith("Skipped: ") else text
    return str(longrepr) if longrepr else "(no reason given)"


class SkipsFailUnderCI:
    """Collects the skips of a session; at its end fails the session when there were any."""

    def __init__(self) -> None:
        self.skipped: list[Skipped] = []

    def _note(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if hasattr(report, "wasxfail"):
            kind = "xpassed" if report.passed else "xfailed"
        elif report.skipped:
            kind = "skipped"
        else:
            return
        item = Skipped(report.nodeid or "(collection)", kind, _reason(report))
        if item not in self.skipped:
            self.skipped.append(item)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.skipped:
            return
        tr = terminalreporter
        tr.section("CI=true: skips are failures", sep="=", red=True, bold=True)
        tr.line(f"{len(self.skipped)} test(s) did not run to a counted outcome; under CI every "
                "part of the suite must run (give the machine what is missing, or remove the test):",
                red=True)
        for s in self.skipped:
            tr.line(f"{s.kind.upper()} {s.nodeid}: {s.reason}", red=True)


def pytest_configure(config: pytest.Config) -> None:
    # on an xdist worker the controller decides: it sees the same reports
    if under_ci() and not hasattr(config, "workerinput"):
        config.pluginmanager.register(SkipsFailUnderCI(), "rlark-ci-skips")
