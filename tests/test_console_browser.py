"""The web console in a real browser: Debian's Chromium driven by Playwright (pytest-playwright),
against a real ``rlark server`` subprocess on the local runtime.

Every test logs in through the login page with the site administrator's token (what the first
start wrote to ``$RLARK_HOME/credentials``), and fails on a JavaScript error or a console error
of the page. Screenshots of each page
go to ``artifacts/screenshots/`` (a few are copied to docs/console/ for the README).
Tests that start Ray nodes are marked ``ray``; the others fail their Workers before Ray starts
(a prepare script that exits non-zero) or start none.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

import pytest

from tests.server import RlarkServer, serve

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

REPO = Path(__file__).resolve().parent.parent
SHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
IMAGE = "docker.io/rlinf/rlinf:0.3.0"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("Debian chromium is not installed (scripts/test installs it with apt-get)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS,
            "headless": True}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 800},
            "accept_downloads": True, "locale": "en-US"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("console-home"))


class UI:
    def __init__(self, page, server: RlarkServer):
        self.page = page
        self.server = server
        self.url = server.url
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.set_default_timeout(20_000)

    def go(self, path: str):
        self.page.goto(self.url + path)
        return self.page

    def login(self, token: str) -> None:
        """Log in through the login page, pasting an API token."""
        page = self.go("/jobs")  # not logged in: the console sends the browser to log in
        page.wait_for_url("**/login?next=%2Fjobs")
        page.fill("#login-token", token)
        self.shot("login", full=False)
        page.click("#token-submit")
        page.wait_for_url("**/jobs")
        expect(page.locator("#logout")).to_be_visible()

    def shot(self, name: str, full: bool = True) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)

    def step(self, n: int) -> None:
        expect(self.page.locator("#wizard")).to_have_attribute("data-step", str(n))

    def phase(self, phase: str, timeout: float = 180) -> None:
        expect(self.page.locator("#job-live")).to_have_attribute("data-phase", phase,
                                                                 timeout=timeout * 1000)

    def download(self, selector: str) -> str:
        with self.page.expect_download() as info:
            self.page.click(selector)
        return Path(info.value.path()).read_text()


@pytest.fixture
def ui(page, server):
    u = UI(page, server)
    u.login(server.token)
    yield u
    assert not u.errors, u.errors


def failing_job(name: str, code: int = 4) -> str:
    return f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  roles:
    - {{name: head, workers: 1, image: "{IMAGE}", prepareScript: "echo preparing; exit {code}"}}
  runScript: echo never
"""


# --- the wizard, end to end ----------------------------------------------------------------------


