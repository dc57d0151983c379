"""The server composes a Job's RLinf config in a jail (issue 18; found by an attack pass): a
root server's composer ran as root, so a member whose ``workingDir`` led (through a link they
re-pointed) into another Run's files under ``$RLARK_HOME`` had root read that Run's YAML into the
member's run record. Now the composer reads what the Job's Workers could read and nothing more:
a mount namespace where ``$RLARK_HOME`` is covered, as an unprivileged uid.

Real composer children (the keeper's ``--exec`` jail, Hydra), real files; root, as the server is
where Workers get a uid of their own.
"""

from __future__ import annotations

import os

import pytest

from rlark.rlinf_config import isolated
from rlark.runtimes.local.runtime import LocalRuntime
from rlark.runtimes.local.identity import DEFAULT_RANGE, Identity, UidRange


@pytest.fixture
def jailed(rlark_home):
    rt = LocalRuntime(identity=Identity("uid", uids=UidRange(*DEFAULT_RANGE)), read_paths=[])
    isolated.set_jail(rt.composer_jail)
    try:
        yield rt
    finally:
        isolated.set_jail(None)


def config(where, text="cluster:\n  num_nodes: 1\nsecret_value: ${oc.env:NOPE,fallback}\n"):
    where.mkdir(parents=True, exist_ok=True)
    (where / "train.yaml").write_text(text)
    return where


def compose(directory, roots):
    return isolated.compose_isolated(str(directory), "train", roots=[str(r) for r in roots])


@pytest.fixture
def public():
    """A directory every user may read (pytest's own are private)."""
    import shutil
    import tempfile
    from pathlib import Path

    where = Path(tempfile.mkdtemp(prefix="rlark-jail-", dir="/tmp"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def test_the_jailed_composer_reads_what_others_may(jailed, public):
    config(public)
    got = compose(public, [public])
    assert got.data is not None and got.data["cluster"]["num_nodes"] == 1, got.findings


def test_the_jailed_composer_never_reads_the_servers_state_even_through_a_link(jailed, rlark_home, tmp_path):
    # another Run's YAML in its Worker directory under $RLARK_HOME, and a member's link to it
    victim = config(rlark_home / "workers" / "victimrun" / "0" / "upper",
                    "cluster:\n  num_nodes: 1\nwandb: {api_key: VICTIM-YAML-SECRET}\n")
    link = tmp_path / "wd"
    link.symlink_to(victim)
    for directory, roots in ((link, [link]), (victim, [victim]), (victim, [rlark_home])):
        got = compose(directory, roots)
        assert got.data is None, got.data
        assert "VICTIM-YAML-SECRET" not in repr(got)


def test_a_file_only_root_may_read_is_not_read(jailed, public):
    if os.geteuid() != 0:
        pytest.fail("the composer jail is a root server's: run the suite as root")
    config(public, "cluster:\n  num_nodes: 1\napi_key: ROOT-ONLY-SECRET\n")
    (public / "train.yaml").chmod(0o600)  # root's alone
    got = compose(public, [public])
    assert got.data is None and "ROOT-ONLY-SECRET" not in repr(got)
    isolated.set_jail(None)  # the same composition, unjailed (as root), reads it: the control
    assert compose(public, [public]).data["api_key"] == "ROOT-ONLY-SECRET"
