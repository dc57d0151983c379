"""``GET /metrics`` (issue 25 item 5): RLark's own metrics in the Prometheus text format, for a
site administrator's token only, read with prometheus-client's own parser.

* the store's metrics and the route latencies on an app without a controller (no Ray);
* a real ``rlark server`` on the local runtime running one one-Worker Job to Succeeded: the Run
  is counted by phase, its submit -> Running lands in the histogram, and the controller's pass,
  lane and lag times are there (marked ``ray``: one Ray node).
"""

from __future__ import annotations

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rlark.services.metrics import TIME_TO_RUNNING_BUCKETS, histogram_buckets
from tests.access import admin_token, api_client, make_user
from tests.server import RlarkServer, ray_tmp_dir
from tests.waits import wait_until


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Each sample of an exposition: (name, labels) -> value."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels) -> float | None:
    return found.get((name, frozenset(labels.items())))


def test_buckets_are_cumulative_with_inf_last_and_the_sum_of_the_values():
    buckets, total = histogram_buckets([0.5, 1.0, 3.0, 7000.0], (1.0, 5.0))
    assert buckets == [("1.0", 2.0), ("5.0", 3.0), ("+Inf", 4.0)] and total == 7004.5
    assert histogram_buckets([], TIME_TO_RUNNING_BUCKETS)[0][-1] == ("+Inf", 0.0)


def one_worker(name: str, run_script: str) -> dict:
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"headRole": "head", "runScript": run_script,
                     "roles": [{"name": "head", "workers": 1, "image": "example.org/rlinf:0.3.0",
                                "resources": {"cpu": 1, "memory": "1Gi",
                                              "objectStoreMemory": "100Mi"}}]}}


def test_only_a_site_administrator_reads_the_metrics(app_store):
    app, store = app_store
    admin = api_client(app, admin_token(store))
    member = api_client(app, make_user(store, "mia", "default", "member"))
    anonymous = api_client(app, None)

    r = anonymous.get("/metrics")
    # a scraper without a token gets the API's 401, not the console's login page
    assert r.status_code == 401 and r.json()["detail"]["code"] == "Unauthenticated", r.text
    assert member.get("/metrics").status_code == 403
    r = admin.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=")


def test_the_store_and_the_routes_are_counted(app_store):
    app, store = app_store
    admin = api_client(app, admin_token(store))
    assert admin.post("/api/v1/jobs", json=one_worker("waits", "true")).status_code == 201
    for _ in range(3):
        assert admin.get("/api/v1/jobs/waits").status_code == 200
    assert admin.get("/api/v1/jobs/nosuchjob").status_code == 404
    assert admin.get("/no/such/route").status_code in (303, 404)

    found = samples(admin.get("/metrics").text)
    # no controller here: the Run waits Pending with no reason yet
    assert value(found, "rlark_runs", phase="Pending") == 1.0
    assert value(found, "rlark_runs", phase="Running") == 0.0
    assert value(found, "rlark_runs_pending", reason="none") == 1.0
    assert value(found, "rlark_time_to_running_seconds_count") == 0.0
    # one series per route template, whatever the name in the path
    assert value(found, "rlark_api_request_duration_seconds_count",
                 method="GET", route="/api/v1/jobs/{name}", code="200") == 3.0
    assert value(found, "rlark_api_request_duration_seconds_count",
                 method="GET", route="/api/v1/jobs/{name}", code="404") == 1.0
    assert value(found, "rlark_api_request_duration_seconds_count",
                 method="POST", route="/api/v1/jobs", code="201") == 1.0
    assert any(name == "rlark_api_request_duration_seconds_count" and dict(labels)["route"] == "unmatched"
               for name, labels in found)


@pytest.mark.ray
def test_a_real_servers_run_and_controller_are_measured(tmp_path):
    srv = RlarkServer(tmp_path, {"RLARK_RAY_TMP": ray_tmp_dir()}).start()
    try:
        srv.submit(yaml.safe_dump(one_worker("measured", "echo measured")))
        srv.wait_phase("measured", {"Succeeded"}, timeout=180)
        srv.wait_released("measured")

        def scraped():
            found = samples(srv.http.get("/metrics").text)
            return value(found, "rlark_controller_lane_seconds_count") and found
        found = wait_until("the controller's timings in /metrics", scraped, timeout=30)
        assert value(found, "rlark_runs", phase="Succeeded") == 1.0
        assert value(found, "rlark_runs", phase="Pending") == 0.0
        assert value(found, "rlark_time_to_running_seconds_count") == 1.0
        assert 0 < value(found, "rlark_time_to_running_seconds_sum") < 180
        # the submit woke the controller: at least that wake's lag, and passes and lanes
        assert value(found, "rlark_controller_lag_seconds_count") >= 1
        assert value(found, "rlark_controller_pass_seconds_count") >= 1
        assert value(found, "rlark_api_request_duration_seconds_count",
                     method="POST", route="/api/v1/jobs", code="201") == 1.0
    finally:
        srv.stop()
