"""The run record's automatic checks: one per item of the list RLinf users are asked to record
and verify for every run (issue 14), each ``pass`` / ``warn`` / ``fail`` with evidence (pure).

Long because: one short check per item of the record's list (issue 14), in the list's order;
splitting them would scatter one table.

=====================  ==========================================================================
id                     what it verifies (fail / warn)
=====================  ==========================================================================
``code``               the working directory's and RLinf's exact code: fail when Workers run
                       different commits, diffs or RLinf versions; warn when a commit is unknown
                       or a dirty diff was too large to keep whole
``versions``           RLinf, Python, Ray, torch, CUDA, driver, NCCL and device library
                       versions: fail when Workers differ; warn when one did not report
``packages``           the installed-package list: fail when Workers of one role differ (named
                       packages), warn when roles differ from each other
``images``             image reference with an explicit version: fail when Workers of a role
                       ran different digests, warn for a ``latest``/untagged reference
``configs``            original Hydra files, overrides, resolved config: warn when one is
                       missing, when the resolved config is RLark's composition from files other
                       than those the head saw (or not compared) or without overrides the run
                       script passes, or an override is not in the run script
``locations``          data/model/checkpoint/output locations: warn when an output or checkpoint
                       path is on no persistent mount (or a read-only one)
``workers``            the expected Workers joined: fail when fewer did
``resources``          what each Worker saw and what Ray counts on its node against what its
                       role asked: fail for fewer GPUs, CPUs or memory seen, or fewer CPUs,
                       memory, GPUs or named devices counted by Ray
``node-grouping``      roles and RLinf's ``cluster.num_nodes`` and ``node_groups``: fail when the
                       counts differ, a node group names a rank no Worker has, or a node's role
                       label is not its Worker's role
``ray-nodes``          one distinct Ray node per Worker: fail for a Worker without one or two
                       sharing one
``node-rank``          ``RLINF_NODE_RANK`` as Ray reports it (node label, raylet environment)
                       equals the rank RLark gave: fail on a mismatch, warn when not reported
``logs``               every Worker's log exists and shows start (facts) and end (exit): fail for
                       a missing log, warn for one without its lifecycle lines
``outputs-readable``   after the Run, the output locations can be read again (the server looked
                       where the Workers' view of each path lies on its machine): fail when one
                       is missing or unreadable, warn when not looked at
``isolation``          who each Worker ran as and whether its Ray cluster took only the Run's
                       token: warn when a keeper's channel was not protected or Ray ran without
                       token authentication (a server policy); fail for a joined Worker that
                       says nothing of it
=====================  ==========================================================================
"""

from __future__ import annotations

from typing import Any, Callable

from rlark import runtimes
from rlark.status import Phase, text_of

SUCCEEDED = text_of(Phase.Succeeded)  # a record's result.phase as it stores it

#: check id -> the item of the seed's list it verifies (shown beside each check)
ITEMS: dict[str, str] = {
    "code": "the exact RLinf commit (or fork) and where its patches came from; the working "
            "directory's code",
    "versions": "RLinf, Python, Ray, CUDA, driver and device library versions",
    "packages": "the same Python environment on Workers meant to be alike",
    "images": "the image reference and explicit version",
    "configs": "the original Hydra config, the command-line overrides and the resolved final config",
    "locations": "dataset, model, checkpoint and output locations",
    "workers": "the expected Workers",
    "resources": "each Worker's resources, as seen against as asked",
    "node-grouping": "the node grouping",
    "ray-nodes": "Workers and Ray nodes are as intended",
    "node-rank": "RLINF_NODE_RANK is as intended",
    "logs": "logs that show start, progress and failure",
    "outputs-readable": "outputs can be read again",
    "isolation": "the Run's own identity, lifecycle channel and Ray token",
}
STATUSES = ("pass", "warn", "fail")


def _check(cid: str, fails: list[str], warns: list[str], passes: list[str]) -> dict[str, Any]:
    status = "fail" if fails else "warn" if warns else "pass"
    return {"id": cid, "item": ITEMS[cid], "status": status,
            "evidence": fails + warns + ([] if fails or warns else passes)}


