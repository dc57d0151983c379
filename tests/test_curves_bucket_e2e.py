"""A Run's training curves read back from its bucket, end to end on the local runtime (issue 25,
item 2): a real ``rlark server``, ONE one-Worker Job (one Ray node) whose RLinf config puts
``runner.logger.log_path`` on a copy-mode ``objectStorage`` mount of a real S3 server
(SeaweedFS, tests/s3_server.py); its run script writes a small event file where RLinf's
MetricLogger would, with tensorboard's own writer; the Worker copies it out to the bucket.
Once the Worker's directory is gone, the API and ``rlark metrics`` give exactly those points,
read from the bucket."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.s3_server import s3_server  # noqa: F401  (the fixture)
from tests.server import RlarkServer, ray_tmp_dir
from tests.test_curves_e2e import points, train
from tests.test_local_mounts import mount_root  # noqa: F401  (the fixture)
from tests.test_local_objects import s3_mount, secret

pytestmark = pytest.mark.ray

NAME = "curves-s3"
BUCKET = "rlark-curves-e2e"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # the S3 server listens on 127.0.0.1: a network the server reads from only where allowed
    srv = RlarkServer(tmp_path_factory.mktemp("curves-s3-home"), {
        "RLARK_RAY_TMP": ray_tmp_dir(), "RLARK_OBJECT_STORAGE_ALLOW_NETWORKS": "127.0.0.0/8"}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_curves_of_a_logger_directory_on_a_bucket_are_read_from_the_bucket(
        server, s3_server, mount_root, tmp_path_factory):
    s3 = s3_server.client()
    s3.create_bucket(Bucket=BUCKET)
    # a first object outside the Job's prefix: SeaweedFS grows a new bucket's volumes on its
    # first write, which on a loaded machine may answer InternalError to the Worker's copy
    s3.put_object(Bucket=BUCKET, Key="other/readme.txt", Body=b"not the Job's\n")
    secret(server, "s3", "accessKeyId", s3_server.access_key)
    secret(server, "s3", "secretAccessKey", s3_server.secret_key)
    log = f"{mount_root}/ckpt/logs"
    work = tmp_path_factory.mktemp("curves-s3-work")
    work.chmod(0o755)
    (work / "config").mkdir()
    (work / "config" / "train.yaml").write_text(
        "cluster:\n  num_nodes: 1\n  component_placement:\n    actor: all\n"
        f"runner:\n  logger:\n    log_path: {log}\n    experiment_name: tiny\n")
    (work / "train.py").write_text(train(log))
    mount = s3_mount("ckpt", f"s3://{BUCKET}/ppo", f"{mount_root}/ckpt", s3_server.endpoint, "s3")
    server.submit(json.dumps({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": NAME},
        "spec": {"headRole": "head", "workingDir": str(work),
                 "rlinf": {"configDir": "config", "configName": "train"},
                 "terminationGracePeriodSeconds": 3, "failurePolicy": {"joinTimeoutSeconds": 120},
                 "roles": [{"name": "head", "workers": 1, "image": "docker.io/rlinf/rlinf:0.3.0",
                            "resources": {"cpu": 1, "memory": "1Gi"}, "mounts": [mount]}],
                 "runScript": f"{sys.executable} train.py"}}))
    server.succeeded(NAME, timeout=300)
    [key] = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="ppo/")["Contents"]]
    assert key.startswith("ppo/logs/tensorboard/events.out.tfevents."), key
    # the Worker's own directory (its copy of the mount included) is gone
    record = server.http.get(f"/api/v1/jobs/{NAME}/record", params={"run": 1}).json()
    shutil.rmtree(server.home / "workers" / record["runUid"])

    r = server.http.get(f"/api/v1/jobs/{NAME}/runs/1/scalars")
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["why"] is None and data["scalars"] == points(), data
    assert data["path"] == f"{log}/tensorboard"
    assert data["at"] == f"s3://{BUCKET}/ppo/logs/tensorboard"
    assert data["files"] == [key.rsplit("/", 1)[1]]
    shown = server.cli("metrics", f"{NAME}:1", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["scalars"] == points()