@pytest.mark.ray
def test_wizard_creates_a_two_role_job_that_succeeds_then_logs_and_record(ui):
    page = ui.go("/jobs")
    page.locator(".page-head").get_by_role("link", name="Create Job").click()
    ui.step(1)
    page.click("#wizard-next")  # no name yet: the step refuses, saying why once, at the field
    expect(page.locator("#step-errors")).to_be_visible()
    expect(page.locator("[data-code=InvalidName]")).to_have_count(1)
    expect(page.locator(".field-error[data-code=InvalidName]")).to_be_visible()
    page.fill("#f-name", "wiz")
    page.get_by_role("button", name="Add role").click()
    expect(page.locator("#role-1-name")).to_have_value("role1")
    page.fill("#role-1-name", "pool")
    expect(page.locator("#head-0")).to_be_checked()
    ui.shot("create-1-roles")
    page.click("#wizard-next")
    ui.step(2)

    page.click("#tab-role-0")
    expect(page.locator("#panel-role-0")).to_be_visible()
    page.fill("#role-0-image", IMAGE)
    page.fill("#role-0-cpu", "1")
    page.fill("#role-0-memory", "1Gi")
    page.locator("#panel-role-0").get_by_role("button", name="Add variable").click()
    page.fill("#role-0-env-0-name", "GREETING")
    page.fill("#role-0-env-0-value", "hello")
    page.click("#wizard-next")  # the pool role has no image: the step shows that role's tab
    ui.step(2)
    expect(page.locator("#panel-role-1")).to_be_visible()
    expect(page.locator("#panel-role-1 [data-code=InvalidImage]")).to_be_visible()
    expect(page.locator("#role-1-image")).to_have_attribute("aria-invalid", "true")
    page.fill("#role-1-image", IMAGE)
    page.fill("#role-1-cpu", "1")
    page.fill("#role-1-memory", "1Gi")
    ui.shot("create-2-workers")
    page.click("#wizard-next")
    ui.step(3)

    page.fill("#f-runScript", 'echo "console says $GREETING from rank $RLINF_NODE_RANK"')
    page.fill("#f-joinTimeout", "90")
    page.fill("#f-prepareTimeout", "60")
    page.fill("#f-grace", "3")
    ui.shot("create-3-shared")
    page.click("#wizard-next")
    ui.step(4)

    expect(page.locator("#yaml-preview")).to_contain_text("name: wiz")
    expect(page.locator("#yaml-preview")).to_contain_text("headRole: head")
    expect(page.locator("#yaml-preview")).to_contain_text("GREETING")
    rows = page.locator("#rank-table tbody tr")
    expect(rows).to_have_count(2)
    assert [(r.get_attribute("data-rank"), r.get_attribute("data-worker"))
            for r in rows.all()] == [("0", "wiz-head-0"), ("1", "wiz-pool-0")]
    expect(page.locator("#blocking")).to_have_count(0)
    expect(page.locator("#wizard-submit")).to_be_enabled()
    ui.shot("create-4-review")
    page.click("#wizard-submit")

    page.wait_for_url("**/jobs/wiz")
    expect(page.locator(".notice-ok")).to_contain_text("Job “wiz” created")
    ui.phase("Succeeded", timeout=180)  # the page follows the Run live
    expect(page.locator("#workers-table tbody tr")).to_have_count(2)
    expect(page.locator("#runs-table tr[data-run='1'] [data-phase=Succeeded]")).to_be_visible()
    ui.shot("job-overview")

    page.click("[data-tab=logs]")
    page.select_option("#log-worker", "wiz-head-0")
    page.locator("#tab-logs").get_by_role("button", name="Apply").click()
    expect(page.locator("#log-lines")).to_contain_text("console says hello from rank 0")
    ui.shot("job-logs")
    # the Run has ended: every line is there, and nothing more will come to follow
    expect(page.locator("#log-follow")).to_have_count(0)
    expect(page.locator("#log-lines")).to_contain_text("console says hello from rank 0")
    text = ui.download("[data-download=txt]")
    assert "console says hello from rank 0" in text
    rows = list(csv.reader(io.StringIO(ui.download("[data-download=csv]"))))
    assert rows[0] == ["worker", "role", "time", "line"]
    said = [r for r in rows[1:] if "console says hello" in r[3]]
    assert said and said[0][:2] == ["wiz-head-0", "head"] and said[0][2]

    page.click("[data-tab=record]")
    rec = json.loads(ui.download("[data-download=json]"))
    assert rec["result"]["phase"] == "Succeeded" and rec["job"] == "wiz"
    assert rec["workers"]["expected"] == 2 and rec["workers"]["actual"] == 2
    assert [w["nodeRank"] for w in rec["workers"]["items"]] == [0, 1]
    assert ui.download("[data-download=md]").startswith("# Run record: wiz run 1")
    ui.shot("job-record")

    page.click("[data-tab=events]")
    expect(page.locator("#tab-events [data-reason=Completed]")).to_be_visible()
    ui.shot("job-events")
    ui.go("/jobs")
    expect(page.locator("tr[data-job=wiz]")).to_have_attribute("data-phase", "Succeeded")
    expect(page.locator("tr[data-job=wiz] [data-workers]")).to_have_text("2/2")
    ui.shot("jobs-list")