def _workers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return list((rec.get("workers") or {}).get("items") or [])


def _who(w: dict[str, Any]) -> str:
    return f"rank {w.get('nodeRank')} ({w.get('name')})"


def _differs(workers: list[dict[str, Any]], value: Callable[[dict[str, Any]], Any],
             what: str) -> list[str]:
    """``["Workers run 2 different X: a on rank 0, 1; b on rank 2"]`` when they differ."""
    by: dict[str, list[str]] = {}
    for w in workers:
        v = value(w)
        if v is not None:
            by.setdefault(str(v), []).append(str(w.get("nodeRank")))
    if len(by) <= 1:
        return []
    return [f"Workers run {len(by)} different {what}: "
            + "; ".join(f"{v} on rank {', '.join(r)}" for v, r in by.items())]


def check_code(rec: dict[str, Any]) -> dict[str, Any]:
    ws = [w for w in _workers(rec) if w.get("code")]
    fails, warns, passes = [], [], []

    def code(w: dict[str, Any], k: str) -> Any:
        return (w.get("code") or {}).get(k)
    fails += _differs(ws, lambda w: code(w, "workingDirCommit"), "working-directory commits")
    fails += _differs(ws, lambda w: code(w, "workingDirDiffSha256") or "clean",
                      "working-directory diffs")
    fails += _differs(ws, lambda w: code(w, "rlinfCommit"), "RLinf commits")
    fails += _differs(ws, lambda w: code(w, "rlinfVersion"), "RLinf versions")
    head = (rec.get("code") or {})
    wd, rl = head.get("workingDir") or {}, head.get("rlinf") or {}
    if not ws:
        warns.append("no Worker reported its code")
    if wd.get("absent"):
        warns.append(f"working directory {wd.get('path')}: {wd['absent']}")
    elif wd.get("commit"):
        passes.append(f"working directory {wd.get('root')} at {wd['commit'][:12]}"
                      + (f" on {wd['branch']}" if wd.get("branch") else "")
                      + (f", dirty (diff sha256 {str(wd.get('diffSha256'))[:12]} kept)"
                         if wd.get("dirty") else ", clean"))
        if wd.get("dirty") and wd.get("diffCut"):
            warns.append("the working directory's uncommitted diff is larger than the record "
                         "keeps: only its sha256 and its start are recorded")
    rgit = rl.get("git") or {}
    direct = rl.get("directUrl") or {}
    if rgit.get("commit"):
        passes.append(f"RLinf {rl.get('version') or ''} from checkout {rgit.get('root')} at "
                      f"{rgit['commit'][:12]}" + (f" ({rgit['remote']})" if rgit.get("remote") else "")
                      + (", dirty" if rgit.get("dirty") else ""))
    elif direct.get("commit"):
        passes.append(f"RLinf {rl.get('version') or ''} installed from {direct.get('url')} at "
                      f"{direct['commit'][:12]}")
    elif rl.get("version"):
        passes.append(f"RLinf {rl['version']} installed from a package index"
                      + (f" ({direct.get('url')})" if direct.get("url") else ""))
    elif ws:
        warns.append("RLinf is not installed on the head (no version, no commit)")
    return _check("code", fails, warns, passes)


def check_versions(rec: dict[str, Any]) -> dict[str, Any]:
    ws = _workers(rec)
    fails, warns = [], []
    keys = (("python", "Python"), ("ray", "Ray"), ("rlinf", "RLinf"), ("torch", "torch"))
    for key, label in keys:
        fails += _differs(ws, lambda w, k=key: (w.get("facts") or {}).get(k),  # type: ignore[misc]
                          f"{label} versions")

    def extra(w: dict[str, Any], k: str) -> Any:
        return ((w.get("facts") or {}).get("versions_extra") or {}).get(k)
    fails += _differs(ws, lambda w: extra(w, "torchCuda"), "CUDA runtimes (torch.version.cuda)")
    fails += _differs(ws, lambda w: ((w.get("facts") or {}).get("devices") or {}).get("driver"),
                      "NVIDIA drivers")
    fails += _differs(ws, lambda w: extra(w, "nccl"), "NCCL versions")
    missing = [_who(w) for w in ws if not (w.get("facts") or {}).get("python")]
    if missing:
        warns.append(f"no versions reported by {', '.join(missing)}")
    v = rec.get("versions") or {}
    shown = ", ".join(f"{k} {'/'.join(map(str, v.get(k) or [])) or 'absent'}"
                      for k in ("python", "ray", "rlinf", "torch", "cuda", "nvidiaDriver", "nccl"))
    return _check("versions", fails, warns, [f"every Worker: {shown}"])


