"""``rlark plan`` over every config of the RLinf corpus, compared with RLinf's own answers.

For each of the corpus's YAML files (real configs from RLinf's ``examples/``), the plan must:

* never raise (zero tracebacks);
* where RLinf 0.3.0 accepts the cluster section (``rlinf_valid`` in the oracle): give the same
  ``num_nodes``, the same ``node_groups`` (label -> expanded ranks) and the same components;
* where RLinf refuses it: hold an error Finding that names the field and the bad value RLinf
  complained about;
* where Hydra cannot compose it: hold an error Finding naming the file and the cause;
* where the file has no ``cluster:`` (a defaults-group file): say so with an error Finding.

And the suggested Job of every config RLinf accepts must itself pass ``rlark check`` against that
config with no Finding about workers, ranks or placements. Planning the whole corpus must take
under 60 s on a 2-core machine.
"""

from __future__ import annotations

import re

import pytest

from rlark.findings import Severity, has_errors
from rlark.preflight.job import check_job
from rlark.ranks import plan_workers
from rlark.rlinf_config.check import check_config
from rlark.spec import parse_job
from tests.rlinf_corpus import corpus_files, corpus_or_skip, load_oracle, plan_corpus

LAYOUT_CODES = {"WorkersMismatch", "RoleStraddlesNodeGroups", "RoleNamedLikeComponent",
                "PlacementNeedsMoreAccelerators", "PlacementBeyondNodes",
                "PlacementNeedsMoreHardware", "PlacementInvalid", "UnknownNodeGroup"}


@pytest.fixture(scope="module")
def corpus():
    return corpus_or_skip()


@pytest.fixture(scope="module")
def oracle(corpus):
    return load_oracle(corpus)


@pytest.fixture(scope="module")
def run(corpus):
    return plan_corpus(str(corpus))


def test_every_config_is_planned_without_a_traceback(corpus, run):
    files = corpus_files(corpus)
    assert len(files) >= 300, "the corpus holds every YAML under RLinf's examples/"
    assert run.tracebacks == {}, "\n\n".join(f"{k}:\n{v}" for k, v in run.tracebacks.items())
    assert sorted(run.plans) == files


def test_the_oracle_covers_222_configs(oracle, run):
    assert len(oracle) == 222
    assert set(oracle) <= set(run.plans)


def test_accepted_configs_match_rlinf(oracle, run):
    accepted = {k: v for k, v in oracle.items() if v.get("rlinf_valid")}
    assert len(accepted) > 150
    wrong = []
    for rel, expected in accepted.items():
        got = run.plans[rel].to_dict()
        if (got["num_nodes"], got["node_groups"]) != (expected["num_nodes"], expected["node_groups"]):
            wrong.append(f"{rel}: plan {got['num_nodes']} {got['node_groups']} != RLinf "
                         f"{expected['num_nodes']} {expected['node_groups']}")
        cluster_errors = [f for f in run.plans[rel].findings
                          if f.severity == Severity.error and f.path.startswith("cluster.node_groups")]
        if cluster_errors:
            wrong.append(f"{rel}: RLinf accepts it but the plan says {cluster_errors[0].message}")
        if set(run.plans[rel].spec.components) != set(expected["components"]):
            wrong.append(f"{rel}: components {run.plans[rel].spec.components} != "
                         f"{expected['components']}")
    assert not wrong, "\n".join(wrong)


def _rejection_value(rlinf_error: str) -> str:
    """The bad value in RLinf's message, e.g. ``... But got ROBOT_IP.`` -> ``ROBOT_IP``."""
    m = re.search(r"But got (.+?)\.?$", rlinf_error)
    assert m, rlinf_error
    return m.group(1)


def test_rejected_configs_have_an_error_saying_why(oracle, run):
    rejected = {k: v for k, v in oracle.items() if v["composed"] and not v.get("rlinf_valid")}
    assert len(rejected) == 24
    missing = []
    for rel, expected in rejected.items():
        value = _rejection_value(expected["rlinf_error"])
        field = re.search(r"'(\w+)'", expected["rlinf_error"]).group(1)  # e.g. 'robot_ip'
        errors = [f for f in run.plans[rel].findings if f.severity == Severity.error]
        if not any(value in f.message and field in f.message for f in errors):
            missing.append(f"{rel}: RLinf says {expected['rlinf_error']!r}; plan errors: "
                           f"{[f.message for f in errors]}")
    assert not missing, "\n".join(missing)


