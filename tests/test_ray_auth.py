"""Each Run's Ray cluster takes only its own token (Ray token authentication, Ray >= 2.52).

The attack (found by an attack pass): local Workers share the loopback network, and Ray's GCS
had no authentication, so any process on the machine (another project's Worker among them)
could ``ray.init(address=<head>)`` into a Job's cluster and run code there, reading the Job's
secrets from its environment. Now a driver without the Run's token is refused, and one with it
(the Run's own run script) connects.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from rlark.controller.loop import Controller
from rlark.runtimes.local.runtime import LocalRuntime, ray_auth_env
from rlark.runtimes.local.ports import port_layout
from rlark.secretbox import SecretBox
from rlark.services.jobs import JobService
from rlark.store import JobRow, RunRow, Store, WorkerRow
from tests.k8s_testbed import wait_for
from tests.test_local_runtime import job_yaml

pytestmark = pytest.mark.ray

DRIVER = """
import sys, ray
address = sys.argv[1]
try:
    ray.init(address=address, _node_ip_address=address.split(":")[0], log_to_driver=False)
    print("CONNECTED", ray.cluster_resources().get("CPU"))
except Exception as exc:  # what Ray says to a driver it refuses, with what caused it
    said, cause = [], exc
    while cause is not None:
        said.append(f"{type(cause).__name__}: {cause}")
        cause = cause.__cause__
    print("REFUSED", " <- ".join(said).replace("\\n", " ")[-2000:])
"""

#: a refused driver tries the GCS twice (1 s apart), not Ray's 20 times: each try is refused at
#: once (ray/_private/node.py _init_gcs_client, RAY_NUM_REDIS_GET_RETRIES); the refusal is
#: checked to be the GCS's authentication error, so giving up sooner proves as much
REFUSED_TRIES = {"RAY_NUM_REDIS_GET_RETRIES": "2"}


def drive(address: str, extra_env: dict[str, str]) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **extra_env}
    r = subprocess.run([sys.executable, "-c", DRIVER, address], capture_output=True, text=True,
                       env=env, timeout=120)
    return (r.stdout.strip().splitlines() or [f"no output; stderr: {r.stderr[-500:]}"])[-1]


def test_pure_the_runs_token_goes_to_ray_as_is():
    assert ray_auth_env("t" * 43) == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t" * 43}
    assert ray_auth_env(None) == {}  # a Run launched by an older server has none


def test_a_driver_without_the_runs_token_is_refused(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    box = SecretBox.from_settings(create=True)
    ctl = Controller(store, LocalRuntime(), stop_runs_on_exit=True, secret_box=box)
    jobs = JobService(store, ctl.wake)
    ctl.start()
    try:
        jobs.create(job_yaml("victim", run="sleep 600", pool_workers=0))

        def running():
            with store.session() as s:
                return s.scalars(select(JobRow.phase).where(JobRow.name == "victim")).one() == "Running"
        wait_for("Job victim to be Running", running, 180)
        with store.session() as s:
            run = s.scalars(select(RunRow)).one()
            head = s.scalars(select(WorkerRow).where(WorkerRow.is_head.is_(True))).one()
            address = f"{head.node_ip}:{port_layout(head.port_base)['gcs']}"
            # random per Run, sealed in the store: derived from nothing a log or a line holds
            assert run.ray_token and run.event_token is None
            token = ray_auth_env(box.open(run.ray_token)["token"])
        refused = drive(address, REFUSED_TRIES)
        assert refused.startswith("REFUSED") and "InvalidAuthToken" in refused, refused
        wrong = drive(address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64, **REFUSED_TRIES})
        assert wrong.startswith("REFUSED") and "InvalidAuthToken" in wrong, wrong
        assert drive(address, token).startswith("CONNECTED"), "the Run's own token must work"
    finally:
        ctl.shutdown(grace=5)
        store.dispose()