def _package_delta(a: list[str], b: list[str]) -> str:
    """``"x==1 vs x==2; only one side: y==3"`` for two package lists."""
    da = dict(p.split("==", 1) for p in a if "==" in p)
    db = dict(p.split("==", 1) for p in b if "==" in p)
    changed = [f"{n} {da[n]} vs {db[n]}" for n in sorted(set(da) & set(db)) if da[n] != db[n]]
    only_a = [f"{n}=={da[n]}" for n in sorted(set(da) - set(db))]
    only_b = [f"{n}=={db[n]}" for n in sorted(set(db) - set(da))]
    parts = changed[:5] + ([f"only the first: {', '.join(only_a[:5])}"] if only_a else []) \
        + ([f"only the second: {', '.join(only_b[:5])}"] if only_b else [])
    return "; ".join(parts) or "same packages"


def check_packages(rec: dict[str, Any]) -> dict[str, Any]:
    ws = _workers(rec)
    lists = rec.get("packageLists") or {}
    fails, warns = [], []
    by_role: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for w in ws:
        if w.get("packagesSha256"):
            by_role.setdefault(str(w.get("role")), {}).setdefault(w["packagesSha256"], []).append(w)
    for role, hashes in by_role.items():
        if len(hashes) > 1:
            (h1, w1), (h2, w2) = list(hashes.items())[:2]
            delta = _package_delta((lists.get(h1) or {}).get("packages") or [],
                                   (lists.get(h2) or {}).get("packages") or [])
            fails.append(f"role {role}: Workers have {len(hashes)} different package lists; "
                         f"{_who(w1[0])} vs {_who(w2[0])}: {delta}")
    role_hashes = {r: set(h) for r, h in by_role.items()}
    if len(by_role) > 1 and len(set.union(*role_hashes.values())) > 1 and not fails:
        warns.append("roles run different package lists ("
                     + "; ".join(f"{r}: {', '.join(sorted(x[:12] for x in h))}"
                                 for r, h in role_hashes.items()) + ")")
    missing = [_who(w) for w in ws if not w.get("packagesSha256")]
    if missing:
        warns.append(f"no package list from {', '.join(missing)}")
    return _check("packages", fails, warns,
                  [f"{len(lists)} distinct package list(s): "
                   + ", ".join(f"{h[:12]} ({(v or {}).get('count')} packages)" for h, v in lists.items())])


def _pulls_images(runtime: Any) -> bool:
    """Whether runtime ``runtime`` (a record's) pulls each role's image, as it says
    (:attr:`rlark.runtimes.base.RuntimeProfile.pulls_images`); a runtime this version does not
    know is taken to pull them (nothing is said for it)."""
    try:
        return runtimes.profile(runtime).pulls_images if isinstance(runtime, str) and runtime \
            else True
    except ValueError:
        return True


def check_images(rec: dict[str, Any]) -> dict[str, Any]:
    fails, warns, passes = [], [], []
    for role in rec.get("imageDigestMismatch") or []:
        ds = (rec.get("imageDigests") or {}).get(role) or {}
        fails.append(f"image digest differs between Workers of role {role}: "
                     + "; ".join(f"{d[:24]} on {', '.join(ws)}" for d, ws in ds.items()))
    for role, image in (rec.get("images") or {}).items():
        ref = str(image or "")
        tail = ref.rsplit("/", 1)[-1]
        if "@" not in ref and (":" not in tail or tail.endswith(":latest")):
            warns.append(f"role {role}: image {ref!r} has no explicit version")
        else:
            passes.append(f"role {role}: {ref}")
    if not _pulls_images(rec.get("runtime")):
        passes.append(f"{rec.get('runtime')} runtime: images are recorded, not pulled")
    return _check("images", fails, warns, passes)


