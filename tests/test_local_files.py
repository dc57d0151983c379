"""Where the local runtime writes: Ray's temp dirs under ``$RLARK_HOME`` when the socket-path
limit allows, by a stated rule otherwise; the host-wide reservation locks where every server on
the machine sees them."""

from __future__ import annotations

import os

import pytest

from rlark import settings
from rlark.runtimes.local.reservations import Reservations


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("RLARK_RAY_TMP", raising=False)
    monkeypatch.delenv("RLARK_LOCK_DIR", raising=False)

    def set_home(path: str):
        monkeypatch.setenv("RLARK_HOME", path)
        return path

    return set_home


def test_ray_temp_dirs_live_in_a_short_rlark_home(home):
    short = home(f"/tmp/rlh-{os.getpid()}")  # pytest's tmp dirs are too long for the rule
    try:
        assert settings.ray_tmp_root() == f"{short}/ray"
        assert len(settings.ray_tmp_root()) <= settings.MAX_RAY_TMP_LENGTH
    finally:
        os.rmdir(short)


def test_a_long_rlark_home_falls_back_to_a_per_user_tmp_dir(home, tmp_path):
    long_home = home(str(tmp_path / ("x" * 40)))
    assert len(f"{long_home}/ray") > settings.MAX_RAY_TMP_LENGTH
    assert settings.ray_tmp_root() == f"/tmp/rlark-ray-{os.geteuid()}"


def test_rlark_ray_tmp_wins_and_a_long_one_is_refused(home, tmp_path, monkeypatch):
    home(str(tmp_path))
    monkeypatch.setenv("RLARK_RAY_TMP", "/tmp/mine")
    assert settings.ray_tmp_root() == "/tmp/mine"
    monkeypatch.setenv("RLARK_RAY_TMP", "/tmp/" + "y" * 40)
    with pytest.raises(ValueError, match="RLARK_RAY_TMP='/tmp/y+' is 45 characters.*at most 30"):
        settings.ray_tmp_root()


def test_reservation_locks_are_host_wide_and_movable(home, tmp_path, monkeypatch):
    home(str(tmp_path))
    assert settings.lock_dir() == "/tmp/rlark-locks"  # not per home: servers must see each other
    monkeypatch.setenv("RLARK_LOCK_DIR", str(tmp_path / "locks"))
    res = Reservations()
    assert res.dir == tmp_path / "locks" and res.try_reserve("ports", 20000)
    assert (tmp_path / "locks" / "ports-20000.lock").exists()
    res.release("ports", 20000)
