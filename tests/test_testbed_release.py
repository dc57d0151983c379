"""The test beds stopped after their last user (tests/k8s_testbed.py ``release_points``) in the
``k8s`` group's order (tests/xdist_groups.py), on items pytest really collects (``pytester``) from
modules whose tests ask for fixtures of the test beds' names."""

from __future__ import annotations

import pytest

from tests.k8s_testbed import release_points
from tests.xdist_groups import group_items, item_group

CONFTEST = '''
import pytest

@pytest.fixture(scope="session")
def k8s_testbed():
    return "kwok"

@pytest.fixture(scope="session")
def k8s_real_node():
    return "real"

@pytest.fixture(scope="session")
def k8s_kueue_testbed():
    return "kueue"
'''


def test_each_test_bed_stops_after_the_last_module_that_uses_it(pytester: pytest.Pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_a_queue="def test_one(k8s_kueue_testbed, k8s_testbed): pass\n"
                     "def test_two(k8s_kueue_testbed): pass\n",
        test_b_real="def test_pods(k8s_real_node): pass\n"
                    "def test_after_without_it(): pass\n",
        test_c_kwok="def test_one(k8s_testbed): pass\n",
        test_d_kueue="def test_one(k8s_kueue_testbed): pass\n",
        test_e_plain="def test_one(): pass\n",
    )
    items = pytester.getitems(pytester.path)
    group_items(items)
    order = [item.nodeid for item in items]
    # the test-bed modules in the order of their names, the test with no test bed last
    assert order == ["test_a_queue.py::test_one", "test_a_queue.py::test_two",
                     "test_b_real.py::test_pods", "test_b_real.py::test_after_without_it",
                     "test_c_kwok.py::test_one", "test_d_kueue.py::test_one",
                     "test_e_plain.py::test_one"]
    assert [item_group(item) for item in items] == ["k8s"] * 6 + [None]
    # each stops after its last user's module (whose module-scoped fixtures may still use it)
    assert release_points(items) == {"test_b_real.py::test_after_without_it": {"k8s_real_node"},
                                     "test_c_kwok.py::test_one": {"k8s_testbed"},
                                     "test_d_kueue.py::test_one": {"k8s_kueue_testbed"}}