def check_configs(rec: dict[str, Any]) -> dict[str, Any]:
    cfg = rec.get("configs") or {}
    warns, passes = [], []
    if not (rec.get("rlinf") or {}).get("configName"):
        return _check("configs", [], ["spec.rlinf names no config: nothing to record"], [])
    original = cfg.get("original") or {}
    if original.get("files"):
        passes.append(f"original: {len(original['files'])} Hydra file(s) of {original.get('dir')} "
                      "with sha256")
    else:
        warns.append("original Hydra files not recorded: "
                     + str(original.get("absent") or "the head did not report them"))
    resolved = cfg.get("resolved") or {}
    over = cfg.get("overrides") or {}
    if resolved.get("source") == "hydra-output":
        passes.append(f"resolved: RLinf's own Hydra output {resolved.get('dir')}")
    elif resolved.get("source") == "rlark-composition" and resolved.get("data") is not None:
        doubts = _composition_doubts(resolved, over)
        warns += doubts
        if not doubts:
            n = len(original.get("files") or [])
            passes.append(f"resolved: RLark's composition of {rec['rlinf'].get('configName')} from "
                          f"the {n} Hydra file(s) the head saw (same sha256), with the overrides "
                          f"the run script passes ({' '.join(over.get('runScript') or []) or 'none'}); "
                          "RLinf wrote no Hydra output directory of its own")
    else:
        warns.append("no resolved config: " + str(resolved.get("error") or resolved.get("note")
                                                   or "RLinf wrote none and RLark could not compose it"))
    for o in over.get("notInRunScript") or []:
        warns.append(f"override {o} (spec.rlinf.overrides) is not in the run script")
    passes.append(f"overrides: spec {over.get('spec') or []}, run script {over.get('runScript') or []}")
    return _check("configs", [], warns, passes)


def _composition_doubts(resolved: dict[str, Any], over: dict[str, Any]) -> list[str]:
    """Why RLark's composition of the config may not be what the Run composed: the Hydra files
    changed since the head saw them (or could not be compared), or the run script passes
    overrides that ``spec.rlinf.overrides`` (what RLark composes with) does not list."""
    out = []
    same = resolved.get("sameInputs") or {}
    if same.get("same") is False:
        out.append("resolved config is RLark's composition from Hydra files that differ from those "
                   f"the head saw when the Run started ({', '.join(same.get('differ') or [])}): "
                   "it may not be what ran")
    elif same.get("same") is not True:
        out.append("resolved config is RLark's composition, not compared with the Hydra files the "
                   f"head saw: {same.get('why') or 'no comparison recorded'}")
    spec = over.get("spec") or []
    missing = [o for o in over.get("runScript") or [] if o not in spec]
    if missing:
        out.append(f"the run script passes override(s) {' '.join(missing)} that "
                   "spec.rlinf.overrides does not list, so RLark's composition lacks them: list "
                   "them in spec.rlinf.overrides")
    return out


def check_locations(rec: dict[str, Any]) -> dict[str, Any]:
    from rlark.rlinf_config.locations import WRITTEN_KINDS

    locs = rec.get("locations") or []
    warns, passes = [], []
    for loc in locs:
        by = loc.get("byRole") or {}
        lost = sorted(r for r, b in by.items() if not b.get("persistent"))
        ro = sorted(r for r, b in by.items() if b.get("readOnly"))
        where = loc.get("path") or loc.get("value")
        if loc.get("kind") in WRITTEN_KINDS and lost:
            warns.append(f"{loc['kind']} path {where} ({loc['key']}) is not on a persistent mount "
                         f"(role {', '.join(lost)})")
        elif loc.get("kind") in WRITTEN_KINDS and ro:
            warns.append(f"{loc['kind']} path {where} ({loc['key']}) is on a read-only mount "
                         f"(role {', '.join(ro)})")
        else:
            passes.append(f"{loc.get('kind')} {where} ({loc.get('key')}): "
                          + "; ".join(f"{r}: {b.get('why')}" for r, b in by.items()))
    if not locs:
        warns.append("the resolved config names no data, model, checkpoint or output location "
                     "RLark knows (docs/record.md lists the keys)"
                     if (rec.get("configs") or {}).get("resolved", {}).get("data") is not None
                     else "no resolved config to read locations from")
    return _check("locations", [], warns, passes)