def test_bad_image_shows_the_blocking_finding_in_step_4(ui):
    page = ui.go("/create")
    page.locator(".yaml-start summary").click()
    page.fill("#yaml-text", f"""apiVersion: rlark.io/v1
kind: Job
metadata: {{name: badimage}}
spec:
  headRole: head
  roles:
    - {{name: head, workers: 1, image: docker.io/rlinf/rlinf}}
    - {{name: pool, workers: 1, image: "{IMAGE}"}}
  runScript: echo hi
""")
    page.get_by_role("button", name="Load into the wizard").click()
    ui.step(4)
    finding = page.locator("#findings [data-code=ImageNoVersion]")
    expect(finding).to_be_visible()
    expect(finding).to_have_class("finding sev-error")
    expect(finding).to_contain_text("spec.roles[0].image")
    expect(page.locator("#blocking")).to_be_visible()
    expect(page.locator("#wizard-submit")).to_be_disabled()
    expect(page.locator("#rank-table tbody tr")).to_have_count(2)  # still planned
    ui.shot("create-4-blocked")
    # the same Finding keeps step 2 from going on
    page.get_by_role("button", name="Back").click()
    ui.step(3)
    page.get_by_role("button", name="Back").click()
    ui.step(2)
    page.click("#wizard-next")
    ui.step(2)
    expect(page.locator("#panel-role-0 .field-error[data-code=ImageNoVersion]")).to_be_visible()
    expect(page.locator("#role-0-image")).to_have_attribute("aria-invalid", "true")
    assert ui.server.http.get("/api/v1/jobs/badimage").status_code == 404

    # an uploaded file starts the wizard the same way
    page = ui.go("/create")
    page.locator(".yaml-start summary").click()
    page.set_input_files("#yaml-file", files=[{
        "name": "job.yaml", "mimeType": "application/yaml",
        "buffer": failing_job("uploaded").replace(IMAGE, "docker.io/rlinf/rlinf:latest").encode()}])
    expect(page.locator("#yaml-text")).to_have_value(containing("uploaded"))
    page.get_by_role("button", name="Load into the wizard").click()
    ui.step(4)
    expect(page.locator("#findings [data-code=ImageLatestTag]")).to_be_visible()
    expect(page.locator("#wizard-submit")).to_be_disabled()


def containing(text: str):
    import re

    return re.compile(".*" + re.escape(text) + ".*", re.S)


def test_failing_job_shows_its_reason_on_the_list_and_detail_pages(ui):
    page = ui.go("/jobs")  # open first: the row must appear and fail without a reload
    ui.server.submit(failing_job("prepfail"))
    row = page.locator("tr[data-job=prepfail]")
    expect(row).to_have_attribute("data-phase", "Failed", timeout=60_000)
    expect(row.locator("[data-reason]")).to_have_text("PrepareFailed")
    expect(row.locator(".fail-msg")).to_contain_text("prepare script exited with code 4")
    ui.shot("jobs-list-failed")
    row.get_by_role("link", name="prepfail").click()
    ui.phase("Failed")
    live = page.locator("#job-live")
    expect(live.locator(".status-phase [data-reason]")).to_have_text("PrepareFailed")
    expect(live.locator(".status-message[data-message]")).to_contain_text(
        "Worker prepfail-head-0 (rank 0, role head): prepare script exited with code 4")
    worker = page.locator("#workers-table tr[data-worker=prepfail-head-0]")
    expect(worker).to_contain_text("PrepareFailed")
    expect(worker).to_contain_text("4")
    ui.shot("job-failed")
    page.click("[data-tab=events]")
    expect(page.locator("#tab-events [data-reason=PrepareFailed]").first).to_be_visible()
    page.click("[data-tab=logs]")
    expect(page.locator("#log-lines")).to_contain_text("preparing")
    expect(page.locator("#log-lines .ln-event")).to_have_count(0)  # RLark's own lines: hidden
    page.check("#log-lifecycle")
    page.select_option("#log-order", "time")
    page.locator("#tab-logs").get_by_role("button", name="Apply").click()
    expect(page.locator("#log-lines .ln-event").first).to_be_visible()
    assert '"tok"' not in page.locator("#log-lines").inner_text()
    page.uncheck("#log-lifecycle")
    page.locator("#tab-logs").get_by_role("button", name="Apply").click()
    expect(page.locator("#log-lines .ln-event")).to_have_count(0)

    # edit and restart reuses the wizard: a new Run with the new spec (it fails again, as asked)
    page.click("#job-live [data-action=edit]")
    ui.step(1)
    expect(page.locator("#f-name")).to_have_attribute("readonly", "")
    page.click("#wizard-next")
    ui.step(2)
    page.fill("#role-0-prepare", "echo preparing again; exit 5")
    page.click("#wizard-next")
    ui.step(3)
    page.click("#wizard-next")
    ui.step(4)
    expect(page.locator("#yaml-preview")).to_contain_text("exit 5")
    page.get_by_role("button", name="Save and restart").click()
    page.wait_for_url("**/jobs/prepfail")
    expect(page.locator("#runs-table tr[data-run='2']")).to_contain_text("spec updated",
                                                                          timeout=30_000)
    ui.phase("Failed", timeout=60)
    expect(page.locator("#job-live .status-message[data-message]")).to_contain_text("exited with code 5")

    # clone reuses it too, with a new name
    page.click("#job-live [data-action=clone]")
    expect(page.locator("#f-name")).to_have_value("prepfail-copy")


