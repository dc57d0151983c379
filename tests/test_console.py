"""The web console without a browser: pages, wizard steps, actions, downloads, languages.

A real app (create_app) on a real SQLite store, driven through HTTP with the TestClient as the
site administrator (an API token: console pages take one too); no controller runs, so Jobs stay
as the service leaves them. Logging in, sessions, CSRF and roles: test_console_auth.py. Browser
tests: test_console_browser.py.
"""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest

from rlark.console import HTMX_VERSION, STATIC_DIR
from rlark.console.i18n import CATALOG_DIR, LOCALES, Translator, catalog, negotiate
from rlark.console.logview import stamp_of
from rlark.console.wizard import WizardState
from rlark.console.wizard_steps import field_of, step_of
from rlark.status import Cause, ConditionType, Phase, WorkerPhase
from rlark.findings import Finding
from rlark.spec import job_to_dict, load_job
from rlark.store import WorkerRow
from tests.access import admin_token, api_client

TEMPLATES = Path(__file__).resolve().parent.parent / "src" / "rlark" / "console" / "templates"
HOST = {"cpu": 16, "memory": 64 * 1024**3, "gpu": 0}


def job_doc(name: str, *, image: str = "docker.io/rlinf/rlinf:0.3.0", workers: int = 1,
            run: str = "echo hi") -> str:
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  roles:
    - {{name: head, workers: 1, image: "{image}"}}
    - {{name: pool, workers: {workers}, image: "{image}"}}
  runScript: {json.dumps(run)}