def check_workers(rec: dict[str, Any]) -> dict[str, Any]:
    ws = rec.get("workers") or {}
    expected, actual = ws.get("expected"), ws.get("actual")
    if actual is not None and expected is not None and actual < expected:
        missing = [_who(w) for w in _workers(rec) if not w.get("joined")]
        return _check("workers", [f"{actual} of {expected} expected Workers joined; missing "
                                  f"{', '.join(missing)}"], [], [])
    return _check("workers", [], [], [f"{actual} of {expected} expected Workers joined"])


def _memory_bytes(value: Any) -> int | None:
    if value is None:
        return None
    try:
        from rlark.preflight.quantities import parse_memory_bytes

        return parse_memory_bytes(value)
    except ValueError:
        return None


def _cpus(value: Any) -> float | None:
    try:
        from rlark.preflight.quantities import parse_cpu

        return float(parse_cpu(value)) if value is not None else None
    except ValueError:
        return None


def check_resources(rec: dict[str, Any]) -> dict[str, Any]:
    """What each Worker saw (CPUs it may run on, memory, GPUs) and what Ray counts on its node
    (the head's node table), against what its role asked: fail for less of either; the evidence
    shows all three, bytes in binary units."""
    import math

    from rlark.record.export import human_bytes

    fails, warns, passes = [], [], []
    for w in _workers(rec):
        res = w.get("resources") or {}
        asked, seen = res.get("asked") or {}, res.get("seen") or {}
        if not (w.get("facts") or {}).get("python"):
            warns.append(f"{_who(w)} reported nothing it saw")
            continue
        who, role = _who(w), w.get("role")
        gpu = int(asked.get("gpu") or 0)
        if seen.get("gpus") is not None and seen["gpus"] < gpu:
            fails.append(f"{who} saw {seen['gpus']} GPUs, role {role} asked for {gpu}")
        cpu = _cpus(asked.get("cpu"))
        if cpu is not None and seen.get("cpus") is not None and seen["cpus"] < math.ceil(cpu):
            fails.append(f"{who} may run on {seen['cpus']} CPUs, role {role} asked for "
                         f"{asked.get('cpu')}")
        mem = _memory_bytes(asked.get("memory"))
        if mem is not None and seen.get("memoryBytes") is not None and seen["memoryBytes"] < mem:
            fails.append(f"{who} saw {human_bytes(seen['memoryBytes'])} of memory, role {role} "
                         f"asked for {asked.get('memory')}")
        ray = seen.get("ray") if isinstance(seen.get("ray"), dict) else None
        if ray is not None:
            if cpu is not None and float(ray.get("CPU", 0)) < cpu:
                fails.append(f"{who}: Ray counts {float(ray.get('CPU', 0)):g} CPUs, role {role} "
                             f"asked for {asked.get('cpu')}")
            if mem is not None and "memory" in ray and float(ray["memory"]) < mem:
                fails.append(f"{who}: Ray counts {human_bytes(ray['memory'])} of memory, role "
                             f"{role} asked for {asked.get('memory')}")
            for name, amount in (asked.get("devices") or {}).items():
                if float(ray.get(name, 0)) < float(amount):
                    fails.append(f"{who}: Ray counts {float(ray.get(name, 0)):g} {name}, role "
                                 f"{role} asked for {amount}")
            if gpu and float(ray.get("GPU", 0)) < gpu:
                fails.append(f"{who}: Ray counts {float(ray.get('GPU', 0)):g} GPUs, role asked "
                             f"for {gpu}")
        passes.append(f"{who}: asked {_amounts(asked.get('cpu'), mem, gpu)}; "
                      + (f"Ray counts {_amounts(ray.get('CPU'), ray.get('memory'), ray.get('GPU', 0))}; "
                         if ray is not None else "")
                      + f"sees {_amounts(seen.get('cpus'), seen.get('memoryBytes'), seen.get('gpus'))}"
                      + (f" ({', '.join(seen.get('gpuModels') or [])})" if seen.get("gpuModels") else ""))
    return _check("resources", fails, warns, passes)


