"""The plugin that fails a session with a skip under ``CI=true`` (tests/ci_skips.py), run in a
pytest of its own (``pytester``) as any caller would have it: through a conftest that loads it,
in one process and with pytest-xdist workers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: every kind of skip the plugin counts, next to tests that pass
SKIPS = '''
import pytest


def test_passes():
    assert True


def test_skips_itself():
    pytest.skip("no widget on this machine")


@pytest.mark.skipif(True, reason="the widget is absent")
def test_skipif():
    pass


@pytest.fixture
def widget():
    pytest.skip("the widget fixture found none")


def test_skipped_by_its_fixture(widget):
    pass


@pytest.mark.xfail(reason="known to fail")
def test_xfail_that_fails():
    assert False


@pytest.mark.xfail(reason="thought to fail")
def test_xfail_that_passes():
    assert True


def test_xfail_called():
    pytest.xfail("gave up halfway")
'''

#: a module skipped whole while it is collected
IMPORTORSKIP = '''
import pytest

pytest.importorskip("rlark_no_such_module_anywhere")


def test_never_collected():
    pass
'''

#: each skip of SKIPS and IMPORTORSKIP, as the failure names it
NAMED = [
    "SKIPPED test_skips.py::test_skips_itself: no widget on this machine",
    "SKIPPED test_skips.py::test_skipif: the widget is absent",
    "SKIPPED test_skips.py::test_skipped_by_its_fixture: the widget fixture found none",
    "XFAILED test_skips.py::test_xfail_that_fails: known to fail",
    "XPASSED test_skips.py::test_xfail_that_passes: thought to fail",
    "XFAILED test_skips.py::test_xfail_called: gave up halfway",
    "SKIPPED test_importorskip.py: could not import 'rlark_no_such_module_anywhere': "
    "No module named 'rlark_no_such_module_anywhere'",
]


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch) -> pytest.Pytester:
    """A test directory whose conftest loads the plugin as tests/conftest.py does, importable
    from a subprocess too (xdist workers)."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    pytester.makeconftest('pytest_plugins = ["tests.ci_skips"]\n')
    pytester.makepyfile(test_skips=SKIPS, test_importorskip=IMPORTORSKIP)
    return pytester


#: an inner pytest without this suite's other plugins (pytest-playwright's soft assertions
#: cannot nest in one process) and without a cache directory
PLAIN = ("-p", "no:cacheprovider", "-p", "no:playwright")


def named(lines: list[str]) -> list[str]:
    """The lines of the plugin's summary that name a skipped test."""
    return [line for line in lines if line.startswith(("SKIPPED ", "XFAILED ", "XPASSED "))
            and ".py" in line.split(":", 1)[0]]


def test_under_ci_a_skip_of_any_kind_fails_the_session_and_is_named(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest(*PLAIN)
    result.assert_outcomes(passed=1, skipped=4, xfailed=2, xpassed=1)  # as pytest counts them
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.outlines
    assert any("CI=true: skips are failures" in line for line in out), result.stdout.str()
    assert sorted(named(out)) == sorted(NAMED), result.stdout.str()


def test_without_ci_a_skip_is_a_plain_skip(suite, monkeypatch):
    for value in (None, "false", "0", ""):
        if value is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", value)
        result = suite.runpytest(*PLAIN)
        result.assert_outcomes(passed=1, skipped=4, xfailed=2, xpassed=1)
        assert result.ret == pytest.ExitCode.OK, (value, result.stdout.str())
        assert not any("skips are failures" in line for line in result.outlines)


@pytest.mark.parametrize("value", ["1", "TRUE", "yes"])
def test_other_spellings_of_ci_count_too(suite, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    assert suite.runpytest(*PLAIN).ret == pytest.ExitCode.TESTS_FAILED


def test_under_ci_with_xdist_workers_the_controller_fails_the_session(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest_subprocess(*PLAIN, "-n", "2", timeout=120)
    result.assert_outcomes(passed=1, skipped=4, xfailed=2, xpassed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    assert sorted(named(result.outlines)) == sorted(NAMED), result.stdout.str()


def test_under_ci_a_session_that_only_skips_a_module_fails_not_merely_collects_nothing(
        pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest('pytest_plugins = ["tests.ci_skips"]\n')
    pytester.makepyfile(test_importorskip=IMPORTORSKIP)
    result = pytester.runpytest(*PLAIN)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # not 5 (no tests collected)
    assert named(result.outlines) == [NAMED[-1]], result.stdout.str()


def test_under_ci_a_session_without_skips_passes_and_its_failures_stay_failures(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest('pytest_plugins = ["tests.ci_skips"]\n')
    pytester.makepyfile(test_clean="def test_a():\n    assert True\n")
    clean = pytester.runpytest(*PLAIN)
    assert clean.ret == pytest.ExitCode.OK
    assert not any("skips are failures" in line for line in clean.outlines)
    pytester.makepyfile(test_usage="def test_b(:\n")  # a syntax error: an error, not a skip
    broken = pytester.runpytest(*PLAIN)
    assert broken.ret == pytest.ExitCode.INTERRUPTED  # the collection error's own status is kept
