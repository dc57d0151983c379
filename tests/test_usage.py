"""Resource use (issue 25 item 3): the keeper's ``usage`` samples (bootstrap/usage.py), the
series the server keeps per Worker (services/usage.py: bounded, thinned by halving, peaks kept),
the "GPUs idle while others worked" warning, and the real keeper sampling a real process tree
whose busy process double-forked away from the run script.
"""

from __future__ import annotations

import os
import sys
from html import unescape
from pathlib import Path

import pytest

from rlark.bootstrap import archive
from rlark.bootstrap.usage import (DEFAULT_INTERVAL, MIN_INTERVAL, ProcStat, interval_of,
                                   parse_nvidia_smi, parse_stat, read_stats, tree_totals,
                                   usage_fields)
from rlark.controller.lifecycle import check_event, parse_lifecycle
from rlark.bootstrap.usage import MAX_POINTS, add_sample
from rlark.services.usage import build_usage, idle_gpu_warnings

# nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total
#   --format=csv,noheader,nounits on an 8-GPU host (the format: ", " between fields, no units;
#   "[N/A]" for what a GPU cannot say, e.g. utilisation of a MIG-enabled GPU)
SMI_TEXT = """0, 97, 71234, 81559
1, 0, 4, 81559
2, [N/A], 1021, 81559
3, 100, 80321, 81559
"""


def test_nvidia_smi_output_is_read_per_gpu_and_unknowns_are_none():
    assert parse_nvidia_smi(SMI_TEXT) == [
        {"util": 97.0, "memUsed": 71234.0, "memTotal": 81559.0},
        {"util": 0.0, "memUsed": 4.0, "memTotal": 81559.0},
        {"util": None, "memUsed": 1021.0, "memTotal": 81559.0},
        {"util": 100.0, "memUsed": 80321.0, "memTotal": 81559.0}]


@pytest.mark.parametrize("visible,kept", [
    ("1,3", [0.0, 100.0]), (" 3 ", [100.0]), ("", [97.0, 0.0, None, 100.0]),
    # UUIDs and MIG names are not indices: the GPUs nvidia-smi shows are the Worker's
    ("GPU-5e6f2b1c-0000-0000-0000-000000000000", [97.0, 0.0, None, 100.0]),
])
def test_cuda_visible_devices_narrows_to_the_workers_gpus(visible, kept):
    assert [g["util"] for g in parse_nvidia_smi(SMI_TEXT, visible)] == kept


@pytest.mark.parametrize("text", ["", "No devices were found\n",
                                  "NVIDIA-SMI has failed because it couldn't communicate\n"])
def test_no_gpu_is_no_list(text):
    assert parse_nvidia_smi(text) == []
    assert "gpu" not in usage_fields(0, 100, 1.0, 100, 10, 4096, parse_nvidia_smi(text))


def test_a_stat_line_with_spaces_and_parentheses_in_its_command_is_read():
    text = ("4242 (evil) 1 2 (x) S 17 4242 4242 0 -1 4194560 1 0 0 0 "
            "150 50 7 3 20 0 1 0 100 1000 2560 18446744073709551615\n")
    assert parse_stat(text) == ProcStat(4242, 17, 200, 10, 2560)
    assert parse_stat("garbage") is None and parse_stat("12 (x) S 1") is None


def test_this_processes_own_stat_is_read():
    with open("/proc/self/stat") as f:
        st = parse_stat(f.read())
    assert st is not None and st.pid == os.getpid() and st.ppid == os.getppid()
    assert st.rss_pages > 0


def test_the_tree_below_the_root_is_summed_with_waited_for_children_and_the_rest_is_not():
    stats = [ProcStat(1, 0, 999, 999, 999),  # init: not below the root
             ProcStat(10, 1, 500, 30, 100),  # the keeper: its own ticks are not the workload's
             ProcStat(11, 10, 40, 2, 10), ProcStat(12, 11, 7, 0, 20),
             ProcStat(13, 10, 1, 0, 5), ProcStat(20, 1, 800, 0, 900)]
    assert tree_totals(stats, 10) == (30 + 42 + 7 + 1, 35, 3)
    assert tree_totals(stats, 99) == (0, 0, 0)


def test_the_real_tree_below_this_process_is_found():
    ticks, pages, count = tree_totals(read_stats(), os.getppid())
    assert count >= 1 and pages > 0  # this process at least


def test_cores_are_tick_growth_over_wall_time_never_negative():
    assert usage_fields(100, 600, 5.0, 100, 1000, 4096, None) == {"cpu": 1.0, "mem": 4096000}
    # a process that ended unwaited-for between samples: the sum fell, the sample says 0
    assert usage_fields(600, 100, 5.0, 100, 0, 4096, None)["cpu"] == 0.0
    assert usage_fields(0, 100, 0.0, 100, 0, 4096, None)["cpu"] == 0.0