def _amounts(cpus: Any, memory: Any, gpus: Any) -> str:
    """``"1 CPU, 3 GiB memory, 0 GPUs"`` (a part that is None is left out)."""
    from rlark.record.export import human_bytes

    parts = []
    if cpus is not None:
        n = _cpus(cpus)
        parts.append(f"{cpus if n is None else f'{n:g}'} CPU{'' if n == 1 else 's'}")
    if memory is not None:
        parts.append(f"{human_bytes(memory)} memory")
    if gpus is not None:
        parts.append(f"{float(gpus):g} GPU{'' if float(gpus) == 1 else 's'}")
    return ", ".join(parts) or "nothing"


def check_node_grouping(rec: dict[str, Any]) -> dict[str, Any]:
    fails, warns, passes = [], [], []
    ws = _workers(rec)
    data = ((rec.get("configs") or {}).get("resolved") or {}).get("data") or {}
    cluster = data.get("cluster") if isinstance(data, dict) else None
    num = cluster.get("num_nodes") if isinstance(cluster, dict) else None
    expected = (rec.get("workers") or {}).get("expected")
    if isinstance(num, int) and expected is not None and num != expected:
        fails.append(f"cluster.num_nodes is {num}, the roles have {expected} Workers")
    elif isinstance(num, int):
        passes.append(f"cluster.num_nodes {num} = the roles' {expected} Workers")
    else:
        warns.append("no cluster.num_nodes in a resolved config to compare the roles with")
    for w in ws:
        labels = (((w.get("facts") or {}).get("ray_node_table") or {}).get("labels") or {})
        role = labels.get("rlark.io/role")
        if role is not None and role != w.get("role"):
            fails.append(f"{_who(w)}'s Ray node is labelled role {role}, its Worker is {w.get('role')}")
    groups: dict[str, list[int]] = {}
    for w in ws:
        groups.setdefault(str(w.get("role")), []).append(int(w.get("nodeRank") or 0))
    passes.append("; ".join(f"{r}: ranks {', '.join(map(str, sorted(g)))}" for r, g in groups.items()))
    if isinstance(cluster, dict) and isinstance(num, int):
        fails += _node_groups(cluster, {int(w.get("nodeRank") or 0): str(w.get("role")) for w in ws},
                              passes)
    return _check("node-grouping", fails, warns, passes)


def _node_groups(cluster: dict[str, Any], role_of: dict[int, str], passes: list[str]) -> list[str]:
    """RLinf's ``cluster.node_groups`` (parsed as RLinf 0.3.0 does) against the Workers: which
    roles carry each group's ranks (evidence), and a group naming a rank no Worker has (fail)."""
    from rlark.rlinf_config.cluster import parse_cluster

    spec, _ = parse_cluster(cluster)
    if spec is None:
        return ["RLinf would not accept the resolved cluster section (`rlark check` says why)"]
    fails = []
    for g in spec.node_groups:
        missing = [r for r in g.node_ranks if r not in role_of]
        if missing:
            fails.append(f"node group {g.label} names rank {', '.join(map(str, missing))}, which "
                         "no Worker has")
        roles = sorted({role_of[r] for r in g.node_ranks if r in role_of})
        passes.append(f"node group {g.label}: ranks {', '.join(map(str, g.node_ranks))} on role "
                      f"{', '.join(roles) or '-'}")
    return fails


