"""One table of the system's directories (rlark.paths.SYSTEM_DIRECTORIES) answers both questions
RLark asks of a path: may a Job mount it, and may the server read RLinf configs from a Job's
``workingDir`` there. Each directory carries its own rule for each, so the two answers cannot come
from two lists that drift apart."""

from __future__ import annotations

import os

from rlark.paths import SYSTEM_DIRECTORIES, system_dir, system_path


def test_root_refuses_every_mount_but_a_checkout_under_it_stays_a_config_root(tmp_path):
    assert system_path("/root") == "/root" and system_path("/root/proj") == "/root"
    assert system_dir("/root") and not system_dir("/root/proj")


def test_kernel_and_configuration_trees_refuse_both_at_every_depth():
    for tree in (d.path for d in SYSTEM_DIRECTORIES if d.config_root == "tree"):
        deep = f"{tree}/a/b"
        assert system_dir(tree) and system_dir(deep), tree
        assert system_path(tree) == tree and system_path(deep) == tree, tree


def test_directories_that_only_hold_others_refuse_a_mount_through_what_they_hold():
    # /var refuses no mount itself; it holds /var/run and /var/lib/kubelet
    assert system_path("/var") == "/var/run" and system_path("/var/data") is None
    assert system_path("/") is not None and system_dir("/")
    assert system_path("/home/u/data") is None and system_dir("/home") and not system_dir("/home/u/proj")


def test_links_are_resolved_before_the_config_root_rule(tmp_path):
    link = tmp_path / "etc-link"
    os.symlink("/etc", link)
    assert system_dir(str(link)) and system_dir(str(link / "ssl"))


def test_one_entry_per_directory_and_every_entry_says_something():
    paths = [d.path for d in SYSTEM_DIRECTORIES]
    assert len(paths) == len(set(paths))
    assert all(d.mount or d.config_root for d in SYSTEM_DIRECTORIES)
    # a tree no config may come from is one no mount may touch either
    assert all(d.mount for d in SYSTEM_DIRECTORIES if d.config_root == "tree")
