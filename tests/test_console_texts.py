"""What the console says and how (issue 10, item 12): each error once, the head-role choice
labelled per role, previews with only what differs from the defaults, no Python booleans, the
Job's warnings on its overview, and the server's own texts (Finding messages and hints, reasons,
event texts) in Chinese through the message catalog (codes + parameters, English the fallback).

A real app on a real SQLite store, driven over HTTP with the site administrator's token, as
tests/test_console.py does (no controller runs).
"""

from __future__ import annotations

import html
import re

import pytest
import yaml

from rlark.console.messages import catalog as messages, localize_event, localize_finding
from rlark.findings import Finding
from tests.test_console import (  # noqa: F401  (fixtures)
    client,
    codes,
    current_step,
    finish,
    job_doc,
    post_wizard,
    service,
    wizard_form,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CJK = re.compile(r"[\u4e00-\u9fff]")


def test_each_error_is_shown_once(client):
    r = post_wizard(client, wizard_form(name="Bad_Name", **{"role-1-name": "Pool"}), "next")
    assert current_step(r.text) == 1
    assert codes(r.text).count("InvalidName") == 2  # one for the Job name, one for the role
    text = html.unescape(r.text)
    assert text.count("'Bad_Name' is not a DNS-1123 label") == 1
    assert text.count("'Pool' is not a DNS-1123 label") == 1
    # the notice above the form counts them and lists none of those shown next to a field
    notice = re.search(r'<div class="notice notice-error" role="alert" id="step-errors">(.*?)</div>',
                       r.text, re.S).group(1)
    assert "data-code" not in notice and "2" in notice
    # step 4 lists every Finding once (the hidden steps carry none of them)
    r = post_wizard(client, wizard_form(step="4", **{"role-0-gpu": "64"}), "next")
    assert current_step(r.text) == 4 and codes(r.text).count("ExceedsHostGpu") == 1


def test_a_refused_submit_says_it_once(client, service):
    service.create(job_doc("taken"))
    r = post_wizard(client, wizard_form(step="4", name="taken"), "submit")
    assert current_step(r.text) == 4 and codes(r.text).count("NameTaken") == 1
    assert 'id="submit-error"' not in r.text and "already exists" not in r.text


def test_the_head_role_choice_is_labelled_per_role(client):
    r = post_wizard(client, wizard_form(), "add-role")
    labels = re.findall(r'<label for="head-(\d)"><span aria-hidden="true">[^<]*</span>'
                        r'<span class="sr-only">([^<]*)</span></label>', r.text)
    assert labels == [("0", "Role 1 (head) is the head role"), ("1", "Role 2 (pool) is the head role"),
                      ("2", "Role 3 (role1) is the head role")]


def test_previews_show_only_what_differs_from_the_defaults(client, service):
    r = post_wizard(client, wizard_form(step="3"), "next")
    preview = re.search(r'id="yaml-preview"[^>]*>(.*?)</pre>', r.text, re.S).group(1)
    doc = yaml.safe_load(preview.replace("&#34;", '"').replace("&#39;", "'"))
    spec = doc["spec"]
    assert spec["failurePolicy"] == {"joinTimeoutSeconds": 60, "prepareTimeoutSeconds": 120}
    assert spec["terminationGracePeriodSeconds"] == 5
    assert spec["roles"][0] == {"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                                "resources": {"cpu": 1, "memory": "1Gi"},
                                "env": [{"name": "GREETING", "value": "hello"}]}
    assert spec["roles"][1] == {"name": "pool", "workers": 2, "image": "docker.io/rlinf/rlinf:0.3.0"}
    assert not re.search(r":\s+\d+\.0\n", preview)  # whole numbers as integers
    assert "gpu: 0" not in preview and "maxRestarts" not in preview
    post_wizard(client, wizard_form(step="4"), "submit")
    page = client.get("/jobs/wiz?tab=spec").text
    shown = re.search(r'<h2 id="h-yaml">.*?<pre class="code-block"[^>]*>(.*?)</pre>', page, re.S).group(1)
    assert yaml.safe_load(shown.replace("&#34;", '"').replace("&#39;", "'"))["spec"] == spec
    # the stored spec keeps every field (the API's view); only the preview is trimmed
    assert service.get("wiz")["spec"]["spec"]["roles"][0]["resources"]["gpu"] == 0


def test_the_unresponsive_timeout_is_a_field_of_the_wizard(client, service):
    """failurePolicy.unresponsiveTimeoutSeconds has its own field: a Job file's value fills
    it (never the hidden extras), and what is typed there reaches the Job."""
    from rlark.console.wizard import WizardState

    st = WizardState.from_spec({"metadata": {"name": "x"}, "spec": {
        "failurePolicy": {"joinTimeoutSeconds": 300, "unresponsiveTimeoutSeconds": 0}}})
    assert st.unresponsive_timeout == "0" and "failurePolicy" not in st.extra
    r = post_wizard(client, wizard_form(step="3", unresponsiveTimeout="90"), "next")
    assert 'id="f-unresponsiveTimeout"' in r.text
    preview = re.search(r'id="yaml-preview"[^>]*>(.*?)</pre>', r.text, re.S).group(1)
    doc = yaml.safe_load(preview.replace("&#34;", '"').replace("&#39;", "'"))
    assert doc["spec"]["failurePolicy"]["unresponsiveTimeoutSeconds"] == 90


def test_mounts_say_yes_or_no_not_python_booleans(client, service):
    doc = yaml.safe_load(job_doc("mounted"))
    doc["spec"]["roles"][0]["mounts"] = [
        {"name": "ro", "type": "pvc", "source": "data", "mountPath": "/ro", "readOnly": True},
        {"name": "rw", "type": "pvc", "source": "out", "mountPath": "/rw"}]
    service.create(yaml.safe_dump(doc))
    page = client.get("/jobs/mounted?tab=record").text
    table = re.search(r'<h2 id="h-mounts">.*?</table>', page, re.S).group(0)
    assert "True" not in table and "False" not in table
    cells = re.findall(r"<td>(yes|no)</td>", table)
    assert cells == ["yes", "no"]


def test_the_overview_shows_the_jobs_warnings(client, service):
    doc = yaml.safe_load(job_doc("warned"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    service.create(yaml.safe_dump(doc))
    page = client.get("/jobs/warned").text
    card = re.search(r'<section class="card" aria-labelledby="h-job-findings" id="job-findings">(.*?)</section>',
                     page, re.S).group(1)
    assert 'data-code="DuplicateEnv"' in card and "the last value wins" in card
    assert 'id="job-findings"' not in client.get(f"/jobs/{service.create(job_doc('clean'))['name']}").text


def test_an_unchanged_edit_starts_nothing_and_says_so(client, service):
    service.create(job_doc("same"))
    form = wizard_form(step="4", mode="edit", original="same", name="same", runScript="echo hi",
                       joinTimeout="300", prepareTimeout="1800", grace="10")
    form.update({"role-0-cpu": "", "role-0-memory": "", "role-0-env-0-name": "",
                 "role-0-env-0-value": "", "role-1-workers": "1"})
    r = post_wizard(client, form, "submit")
    assert r.headers["HX-Redirect"] == "/jobs/same"
    assert [x["number"] for x in service.get("same")["runs"]] == [1]
    assert "is unchanged: its spec is the same, so no Run was started" in client.get("/jobs/same").text


# --- the server's texts in Chinese --------------------------------------------------------------------


def test_every_preflight_finding_is_in_the_catalog_in_both_languages():
    """Every Finding the spec and value rules produce (all rows of tests/test_preflight.py) is
    known to the catalog: its message and hint come out in Chinese, the parameters (paths,
    values) as they were."""
    from tests.test_preflight import ROWS, base, findings_of

    seen = 0
    for row in ROWS:
        data = base()
        row.mutate(data)
        for f in findings_of(data):
            message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN")
            assert CJK.search(message) and message != f.message, (f.code, f.message)
            assert CJK.search(hint) and hint != f.hint, (f.code, f.hint)
            assert f.path in message, (f.code, message)
            seen += 1
    assert seen > 80


def test_local_runtime_findings_are_translated():
    from rlark.runtimes.local.preflight import check_for_local_runtime
    from rlark.spec import load_job

    doc = yaml.safe_load(job_doc("local"))
    doc["spec"]["workingDir"] = "/nonexistent/work"
    role = doc["spec"]["roles"][0]
    role["resources"] = {"gpu": 2, "cpu": 999, "memory": "9999Gi"}
    role["local"] = {"python": "/nonexistent/python"}
    role["nodeSelector"] = {"pool": "a"}
    role["mounts"] = [{"name": "p", "type": "objectStorage", "source": "s3://bucket/x", "mountPath": "/p",
                       "objectStorage": {"mode": "fuse"}},
                      {"name": "g", "type": "objectStorage", "source": "gs://bucket/x", "mountPath": "/g"},
                      {"name": "h", "type": "hostPath", "source": "/nonexistent/h", "mountPath": "/h"},
                      {"name": "t", "type": "hostPath", "source": "/tmp", "mountPath": "/data"}]
    job, _ = load_job(yaml.safe_dump(doc))
    findings = check_for_local_runtime(job, {"cpu": 2, "memory": 2**30, "gpu": 0})
    assert {f.code for f in findings} >= {"ExceedsHostGpu", "ExceedsHostCpu", "ExceedsHostMemory",
                                          "WorkingDirMissing", "MountUnavailable",
                                          "MountSourceMissing", "PythonNotFound",
                                          "NodeSelectorIgnoredLocally"}
    for f in findings:
        message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN")
        assert CJK.search(message) and CJK.search(hint), (f.code, f.message, f.hint)


def test_unknown_texts_stay_english_and_console_hints_fit_the_console():
    assert localize_finding("SomethingNew", "a new message", "a new hint", "zh-CN") == (
        "a new message", "a new hint")
    # a known code whose text changed: English, not a broken translation
    assert localize_finding("InvalidGpu", "reworded entirely", "h", "zh-CN") == ("reworded entirely", "h")
    f = Finding(code="RelativePath", path="spec.workingDir",
                message="spec.workingDir = '.' is not an absolute path",
                hint="write an absolute path (a Job sent without its file has nothing to resolve a "
                     "relative one against; `rlark submit FILE` resolves it against FILE's directory)")
    for locale in ("en", "zh-CN"):
        message, hint = localize_finding(f.code, f.message, f.hint, locale)
        assert "rlark submit" not in hint and "'.'" in message
    assert localize_finding(f.code, f.message, f.hint, "en", where="api") == (f.message, f.hint)


def test_catalog_entries_are_well_formed():
    """Every Chinese template uses only its English template's parameters and says something in
    Chinese itself (or through a parameter that is a message of its own); every reason and
    every check has its Chinese label."""
    import string

    from rlark.record.checks import ITEMS
    from rlark.status import Reason

    cat = messages()
    groups = [("text", cat["text"])]
    groups += [(code, t) for code, e in cat["finding"].items() for t in (e["message"], e["hint"])]
    groups += [(reason, t) for reason, t in cat["event"].items()]
    groups += [(cid, e["evidence"]) for cid, e in cat["check"].items()]
    for code, templates in groups:
        for tpl in templates:
            fields = {f for _, f, _, _ in string.Formatter().parse(tpl.en) if f}
            other = {f for _, f, _, _ in string.Formatter().parse(tpl.other) if f}
            assert other <= fields, (code, tpl.en, tpl.other)
            nested = any(kind in ("msg", "list", "parts") for kind in tpl.kinds.values())
            # Chinese words, or Chinese punctuation around what is quoted as code
            assert CJK.search(tpl.other) or nested or re.search("[\u3000-\u303f\uff00-\uffef]",
                                                                tpl.other), (code, tpl.other)
    assert all(CJK.search(v) for v in cat["reason"].values())
    assert set(cat["reason"]) == {r.value for r in Reason}
    assert set(cat["check"]) == set(ITEMS) and all(CJK.search(c["item"]) for c in cat["check"].values())


def test_chinese_pages_translate_findings_reasons_and_events(client, service):
    doc = yaml.safe_load(job_doc("zhtexts"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    service.create(yaml.safe_dump(doc))
    finish(service, "zhtexts")  # RunFailed: the run script on x-head-0 exited with code 3
    client.cookies.set("rlark_lang", "zh-CN")
    page = client.get("/jobs/zhtexts").text
    assert "spec.roles[0].env[1].name = &#39;A&#39; 设置了多次；以最后一个为准" in page
    assert "每个变量只保留一项" in page
    assert "x-head-0 上的运行脚本以退出码 3 结束" in page
    assert 'data-reason="RunFailed"' in page and "运行脚本失败" in page
    events = client.get("/jobs/zhtexts?tab=events").text
    assert "作业已接受：2 个 Worker，2 个角色" in events
    assert "设置了多次" in events  # the warning events carry the Finding's message
    review = post_wizard(client, wizard_form(step="4", **{"role-0-gpu": "64"}), "next").text
    assert "这些 Worker 共需要 64 个 GPU" in review and "请减少 resources.gpu" in review
    client.cookies.set("rlark_lang", "en")
    assert "the last value wins" in client.get("/jobs/zhtexts").text


def test_event_texts_translate_by_reason_with_english_fallback():
    assert localize_event("Submitted", "Job accepted: 1 Worker in 1 role by alice", "zh-CN") == \
        "作业已接受：1 个 Worker，1 个角色（alice）"
    assert localize_event("NodeJoined", "rank 2 (j-pool-1) joined as Ray node abcdef012345 at "
                          "127.0.0.3", "zh-CN") == \
        "序号 2（j-pool-1）已作为 Ray 节点 abcdef012345 加入，地址 127.0.0.3"
    assert localize_event("Whatever", "unchanged text", "zh-CN") == "unchanged text"
    assert localize_event("Submitted", "Job accepted: 1 Worker in 1 role", "en") == \
        "Job accepted: 1 Worker in 1 role"
    # a failure message followed by the Worker's last lines: the lines stay as written
    text = "the run script on j-head-0 exited with code 2\nTraceback (most recent call last):"
    assert localize_event("RunFailed", text, "zh-CN") == \
        "j-head-0 上的运行脚本以退出码 2 结束\nTraceback (most recent call last):"


# --- every text the server composes, from the code that composes it (issue 19, item 2) -------------

from rlark.console.messages import (  # noqa: E402
    check_evidence,
    check_item,
    message_text,
    ray_node_text,
)
from tests.english import english_words  # noqa: E402


def chinese(text: str, names: set[str] = frozenset()) -> str:
    """``text`` itself, once it is shown to be Chinese: CJK in it and no English word left
    (tests/english.py)."""
    assert CJK.search(text) and not english_words(text, set(names)), (text, english_words(text, set(names)))
    return text


def _finding_codes_in_the_source() -> dict[str, str]:
    """Every Finding code a producer outside the console writes as a literal, with the file."""
    import ast
    from pathlib import Path

    import rlark

    root = Path(rlark.__file__).parent
    makers = {"Finding", "_err", "_warn", "_info", "_error", "_warning", "err", "warn", "info",
              "error", "warning", "finding", "_finding", "_f"}
    found: dict[str, str] = {}
    for path in root.rglob("*.py"):
        if "console" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in makers:
                continue
            code = next((k.value.value for k in node.keywords if k.arg == "code"
                         and isinstance(k.value, ast.Constant)), None)
            if code is None and node.args and isinstance(node.args[0], ast.Constant):
                code = node.args[0].value
            if isinstance(code, str) and code.isidentifier() and code[:1].isupper():
                found[code] = str(path.relative_to(root))
    return found


def test_every_finding_code_the_server_makes_is_in_the_catalog():
    codes = _finding_codes_in_the_source()
    assert len(codes) > 100
    missing = {c: f for c, f in codes.items() if not messages()["finding"].get(c, {}).get("message")}
    assert not missing, missing


def _job(**role):
    """A one-role Job with ``role``'s fields, and every Finding of the spec's own checks."""
    from rlark.preflight.job import check_document

    data = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "zh"},
            "spec": {"headRole": "head", "runScript": "true",
                     "roles": [{"name": "head", "image": "x/y:1", **role}]}}
    return check_document(data)


def _all_chinese(findings, names=frozenset({"zh", "head"})) -> set[str]:
    for f in findings:
        message, hint = localize_finding(f.code, f.message, f.hint, "zh-CN", where="cli")
        chinese(message, names)
        if f.hint:
            chinese(hint, names)
    return {f.code for f in findings}


def test_findings_of_resources_secrets_and_the_local_runtime_in_chinese(tmp_path):
    from rlark.runtimes.local.runtime import LocalRuntime
    from rlark.runtimes.local.identity import DEFAULT_RANGE, Identity, UidRange, many_users_message
    from rlark.runtimes.local.sandbox import access_problem

    seen: set[str] = set()
    for role in ({"resources": {"cpu": 4, "memory": "1Gi", "objectStoreMemory": "1Gi"},
                  "ray": {"workerPorts": 5}},
                 {"resources": {"objectStoreMemory": "1x"}},
                 {"resources": {"objectStoreMemory": "10Mi"}},
                 {"ray": {"workerPorts": 0}},
                 {"env": [{"name": "API_TOKEN", "value": "x"},
                          {"name": "B", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                          {"name": "C", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k!"}}}]}):
        job, found = _job(**role)
        seen |= _all_chinese(found)
    assert {"ObjectStoreExceedsMemory", "WorkerPortsTight", "InvalidObjectStoreMemory",
            "ObjectStoreTooSmall", "InvalidWorkerPorts", "PlainSecretEnv", "EnvValueAndValueFrom",
            "InvalidSecretRef"} <= seen
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    home = tmp_path / "home"
    for path, what in ((str(private), "spec.workingDir"), (str(home / "x"), "spec.workingDir"),
                       (str(tmp_path), "spec.roles[0].mounts[0].source")):
        problem = access_problem(path, what, rlark_home=str(home), allowed=[], stat=__import__("os").stat)
        if problem is not None:
            chinese(localize_finding("NotReadableByWorkers", problem, "", "zh-CN")[0],
                    {path, what})
    chinese(localize_finding("IdentityUnavailable", many_users_message("2 user accounts are enabled"), "",
                             "zh-CN")[0])
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    job, _ = _job(mounts=[{"name": "s", "type": "hostPath", "source": str(shared), "mountPath": "/d"}])
    own = LocalRuntime(identity=Identity("uid", uids=UidRange(*DEFAULT_RANGE)))
    assert _all_chinese(own._mount_findings(0, job.spec.roles[0])) == {"HostPathNotWritable"}
    for why in ("the server is not root, so it cannot switch a Worker to another uid",
                "asked for (--worker-identity server-user)"):
        solo = LocalRuntime(identity=Identity("server-user", why=why, uids=UidRange(*DEFAULT_RANGE)))
        said = [f for f in solo.preflight(_job()[0]) if f.code == "WorkersRunAsServer"]
        assert said and _all_chinese(said) == {"WorkersRunAsServer"}


def test_findings_of_the_kubernetes_policy_and_capacity_in_chinese():
    from rlark.runtimes.kubernetes.podpolicy import PodPolicy, check_pod_policy
    from rlark.runtimes.kubernetes.preflight import check_for_kubernetes
    from tests.test_k8s_capacity import four_node_inventory

    seen: set[str] = set()
    job, _ = _job(kubernetes={"runAsRoot": True, "serviceAccountName": "robot",
                              "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
                  mounts=[{"name": "h", "type": "hostPath", "source": "/etc/x", "mountPath": "/h"},
                          {"name": "d", "type": "hostPath", "source": "/srv/data", "mountPath": "/d"},
                          {"name": "r", "type": "hostPath", "source": "rel", "mountPath": "/r"},
                          {"name": "o", "type": "objectStorage", "source": "s3://b/p", "mountPath": "/o",
                           "kubernetes": {"csiDriver": "fuse.example.com", "storageClass": "fast"}}])
    seen |= _all_chinese(check_pod_policy(job, PodPolicy()))
    job, _ = _job(kubernetes={"runAsUser": 0})
    seen |= _all_chinese(check_pod_policy(job, PodPolicy()))
    nodes = four_node_inventory()
    for role in ({"resources": {"cpu": 500, "memory": "1Gi"}},
                 {"resources": {"cpu": 60, "memory": "900Gi"}},
                 {"nodeSelector": {"pool": "nowhere"}},
                 {"workers": 40, "resources": {"cpu": 8}},
                 {"local": {"python": "/usr/bin/python3"},
                  "mounts": [{"name": "p", "type": "pvc", "source": "c", "mountPath": "/p",
                              "kubernetes": {"size": "lots"}},
                             {"name": "o", "type": "objectStorage", "source": "s3://b/p",
                              "mountPath": "/o", "objectStorage": {"mode": "fuse"}},
                             {"name": "c", "type": "objectStorage", "source": "s3://b/p",
                              "mountPath": "/c", "objectStorage": {"mode": "copy"},
                              "kubernetes": {"storageClass": "fast"}},
                             {"name": "g", "type": "objectStorage", "source": "s3://B/p",
                              "mountPath": "/g"}]}):
        job, _ = _job(**role)
        seen |= _all_chinese(check_for_kubernetes(job, nodes, free_basis="cluster"),
                             {"zh", "head"} | {n.name for n in nodes})
    seen |= _all_chinese(check_for_kubernetes(_job()[0], None, inventory_error="403 Forbidden"))
    assert {"RootNotAllowed", "ServiceAccountNotAllowed", "TolerationNotAllowed",
            "HostPathNotAllowed", "CsiDriverNotAllowed", "InvalidRunAsUser",
            "ExceedsNodeCapacity", "NoEligibleNode", "LocalSettingIgnored",
            "CapacityUnknown", "ObjectStorageNeedsDriver", "ObjectStorageModeConflict",
            "InvalidMountSource"} <= seen, seen


def test_findings_of_rlinf_cluster_sections_in_chinese():
    from rlark.rlinf_config.cluster import node_group_findings, parse_cluster

    seen: set[str] = set()
    for section in ("nope", {"num_nodes": -1, "component_placement": {}},
                    {"num_nodes": 2, "component_placement": {"actor": "0-1"}, "bogus": 1},
                    {"num_nodes": 2, "component_placement": {"actor": "0-1"},
                     "node_groups": [{"label": "cluster", "node_ranks": "0"},
                                     {"label": "a", "node_ranks": "0-5"},
                                     {"label": "b", "node_ranks": "1", "hardware": {"type": "Nope"}},
                                     {"label": "c", "node_ranks": "1", "env_configs": "x"}]},
                    {"num_nodes": 2, "component_placement": {"actor": "0-1"},
                     "node_groups": [{"label": "d", "node_ranks": "1", "oops": 1},
                                     {"label": "e", "node_ranks": "1",
                                      "hardware": {"type": "Nope", "configs": []}}]},
                    {"num_nodes": 2, "component_placement": {"actor": "0-1"},
                     "profiling": {"backend": "nope", "steps": "x"}}):
        spec, found = parse_cluster(section)
        seen |= _all_chinese(found)
        if spec is not None:
            seen |= _all_chinese(node_group_findings(spec))
    assert {"ClusterSectionInvalid", "NumNodesInvalid", "RLinfFieldUnknown", "RLinfFieldMissing",
            "NodeGroupLabelReserved", "NodeRanksInvalid", "HardwareInvalid",
            "EnvConfigInvalid", "ProfilingInvalid"} <= seen, seen


def test_the_config_name_mismatch_in_chinese():
    """spec.rlinf.configName against the run script's --config-name (rlinf_config/script.py)."""
    from rlark.rlinf_config.script import config_name_findings
    from rlark.spec import Job

    job = Job.model_validate({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "zh"},
        "spec": {"headRole": "head", "runScript": "python train.py --config-name other",
                 "rlinf": {"configName": "mine", "configDir": "examples/x"},
                 "roles": [{"name": "head", "image": "x/y:1"}]}})
    assert _all_chinese(config_name_findings(job)) == {"RLinfConfigNameMismatch"}


def _view(name, rank, **kw):
    from rlark.controller.phases import WorkerView

    return WorkerView(name=name, role="head" if rank == 0 else "pool", node_rank=rank,
                      is_head=rank == 0, **kw)


NAMES = {"j-head-0", "j-pool-0", "j-pool-1", "head", "pool", "admin"}


def test_run_worker_and_condition_messages_of_the_controller_in_chinese():
    """What the controller's pure decisions say (controller/phases.py): every failure, stop and
    success message, every Worker's end, every condition, in Chinese."""
    from rlark.controller.phases import (RunView, Transition, decide, failure_conditions,
                                         observed_conditions, settle)
    from rlark.status import Phase, Reason, WorkerPhase

    def run(phase, workers, **kw):
        return RunView(phase=phase, stop_requested=kw.pop("stop", False), workers=workers, **kw)

    up = dict(launched=True, alive=True, joined=True)
    cases = [
        run(Phase.Starting, [_view("j-head-0", 0, launched=True, alive=False, exit_code=4,
                                   failed={"reason": "PrepareFailed", "ts": 1,
                                           "message": "prepare script exited with code 4"})]),
        run(Phase.Starting, [_view("j-head-0", 0, launched=True, alive=False, exit_code=86,
                                   failed={"reason": "NodeLost", "ts": 1, "exit_code": 1,
                                           "message": "`ray start` exited with code 1 while the node should be alive"})]),
        run(Phase.Starting, [_view("j-head-0", 0, **up),
                             _view("j-pool-0", 1, launched=True, alive=True)],
            now=200.0, launched_at=0.0, join_timeout=60.0),
        run(Phase.Running, [_view("j-head-0", 0, launched=True, alive=True, joined=True,
                                  failed={"reason": "JoinTimeout", "ts": 1, "missing_ranks": [1],
                                          "message": "rank 1 did not join within 70 s of the head's start"}),
                            _view("j-pool-0", 1, launched=True, alive=True)]),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True,
                                  run_finished={"exit_code": 3, "ts": 2}, exit_code=3)]),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True,
                                  run_finished={"exit_code": 137, "ts": 2})]),
        # the kernel's OOM killer, as the keeper counted it: the run script, a prepare script
        # (with and without a limit), and OOM kills beside another failure
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True, run_finished={
            "exit_code": 137, "ts": 2, "oom_kills": 1, "memory_limit": 1 << 30})]),
        run(Phase.Starting, [_view("j-head-0", 0, launched=True, alive=True, failed={
            "reason": "PrepareFailed", "ts": 1, "exit_code": 137, "oom_kills": 1,
            "message": "prepare script was killed by signal 9"})]),
        run(Phase.Starting, [_view("j-head-0", 0, launched=True, alive=True, failed={
            "reason": "PrepareFailed", "ts": 1, "exit_code": 137, "oom_kills": 1,
            "memory_limit": 1 << 30, "message": "prepare script was killed by signal 9"})]),
        run(Phase.Starting, [_view("j-head-0", 0, launched=True, alive=True, failed={
            "reason": "PrepareFailed", "ts": 1, "exit_code": 137,
            "message": "prepare script was killed by signal 9"})]),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True),
                            _view("j-pool-0", 1, **up, failed={
                                "reason": "NodeLost", "ts": 1, "exit_code": 1, "oom_kills": 2,
                                "memory_limit": 1 << 30,
                                "message": "`ray start` exited with code 1 while the node should be alive"})]),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True),
                            _view("j-pool-0", 1, **up, failed={
                                "reason": "NodeLost", "ts": 1, "exit_code": 1, "oom_kills": 2,
                                "message": "`ray start` exited with code 1 while the node should be alive"})]),
        run(Phase.Running, [_view("j-head-0", 0, launched=True, alive=False, joined=True,
                                  running=True, exit_code=0)]),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True),
                            _view("j-pool-0", 1, launched=True, alive=False, joined=True, exit_code=1)]),
        run(Phase.Starting, [_view("j-head-0", 0, **up, running=True),
                             _view("j-pool-0", 1, **up)]),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True, run_finished={"exit_code": 0, "ts": 2})]),
        run(Phase.Pending, [_view("j-head-0", 0)], stop=True),
        run(Phase.Running, [_view("j-head-0", 0, **up)], stop=True),
        run(Phase.Stopping, [_view("j-head-0", 0, launched=True, alive=False)]),
        # Responsive True, then two silent Workers (no line; stopped processes) that fail it
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True, heartbeat=10.0,
                                  last_seen=95.0)], now=100.0),
        run(Phase.Running, [_view("j-head-0", 0, **up, running=True, heartbeat=10.0,
                                  last_seen=0.0),
                            _view("j-pool-0", 1, **up, heartbeat=10.0, last_seen=399.0,
                                  stopped_since=1.0)], now=400.0, unresponsive_timeout=300.0),
    ]
    said = []
    for r in cases:
        for t in decide(r):
            said.append((t.reason, t.message))
            said += [(c.reason, c.message) for c in failure_conditions(t)]
            for w in r.workers:
                s = settle(w, t.to, t.reason, t.blamed) if t.to in (Phase.Succeeded, Phase.Failed,
                                                                     Phase.Stopped) else None
                if s is not None and s.message:
                    said.append((s.reason, s.message))
        said += [(c.reason, c.message) for c in observed_conditions(r)]
    for phase in (WorkerPhase.Preparing, WorkerPhase.StartingRay, None):
        said += [(c.reason, c.message) for c in observed_conditions(run(Phase.Starting, [
            _view("j-head-0", 0, launched=True, alive=True, reported_phase=phase),
            _view("j-pool-0", 1, launched=True, alive=True)]))]
    said.append((Reason.Completed, settle(_view("j-pool-0", 1), Phase.Succeeded).message))
    said.append((Reason.WorkerFailed, settle(_view("j-pool-0", 1, launched=True, alive=True),
                                             Phase.Failed, Reason.ImagePull, ("j-pool-0",)).message))
    reasons = {r for r, _ in said}
    assert len(said) > 30 and {Reason.PrepareFailed, Reason.RayStartFailed, Reason.JoinTimeout,
                               Reason.RunFailed, Reason.HeadLost, Reason.WorkerLost,
                               Reason.AllJoined, Reason.Completed, Reason.StopRequested,
                               Reason.Stopped, Reason.StoppedByRLark, Reason.NotLaunched,
                               Reason.WaitingForWorkers, Reason.HeadStarting,
                               Reason.RayHeadStarted, Reason.Responding,
                               Reason.WorkerUnresponsive, Reason.OOMKilled} <= reasons, reasons
    for reason, text in said:
        chinese(message_text(reason, text, "zh-CN"), NAMES)
        assert message_text(reason, text, "en") == text
    assert Transition  # the type the messages come in