@pytest.mark.parametrize("text,seconds", [
    (None, DEFAULT_INTERVAL), ("", DEFAULT_INTERVAL), ("x", DEFAULT_INTERVAL),
    ("nan", DEFAULT_INTERVAL), ("0.1", MIN_INTERVAL), ("30", 30.0), ("0", None), ("-1", None)])
def test_the_interval_is_bounded_below_and_zero_turns_sampling_off(text, seconds):
    assert interval_of(text) == seconds


# --- the series the server keeps --------------------------------------------------------------


def sample(ts: float, cpu: float = 1.0, mem: int = 1 << 30, util: float | None = None) -> dict:
    ev: dict = {"ts": ts, "event": "usage", "cpu": cpu, "mem": mem}
    if util is not None:
        ev["gpu"] = [{"util": util, "memUsed": 1000, "memTotal": 81559}]
    return ev


def test_a_weeks_samples_stay_bounded_evenly_spread_with_exact_peaks_and_latest():
    series = None
    n = 7 * 24 * 3600 // 5  # a week every 5 s
    for i in range(n):
        series = add_sample(series, sample(1000.0 + 5 * i, cpu=(8.0 if i == 4321 else 1.0),
                                           mem=(1 << 30) + i))
    assert series is not None
    points = series["points"]
    assert MAX_POINTS // 2 <= len(points) < MAX_POINTS
    gaps = {round(b[0] - a[0], 3) for a, b in zip(points, points[1:])}
    assert len(gaps) == 1  # evenly spread over the whole week
    assert points[0][0] == 1000.0 and points[-1][0] > 1000.0 + 5 * n * 0.99
    assert series["peak"] == {"cpu": 8.0, "mem": (1 << 30) + n - 1}
    assert series["last"][0] == 1000.0 + 5 * (n - 1) and series["seen"] == n


def test_a_line_that_is_not_a_sample_changes_nothing_and_is_refused_by_the_check():
    for bad in ({"ts": 1, "event": "usage", "cpu": -1, "mem": 1},
                {"ts": 1, "event": "usage", "cpu": 1},
                {"ts": 1, "event": "usage", "cpu": True, "mem": 1},
                {"ts": "1", "event": "usage", "cpu": 1, "mem": 1}):
        assert check_event(bad) is None
        assert add_sample(None, bad) == {"points": [], "stride": 1, "seen": 0, "peak": {},
                                         "last": None}
    assert check_event({"ts": 1, "event": "usage", "cpu": 1, "mem": 1, "gpu": "x"}) is None
    assert check_event({"ts": 1, "event": "usage", "cpu": 1, "mem": 1,
                        "gpu": [{"util": 1, "memUsed": 1, "memTotal": 2}] * 65}) is None
    assert check_event(sample(1.0, util=50)) is not None


def test_the_view_has_latest_peak_and_gpus_absent_as_absent():
    a = add_sample(add_sample(None, sample(1.0, cpu=2.0)), sample(6.0, cpu=0.5))
    b = add_sample(None, sample(1.0, util=40.0))
    view = build_usage(3, [{"name": "j-b-0", "role": "b", "rank": 1, "usage": b},
                           {"name": "j-a-0", "role": "a", "rank": 0, "usage": a},
                           {"name": "j-c-0", "role": "c", "rank": 2, "usage": None}])
    assert [w["name"] for w in view["workers"]] == ["j-a-0", "j-b-0", "j-c-0"]
    wa, wb, wc = view["workers"]
    assert wa["latest"] == {"ts": 6.0, "cpu": 0.5, "mem": 1 << 30, "gpu": None}
    assert wa["peak"]["cpu"] == 2.0 and wa["gpus"] == 0 and "gpuUtil" not in wa["peak"]
    assert wb["latest"]["gpu"] == [{"util": 40.0, "memUsed": 1000.0, "memTotal": 81559.0}]
    assert wb["gpus"] == 1 and wc["latest"] is None and wc["points"] == []
    assert view["run"] == 3 and view["idleGpus"] == []


def series_of(utils: list[float], start: float = 0.0) -> list:
    s = None
    for i, u in enumerate(utils):
        s = add_sample(s, sample(start + 5 * i, util=u))
    return s["points"] if s else []


