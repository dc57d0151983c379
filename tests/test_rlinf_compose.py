"""Composing RLinf configs with real Hydra (files written here): defaults, search paths through
RLinf's environment variables, overrides, RLinf's resolvers, and every failure as a Finding."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from rlark.rlinf_config.compose import (
    INCOMPLETE,
    INVALID,
    NOT_FOUND,
    compose,
    find_rlinf_repo,
    locate,
    rlinf_env,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A minimal RLinf checkout: a top-level config that pulls a group from EMBODIED_PATH."""
    repo = tmp_path / "RLinf"
    (repo / "rlinf").mkdir(parents=True)
    write(repo / "examples/embodiment/config/env/sim.yaml", """\
        simulator: maniskill
        data_dir: ${oc.env:REPO_PATH}/data
        """)
    write(repo / "examples/embodiment/config/ppo.yaml", """\
        defaults:
          - env@env.train: sim
          - _self_
        hydra:
          searchpath:
            - file://${oc.env:EMBODIED_PATH}/config/
        cluster:
          num_nodes: ${multiply:1,2}
          component_placement:
            actor: all
        actor:
          micro_batch: ${int_div:16,4}
          dtype: ${torch.dtype:bfloat16}
          lr_scale: ${subtract:3,1}
          frozen: ${not:true}
          model_path: ${oc.env:MODEL_DIR}/qwen
          run_dir: ${hydra:runtime.output_dir}
          missing: ???
        """)
    return repo