def test_admission_and_service_messages_in_chinese(client, service):
    from rlark.controller.admission import Amounts, Candidate, Capacity, Usage, admit

    gib = 1 << 30
    cap = Capacity(total=Amounts(2, 8 * gib, 0), max_starting_nodes=2)
    queue = [Candidate("a", Amounts(4, gib, 0), 1), Candidate("b", Amounts(1, gib, 1), 1),
             Candidate("c", Amounts(1, gib, 0), 1)]
    said = [d.message for d in admit(queue, Usage(held=Amounts(1, gib, 0), starting_nodes=0,
                                                  busy=True), cap).values() if d.message]
    said += [d.message for d in admit([Candidate("d", Amounts(1, gib, 0), 3)],
                                      Usage(held=Amounts(0, 0, 0), starting_nodes=2, busy=True),
                                      cap).values() if d.message]
    # every CPU held: the message ends in "... GiB memory", which the general "{mem} memory"
    # template once swallowed whole (the queue's text left in English)
    said += [d.message for d in admit([Candidate("e", Amounts(1, gib, 0), 1)],
                                      Usage(held=Amounts(2, gib, 0), starting_nodes=0, busy=True),
                                      cap).values() if d.message]
    assert said[-1].endswith("GiB memory"), said[-1]
    assert len(said) >= 4
    for text in said:
        chinese(message_text("Queued", text, "zh-CN"))
    # what the service records: acceptance, runs, stop, replace, delete, the Job's warnings
    doc = yaml.safe_load(job_doc("said"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    service.create(yaml.safe_dump(doc))
    client.post("/jobs/said/restart", data={"next": "/jobs/said"})
    service.replace("said", yaml.safe_dump({**doc, "spec": {**doc["spec"], "runScript": "echo 2"}}))
    service.stop("said")
    service.delete("said")
    events = [e for e in service.events("said")] if False else []
    from rlark.store import EventRow

    with service.store.session() as s:
        events = [(e.reason, e.message) for e in s.query(EventRow).all()]
    assert len({r for r, _ in events}) >= 5
    for reason, text in events:
        chinese(message_text(reason, text, "zh-CN"), NAMES | {"said", "A"})


def test_record_check_items_and_evidence_in_chinese():
    """Every check's item and evidence of records that pass, warn and fail
    (tests/test_record_v2.py's Runs), and the RecordVerified message they give."""
    import copy

    from rlark.record.build import build_record
    from rlark.record.finish import record_condition
    from tests.test_record_v2 import COMPOSED, PROBES, facts, rows

    other = facts(2, "pool", packages=("ray==2.60.0", "rlinf==0.3.1"))
    no_gpu = facts(0, "head", gpus=0)
    bare = facts(1, "pool")
    for key in ("keeper", "python"):
        bare.pop(key)
    records = [build_record(*rows(), composed=COMPOSED, probes=PROBES),
               build_record(*rows(facts={2: other}), composed=COMPOSED, probes=PROBES),
               build_record(*rows(facts={0: no_gpu, 1: bare}), composed=None, probes=None)]
    job, run, workers = rows()
    run.spec = copy.deepcopy(run.spec)
    run.spec["spec"]["roles"][1]["image"] = "docker.io/rlinf/rlinf"
    run.phase = "Failed"
    records.append(build_record(job, run, workers, composed=COMPOSED, probes={
        "outputs": {"/w/out/run1": {"exists": False}}, "logs": {"rec-head-0": False}}))
    names = {"rec-head-0", "rec-pool-0", "rec-pool-1", "head", "pool", "box", "out", "exp"}
    seen = 0
    for rec in records:
        for c in rec["checks"]["items"]:
            chinese(check_item(c["id"], c["item"], "zh-CN"))
            for line in c["evidence"]:
                chinese(check_evidence(c["id"], line, "zh-CN"), names)
                seen += 1
        _, _, reason, text = record_condition(rec)
        chinese(message_text(reason, text, "zh-CN"), names)
    assert seen > 50


def test_ray_node_summary_in_both_languages():
    view = {"cpus": 1, "gpus": 2, "memoryBytes": 1 << 30, "objectStoreBytes": 307 << 20,
            "workerPorts": 48, "devices": {"rdma/hca": 1}}
    assert ray_node_text(view, "en") == ("1 CPU, 2 GPUs, 1 GiB memory, 307 MiB object store, "
                                         "48 worker ports, 1 rdma/hca")
    assert chinese(ray_node_text(view, "zh-CN")) == (
        "1 个 CPU，2 个 GPU，内存 1 GiB，对象存储 307 MiB，48 个工作进程端口，1 个 rdma/hca")
    assert ray_node_text(None, "zh-CN") == ""