def test_logs_follow_shows_lines_as_a_running_worker_writes_them(ui):
    # a Worker still in its prepare script (no Ray yet) that writes a line every 0.3 s
    ui.server.submit(f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: ticker}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  roles:
    - {{name: head, workers: 1, image: "{IMAGE}",
       prepareScript: "for i in $(seq 1 400); do echo tick $i; sleep 0.3; done"}}
  runScript: echo never
""")
    deadline = time.monotonic() + 60
    while "tick 2" not in ui.server.cli("logs", "ticker").stdout:  # the tab shows what is there
        assert time.monotonic() < deadline, "the Worker wrote nothing in 60 s"
        time.sleep(0.3)
    page = ui.go("/jobs/ticker?tab=logs")
    expect(page.locator("#log-lines")).to_contain_text("tick 1")
    page.click("#log-follow")
    expect(page.locator("#log-follow")).to_have_attribute("aria-pressed", "true")
    shown = lambda: [int(t.split()[1]) for t in page.locator("#log-lines").inner_text().splitlines()  # noqa: E731
                     if t.startswith("tick ")]
    # following re-renders the lines: wait (bounded) until they are back before reading the last
    expect(page.locator("#log-lines")).to_contain_text("tick ", timeout=20_000)
    deadline = time.monotonic() + 20
    while not (before := shown()):
        assert time.monotonic() < deadline, "the followed log shows no line for 20 s"
        page.wait_for_timeout(100)
    last = max(before)
    # lines written after the click arrive without a reload, in order, none twice
    expect(page.locator("#log-lines")).to_contain_text(f"tick {last + 5}\n", timeout=20_000)
    ticks = shown()
    assert ticks == list(range(ticks[0], ticks[-1] + 1)), ticks
    ui.shot("job-logs-follow")
    ui.server.cli("stop", "ticker")
    expect(page.locator("#log-status")).to_have_text("The Workers have ended; every line is shown.",
                                                     timeout=30_000)
    expect(page.locator("#log-follow")).to_have_attribute("aria-pressed", "false")
    ui.server.wait_phase("ticker", {"Stopped"}, timeout=60)


@pytest.mark.ray
def test_stop_start_restart_and_delete_from_the_ui(ui):
    ui.server.submit(f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: ctl}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 60}}
  roles:
    - {{name: head, workers: 1, image: "{IMAGE}", resources: {{cpu: 1}}}}
  runScript: sleep 600
""")
    page = ui.go("/jobs/ctl")
    ui.phase("Running", timeout=120)
    expect(page.locator(".live-dot")).to_be_visible()
    ui.shot("job-running")
    page.click("#job-live [data-action=stop]")
    expect(page.locator(".notice-ok")).to_contain_text("Stopping Job “ctl”")
    ui.phase("Stopped", timeout=60)
    page.click("#job-live [data-action=start]")
    expect(page.locator(".notice-ok")).to_contain_text("started (run 2)")
    ui.phase("Running", timeout=120)
    page.click("#job-live [data-action=restart]")
    expect(page.locator(".notice-ok")).to_contain_text("restarted (run 3)")
    ui.phase("Running", timeout=120)
    expect(page.locator("#runs-table tbody tr")).to_have_count(3)
    runs = ui.server.http.get("/api/v1/jobs/ctl/runs").json()
    assert [(r["number"], r["cause"], r["phase"]) for r in runs] == [
        (1, "Submitted", "Stopped"), (2, "Started", "Stopped"), (3, "Restarted", "Running")]

    page = ui.go("/jobs")
    messages = []
    page.once("dialog", lambda d: (messages.append(d.message), d.accept()))
    page.click("tr[data-job=ctl] [data-action=delete]")
    expect(page.locator(".notice-ok")).to_contain_text("ctl")
    assert messages and "Delete Job “ctl”?" in messages[0]
    expect(page.locator("tr[data-job=ctl]")).to_have_count(0, timeout=60_000)  # live list
    assert ui.server.http.get("/api/v1/jobs/ctl").status_code == 404