def check_ray_nodes(rec: dict[str, Any]) -> dict[str, Any]:
    fails, passes = [], []
    seen: dict[str, str] = {}
    for w in _workers(rec):
        node = w.get("rayNodeId")
        if not node:
            if w.get("joined") or (rec.get("result") or {}).get("phase") == SUCCEEDED:
                fails.append(f"{_who(w)} has no Ray node id")
            continue
        if node in seen:
            fails.append(f"{_who(w)} and {seen[node]} share Ray node {node[:12]}")
        seen[node] = _who(w)
    passes.append(f"{len(seen)} distinct Ray nodes")
    if (rec.get("result") or {}).get("phase") != SUCCEEDED and len(seen) < len(_workers(rec)):
        return _check("ray-nodes", fails, [f"only {len(seen)} of {len(_workers(rec))} Workers "
                                           "started a Ray node (the Run did not succeed)"], passes)
    return _check("ray-nodes", fails, [], passes)


def check_node_rank(rec: dict[str, Any]) -> dict[str, Any]:
    fails, warns, passes = [], [], []
    for w in _workers(rec):
        got = w.get("rayReportedRank") or {}
        want = str(w.get("nodeRank"))
        for key, what in (("label", "its Ray node's rlark.io/node-rank label"),
                          ("rayletEnv", "RLINF_NODE_RANK in its raylet's environment")):
            value = got.get(key)
            if value is None:
                if w.get("joined"):
                    warns.append(f"{_who(w)}: {what} was not reported")
            elif str(value) != want:
                fails.append(f"{_who(w)}: {what} is {value}, RLark gave rank {want}")
        if got.get("label") is not None and str(got.get("label")) == want \
                and str(got.get("rayletEnv")) == want:
            passes.append(f"{_who(w)}: label {want}, raylet RLINF_NODE_RANK={want}")
    return _check("node-rank", fails, warns, passes)


def check_logs(rec: dict[str, Any], probes: dict[str, Any] | None) -> dict[str, Any]:
    fails, warns, passes = [], [], []
    present = (probes or {}).get("logs")
    for w in _workers(rec):
        if isinstance(present, dict) and w.get("log") and not present.get(w["name"]):
            fails.append(f"{_who(w)}: log {w['log']} is gone")
        elif not w.get("log"):
            warns.append(f"{_who(w)} has no log")
        elif not (w.get("facts") or {}).get("python"):
            warns.append(f"{_who(w)}: its log shows no start (no facts line)")
        else:
            passes.append(f"{_who(w)}: {w['log']}")
    if present is None:
        warns.append("log files were not looked at")
    return _check("logs", fails, warns, passes)


def check_outputs(rec: dict[str, Any], probes: dict[str, Any] | None) -> dict[str, Any]:
    """Each output and checkpoint location, where the server looked for it after the Run
    (``probes["outputs"][path]``: ``exists``, ``readable``, ``entries``, and ``at``: where that
    path of the Workers' view lies on the server's machine, ``why`` when it could not be read)."""
    from rlark.rlinf_config.locations import WRITTEN_KINDS

    if isinstance(rec.get("outputs"), list):
        return check_read_back(rec["outputs"])
    fails, warns, passes = [], [], []
    looked = (probes or {}).get("outputs") or {}
    written = [loc for loc in rec.get("locations") or [] if loc.get("kind") in WRITTEN_KINDS]
    if not written:
        return _check("outputs-readable", [], ["no output or checkpoint location to read back"], [])
    for loc in written:
        path = loc.get("path")
        got = looked.get(path) if path else None
        at = f" (on this machine: {got['at']})" if got and got.get("at") and got["at"] != path else ""
        if got is None:
            warns.append(f"{loc['kind']} path {path or loc.get('value')} ({loc['key']}): "
                         "not readable from the server, not verified")
        elif not got.get("exists"):
            fails.append(f"{loc['kind']} path {path} ({loc['key']}) does not exist after the Run"
                         + (f": {got['why']}" if got.get("why") else at))
        elif not got.get("readable"):
            fails.append(f"{loc['kind']} path {path} ({loc['key']}) cannot be read"
                         + (f": {got['why']}" if got.get("why") else at))
        else:
            passes.append(f"{loc['kind']} path {path}: readable, {got.get('entries')} entries{at}")
    return _check("outputs-readable", fails, warns, passes)


