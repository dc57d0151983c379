"""A pvc volume on the local runtime (runtimes/local/volumes.py), on this machine's real file
system: a new Run's uid is given what earlier Runs' uids wrote, and nothing else; sizes; delete.
Needs root (chown), as the local runtime's own identities do."""

from __future__ import annotations

import os

import pytest

from rlark.runtimes.local import volumes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")

#: the Workers' uids of this test: an earlier Run's, the new Run's; and a user's of the machine
EARLIER, NEW, USER = 150001, 150002, 1234


def worker_uid(uid: int) -> bool:
    return 150000 <= uid < 160000


def owner(path) -> int:
    return os.lstat(path).st_uid


def test_a_new_run_is_given_what_earlier_runs_wrote_and_nothing_else(tmp_path):
    home = tmp_path / "home"
    vol = home / "volumes" / "default" / "ckpt"
    (vol / "step_1").mkdir(parents=True)
    (vol / "step_1" / "model.pt").write_bytes(b"x" * 1000)
    (vol / "notes.txt").write_text("by a user")
    outside = tmp_path / "outside.txt"  # a file of the machine's, elsewhere
    outside.write_text("not the volume's")
    os.link(outside, vol / "hardlink.txt")  # a second name of it, planted in the volume
    os.symlink(outside, vol / "link")  # and a symbolic link to it
    for path in (vol, vol / "step_1", vol / "step_1" / "model.pt", vol / "link"):
        os.chown(path, EARLIER, EARLIER, follow_symlinks=False)
    os.chown(vol / "notes.txt", USER, USER)
    os.chown(outside, EARLIER, EARLIER)

    changed = volumes.claim(str(vol), NEW, worker_uid)

    assert changed == 4
    for path in (vol, vol / "step_1", vol / "step_1" / "model.pt", vol / "link"):
        assert owner(path) == NEW, path
    assert owner(vol / "notes.txt") == USER  # not a Worker's: left as it is
    assert owner(outside) == EARLIER  # neither the link nor the second name led the walk out
    assert volumes.claim(str(vol), NEW, worker_uid) == 0


def test_sizes_listing_and_delete(tmp_path):
    home = str(tmp_path)
    for project, name, size in (("default", "ckpt", 3000), ("default", "data", 10),
                                ("other", "ckpt", 5)):
        path = volumes.volume_dir(home, project, name)
        os.makedirs(os.path.join(path, "d"))
        with open(os.path.join(path, "d", "f"), "wb") as f:
            f.write(b"x" * size)
    os.makedirs(os.path.join(home, "volumes", "default", "Not-A-Volume"))
    listed = volumes.listing(home, "default")
    assert [(v["name"], v["bytes"], v["entries"]) for v in listed] == [("ckpt", 3000, 2),
                                                                       ("data", 10, 2)]
    assert volumes.listing(home, "nobody") == []
    assert volumes.remove(home, "default", "ckpt") == (3000, 2)
    assert not os.path.exists(volumes.volume_dir(home, "default", "ckpt"))
    assert volumes.remove(home, "default", "ckpt") is None
    assert [v["name"] for v in volumes.listing(home, "other")] == ["ckpt"]  # another project's
