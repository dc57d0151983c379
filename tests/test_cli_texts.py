"""``rlark describe``, ``get`` and ``events`` in the reader's language (issue 19, item 2): the
language comes from ``RLARK_LANG``, else the POSIX locale (``LC_ALL``, ``LC_MESSAGES``,
``LANG``); Chinese output has no English left (tests/english.py says what may stay), English
output is what it always was.

The CLI as a subprocess against the server ``rlark server`` builds (tests/server.py AppServer,
its controller running), on a Job whose Runs really failed (the message with the Worker's last
lines, a Finding, Events, the run history); only the Run's conditions are written into its rows
(the ``live`` fixture says why).
"""

from __future__ import annotations

import socket

import pytest
import yaml

from rlark.cli.base import output_language
from tests.english import english_words
from tests.test_cli import cli_env, rlark
from tests.test_console import job_doc, observe

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("environ, language", [
    ({}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh-CN"), ({"LANG": "C.UTF-8"}, "en"),
    ({"LANG": "zh_CN.UTF-8", "LC_ALL": "en_US.UTF-8"}, "en"),
    ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "zh_TW.UTF-8"}, "zh-CN"),
    ({"LANG": "en_US.UTF-8", "RLARK_LANG": "zh-CN"}, "zh-CN"),
    ({"LANG": "zh_CN.UTF-8", "RLARK_LANG": "en"}, "en"),
    ({"LC_ALL": "", "LANG": "zh_SG"}, "zh-CN"),
])
def test_the_language_comes_from_rlark_lang_then_the_locale(environ, language):
    assert output_language(environ) == language


#: identifiers describe shows: the Job's names, user and project, signal names, the record
#: checks' ids (code in the console) and the machine the Workers ran on
NAMES = {"zhcli", "zhcli-head-0", "zhcli-pool-0", "head", "pool", "default", "admin", "A",
         "SIGTERM", "SIGKILL", *__import__("rlark.record.checks", fromlist=["ITEMS"]).ITEMS,
         socket.gethostname(), socket.gethostname().split(".")[0]}
TAIL = "ValueError: no such file"  # the Worker's own last line: shown as written


def failing_job_yaml() -> str:
    """Two Workers; the head's prepare script prints :data:`TAIL` and exits 4 (the Run fails
    PrepareFailed, with the Worker's last lines, before any Ray node starts), the pool's waits
    until the controller ends it with the Run. ``A`` set twice: a Finding."""
    doc = yaml.safe_load(job_doc("zhcli"))
    head, pool = doc["spec"]["roles"]
    head["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    head["prepareScript"] = f'echo "{TAIL}"; exit 4'
    pool["prepareScript"] = "sleep 3600"
    doc["spec"]["terminationGracePeriodSeconds"] = 5
    return yaml.safe_dump(doc)


@pytest.fixture
def live(rlark_home):
    """The server ``rlark server`` builds (tests/server.py AppServer, its controller running)
    with Job ``zhcli`` failed twice for real (run 1, then run 2 after a restart)."""
    from tests.server import AppServer

    app = AppServer(rlark_home).start()
    try:
        r = app.http.post("/api/v1/jobs", content=failing_job_yaml().encode(),
                          headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        app.wait_for("zhcli", "run 1 Failed", lambda j: j["phase"] == "Failed")
        assert app.http.post("/api/v1/jobs/zhcli/restart").status_code == 200
        job = app.wait_for("zhcli", "run 2 Failed, its Workers released",
                           lambda j: j["currentRun"]["number"] == 2 and j["phase"] == "Failed"
                           and all(w["finishedAt"] for w in j["currentRun"]["workers"]))
        assert job["reason"] == "PrepareFailed", (job["reason"], job["message"])
        # The one thing written into the rows: the conditions a pass leaves when it failed
        # (ReconcileError/ReconcileFailed: the controller's own call to the runtime raising, e.g.
        # the Kubernetes API server gone), which no Run reaches on purpose, and AllJoined/HeadReady
        # at fixed times beside it, which a Run failed in its prepare script never gets. Written
        # after the Run ended: the controller leaves an ended Run's rows alone.
        observe(app.jobs, "zhcli")
        yield app
    finally:
        app.stop()


def test_describe_get_and_events_in_chinese(live):
    zh = cli_env(RLARK_SERVER=live.url, LANG="zh_CN.UTF-8")
    zh.pop("RLARK_LANG", None)
    zh.pop("LC_ALL", None)
    zh.pop("LC_MESSAGES", None)
    described = rlark("describe", "job", "zhcli", env=zh)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    for said in ("名称：", "阶段：", "失败", "准备脚本失败", "准备脚本以退出码 4 结束",
                 "任务（每个角色一个）", "状况", "运行历史", "事件", "作业已接受", "设置了多次",
                 "对象存储", "运行记录检查"):
        assert said in text, (said, text)
    assert TAIL in text
    assert not english_words(text.replace(TAIL, ""), NAMES), english_words(text.replace(TAIL, ""), NAMES)
    got = rlark("get", "jobs", env=zh).stdout
    assert "阶段" in got and "失败" in got and not english_words(got, NAMES), got
    assert rlark("get", "jobs", "--phase", "Running", env=zh).stdout.strip() == (
        "项目 default 中没有处于“运行中”阶段的作业；用 `rlark submit FILE` 提交一个")
    # the same catalog through RLARK_LANG, whatever the locale says
    forced = rlark("describe", "job", "zhcli", env={**zh, "LANG": "en_US.UTF-8", "RLARK_LANG": "zh-CN"})
    assert forced.stdout == text


def test_describe_in_english_names_codes_as_before(live):
    en = cli_env(RLARK_SERVER=live.url, LANG="C.UTF-8", RLARK_LANG="")
    text = rlark("describe", "job", "zhcli", env=en).stdout
    assert "Phase:     Failed  PrepareFailed: Worker zhcli-head-0 (rank 0, role head): prepare " \
           "script exited with code 4" in text
    assert "Tasks (one per role)" in text and "AllJoined" in text and "ReconcileFailed" in text
    assert "512 MiB object store, 48 worker ports" in text
    assert "Job accepted: 2 Workers in 2 roles" in text
    assert not any("\u4e00" <= c <= "\u9fff" for c in text)