def test_chinese_locale_renders_the_same_pages(ui):
    ui.server.submit(failing_job("zhfail"))
    ui.server.wait_phase("zhfail", {"Failed"}, timeout=60)
    page = ui.go("/jobs")
    page.click("a[data-lang=zh-CN]")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("h1")).to_have_text("作业")
    row = page.locator("tr[data-job=zhfail]")
    expect(row.locator("[data-phase=Failed]")).to_have_text("失败")
    # the reason in Chinese (its code stays in data-reason), and the message too
    expect(row.locator("[data-reason=PrepareFailed]")).to_have_text("准备脚本失败")
    expect(row.locator(".fail-msg")).to_contain_text("准备脚本以退出码 4 结束")
    expect(row.locator("[data-action=delete]")).to_have_text("删除")
    ui.shot("zh-jobs-list")

    page = ui.go("/jobs/zhfail")  # remembered: a cookie
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("#job-live .status-phase [data-phase=Failed]")).to_have_text("失败")
    expect(page.locator("nav.tabs a")).to_have_text(["概览", "事件", "日志", "曲线", "资源", "输出", "运行记录", "规格"])
    expect(page.locator("#h-workers")).to_have_text("Worker 列表")
    ui.shot("zh-job-detail")
    page.click("[data-tab=logs]")
    expect(page.locator("[data-download=csv]")).to_have_text("下载 CSV")
    expect(page.locator("label[for=log-q]")).to_have_text("搜索文本")
    page.click("[data-tab=record]")
    expect(page.locator("[data-download=json]")).to_have_text("下载 JSON")
    ui.shot("zh-job-record")

    page.click("nav.main-nav a[href='/nodes']")
    expect(page.locator("h1")).to_have_text("节点")
    expect(page.locator("tr[data-node] [data-status]")).to_have_text("就绪")
    ui.shot("zh-nodes")

    page = ui.go("/create")
    expect(page.locator("h1")).to_have_text("创建作业")
    expect(page.locator("ol.steps")).to_contain_text("名称与角色")
    page.click("#wizard-next")
    expect(page.locator("#step-errors")).to_contain_text("进入下一步前请先修复 1 个问题")
    expect(page.locator(".field-error[data-code=InvalidName]")).to_contain_text(
        "不是以字母开头的 DNS-1123 标签")
    page.fill("#f-name", "zhjob")
    page.click("#wizard-next")
    ui.step(2)
    expect(page.locator("label[for=role-0-image]")).to_have_text("镜像")
    ui.shot("zh-create-2")
    page.click("a[data-lang=en]")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("h1")).to_have_text("Create Job")