"""


@pytest.fixture
def service(rlark_home):
    from rlark.services.jobs import JobService
    from rlark.store import Store

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    yield JobService(store, host=HOST)
    store.dispose()


@pytest.fixture
def client(service):
    from rlark.server import create_app

    with api_client(create_app(service), admin_token(service.store), follow_redirects=False) as c:
        yield c


def finish(service, name: str, phase: str = "Failed", reason: str = "RunFailed",
           message: str = "the run script on x-head-0 exited with code 3") -> None:
    """What the controller does when a Run ends (no controller runs in these tests)."""
    from rlark.store import JobRow, RunRow

    with service.store.session() as s:
        job = s.query(JobRow).filter_by(name=name).one()
        for run in s.query(RunRow).filter_by(job_id=job.id):
            if run.id != job.current_run_id:
                run.phase, run.reason = "Stopped", "Stopped"
        run = s.get(RunRow, job.current_run_id)
        for row in (job, run):
            row.phase, row.reason, row.message = phase, reason, message
        run.exit_code = 3 if phase == "Failed" else 0


def observe(service, name: str) -> None:
    """Conditions on the Job's current Run, as the controller's pass writes them."""
    from rlark.status import ConditionType, Reason, set_condition
    from rlark.store import JobRow, RunRow

    with service.store.session() as s:
        job = s.query(JobRow).filter_by(name=name).one()
        run = s.get(RunRow, job.current_run_id)
        c = set_condition([], ConditionType.AllJoined, False, Reason.WaitingForWorkers,
                          "1/3 Ray nodes joined; waiting for rank 2", "2026-12-01T04:12:03Z")
        c = set_condition(c, ConditionType.HeadReady, True, Reason.RayHeadStarted,
                          f"the Ray head on {name}-head-0 is up", "2026-12-01T04:12:05Z")
        run.conditions = set_condition(c, ConditionType.ReconcileError, True, Reason.ReconcileFailed,
                                       "OSError: the API server went away", "2026-12-01T04:12:07Z")


def wizard_form(**over) -> dict[str, str]:
    """A complete, valid wizard form (two roles) at step 1."""
    form = {
        "step": "1", "mode": "create", "original": "", "tab": "0", "extra": "",
        "name": "wiz", "head": "0",
        "role-0-name": "head", "role-0-workers": "1", "role-0-image": "docker.io/rlinf/rlinf:0.3.0",
        "role-0-cpu": "1", "role-0-memory": "1Gi", "role-0-gpu": "0", "role-0-prepare": "",
        "role-0-python": "", "role-0-extra": "",
        "role-0-env-0-name": "GREETING", "role-0-env-0-value": "hello",
        "role-1-name": "pool", "role-1-workers": "2", "role-1-image": "docker.io/rlinf/rlinf:0.3.0",
        "role-1-cpu": "", "role-1-memory": "", "role-1-gpu": "0", "role-1-prepare": "",
        "role-1-python": "", "role-1-extra": "",
        "runScript": "echo hi", "workingDir": "", "rlinfConfigDir": "", "rlinfConfigName": "",
        "rlinfOverrides": "", "joinTimeout": "60", "prepareTimeout": "120", "maxRestarts": "0",
        "grace": "5",
    }
    form.update(over)
    return form


def post_wizard(client, form: dict, action: str, htmx: bool = True):
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post("/create", content=urlencode({**form, "action": action}),
                       headers={"Content-Type": "application/x-www-form-urlencoded", **headers})


def codes(html: str) -> list[str]:
    return re.findall(r'data-code="([A-Za-z]+)"', html)


def current_step(html: str) -> int:
    return int(re.search(r'id="wizard" class="wizard" data-step="(\d)"', html).group(1))


# --- catalogs and templates ---------------------------------------------------------------------


def test_catalogs_have_the_same_keys_and_placeholders():
    en, zh = catalog("en"), catalog("zh-CN")
    assert set(en) == set(zh)
    for key in en:
        assert en[key].strip() and zh[key].strip(), key
        fields = lambda s: sorted(re.findall(r"\{(\w+)", s))  # noqa: E731
        assert fields(en[key]) == fields(zh[key]), key
    # one catalog per locale, and messages.json: the server's texts (console/messages.py)
    assert sorted(p.stem for p in CATALOG_DIR.glob("*.json")) == sorted([*LOCALES, "messages"])


def test_every_key_the_console_uses_is_in_the_catalogs():
    en = catalog("en")
    used = set()
    for path in [*TEMPLATES.glob("*.html"), *TEMPLATES.parent.glob("*.py")]:
        text = path.read_text()
        used |= set(re.findall(r"""\b_?t\(\s*(?:request,\s*)?["']([A-Za-z0-9_.]+)["']\s*[,)]""", text))
        used |= set(re.findall(r'"((?:flash|error)\.[A-Za-z]+)"(?!\.html)', text))
    used |= {f"flash.{a}" for a in ("stop", "start", "restart")}
    used |= {f"phase.{p.value}" for p in Phase} | {f"phase.{p.value}" for p in WorkerPhase}
    used |= {f"cause.{c.value}" for c in Cause}
    used |= {f"cond.{c.value}" for c in ConditionType} | {"condStatus.True", "condStatus.False"}
    used |= {f"tab.{t}" for t in ("overview", "events", "logs", "curves", "resources", "outputs",
                                  "record", "spec")}
    # what each mount kind is on the server's runtime (the wizard's mount rows, _wizard.html)
    used |= {f"mountMeans.{r}.{m}" for r in ("local", "kubernetes")
             for m in ("hostPath", "pvc", "objectStorage")}
    from rlark.console.usage_chart import METRICS

    used |= {f"us.{m}" for m in METRICS}  # the Resources tab's chart captions (_usage.html)
    used |= {"unit.cores"}  # the Resources tab's CPU unit (_usage.html, t.of("unit", ...))
    used |= {f"sev.{s}" for s in ("error", "warning", "info")}
    used |= {f"mount.{m}" for m in ("hostPath", "pvc", "objectStorage")}
    used |= {f"ev.{e}" for e in ("Normal", "Warning")} | {"dur.s", "dur.ms", "dur.hm"}
    used |= {f"wiz.step{n}" for n in range(1, 5)}
    used |= {f"role.{r}" for r in ("viewer", "member", "admin")}
    used |= {f"state.{s}" for s in ("active", "revoked", "expired")}
    used |= {f"outcome.{o}" for o in ("ok", "denied", "failed")}
    used |= {f"check.{s}" for s in ("pass", "warn", "fail", "provisional")}  # a record check's status
    used |= {f"recSource.{s}" for s in ("hydra-output", "rlark-composition", "absent")}
    used |= {f"runtime.{r}" for r in ("local", "kubernetes")}
    used |= {f"webhooks.state.{s}" for s in ("pending", "succeeded", "failed")}  # webhook.html
    from rlark.services.timeline import PHASES as TIMELINE_PHASES

    # the timeline's legend and spans (templates/_timeline.html), the CLI chart's title line
    used |= {f"tl.phase.{p}" for p in TIMELINE_PHASES} | {"tl.run", "tl.length", "tl.lengthSoFar"}
    from rlark.record.diff import SECTIONS

    used |= {f"diffSection.{s}" for s in SECTIONS}
    # the CLI's describe/get/events write with the same catalogs (rlark.cli.base._labels)
    cli = "\n".join(p.read_text() for p in sorted((TEMPLATES.parents[1] / "cli").glob("*.py")))
    used |= set(re.findall(r"""\bt\(\s*["'](cli\.[A-Za-z0-9_.]+)["']""", cli))
    # describe's line labels: label("name") reads cli.name
    used |= {f"cli.{k}" for k in re.findall(r"""\blabel\(\s*["']([A-Za-z]+)["']""", cli)}
    used |= {f"cli.noJobs{w}{p}" for w in ("In", "Anywhere") for p in ("", "Phase")}
    used |= {k for k in en if k.startswith("cli.col.") and f'"{k[8:]}"' in cli}
    used = {k for k in used if not k.endswith(".") and k != "error.html"}
    missing = sorted(used - set(en))
    assert not missing, missing
    unused = sorted(set(en) - used)
    assert not unused, f"catalog keys no page uses: {unused}"


class _Text(HTMLParser):
    """Literal text of a template once Jinja tags are removed."""

    def __init__(self):
        super().__init__()
        self.texts: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        for k, v in attrs:
            if k in ("placeholder", "title", "aria-label", "alt") and v:
                self.attrs.append((k, v))

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.texts.append(data)


def test_templates_hold_no_untranslated_words():
    """Every word a page shows comes from a catalog: with the Jinja expressions removed, a
    template's text and its labelling attributes hold only punctuation and symbols."""
    for path in TEMPLATES.glob("*.html"):
        text = path.read_text()
        text = re.sub(r"\{#.*?#\}", "", text, flags=re.S)
        text = re.sub(r"\{%.*?%\}", "", text, flags=re.S)
        text = re.sub(r"\{\{.*?\}\}", "", text, flags=re.S)
        parser = _Text()
        parser.feed(text)
        for chunk in parser.texts:
            words = re.findall(r"[^\W\d_]{2,}", chunk)
            assert not words or words == ["RLark"], f"{path.name}: literal text {chunk.strip()!r}"
        for attr, value in parser.attrs:
            assert not re.search(r"[^\W\d_]{2,}", value), f"{path.name}: {attr}={value!r}"


def test_language_negotiation_and_translator():
    assert negotiate(None, "zh-TW,zh;q=0.9") == "zh-CN"
    assert negotiate(None, "fr-FR, en;q=0.5") == "en"
    assert negotiate("zh-CN", "en") == "zh-CN"
    assert negotiate("xx", None) == "en"
    zh = Translator("zh-CN")
    assert zh.phase("Failed") == "失败" and zh.phase("SomethingNew") == "SomethingNew"
    assert zh.duration(125) == "2分05秒" and Translator("en").duration(3725) == "1h 02m"
    assert zh("confirm.delete", name="x").startswith("删除作业“x”")


def test_vendored_htmx_version_is_recorded():
    js = (STATIC_DIR / "htmx.min.js").read_text()
    assert f'version:"{HTMX_VERSION}"' in js
    assert f"| {HTMX_VERSION} |" in (STATIC_DIR / "VENDORED.md").read_text()
    assert (STATIC_DIR / "htmx.LICENSE").exists()


def test_package_data_ships_templates_static_and_catalogs():
    text = (TEMPLATES.parents[3] / "pyproject.toml").read_text()
    for pattern in ("console/templates/**/*", "console/static/**/*", "console/catalogs/*.json"):
        assert pattern in text


# --- wizard state (pure) -------------------------------------------------------------------------


RICH = """
apiVersion: rlark.io/v1
kind: Job
metadata: {name: rich, labels: {team: rl, tier: gold}}
spec:
  headRole: actor
  runScript: python train.py --config-name ppo
  workingDir: /workspace/RLinf
  rlinf: {configDir: config, configName: ppo, overrides: [cluster.num_nodes=3, "runner.max_epochs=2"]}
  failurePolicy: {joinTimeoutSeconds: 90.5, prepareTimeoutSeconds: 600, maxRestarts: 2}
  terminationGracePeriodSeconds: 7
  roles:
    - name: rollout
      workers: 2
      image: docker.io/rlinf/rlinf@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
      resources: {cpu: "500m", memory: 8Gi, gpu: 0, devices: {rdma/hca: 1}}
      env: [{name: A, value: "1"}, {name: B, value: "x y"},
            {name: C, valueFrom: {secretKeyRef: {name: wandb, key: api_key}}}]
      mounts:
        - {name: data, type: pvc, source: datasets, mountPath: /data, readOnly: true}
        - {name: ckpt, type: objectStorage, source: "s3://bucket/ckpt", mountPath: /ckpt,
           kubernetes: {storageClass: csi-s3, size: 50Gi}}
        - {name: out, type: objectStorage, source: "gs://runs/out", mountPath: /out,
           kubernetes: {csiDriver: gcsfuse.csi.storage.gke.io, volumeAttributes: {bucketName: "{bucket}"}}}
      nodeSelector: {pool: a100}
      local: {python: /opt/venv}
    - name: actor
      workers: 1
      image: docker.io/rlinf/rlinf:0.3.0
      resources: {cpu: 2.5}
      prepareScript: |
        pip list
        echo ready
"""


@pytest.mark.parametrize("text", [RICH, (Path(__file__).parent.parent / "examples" / "quickstart"
                                         / "job.yaml").read_text()])
def test_wizard_state_round_trips_a_job(text):
    job, findings = load_job(text)
    assert job is not None, findings
    original = job_to_dict(job)
    doc, bad = WizardState.from_spec(original).to_document()
    assert bad == []
    again, findings = load_job(json.dumps(doc))
    assert again is not None, findings
    assert job_to_dict(again) == original


def test_wizard_keeps_fields_it_does_not_show():
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job",
           "metadata": {"name": "x", "annotations": {"a": "b"}},
           "spec": {"headRole": "h", "runScript": "true", "future": {"k": 1},
                    "failurePolicy": {"maxRestarts": 1, "backoff": 3},
                    "roles": [{"name": "h", "image": "i:1", "workers": 1, "kubernetes": {"sa": "x"},
                               "resources": {"cpu": 1, "ephemeral": "1Gi"},
                               "mounts": [{"name": "m", "type": "objectStorage", "source": "s3://b",
                                           "mountPath": "/m", "kubernetes": {
                                               "csiDriver": "d", "volumeAttributes": {"x": "y"}}}]}]}}
    st = WizardState.from_spec(doc)
    assert "metadata.annotations" in st.extra_fields() and "spec.future" in st.extra_fields()
    assert "kubernetes" in st.roles[0].extra_fields()
    assert "mounts[0].kubernetes.volumeAttributes" in st.roles[0].extra_fields()
    assert st.roles[0].mounts[0].csi_driver == "d"  # shown, so not in extra
    # the form carries them through a round trip of the page
    pairs = [("extra", st.extra), ("name", "x"), ("head", "0"), ("role-0-name", "h"),
             ("role-0-workers", "1"), ("role-0-image", "i:1"), ("role-0-cpu", "1"),
             ("role-0-extra", st.roles[0].extra), ("role-0-mount-0-name", "m"),
             ("role-0-mount-0-type", "objectStorage"), ("role-0-mount-0-source", "s3://b"),
             ("role-0-mount-0-path", "/m"), ("role-0-mount-0-extra", st.roles[0].mounts[0].extra),
             ("role-0-mount-0-csi", "d"),
             ("runScript", "true"), ("maxRestarts", "1")]
    out, _ = WizardState.from_form(pairs).to_document()
    assert out["metadata"]["annotations"] == {"a": "b"}
    assert out["spec"]["future"] == {"k": 1} and out["spec"]["failurePolicy"]["backoff"] == 3
    role = out["spec"]["roles"][0]
    assert role["kubernetes"] == {"sa": "x"} and role["resources"]["ephemeral"] == "1Gi"
    assert role["mounts"][0]["kubernetes"] == {"csiDriver": "d", "volumeAttributes": {"x": "y"}}


def test_wizard_sets_how_kubernetes_mounts_object_storage(client, service):
    """A StorageClass typed into the mount row reaches the Job (the Kubernetes runtime refuses an
    objectStorage mount without one, or a CSI driver); blank fields add nothing."""
    form = wizard_form(step="2", **{
        "role-1-mount-0-name": "models", "role-1-mount-0-type": "objectStorage",
        "role-1-mount-0-source": "s3://models/llama", "role-1-mount-0-path": "/models",
        "role-1-mount-0-ro": "1", "role-1-mount-0-sc": "csi-s3", "role-1-mount-0-size": "100Gi",
        "role-1-mount-0-csi": "",
        "role-1-mount-1-name": "data", "role-1-mount-1-type": "hostPath",
        "role-1-mount-1-source": "/data", "role-1-mount-1-path": "/data",
        "role-1-mount-1-sc": "", "role-1-mount-1-size": "", "role-1-mount-1-csi": ""})
    doc, bad = WizardState.from_form(form.items()).to_document()
    assert bad == []
    models, data = doc["spec"]["roles"][1]["mounts"]
    assert models["kubernetes"] == {"storageClass": "csi-s3", "size": "100Gi"}
    assert "kubernetes" not in data
    html = post_wizard(client, form, "next").text
    assert current_step(html) == 3
    html = post_wizard(client, {**form, "step": "4"}, "next").text
    assert "storageClass: csi-s3" in html  # the YAML preview
    # a row with only a Kubernetes field filled in is not dropped: its missing fields are said
    only_sc = wizard_form(step="2", **{"role-0-mount-0-name": "", "role-0-mount-0-type": "hostPath",
                                       "role-0-mount-0-source": "", "role-0-mount-0-path": "",
                                       "role-0-mount-0-sc": "fast"})
    doc, _ = WizardState.from_form(only_sc.items()).to_document()
    assert doc["spec"]["roles"][0]["mounts"][0]["kubernetes"] == {"storageClass": "fast"}
    html = post_wizard(client, only_sc, "next").text
    assert current_step(html) == 2 and "spec.roles[0].mounts[0]" in html
    # a new mount row shows the three fields, labelled, closed until one is filled in
    html = post_wizard(client, wizard_form(step="2"), "add-mount:0").text
    for field, label in (("sc", "Storage class"), ("size", "PVC size"), ("csi", "CSI driver")):
        assert f'<label for="role-0-mount-0-{field}">{label}</label>' in html
    assert '<details class="mount-k8s">' in html
    html = post_wizard(client, form, "add-mount:0").text  # filled in: open
    assert '<details class="mount-k8s" open>' in html and 'value="csi-s3"' in html


def test_wizard_actions_and_number_fields():
    st = WizardState.from_form(wizard_form().items())
    assert [r.name for r in st.roles] == ["head", "pool"] and st.roles[0].env[0].key == "GREETING"
    assert st.apply("add-role") and [r.name for r in st.roles] == ["head", "pool", "role1"]
    assert st.roles[2].image == "docker.io/rlinf/rlinf:0.3.0" and st.tab == 2
    st.head = 2
    assert st.apply("remove-role:0") and st.head == 1 and st.roles[0].name == "pool"
    assert st.apply("add-mount:0") and len(st.roles[0].mounts) == 1
    assert st.apply("remove-mount:0:0") and st.roles[0].mounts == []
    assert st.apply("add-label") and st.apply("remove-label:0") and st.labels == []
    assert not st.apply("next")
    st.roles[0].workers = "two"
    st.grace = "soon"
    _, bad = st.to_document()
    assert {(f.code, f.path) for f in bad} == {
        ("InvalidValue", "spec.roles[0].workers"), ("InvalidValue", "spec.terminationGracePeriodSeconds")}


def test_findings_map_to_steps_and_fields():
    f = lambda path, code="X": Finding(code=code, path=path, message="m")  # noqa: E731
    assert step_of(f("metadata.name")) == 1 and step_of(f("spec.headRole")) == 1
    assert step_of(f("spec.roles[1].name")) == 1 and step_of(f("spec.roles", "NoRoles")) == 1
    assert step_of(f("spec.roles[1].image")) == 2 and step_of(f("spec.roles")) == 2
    assert step_of(f("spec.runScript")) == 3 and step_of(f("spec.rlinf.configName")) == 3
    assert field_of(f("spec.roles[1].resources.memory")) == "role-1-memory"
    assert field_of(f("spec.roles[0].mounts[2].source")) == "role-0-mounts"
    assert field_of(f("spec.failurePolicy.joinTimeoutSeconds")) == "joinTimeout"


def test_log_line_times(monkeypatch):
    """Every time in one form, UTC with its zone; a stamp without a zone is local time."""
    import time

    assert stamp_of('RLARK_EVENT {"ts": 0.5, "event": "phase"}') == "1970-01-01T00:00:00.500+00:00"
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    assert stamp_of("2026-01-02 03:04:05,123\tINFO x") == "2026-01-02T03:04:05.123+00:00"
    assert stamp_of("[2026-01-02 03:04:05] hello") == "2026-01-02T03:04:05.000+00:00"
    monkeypatch.setenv("TZ", "Asia/Shanghai")  # UTC+8, no daylight saving
    time.tzset()
    assert stamp_of("2026-01-02 03:04:05,123\tINFO x") == "2026-01-01T19:04:05.123+00:00"
    monkeypatch.undo()
    time.tzset()
    assert stamp_of("plain line") is None


# --- pages ---------------------------------------------------------------------------------------


def test_jobs_list_pages_in_sql_filters_and_searches(client, service):
    for i in range(25):
        service.create(job_doc(f"alpha-{i:02d}"))
    for i in range(3):
        service.create(job_doc(f"beta-{i}"))
    service.stop("beta-1")  # Pending + stop -> stays Pending here (no controller), desired Stopped
    r = client.get("/jobs")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    rows = re.findall(r'<tr data-job="([a-z0-9-]+)"', r.text)
    assert len(rows) == 20 and rows[0] == "beta-2"  # newest first
    assert "1–20 of 28" in r.text and 'rel="next"' in r.text
    r = client.get("/jobs?page=2")
    assert len(re.findall(r'<tr data-job="', r.text)) == 8 and 'rel="prev"' in r.text
    assert "/jobs/_table?page=2" in r.text  # live refresh keeps the page
    r = client.get("/jobs?q=beta")
    assert re.findall(r'<tr data-job="([a-z0-9-]+)"', r.text) == ["beta-2", "beta-1", "beta-0"]
    r = client.get("/jobs?phase=Running")
    assert 'data-job="' not in r.text and "No Job matches these filters." in r.text
    # the filter form (htmx): the table only, and the address bar follows
    r = client.get("/jobs?q=alpha-1", headers={"HX-Request": "true"})
    assert r.text.lstrip().startswith('<div id="jobs-table"')
    assert r.headers["HX-Push-Url"] == "/jobs?q=alpha-1&page=1"
    assert 'hx-trigger="every 2s"' in r.text
    # nonsense parameters are ignored, not errors
    assert client.get("/jobs?page=-4&phase=Bogus&q=%00").status_code == 200
    assert client.get("/").headers["location"] == "/jobs"


def test_list_row_shows_phase_reason_roles_and_actions(client, service):
    service.create(job_doc("row", workers=2))
    r = client.get("/jobs")
    row = re.search(r'<tr data-job="row".*?</tr>', r.text, re.S).group(0)
    assert 'data-phase="Pending"' in row and 'data-reason="Submitted"' in row
    assert "0/3" in row and "head×1" in row and "pool×2" in row and ">local<" in row
    for action in ("stop", "restart", "clone", "delete"):
        assert f'data-action="{action}"' in row
    assert 'data-confirm="Delete Job “row”?' in row


def test_wizard_validates_each_step_before_the_next(client, service):
    form = wizard_form(name="Bad_Name")
    r = post_wizard(client, form, "next")
    assert current_step(r.text) == 1 and "InvalidName" in codes(r.text)
    assert 'id="f-name" name="name" value="Bad_Name"' in r.text and "aria-invalid=true" in r.text
    r = post_wizard(client, wizard_form(), "next")
    assert current_step(r.text) == 2
    # step 2: the pool role has no image version -> stays, and shows the pool tab
    form = wizard_form(step="2", **{"role-1-image": "docker.io/rlinf/rlinf"})
    r = post_wizard(client, form, "next")
    assert current_step(r.text) == 2 and codes(r.text).count("ImageNoVersion") >= 1
    assert 'id="panel-role-1" aria-labelledby="tab-role-1" >' in r.text.replace("\n", "")  # shown
    form = wizard_form(step="2", **{"role-0-memory": "1024"})
    r = post_wizard(client, form, "next")
    assert "InvalidMemory" in codes(r.text)
    r = post_wizard(client, wizard_form(step="2"), "next")
    assert current_step(r.text) == 3
    r = post_wizard(client, wizard_form(step="3", runScript="  "), "next")
    assert current_step(r.text) == 3 and "EmptyRunScript" in codes(r.text)
    r = post_wizard(client, wizard_form(step="3", joinTimeout="soon"), "next")
    assert current_step(r.text) == 3 and "InvalidValue" in codes(r.text)
    r = post_wizard(client, wizard_form(step="3"), "next")
    assert current_step(r.text) == 4
    # step 4: YAML, node ranks and the preflight's Findings
    assert "headRole: head" in r.text and "GREETING" in r.text
    ranks = re.findall(r'<tr data-rank="(\d+)" data-worker="([a-z0-9-]+)"', r.text)
    assert ranks == [("0", "wiz-head-0"), ("1", "wiz-pool-0"), ("2", "wiz-pool-1")]
    assert 'id="wizard-submit"' in r.text and "disabled" not in re.search(
        r'<button[^>]*id="wizard-submit"[^>]*>', r.text).group(0)
    # going forward by the step list stops at the first invalid step
    r = post_wizard(client, wizard_form(step="1", **{"role-1-image": ""}), "goto:4")
    assert current_step(r.text) == 2 and "InvalidImage" in codes(r.text)
    r = post_wizard(client, wizard_form(step="3"), "back")
    assert current_step(r.text) == 2
    assert service.list()["total"] == 0  # nothing was stored on the way


def test_wizard_submit_creates_the_job_through_the_service(client, service):
    r = post_wizard(client, wizard_form(step="4"), "submit")
    assert r.status_code == 200 and r.headers["HX-Redirect"] == "/jobs/wiz"
    job = service.get("wiz")
    spec = job["spec"]["spec"]
    assert [r["name"] for r in spec["roles"]] == ["head", "pool"] and spec["headRole"] == "head"
    assert spec["roles"][0]["env"] == [{"name": "GREETING", "value": "hello"}]
    assert spec["roles"][0]["resources"] == {"cpu": 1.0, "memory": "1Gi", "gpu": 0, "devices": {}}
    assert spec["failurePolicy"]["joinTimeoutSeconds"] == 60
    page = client.get("/jobs/wiz")  # the notice rides on a cookie
    assert "Job “wiz” created" in page.text
    # the same name again: refused in step 1 already
    r = post_wizard(client, wizard_form(), "next")
    assert current_step(r.text) == 1 and "NameTaken" in codes(r.text)
    # plain form posts (no JavaScript) get a 303
    r = post_wizard(client, wizard_form(step="4", name="nojs"), "submit", htmx=False)
    assert r.status_code == 303 and r.headers["location"] == "/jobs/nojs"


def test_wizard_blocks_submit_on_error_findings(client, service):
    form = wizard_form(step="4", **{"role-0-gpu": "64"})  # more GPUs than this machine has
    r = post_wizard(client, form, "next")
    assert current_step(r.text) == 4 and "ExceedsHostGpu" in codes(r.text)
    assert re.search(r'<button[^>]*id="wizard-submit"[^>]*disabled', r.text)
    r = post_wizard(client, form, "submit")
    assert current_step(r.text) == 4 and "HX-Redirect" not in r.headers
    assert service.list()["total"] == 0


def test_yaml_start_opens_the_review_step(client, service):
    bad = job_doc("pasted", image="docker.io/rlinf/rlinf")
    r = client.post("/create/yaml", data={"yaml": bad})
    assert r.status_code == 200 and current_step(r.text) == 4
    assert "ImageNoVersion" in codes(r.text) and 'id="blocking"' in r.text
    assert re.search(r'<button[^>]*id="wizard-submit"[^>]*disabled', r.text)
    r = client.post("/create/yaml", data={"yaml": "spec: [unclosed"})
    assert r.status_code == 422 and "InvalidDocument" in codes(r.text)
    assert "spec: [unclosed" in r.text  # the text is kept for fixing
    r = client.post("/create/yaml", data={"yaml": job_doc("typo").replace("runScript", "runScrpt")})
    assert r.status_code == 422 and "UnknownField" in codes(r.text)


def test_edit_replaces_the_spec_and_clone_copies_it(client, service):
    service.create(job_doc("orig", run="echo one"))
    r = client.get("/jobs/orig/edit")
    assert 'name="mode" value="edit"' in r.text and "readonly" in r.text
    form = wizard_form(step="4", mode="edit", original="orig", name="ignored", runScript="echo two")
    form.update({"role-1-workers": "1"})
    r = post_wizard(client, form, "submit")
    assert r.headers["HX-Redirect"] == "/jobs/orig"
    job = service.get("orig")
    assert job["spec"]["spec"]["runScript"] == "echo two"
    assert [(x["number"], x["cause"]) for x in job["runs"]] == [(1, "Submitted"), (2, "Updated")]
    r = client.get("/jobs/orig/clone")
    assert 'name="name" value="orig-copy"' in r.text and 'name="mode" value="create"' in r.text
    assert client.get("/jobs/ghost/edit").status_code == 404


def test_actions_redirect_with_a_notice(client, service):
    service.create(job_doc("act"))
    r = client.post("/jobs/act/stop", data={"next": "/jobs?q=act"})
    assert r.status_code == 303 and r.headers["location"] == "/jobs?q=act"
    page = client.get("/jobs?q=act")
    assert "Stopping Job “act”." in page.text
    assert "rlark_flash" not in client.cookies or not client.cookies.get("rlark_flash")
    assert service.get("act")["desired"] == "Stopped"
    r = client.post("/jobs/act/start", data={"next": "/jobs/act"})  # still Pending: a Conflict
    assert r.status_code == 303
    assert "stop it first or use restart" in client.get("/jobs/act").text
    r = client.post("/jobs/act/restart", data={"next": "https://evil.example/"})
    assert r.headers["location"] == "/jobs/act"  # never off-site
    for evil in ("//evil.example/", "/\t/evil.example", "/\\evil.example"):
        r = client.post("/jobs/act/stop", data={"next": evil})
        assert r.headers["location"] == "/jobs/act", evil
    assert service.get("act")["currentRun"]["number"] == 2
    r = client.post("/jobs/act/delete", data={"next": "/jobs/act"})  # active: stopped first
    assert r.headers["location"] == "/jobs"
    assert "Job “act” is being deleted" in client.get("/jobs").text
    finish(service, "act", "Stopped", "Stopped", "")
    with service.store.session() as s:
        from rlark.store import JobRow
        s.query(JobRow).filter_by(name="act").one().delete_requested = False
    client.post("/jobs/act/delete")
    assert "Job “act” deleted." in client.get("/jobs").text
    assert client.get("/jobs/act").status_code == 404
    assert client.post("/jobs/act/explode").status_code == 404
    # another site's form is refused
    service.create(job_doc("safe"))
    r = client.post("/jobs/safe/delete", headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and service.get("safe")


def test_detail_tabs_render(client, service):
    service.create(job_doc("det", workers=2))
    r = client.get("/jobs/det")
    assert r.status_code == 200
    assert 'data-phase="Pending"' in r.text and 'hx-trigger="every 2s"' in r.text  # live
    assert re.findall(r'<tr data-worker="([a-z0-9-]+)" data-rank="(\d)"', r.text) == [
        ("det-head-0", "0"), ("det-pool-0", "1"), ("det-pool-1", "2")]
    for tab, marker in (("events", 'data-reason="Submitted"'), ("logs", 'id="tab-logs"'),
                        ("record", 'data-download="json"'), ("spec", "headRole: head")):
        page = client.get(f"/jobs/det?tab={tab}")
        assert page.status_code == 200 and marker in page.text, tab
    live = client.get("/jobs/det/_live?tab=events")
    assert live.text.lstrip().startswith('<div id="job-live"') and 'data-reason="Submitted"' in live.text
    assert client.get("/jobs/det?tab=bogus&run=999").status_code == 200
    assert 'id="conditions"' not in client.get("/jobs/det").text  # none observed yet
    observe(service, "det")
    page = client.get("/jobs/det").text
    assert re.findall(r'<tr data-condition="(\w+)" data-status="(\w+)"', page) == [
        ("AllJoined", "False"), ("HeadReady", "True"), ("ReconcileError", "True")]
    row = re.search(r'<tr data-condition="ReconcileError".*?</tr>', page, re.S).group(0)
    assert ('data-reason="ReconcileFailed"' in row and "2026-12-01 04:12:07" in row
            and "OSError: the API server went away" in row)
    r = client.get("/jobs/no-such-job")
    assert r.status_code == 404 and "There is no Job named “no-such-job”" in r.text
    assert client.get("/jobs/BAD%00").status_code == 404
    # a failed Job shows its reason; a deleted Job's live part sends the browser to the list
    finish(service, "det")
    r = client.get("/jobs/det")
    assert 'data-phase="Failed"' in r.text and 'data-reason="RunFailed"' in r.text
    assert "exited with code 3" in r.text and 'hx-trigger="every 2s"' not in r.text  # not live
    row = re.search(r'<tr data-job="det".*?</tr>', client.get("/jobs").text, re.S).group(0)
    assert 'data-reason="RunFailed"' in row and "exited with code 3" in row
    assert 'data-action="start"' in row and 'data-action="stop"' not in row
    from rlark.store import RunRow as Run  # a Worker stopped by RLark: its code says SIGTERM
    with service.store.session() as s:
        s.query(Run).one().workers[1].exit_code = 143
    worker = re.search(r'<tr data-worker="det-pool-0".*?</tr>', client.get("/jobs/det").text, re.S)
    assert '<td class="num">143 (SIGTERM)</td>' in worker.group(0)
    assert service.delete("det")["deleted"]
    r = client.get("/jobs/det/_live")
    assert r.status_code == 200 and r.headers["HX-Redirect"] == "/jobs"



def test_the_workers_table_escapes_what_workers_report_and_lays_out_many_rows_lazily(client,
                                                                                     service):
    """The overview's Workers rows are written in Python (console/pages.py worker_rows, for a
    1,000-Worker Run's page: bench/console_charts.py): a host and a message a Worker
    reported stay text, a message's `backticks` code, its first line only; past LAZY_ROWS Workers the table is laid out
    only as it nears the viewport (console.css .lazy-rows), every row still in the page."""
    from rlark.console.pages import LAZY_ROWS
    from rlark.services.jobs import JobService
    from rlark.store import RunRow as Run

    service.create(job_doc("few", workers=1))
    with service.store.session() as s:
        w = s.query(Run).one().workers[1]
        w.host, w.reason, w.message = "<b>h</b>", "NodeLost", "`ray start` said <i>no</i>\nmore"
    page = client.get("/jobs/few").text
    row = re.search(r'<tr data-worker="few-pool-0".*?</tr>', page, re.S).group(0)
    assert "<b>" not in row and "<i>" not in row and "&lt;b&gt;h&lt;/b&gt;" in row
    assert 'data-reason="NodeLost"' in row and "more" not in row
    assert "<code>ray start</code> said &lt;i&gt;no&lt;/i&gt;" in row
    assert '<a href="/jobs/few?tab=logs&amp;worker=few-pool-0">' in row
    assert 'class="table-wrap lazy-rows"' not in page
    # a Run of more Workers than the local runtime takes: one made on the same store for
    # Kubernetes (the page reads only the store)
    JobService(service.store, runtime="kubernetes", namespace="rlark").create(
        job_doc("many", workers=LAZY_ROWS))
    page = client.get("/jobs/many").text
    assert 'class="table-wrap lazy-rows"' in page
    assert len(re.findall(r'<tr data-worker="many-', page)) == LAZY_ROWS + 1

def test_logs_tab_and_downloads(client, service, rlark_home, monkeypatch):
    import time

    monkeypatch.setenv("TZ", "UTC")  # the pool's stamp has no zone: this machine's time
    time.tzset()
    service.create(job_doc("logs"))
    logs = rlark_home / "logs" / "logs" / "1"
    logs.mkdir(parents=True)
    (logs / "head.log").write_text(
        'RLARK_EVENT {"ts": 1700000000.25, "event": "phase", "phase": "Preparing"}\n'
        "\x1b[32mhello\x1b[0m from the head\nsecond, line\n")
    (logs / "pool.log").write_text("2026-01-02 03:04:05,100\tINFO pool says hi\n")
    with service.store.session() as s:
        for w in s.query(WorkerRow).all():
            w.log_path = str(logs / ("head.log" if w.role == "head" else "pool.log"))
    r = client.get("/jobs/logs?tab=logs")
    assert "hello from the head" in r.text and "[logs-pool-0]" in r.text  # colours removed
    assert 'data-url="/api/v1/jobs/logs/logs?run=1&amp;follow=true&amp;tail=1000"' in r.text
    r = client.get("/jobs/logs?tab=logs&worker=logs-head-0&q=SECOND")
    assert "second, line" in r.text and "hello" not in r.text
    r = client.get("/jobs/logs/logs.txt?role=head")
    assert r.headers["content-disposition"] == 'attachment; filename="logs-run1-logs.txt"'
    assert r.text.splitlines() == ["hello from the head", "second, line"]  # no lifecycle line
    r = client.get("/jobs/logs/logs.csv")
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["worker", "role", "time", "line"]
    # the hidden lifecycle line still dates the lines after it
    assert rows[1] == ["logs-head-0", "head", "2023-11-14T22:13:20.250+00:00", "hello from the head"]
    assert rows[2][:3] == ["logs-head-0", "head", "2023-11-14T22:13:20.250+00:00"]  # carried on
    assert rows[3] == ["logs-pool-0", "pool", "2026-01-02T03:04:05.100+00:00",
                       "2026-01-02 03:04:05,100\tINFO pool says hi"]
    assert client.get("/jobs/logs/logs.csv?lifecycle=1").text.count("RLARK_EVENT") == 1
    assert client.get("/jobs/logs/logs.csv?worker=nope").status_code == 404


def test_record_downloads(client, service):
    service.create(job_doc("rec"))
    r = client.get("/jobs/rec/record.json")
    assert r.headers["content-disposition"] == 'attachment; filename="rec-run1-record.json"'
    rec = r.json()
    assert rec["job"] == "rec" and rec["workers"]["expected"] == 2
    r = client.get("/jobs/rec/record.md?run=1")
    assert r.text.startswith("# Run record: rec run 1")
    assert client.get("/jobs/rec/record.md?run=9").status_code == 404
    assert client.get("/jobs/rec/record.xml").status_code == 404


def _visible_text(html: str) -> list[str]:
    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.out: list[str] = []
            self.stack: list[bool] = []

        def handle_starttag(self, tag, attrs):
            d = dict(attrs)
            raw = d.get("translate") == "no" or tag in ("script", "style", "code", "pre")
            void = tag in ("input", "br", "meta", "link", "img", "hr")
            if not void:
                self.stack.append(raw or (self.stack[-1] if self.stack else False))
            for k in ("placeholder", "title", "aria-label"):
                if d.get(k):
                    self.out.append(d[k])

        def handle_endtag(self, tag):
            if self.stack and tag not in ("input", "br", "meta", "link", "img", "hr"):
                self.stack.pop()

        def handle_data(self, data):
            if not (self.stack and self.stack[-1]) and data.strip():
                self.out.append(data.strip())

    p = P()
    p.feed(html)
    return p.out


def test_chinese_locale_shows_no_english_label(client, service):
    service.create(job_doc("zh"))
    observe(service, "zh")  # the Conditions card too
    en, zh = catalog("en"), catalog("zh-CN")
    english = {v for k, v in en.items() if v != zh[k] and "{" not in v}
    client.cookies.set("rlark_lang", "zh-CN")
    pages = ["/jobs", "/create", "/jobs/zh", "/jobs/zh?tab=events", "/jobs/zh?tab=logs",
             "/jobs/zh?tab=record", "/jobs/zh?tab=spec", "/jobs/zh/edit", "/jobs/nothing", "/nodes",
             "/tokens", "/admin/users", "/admin/projects", "/admin/audit"]
    for url in pages:
        html = client.get(url).text
        assert '<html lang="zh-CN">' in html
        leftover = [t for t in _visible_text(html) if t in english]
        assert not leftover, (url, leftover)
    step4 = post_wizard(client, wizard_form(step="4"), "next").text
    assert "节点序号" in step4 and "YAML 预览" in step4
    # switching language: a cookie for a year, and back to where the user was
    r = client.get("/lang/en?next=/jobs/zh%3Ftab%3Dlogs")
    assert r.status_code == 303 and r.headers["location"] == "/jobs/zh?tab=logs"
    assert "rlark_lang=en" in r.headers["set-cookie"] and "Max-Age=31536000" in r.headers["set-cookie"]
    client.cookies.clear()
    assert '<html lang="zh-CN">' in client.get("/jobs", headers={"Accept-Language": "zh-CN"}).text


# --- nodes ---------------------------------------------------------------------------------------


class _Rows(HTMLParser):
    """``{data-node: {data-resource or column label: text}}`` of the Nodes table."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self._node: str | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if tag == "tr" and "data-node" in d:
            self._node = d["data-node"]
            self.rows[self._node] = {}
        elif tag == "td" and self._node:
            self._cell = d.get("data-resource") or d.get("data-label")
            self.rows[self._node][self._cell] = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None
        elif tag == "tr":
            self._node = None

    def handle_data(self, data):
        if self._node and self._cell:
            self.rows[self._node][self._cell] += data


def node_rows(html: str) -> dict[str, dict[str, str]]:
    p = _Rows()
    p.feed(html)
    return {n: {k: " ".join(v.split()) for k, v in cells.items()} for n, cells in p.rows.items()}


def test_nodes_page_shows_this_machine_minus_active_jobs(client, service):
    import socket

    html = client.get("/nodes").text
    assert '<a href="/nodes" aria-current="page">Nodes</a>' in html
    assert 'data-runtime="local"' in html and 'data-basis="rlark"' in html
    (name, cells), = node_rows(html).items()
    assert name == socket.gethostname()
    assert cells["cpu"] == "16 / 16" and cells["memory"] == "64.0 GiB / 64.0 GiB"
    assert cells["nvidia.com/gpu"] == "0 / 0" and cells["Status"] == "Ready"
    assert "runs every Worker on this machine" in html
    service.create(job_doc("busy", workers=3).replace(
        'image: "docker.io/rlinf/rlinf:0.3.0"}\n    - {name: pool',
        'image: "docker.io/rlinf/rlinf:0.3.0", resources: {cpu: 2, memory: 8Gi}}\n    - {name: pool'))
    cells = node_rows(client.get("/nodes/_table").text)[name]
    assert cells["cpu"] == "14 / 16" and cells["memory"] == "56.0 GiB / 64.0 GiB"
    finish(service, "busy")
    assert node_rows(client.get("/nodes").text)[name]["cpu"] == "16 / 16"


def test_nodes_page_lists_a_kubernetes_inventory(rlark_home):
    from rlark.server import create_app
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests.test_k8s_capacity import four_node_inventory

    nodes = four_node_inventory()
    inventory = {"value": (nodes, "namespace", None)}
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    service = JobService(store, runtime="kubernetes", inventory=lambda: inventory["value"])
    try:
        with api_client(create_app(service), admin_token(store)) as c:
            html = c.get("/nodes").text
            rows = node_rows(html)
            assert list(rows) == ["aks-gpunp-98036146-vmss000004", "cpu-7", "dgx-1", "k8s-node1"]
            dgx = rows["dgx-1"]
            assert dgx["cpu"] == "208 / 224" and dgx["nvidia.com/gpu"] == "5 / 8"
            assert dgx["memory"] == "1904.1 GiB / 1968.1 GiB"
            assert dgx["Other devices"] == "rdma/hca: 1 / 1"
            assert "Labels (1)" in dgx["Labels"] and "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in dgx["Labels"]
            cpu7 = rows["cpu-7"]
            assert cpu7["Status"] == "NotReady Cordoned" and cpu7["Taints"] == "dedicated=rl:NoSchedule"
            assert rows["k8s-node1"]["nvidia.com/gpu"] == "1 / 1"
            assert 'data-basis="namespace"' in html and "namespace only (RLark may not list Pods cluster-wide)" in html
            totals = html[html.index("<tfoot>"):html.index("</tfoot>")]
            assert "Total allocatable" in totals and ">265.84<" in totals and ">2160.9 GiB<" in totals
            assert 'data-label="Memory"' in totals
            assert "Ready, uncordoned node" in html
            c.cookies.set("rlark_lang", "zh-CN")
            zh = c.get("/nodes").text
            assert "<h1>节点</h1>" in zh and "已封锁" in zh and "未就绪" in zh
            c.cookies.clear()
            inventory["value"] = (None, "none", "nodes is forbidden: User cannot list resource")
            html = c.get("/nodes/_table").text
            assert "<html" not in html and 'data-count="0"' in html
            assert "The node inventory could not be read: nodes is forbidden" in html
            assert "There are no nodes." in html
    finally:
        store.dispose()


def test_nodes_page_survives_odd_stored_specs_odd_quantities_and_a_failing_inventory(
        client, service, rlark_home):
    from sqlalchemy import select as sql_select

    from rlark.server import create_app
    from rlark.runtimes.kubernetes.capacity import parse_nodes
    from rlark.services.jobs import JobService
    from rlark.store import RunRow, Store
    from tests.test_k8s_capacity import node, pod

    # a Run spec stored by another RLark version (a field this one does not know)
    service.create(job_doc("old"))
    with service.store.session() as s:
        run = s.scalar(sql_select(RunRow))
        run.spec = {**run.spec, "spec": {**run.spec["spec"], "futureField": 1}}
    assert client.get("/nodes").status_code == 200
    assert client.get("/api/v1/nodes").status_code == 200

    odd = [node("inf", "inf", "Infinity"), node("huge", "1e400", "9" * 400, gpu="1e400")]
    answers = [(parse_nodes(odd, [pod("inf", {"nvidia.com/gpu": "inf"})]), "cluster", None)]
    def inventory():
        if not answers:
            raise RuntimeError("the API server went away")
        return answers.pop()
    store = Store(f"sqlite:///{rlark_home / 'k8s.db'}")
    try:
        app = create_app(JobService(store, runtime="kubernetes", inventory=inventory))
        with api_client(app, admin_token(store)) as c:
            r = c.get("/nodes")
            assert r.status_code == 200
            rows = node_rows(r.text)
            assert rows["inf"]["cpu"] == "0 / 0"  # not a finite quantity: counted as none
            assert rows["huge"]["cpu"] == f"{10**400} / {10**400}"  # beyond a float: as it came
            r = c.get("/nodes")
            assert r.status_code == 200
            assert "reading the node inventory failed: the API server went away" in r.text
            assert c.get("/api/v1/nodes").json()["error"].endswith("the API server went away")
    finally:
        store.dispose()


def test_api_docs_need_no_internet(client):
    """/docs and /redoc load their assets from this server (fastapi-offline), never a CDN."""
    for url in ("/docs", "/redoc"):
        html = client.get(url).text
        assert not re.findall(r'(?:src|href)="(https?://[^"]+)"', html), url
        for asset in re.findall(r'(?:src|href)="(/static-docs/[^"]+)"', html):
            r = client.get(asset)
            assert r.status_code == 200 and len(r.content) > 1000, asset
    assert "/openapi.json" in client.get("/docs").text


def test_console_is_not_in_the_api_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    # the API, its health probes and the Prometheus scrape (/metrics, an API path to the guard)
    assert all(p.startswith("/api/") or p in ("/healthz", "/livez", "/metrics") for p in paths), sorted(paths)
    assert client.get("/docs").status_code == 200
    assert client.get("/api/v1/jobs/nope").json()["detail"]["code"] == "NotFound"  # API errors stay JSON


def test_large_or_broken_forms_are_refused(client):
    r = client.post("/create", content=b"a=" + b"x" * (1024 * 1024 + 10),
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413
    r = client.post("/create", content=b"step=9&role-99999999-name=x&head=zz&tab=-3",
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200  # nonsense fields are ignored, never a 500


def test_wizard_env_rows_take_a_secret_reference_never_a_value():
    pairs = [("name", "x"), ("head", "0"), ("role-0-name", "h"), ("role-0-workers", "1"),
             ("role-0-image", "i:1"), ("runScript", "true"),
             ("role-0-env-0-name", "WANDB_API_KEY"), ("role-0-env-0-secret", "wandb/api_key"),
             ("role-0-env-1-name", "PLAIN"), ("role-0-env-1-value", "1")]
    out, bad = WizardState.from_form(pairs).to_document()
    assert bad == []
    assert out["spec"]["roles"][0]["env"] == [
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api_key"}}},
        {"name": "PLAIN", "value": "1"}]
    st = WizardState.from_spec(out)
    assert (st.roles[0].env[0].secret, st.roles[0].env[0].value) == ("wandb/api_key", "")