def test_compose_with_defaults_env_vars_and_rlinf_resolvers(checkout, monkeypatch):
    for name in ("REPO_PATH", "EMBODIED_PATH", "MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    c = compose(checkout / "examples/embodiment/config", "ppo")
    assert c.findings == [] and c.ok
    assert c.data["cluster"] == {"num_nodes": 2, "component_placement": {"actor": "all"}}
    assert c.data["env"]["train"] == {"simulator": "maniskill", "data_dir": f"{checkout}/data"}
    actor = c.data["actor"]
    assert (actor["micro_batch"], actor["dtype"], actor["lr_scale"], actor["frozen"]) == \
        (4, "torch.bfloat16", 2, False)
    assert actor["model_path"] == "${oc.env:MODEL_DIR}/qwen"  # kept as written
    assert actor["missing"] == "???"
    assert set(c.unresolved) == {"actor.model_path", "actor.run_dir"}
    assert "MODEL_DIR" in c.unresolved["actor.model_path"]
    assert c.env["EMBODIED_PATH"] == str(checkout / "examples/embodiment")
    assert dict(os.environ) == before  # the variables set for composing are gone again


def test_overrides_and_env_given_explicitly(checkout, tmp_path):
    other = tmp_path / "elsewhere"
    c = compose(checkout / "examples/embodiment/config", "ppo.yaml",
                ["cluster.num_nodes=4", "+extra=1"], env={"REPO_PATH": str(other)})
    assert c.findings == []
    assert c.data["cluster"]["num_nodes"] == 4 and c.data["extra"] == 1
    assert c.data["env"]["train"]["data_dir"] == f"{other}/data"


def test_missing_file_and_directory(tmp_path):
    c = compose(tmp_path, "nope")
    assert [f.code for f in c.findings] == [NOT_FOUND] and c.data is None
    assert "nope.yaml" in c.findings[0].message
    c = compose(tmp_path / "no-dir", "x", path="spec.rlinf")
    assert c.findings[0].code == NOT_FOUND and c.findings[0].path == "spec.rlinf"
    assert "directory" in c.findings[0].message


def test_yaml_error_names_file_and_line(tmp_path):
    write(tmp_path / "bad.yaml", "cluster: [1, 2\n")
    c = compose(tmp_path, "bad")
    assert [f.code for f in c.findings] == [INVALID]
    assert "bad.yaml" in c.findings[0].message and "line" in c.findings[0].message.lower()


def test_missing_defaults_entry_is_incomplete(tmp_path):
    write(tmp_path / "top.yaml", "defaults:\n  - training_backend: fsdp\n  - _self_\nx: 1\n")
    c = compose(tmp_path, "top")
    assert [f.code for f in c.findings] == [INCOMPLETE]
    assert "training_backend/fsdp" in c.findings[0].message


def test_unset_search_path_variable_is_incomplete(checkout, monkeypatch, tmp_path):
    for name in ("REPO_PATH", "EMBODIED_PATH"):
        monkeypatch.delenv(name, raising=False)
    # a copy outside any RLinf checkout: nothing can be inferred
    cfg = write(tmp_path / "mine/ppo.yaml", (checkout / "examples/embodiment/config/ppo.yaml").read_text())
    c = compose(cfg.parent, "ppo")
    assert [f.code for f in c.findings] == [INCOMPLETE]
    assert "EMBODIED_PATH" in c.findings[0].message


def test_bad_override_is_invalid(checkout):
    c = compose(checkout / "examples/embodiment/config", "ppo", ["no_such_key=1"])
    assert [f.code for f in c.findings] == [INVALID]
    assert "no_such_key" in c.findings[0].message and "+key=value" in c.findings[0].hint
    c = compose(checkout / "examples/embodiment/config", "ppo", ["=broken"])
    assert [f.code for f in c.findings] == [INVALID]


def test_rlinf_env_precedence(checkout):
    config_dir = checkout / "examples/reasoning/config"
    config_dir.mkdir(parents=True)
    inferred = rlinf_env(config_dir, environ={})
    assert inferred == {"REPO_PATH": str(checkout),
                        "EMBODIED_PATH": str(checkout / "examples/embodiment"),
                        "DIFFUSION_PATH": str(checkout / "examples/diffusion"),
                        "REWARD_PATH": str(checkout / "examples/reward")}
    assert rlinf_env(config_dir, environ={"REPO_PATH": "/x"})["REPO_PATH"] == "/x"
    assert rlinf_env(config_dir, {"REPO_PATH": "/y"}, environ={"REPO_PATH": "/x"})["REPO_PATH"] == "/y"
    assert rlinf_env("/", environ={}) == {}


def test_find_rlinf_repo_needs_an_rlinf_layout(tmp_path):
    (tmp_path / "proj/examples/quickstart/config").mkdir(parents=True)
    assert find_rlinf_repo(tmp_path / "proj/examples/quickstart/config") is None
    (tmp_path / "proj/examples/embodiment").mkdir()
    assert find_rlinf_repo(tmp_path / "proj/examples/quickstart/config") == tmp_path / "proj"


def test_locate():
    assert locate("a/b/ppo.yaml") == ("a/b", "ppo")
    assert locate("ppo.yml") == (".", "ppo")
    assert locate("a/b", "ppo.yaml") == ("a/b", "ppo")
    assert locate(Path("a/b"), "ppo") == ("a/b", "ppo")


def test_resolvers_registered_before_are_restored(checkout):
    """RLinf registers its own resolvers (torch.dtype gives torch dtypes); composing uses RLark's
    equivalents and leaves the process's resolvers as they were."""
    from omegaconf import OmegaConf
    from omegaconf.basecontainer import BaseContainer

    saved = dict(BaseContainer._resolvers)
    try:
        OmegaConf.register_new_resolver("multiply", lambda x, y: "theirs", replace=True)
        BaseContainer._resolvers.pop("int_div", None)
        c = compose(checkout / "examples/embodiment/config", "ppo", env={"MODEL_DIR": "/m"})
        assert c.data["cluster"]["num_nodes"] == 2 and c.data["actor"]["micro_batch"] == 4
        assert c.data["actor"]["model_path"] == "/m/qwen"
        assert OmegaConf.create({"x": "${multiply:2,3}"}).x == "theirs"
        assert not OmegaConf.has_resolver("int_div")
        assert os.environ.get("MODEL_DIR") != "/m"
    finally:
        BaseContainer._resolvers.clear()
        BaseContainer._resolvers.update(saved)