def test_a_worker_whose_gpus_sat_idle_while_another_worked_is_named():
    warn = idle_gpu_warnings({"w0": series_of([90, 95, 99, 97, 92]),
                              "w1": series_of([0, 1, 0, 2, 0]),
                              "w2": series_of([60, 70, 80, 70, 60])})
    assert [(w["worker"], w["busiest"], w["medianUtil"], w["busiestUtil"]) for w in warn] == [
        ("w1", "w0", 0.0, 95.0)]
    assert "w1's GPUs were idle" in warn[0]["message"] and warn[0]["to"] == 20.0


@pytest.mark.parametrize("series", [
    {"w0": series_of([1, 2, 1]), "w1": series_of([0, 0, 0])},  # nobody worked
    {"w0": series_of([99, 99, 99]), "w1": series_of([40, 50, 45])},  # both worked
    {"w0": series_of([99, 99, 99])},  # one Worker with GPUs
    {"w0": series_of([99, 99, 99]), "w1": series_of([0, 0, 0], start=100.0)},  # never together
    {"w0": series_of([99, 99]), "w1": series_of([0, 0])},  # too few samples to say
    {"w0": series_of([99, 99, 99]), "cpu-only": [[0.0, 1.0, 1, None], [5.0, 1.0, 1, None]]},
])
def test_no_warning_without_an_idle_worker_beside_a_busy_one(series):
    assert idle_gpu_warnings(series) == []


# --- the real keeper ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bootstrap_pyz(tmp_path_factory) -> Path:
    return Path(archive.install(str(tmp_path_factory.mktemp("pyz"))))


def test_the_keeper_samples_its_process_tree_including_a_daemon_that_double_forked(
        tmp_path, bootstrap_pyz):
    from tests.test_keeper import run_keeper

    # the busy process leaves the run script's tree as Ray's daemons do (its parent exits at
    # once); the run script itself only waits, using no CPU
    busy = tmp_path / "busy.py"
    busy.write_text("import time\nx = bytearray(300 << 20)\nx[::4096] = b'1' * len(x[::4096])\n"
                    "end = time.time() + 7\nwhile time.time() < end:\n    pass\n")
    script = f"( {sys.executable} {busy} & ) ; sleep 7"
    code, out = run_keeper(tmp_path, bootstrap_pyz, "ok", run_script=script,
                           RLARK_USAGE_SECONDS="2")
    assert code == 0, out[-3000:]
    events, _ = parse_lifecycle(out, 0)
    usage = [e for e in events if e["event"] == "usage"]
    assert len(usage) >= 2, out[-3000:]
    assert all(check_event(e) is not None and "gpu" not in e for e in usage)  # no GPU here
    # busy for 7 s on a shared machine: some of a core, where the run script alone uses none
    assert max(e["cpu"] for e in usage) > 0.2, usage
    assert max(e["mem"] for e in usage) > 250 << 20, usage


# --- the Resources tab -------------------------------------------------------------------------


@pytest.mark.parametrize("locale, said", [
    ("en", "gpu-j-pool-0's GPUs were idle (median 0% busy) while gpu-j-head-0's were 95% busy, "
           "over 20 s"),
    ("zh-CN", "gpu-j-pool-0 的 GPU 闲置（中位利用率 0%），而 gpu-j-head-0 的 GPU 利用率为 95%，"
              "历时 20 秒"),
])
def test_the_resources_tab_names_the_idle_worker_in_the_readers_language(app_store, locale, said):
    from sqlalchemy import select

    from rlark.store import JobRow, RunRow
    from tests.access import admin_token, api_client
    from tests.test_console import job_doc

    app, store = app_store
    client = api_client(app, admin_token(store), cookies={"rlark_lang": locale})
    assert client.post("/api/v1/jobs", content=job_doc("gpu-j").encode(),
                       headers={"Content-Type": "application/yaml"}).status_code == 201
    utils = {"gpu-j-head-0": [90, 95, 99, 97, 92], "gpu-j-pool-0": [0, 1, 0, 2, 0]}
    with store.session() as s:
        run = s.get(RunRow, s.scalar(select(JobRow).where(JobRow.name == "gpu-j")).current_run_id)
        for w in run.workers:
            series = None
            for i, u in enumerate(utils[w.name]):
                series = add_sample(series, sample(1000.0 + 5 * i, util=u))
            w.lifecycle = {"usage": series}
    html = unescape(client.get("/jobs/gpu-j", params={"tab": "resources"}).text)
    assert f'data-worker="gpu-j-pool-0">{said}</p>' in html, html
    assert html.count('class="notice notice-warn us-idle"') == 1
    assert html.count('data-metric="gpu-util"') == 2
    cores = {"en": "CPU (cores)", "zh-CN": "CPU (核)"}[locale]
    assert html.count(f"<figcaption>{cores}</figcaption>") == 2