def check_read_back(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """``outputs-readable`` from the record's ``outputs``, each read back after the Run through
    the mount that holds it (:func:`rlark.record.outputs.list_outputs`): fail for an output
    named in ``spec.outputs`` on no writable mount, one that could not be read back, or one
    that holds no file; warn for a config location on no persistent mount or where the server
    cannot look; pass with what was read back, from where."""
    from rlark.record.export import human_bytes

    fails: list[str] = []
    warns: list[str] = []
    passes: list[str] = []
    if not outputs:
        return _check("outputs-readable", [], ["no output or checkpoint location to read back"], [])
    for out in outputs:
        back = out.get("readBack") or {}
        who = f"output {out.get('name')} ({out.get('path')})"
        if not out.get("persistent"):
            line = f"{who} lies on no writable mount of role {out.get('role')}: nothing written " \
                   "there outlives the Workers"
            (fails if out.get("named") else warns).append(line)
        elif not back.get("ok"):
            if back.get("unseen"):
                warns.append(f"{who} was not read back: {back.get('why')}")
            else:
                fails.append(f"{who} could not be read back from {back.get('at') or back.get('via')}: "
                             f"{back.get('why')}")
        elif not out.get("fileCount"):
            fails.append(f"{who} holds no file after the Run ({back.get('at')})")
        else:
            unread = [f for f in out.get("files") or [] if str(f.get("why") or "").startswith("not read")]
            if unread:
                fails.append(f"{who}: {len(unread)} file(s) could not be read back from "
                             f"{back.get('at')}, e.g. {unread[0].get('path')}: {unread[0].get('why')}")
            else:
                passes.append(f"{who}: {out.get('fileCount')} file(s), "
                              f"{human_bytes(out.get('bytes') or 0)}, read back from {back.get('at')}")
    return _check("outputs-readable", fails, warns, passes)


def check_isolation(rec: dict[str, Any]) -> dict[str, Any]:
    """From each Worker's ``keeper`` and ``ray_auth`` facts (bootstrap/keeper.py, worker.py)."""
    fails, warns, passes = [], [], []
    for w in _workers(rec):
        facts = w.get("facts") or {}
        keeper, auth = facts.get("keeper"), facts.get("ray_auth")
        if not isinstance(keeper, dict) or not isinstance(auth, dict):
            if w.get("joined"):
                fails.append(f"{_who(w)} reported no {'keeper' if not isinstance(keeper, dict) else 'Ray authentication'} "
                             "line (a Worker started by an older RLark, or its log lost it)")
            continue
        if not keeper.get("protected"):
            warns.append(f"{_who(w)}: its lifecycle channel was within the workload's reach "
                         f"({keeper.get('unprotected') or 'the keeper could not protect itself'}); "
                         "its result was taken from what the runtime observed")
        if auth.get("mode") != "token":
            warns.append(f"{_who(w)}: Ray without token authentication ({auth.get('why')})")
        else:
            passes.append(f"{_who(w)}: uid {keeper.get('uid')}"
                          f"{', own file system view' if keeper.get('sandbox') else ''}, "
                          "Ray token authentication")
    return _check("isolation", fails, warns, passes)


def run_checks(rec: dict[str, Any], probes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every check of the module table on a record (version 2 layout): ``{"status": worst,
    "items": [{"id", "item", "status", "evidence": [str]}]}``, in the table's order."""
    items = [check_code(rec), check_versions(rec), check_packages(rec), check_images(rec),
             check_configs(rec), check_locations(rec), check_workers(rec), check_resources(rec),
             check_node_grouping(rec), check_ray_nodes(rec), check_node_rank(rec),
             check_logs(rec, probes), check_outputs(rec, probes), check_isolation(rec)]
    worst = max((STATUSES.index(i["status"]) for i in items), default=0)
    return {"status": STATUSES[worst], "items": items}


def failed_checks(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The failed checks of a record (none for a version 1 record, which has no checks)."""
    return [c for c in ((rec.get("checks") or {}).get("items") or []) if c.get("status") == "fail"]
