"""``rlark describe``, ``get`` and ``events`` in the reader's language (issue 19, item 2): the
language comes from ``RLARK_LANG``, else the POSIX locale (``LC_ALL``, ``LC_MESSAGES``,
``LANG``); Chinese output has no English left (tests/english.py says what may stay), English
output is what it always was.

The CLI as a subprocess against the API served by uvicorn (tests/server.py ThreadedServer, no
controller): the Job is put in the state a controller leaves a failed Run in (its message with
the Worker's last lines, conditions, a Finding, Events), as tests/test_console.py does.
"""

from __future__ import annotations

import pytest
import yaml

from rlark.cli.base import output_language
from tests.english import english_words
from tests.test_cli import cli_env, rlark
from tests.test_console import finish, job_doc, observe

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


#: identifiers describe shows: the Job's names, user and project, signal names, and the record
#: checks' ids (code in the console)
NAMES = {"zhcli", "zhcli-head-0", "zhcli-pool-0", "head", "pool", "default", "admin", "A",
         "SIGTERM", "SIGKILL", *__import__("rlark.record.checks", fromlist=["ITEMS"]).ITEMS}
TAIL = "ValueError: no such file"  # the Worker's own last line: shown as written


@pytest.fixture
def live(rlark_home):
    from rlark.services.jobs import JobService
    from rlark.store import JobRow, RunRow, Store
    from tests.server import ThreadedServer

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    service = JobService(store)
    doc = yaml.safe_load(job_doc("zhcli"))
    doc["spec"]["roles"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    service.create(yaml.safe_dump(doc))
    service.restart("zhcli")
    observe(service, "zhcli")
    finish(service, "zhcli", "Failed", "PrepareFailed",
           "Worker zhcli-head-0 (rank 0, role head): prepare script exited with code 4\n"
           "last lines of zhcli-head-0:\n" + TAIL)
    with store.session() as s:  # ended: the record is read, as describe does for a finished Run
        job = s.query(JobRow).filter_by(name="zhcli").one()
        run = s.get(RunRow, job.current_run_id)
        run.started_at = run.finished_at = run.created_at
        run.exit_code = 4
    server = ThreadedServer(service).start()
    yield server
    server.stop()
    store.dispose()



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
