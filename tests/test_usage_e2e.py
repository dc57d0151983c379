"""A Run's resource use end to end (issue 25, item 3): a real ``rlark server`` on the local
runtime runs ONE one-Worker Job (one Ray node) whose run script burns CPU and holds memory for a
few seconds; then the Worker's samples through the API (two or more, CPU and memory above 0, no
GPU on this machine: shown as absent), ``rlark top`` (the table and ``-o json``) and the Job
page's Resources tab (an SVG chart per metric, over plain HTTP).
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.server import serve
from tests.test_console_browser import IMAGE

pytestmark = pytest.mark.ray

NAME = "use"
# the keeper samples every 5 s (its default): 12 s of work span two samples or more
BURN = ("import time; x = bytearray(200 << 20); x[::4096] = b'1' * len(x[::4096]); "
        "end = time.time() + 12; [0 for _ in iter(lambda: time.time() < end, False)]")
JOB = f"""
apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {NAME}}}
spec:
  headRole: head
  terminationGracePeriodSeconds: 3
  failurePolicy: {{joinTimeoutSeconds: 60}}
  roles:
    - name: head
      workers: 1
      image: "{IMAGE}"
      resources: {{cpu: 1}}
  runScript: |
    {sys.executable} -c "{BURN}"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("usage-home"))


@pytest.fixture(scope="module")
def finished(server) -> dict:
    """The Job once its one Run succeeded and its Worker ended."""
    server.submit(JOB)
    return server.succeeded(NAME)


def test_the_api_has_the_workers_samples_with_cpu_and_memory_and_no_gpu(server, finished):
    r = server.http.get(f"/api/v1/jobs/{NAME}/runs/1/usage")
    assert r.status_code == 200, r.text
    usage = r.json()
    [w] = usage["workers"]
    assert (w["name"], w["role"], w["rank"], usage["run"]) == ("use-head-0", "head", 0, 1)
    points = w["points"]
    assert len(points) >= 2, usage
    assert max(p[1] for p in points) > 0.3 and all(p[1] >= 0 for p in points), points
    assert all(p[2] > 0 for p in points) and max(p[2] for p in points) > 200 << 20, points
    assert all(p[3] is None for p in points) and w["gpus"] == 0 and w["latest"]["gpu"] is None
    assert w["peak"]["cpu"] == max(p[1] for p in points) and usage["idleGpus"] == []
    assert server.http.get(f"/api/v1/jobs/{NAME}/usage").json() == usage
    assert server.http.get(f"/api/v1/jobs/{NAME}/runs/2/usage").status_code == 404


def test_rlark_top_prints_the_latest_sample_and_the_peak(server, finished):
    shown = server.cli("top", NAME)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    assert header.split()[:4] == ["WORKER", "ROLE", "RANK", "CPU(cores)"], header
    assert row.split()[:3] == ["use-head-0", "head", "0"] and "iB" in row, row
    as_json = server.cli("top", f"{NAME}:1", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == server.http.get(f"/api/v1/jobs/{NAME}/usage").json()


def test_the_job_page_charts_the_workers_cpu_and_memory(server, finished):
    r = server.http.get(f"/jobs/{NAME}", params={"tab": "resources"})
    assert r.status_code == 200, r.text
    html = r.text
    assert 'data-worker="use-head-0"' in html and 'aria-current="page" data-tab="resources"' in html
    for metric in ("cpu", "memory"):
        assert f'data-metric="{metric}"' in html
    assert 'data-metric="gpu-util"' not in html  # no GPU: absent, not zeros
    assert html.count("<polyline") == 2 and 'class="cv-dot' in html