def test_configs_that_do_not_compose_have_an_error_naming_file_and_cause(oracle, run):
    failed = {k: v for k, v in oracle.items() if not v["composed"]}
    assert failed
    for rel, expected in failed.items():
        plan = run.plans[rel]
        assert plan.job is None and plan.num_nodes is None
        errors = [f for f in plan.findings if f.severity == Severity.error]
        assert errors and errors[0].code in ("RLinfConfigIncomplete", "RLinfConfigInvalid")
        cause = re.search(r"Could not load '([^']+)'", expected["compose_error"]).group(1)
        assert rel.rsplit("/", 1)[-1] in errors[0].message and cause in errors[0].message, \
            errors[0].message


def test_files_without_a_cluster_section_say_so(oracle, run):
    others = [rel for rel in run.plans if rel not in oracle]
    assert len(others) == 110
    for rel in others:
        codes = [f.code for f in run.plans[rel].findings if f.severity == Severity.error]
        assert codes == ["RLinfClusterMissing"], (rel, run.plans[rel].findings)


def test_configs_placing_a_component_twice_are_errors(oracle, run):
    twice = [rel for rel, v in oracle.items()
             if v["composed"] and len(v["components"]) < sum(
                 len(k.split(",")) for k in v["cluster"]["component_placement"])]
    assert len(twice) == 2  # the corpus README: two end up placing actor twice
    for rel in twice:
        messages = [f.message for f in run.plans[rel].findings if f.code == "ComponentPlacedTwice"]
        assert any("'actor'" in m for m in messages), run.plans[rel].findings


def test_suggested_jobs_pass_their_own_check(oracle, run):
    """Roles line up with node_groups, Workers add up, placements fit the suggested GPUs."""
    problems = []
    checked = 0
    for rel, expected in oracle.items():
        plan = run.plans[rel]
        if not expected.get("rlinf_valid") or plan.job is None:
            continue
        job, structural = parse_job(plan.job)
        assert job is not None, (rel, structural)
        spec_errors = [f for f in check_job(job) if f.severity == Severity.error]
        assert not spec_errors, (rel, spec_errors)
        # RLark's rank rule gives every role exactly the ranks the plan meant for it
        ranks = {w.node_rank: w.role for w in plan_workers(job)}
        assert ranks == {r: role.name for role in plan.roles for r in role.node_ranks}, rel
        found = [f for f in check_config(job, plan.config, source=rel) if f.code in LAYOUT_CODES]
        if found:
            problems.append(f"{rel}: {[f.message for f in found]}")
        checked += 1
    assert checked > 150
    assert not problems, "\n".join(problems)


def test_real_heterogeneous_config_is_planned_like_rlinf(run):
    """Two Franka arms on ranks 1-2, the GPU node on rank 0 (RLinf's own 2-arm example)."""
    plan = run.plans["examples/embodiment/config/realworld_peginsertion_rlpd_cnn_async_2arms.yaml"]
    d = plan.to_dict()
    assert d["node_groups"] == {"4090": [0], "franka": [1, 2]}
    assert d["components"]["actor"]["node_ranks"] == [0]
    assert d["components"]["rollout"]["node_ranks"] == [0]
    assert d["components"]["rollout"]["processes"] == 2
    assert d["components"]["env"]["node_ranks"] == [1, 2]
    assert d["components"]["env"]["resource"] == "Franka"
    assert [(r["name"], r["workers"], r["node_ranks"]) for r in d["roles"]] == [
        ("4090", 1, [0]), ("franka", 2, [1, 2])]
    assert d["job"]["spec"]["headRole"] == "4090"
    assert has_errors(plan.findings)  # ROBOT_IP_FOR_RANK1 is not an IP: RLinf refuses it


def test_sixteen_node_config(run):
    plan = run.plans["examples/reasoning/config/math/qwen2.5-1.5b-grpo-megatron.yaml"]
    d = plan.to_dict()
    assert d["num_nodes"] == 16 and d["node_groups"] == {}
    assert all(c["node_ranks"] == list(range(16)) for c in d["components"].values())
    assert [(r["name"], r["workers"]) for r in d["roles"]] == [("node", 16)]