def _unlabelled(page) -> list[str]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('input, select, textarea'))
        .filter(e => e.type !== 'hidden' && !e.closest('[aria-hidden=true]')
                && e.labels.length === 0 && !e.getAttribute('aria-label'))
        .map(e => e.id || e.name)""")


def _overflow(page) -> int:
    return page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")


def test_every_page_labels_its_inputs_and_fits_a_narrow_window(ui):
    ui.server.submit(failing_job("narrow"))
    ui.server.wait_phase("narrow", {"Failed"}, timeout=60)
    ui.go("/jobs")
    ui.shot("jobs-list-all", full=False)
    page = ui.go("/nodes")  # the local runtime: this machine, one row
    expect(page.locator("tr[data-node] [data-status]")).to_have_text("Ready")
    expect(page.locator("[data-basis=rlark]")).to_be_visible()
    ui.shot("nodes", full=False)
    pages = ["/jobs", "/create", "/jobs/narrow", "/jobs/narrow?tab=events",
             "/jobs/narrow?tab=logs", "/jobs/narrow?tab=record", "/jobs/narrow?tab=spec", "/nodes",
             "/secrets", "/tokens", "/admin/users", "/admin/projects", "/admin/audit"]
    for width, height in ((1280, 800), (390, 844)):
        ui.page.set_viewport_size({"width": width, "height": height})
        for path in pages:
            page = ui.go(path)
            assert _unlabelled(page) == [], path
            assert _overflow(page) <= 0, (path, width)
            if width < 500:
                ui.shot("narrow-" + path.strip("/").replace("/", "-").replace("?tab=", "-"))
        # every wizard step, reached from YAML (step 4) and going back
        page = ui.go("/create")
        page.locator(".yaml-start summary").click()
        page.fill("#yaml-text", failing_job("steps"))
        page.get_by_role("button", name="Load into the wizard").click()
        for step in (4, 3, 2, 1):
            ui.step(step)
            assert _unlabelled(page) == [], step
            assert _overflow(page) <= 0, (step, width)
            if width < 500:
                ui.shot(f"narrow-create-{step}")
            if step > 1:
                page.get_by_role("button", name="Back").click()
    # keyboard: Enter in a field goes to the next step, never "remove role"
    page.fill("#f-name", "enter-key")
    page.press("#f-name", "Enter")
    ui.step(2)
    expect(page.locator("#role-0-name")).to_have_count(1)  # the role is still there


def test_admin_pages_project_switcher_and_logout(ui):
    """A user made on the Users page (its token shown once) logs in with it in a second
    window, sees only what their role allows, switches project, and logs out."""
    r = ui.server.http.post("/api/v1/projects", json={"name": "team"})
    assert r.status_code == 201, r.text
    page = ui.go("/admin/users")
    page.fill("#u-name", "riley")
    page.select_option("#u-project", "team")
    page.select_option("#u-role", "viewer")
    page.click("#user-submit")
    token = page.locator("#new-token-value").input_value()
    assert token.startswith("rlark_")
    expect(page.locator("tr[data-user=riley]")).to_contain_text("team")
    ui.shot("admin-users")
    page = ui.go("/admin/projects")
    expect(page.locator("section[data-project=team] tr[data-member=riley]")).to_have_attribute(
        "data-role", "viewer")
    ui.shot("admin-projects")
    page = ui.go("/admin/audit?action=user.")
    expect(page.locator("#audit-table tbody tr").first).to_have_attribute("data-action", "user.create")
    expect(page.locator("#audit-table tbody tr").first).to_contain_text("riley")
    ui.shot("admin-audit")

    # the switcher: choosing a project goes to its Jobs (no button: the choice submits itself)
    page = ui.go("/jobs")
    page.select_option("#project-switch", "team")
    expect(page.locator("[data-project]").first).to_have_text("team")
    expect(page.locator("#project-switch")).to_have_value("team")
    expect(page.locator("tr[data-job]")).to_have_count(0)

    other = UI(page.context.browser.new_page(), ui.server)  # a second, separate browser context
    try:
        other.login(token)
        expect(other.page.locator("[data-user=riley]")).to_be_visible()
        expect(other.page.locator("nav.main-nav a")).to_have_text(["Jobs", "Nodes", "Queue", "Secrets", "API tokens", "API"])
        expect(other.page.locator("#project-switch")).to_have_value("team")  # their project
        expect(other.page.locator(".page-head .btn-primary")).to_have_count(0)  # a viewer
        other.go("/tokens")
        expect(other.page.locator("#tokens-table tbody tr")).to_have_count(1)
        other.shot("tokens")
        other.page.click("#logout")
        other.page.wait_for_url("**/login")
        expect(other.page.locator(".notice-ok")).to_have_text("You are logged out.")
        other.go("/jobs")
        other.page.wait_for_url("**/login?next=%2Fjobs")
        assert not other.errors, other.errors
    finally:
        other.page.close()


def test_nodes_page_of_a_kubernetes_inventory(page, rlark_home):
    """A server on the kubernetes runtime, its inventory built from saved Node and Pod objects:
    the Nodes page shows readiness, cordon, free/allocatable, devices, labels and taints, and its
    live refresh keeps the page free of errors."""
    from rlark.services.jobs import JobService
    from rlark.store import Store
    from tests.server import ThreadedServer
    from tests.test_k8s_capacity import four_node_inventory

    nodes = four_node_inventory()
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    server = ThreadedServer(JobService(store, runtime="kubernetes",
                                       inventory=lambda: (nodes, "cluster", None))).start()
    ui = UI(page, server)  # type: ignore[arg-type]
    try:
        ui.login(server.token)
        page = ui.go("/nodes")
        expect(page.locator("tr[data-node]")).to_have_count(4)
        dgx = page.locator("tr[data-node=dgx-1]")
        expect(dgx.locator("[data-resource='nvidia.com/gpu']")).to_have_text("5 / 8")
        expect(dgx.locator("[data-device='rdma/hca']")).to_have_text("rdma/hca: 1 / 1")
        dgx.locator("details summary").click()
        expect(dgx.locator("ul.kv")).to_contain_text("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
        expect(page.locator("tr[data-node=cpu-7] [data-cordoned]")).to_be_visible()
        expect(page.locator("tr[data-node=cpu-7] [data-status]")).to_have_text("NotReady")
        ui.shot("nodes-kubernetes", full=False)
        # the live refresh (htmx, every 5 s) waits while a labels list is open, so it does not
        # close under the reader; closed, the table is replaced without an error
        page.evaluate("document.querySelector('#nodes-table').dataset.seen = '1'")
        page.wait_for_timeout(6_000)
        expect(page.locator("#nodes-table[data-seen]")).to_have_count(1)
        expect(dgx.locator("details")).to_have_attribute("open", "")
        dgx.locator("details summary").click()
        expect(page.locator("#nodes-table:not([data-seen])")).to_have_count(1, timeout=12_000)
        assert _overflow(page) <= 0 and _unlabelled(page) == []
        # the table fits a 1280 px window: no column hidden behind a horizontal scroll
        assert page.evaluate("() => { const w = document.querySelector('.table-wrap');"
                             " return w.scrollWidth - w.clientWidth; }") <= 0
        assert not ui.errors, ui.errors
    finally:
        server.stop()
        store.dispose()


def test_api_docs_render_with_no_internet(ui):
    """Swagger UI at /docs, with every request that leaves this server refused: the operations
    are listed (the assets come from the server, not a CDN)."""
    ui.page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(ui.url)
                  else route.abort())
    page = ui.go("/docs")
    expect(page.locator(".opblock-summary-path").first).to_be_visible(timeout=20_000)
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/jobs/{name}/record")).to_have_count(1)
    ui.shot("api-docs", full=False)

