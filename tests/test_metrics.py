"""``GET /metrics`` (issue 25 item 5): RLark's own metrics in the Prometheus text format, for a
site administrator's token only, read with prometheus-client's own parser.

* the store's metrics and the route latencies on an app without a controller (no Ray);
* a real ``rlark server`` on the local runtime running one one-Worker Job to Succeeded: the Run
  is counted by phase, its submit -> Running lands in the histogram, and the controller's pass,
  lane and lag times are there, on the API's address and on the listener of
  ``--metrics-address`` alike (marked ``ray``: one Ray node);
* ``rlark server --metrics-address``: a real server's metrics listener serves ``/metrics`` only,
  to a site administrator's token only, with the API's JSON refusals and ``Host`` rule (no Ray);
  an address that is not ``HOST:PORT``, or taken, stops the start before anything is written.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rlark.services.metrics import TIME_TO_RUNNING_BUCKETS, histogram_buckets
from tests.access import admin_token, api_client, make_user
from rlark.server import listen_address
from tests.server import RlarkServer, free_port, ray_tmp_dir
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
    metrics_port = free_port()
    srv = RlarkServer(tmp_path, {"RLARK_RAY_TMP": ray_tmp_dir(),
                                 "RLARK_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}"}).start()
    apart = httpx.Client(base_url=f"http://127.0.0.1:{metrics_port}", timeout=30,
                         headers={"Authorization": f"Bearer {srv.token}"})
    try:
        srv.submit(yaml.safe_dump(one_worker("measured", "echo measured")))
        srv.wait_phase("measured", {"Succeeded"}, timeout=180)
        srv.wait_released("measured")

        def scraped():
            found = samples(srv.http.get("/metrics").text)
            return value(found, "rlark_controller_lane_seconds_count") and found
        found = wait_until("the controller's timings in /metrics", scraped, timeout=30)
        # the metrics listener serves the same process's metrics: the controller's too
        elsewhere = samples(apart.get("/metrics").text)
        for name in ("rlark_controller_lane_seconds_count", "rlark_controller_pass_seconds_count",
                     "rlark_time_to_running_seconds_count"):
            assert (value(elsewhere, name) or 0) >= 1, (name, elsewhere)
        assert value(elsewhere, "rlark_runs", phase="Succeeded") == 1.0
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
        apart.close()
        srv.stop()


def test_a_listen_address_is_host_and_port():
    assert listen_address("127.0.0.1:9470", "--metrics-address") == ("127.0.0.1", 9470)
    assert listen_address(" [::1]:9470 ", "--metrics-address") == ("::1", 9470)
    assert listen_address("rlark-0.rlark:80", "--metrics-address") == ("rlark-0.rlark", 80)
    for bad, why in (("9470", "is not HOST:PORT"), (":9470", "is not HOST:PORT"),
                     ("::1:9470", "is not HOST:PORT"), ("http://a:1", "is not HOST:PORT"),
                     ("a:0", "port 0 is not in 1..65535"), ("a:70000", "port 70000 is not in")):
        with pytest.raises(ValueError, match=f"--metrics-address '{bad}'(: | ){why}"):
            listen_address(bad, "--metrics-address")


def test_the_metrics_address_serves_the_metrics_only_to_a_site_administrator(tmp_path):
    port = free_port()
    srv = RlarkServer(tmp_path, {"RLARK_METRICS_ADDRESS": f"127.0.0.1:{port}"}).start()
    apart = f"http://127.0.0.1:{port}"
    try:
        made = srv.cli("user", "create", "mia", "--project", "default", "--role", "member",
                       "--token", "-o", "json")
        assert made.returncode == 0, made.stderr
        member = yaml.safe_load(made.stdout)["token"]
        admin = {"Authorization": f"Bearer {srv.token}"}

        r = httpx.get(f"{apart}/metrics", headers=admin)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=")
        found = samples(r.text)
        assert value(found, "rlark_runs", phase="Running") == 0.0
        # scrapes there are not the API's requests: no latency series of the metrics address
        assert not any(n == "rlark_api_request_duration_seconds_count"
                       and dict(labels)["route"] == "/metrics" for n, labels in found)
        r = httpx.get(f"{apart}/metrics")
        assert r.status_code == 401 and r.json()["detail"]["code"] == "Unauthenticated", r.text
        assert r.headers["www-authenticate"] == 'Bearer realm="rlark"'
        r = httpx.get(f"{apart}/metrics", headers={"Authorization": f"Bearer {member}"})
        assert r.status_code == 403 and r.json()["detail"]["code"] == "Forbidden", r.text
        # nothing else: neither the API nor the console, whoever asks
        for path in ("/api/v1/jobs", "/jobs", "/api/v1/server", "/docs", "/healthz"):
            r = httpx.get(apart + path, headers=admin)
            assert r.status_code == 404 and r.json()["detail"]["code"] == "NotFound", (path, r.text)
        # a refusal without credentials is JSON too, never a redirect to a login page
        r = httpx.get(f"{apart}/jobs")
        assert r.status_code == 401 and r.json()["detail"]["code"] == "Unauthenticated"
        r = httpx.get(f"{apart}/metrics", headers={**admin, "Host": "evil.example"})
        assert r.status_code == 400 and r.json()["detail"]["code"] == "HostNotAllowed"
        # the API's address keeps its /metrics
        assert srv.http.get("/metrics").status_code == 200
    finally:
        srv.stop()


@pytest.mark.parametrize("taken", [True, False])
def test_a_metrics_address_that_cannot_be_served_stops_the_start_before_anything_is_written(tmp_path, taken):
    home = tmp_path / "home"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        address = f"127.0.0.1:{busy}" if taken else "localhost"
        r = subprocess.run([sys.executable, "-m", "rlark.cli", "server", "--port", str(free_port()),
                            "--metrics-address", address], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "RLARK_HOME": str(home)})
    assert r.returncode == 1, r.stderr
    want = (f"cannot listen on --metrics-address 127.0.0.1:{busy}: Address already in use"
            if taken else "--metrics-address 'localhost' is not HOST:PORT")
    assert want in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not home.exists()
