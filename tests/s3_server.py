"""A real S3 server for tests (``scripts/s3-server``): SeaweedFS's ``weed`` built from its Go module.

``scripts/s3-server build`` compiles ``weed`` once into a cache outside the repository (a no-op
when cached); the ``s3_server`` fixture (session scope) starts one ``weed server`` with its
master, volume server, filer and S3 gateway on 127.0.0.1, on free ports below 32768, with an
access key and secret this session makes up, and stops it at the end (by its PID)::

    from tests.s3_server import s3_server  # noqa: F401  (the fixture)

    def test_something(s3_server):
        s3 = s3_server.client()              # a boto3 S3 client with the session's keys
        s3.create_bucket(Bucket="data")
        s3_server.endpoint, s3_server.access_key, s3_server.secret_key

When the server cannot be built or started, the fixture **fails** with the reason under CI
(``CI=true``, or ``RLARK_S3_SERVER_REQUIRED=1``) and skips with the reason elsewhere.
Settings: ``RLARK_S3_SERVER_BUILD_TIMEOUT`` (seconds for a build, default 3600: a cold build on
two cores takes minutes), ``RLARK_S3_SERVER_UP_TIMEOUT`` (default 90).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "s3-server"

#: the ports one server takes: master, volume server, filer and S3 gateway, each with its gRPC port
PORT_NAMES = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")
#: where a free block is looked for: below Linux's ephemeral range (32768) and apart from the
#: other tests' ranges (PostgreSQL 15432-15999, the k8s test bed 16000-19989, RLark's local
#: runtime 20000-32767: rlark.runtimes.local.ports)
PORT_LOW, PORT_HIGH = 14000, 15400


class S3ServerUnavailable(RuntimeError):
    """The S3 server could not be built or started; the message says why."""


def _required() -> bool:
    return (os.environ.get("CI", "").lower() in ("1", "true", "yes")
            or os.environ.get("RLARK_S3_SERVER_REQUIRED", "") == "1")


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _free(port: int, ip: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, port))
        except OSError:
            return False
    return True


def _pick_ports(ip: str = "127.0.0.1") -> dict[str, int]:
    """A block of :data:`PORT_NAMES` consecutive free ports of ``ip`` in ``[PORT_LOW, PORT_HIGH)``."""
    size = len(PORT_NAMES)
    starts = list(range(PORT_LOW, PORT_HIGH - size, size))
    random.shuffle(starts)
    for base in starts:
        if all(_free(base + k, ip) for k in range(size)):
            return {name: base + k for k, name in enumerate(PORT_NAMES)}
    raise S3ServerUnavailable(f"no {size} free consecutive ports in {PORT_LOW}-{PORT_HIGH}")


def weed_binary() -> str:
    """Build ``weed`` (cached: a no-op after the first time) and return its path.

    Raises:
        S3ServerUnavailable: no script, no Go, or the build failed or ran out of time (the
            script's last lines are in the message).
    """
    if not SCRIPT.exists():
        raise S3ServerUnavailable(f"{SCRIPT} is missing")
    timeout = float(os.environ.get("RLARK_S3_SERVER_BUILD_TIMEOUT", "3600"))
    try:
        done = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True,
                              timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise S3ServerUnavailable(f"scripts/s3-server build ran past {timeout:.0f} s "
                                  "(RLARK_S3_SERVER_BUILD_TIMEOUT)") from None
    if done.returncode != 0:
        raise S3ServerUnavailable(f"scripts/s3-server build failed:\n{_tail(done.stderr)}")
    path = subprocess.run(["bash", str(SCRIPT), "path"], capture_output=True, text=True)
    if path.returncode != 0:
        raise S3ServerUnavailable(f"scripts/s3-server path failed: {_tail(path.stderr)}")
    return path.stdout.strip()


@dataclass
class S3Server:
    """A running SeaweedFS server: its S3 ``endpoint`` (``http://127.0.0.1:PORT``) and the one
    identity it knows, ``access_key``/``secret_key`` (every S3 action)."""

    endpoint: str
    access_key: str
    secret_key: str
    dir: Path
    proc: subprocess.Popen

    def client(self, access_key: str | None = None, secret_key: str | None = None) -> Any:
        """A boto3 S3 client for this server (path-style addressing, region us-east-1), with
        the server's keys unless others are given (e.g. wrong ones)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2},
                          connect_timeout=5, read_timeout=30))

    def log_tail(self) -> str:
        try:
            return _tail((self.dir / "weed.log").read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 5 s (its graceful stop takes
        ~15 s and keeps nothing worth keeping: the data directory goes next); its directory
        removed."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def start_s3_server(ip: str = "127.0.0.1") -> S3Server:
    """Start ``weed server`` (master, volume, filer, S3) on free ports of ``ip`` (an address of
    this machine, e.g. the test bed's real node's, which its Pods reach) with fresh keys, and
    wait (bounded: ``RLARK_S3_SERVER_UP_TIMEOUT``, default 90 s) until its S3 gateway lists
    buckets with those keys.

    Raises:
        S3ServerUnavailable: it could not be built, exited, or did not answer in time (its log's
            last lines are in the message).
    """
    weed = weed_binary()
    ports = _pick_ports(ip)
    root = Path(tempfile.mkdtemp(prefix="rlark-s3-server-"))
    (root / "data").mkdir()
    access_key = "RLARK" + secrets.token_hex(8).upper()
    secret_key = secrets.token_urlsafe(30)
    (root / "s3.json").write_text(json.dumps({"identities": [{
        "name": "rlark-tests",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    (root / "s3.json").chmod(0o600)
    # -volume.max: the master grows 7 volumes for a bucket's first write (its collection's own;
    # sparse files, a few KB while empty), and a bucket without one answers InternalError
    # ("No writable volumes and no free volumes left"): 128 holds the 18 buckets of a session
    args = [weed, "server", f"-dir={root / 'data'}", f"-ip={ip}", f"-ip.bind={ip}",
            "-filer", "-s3", f"-s3.config={root / 's3.json'}", "-master.telemetry=false",
            "-volume.max=128", "-volume.preStopSeconds=0", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-filer.localSocket={root / 'filer.sock'}", f"-s3.localSocket={root / 's3.sock'}",
            *(f"-{name}={port}" for name, port in ports.items())]
    log = open(root / "weed.log", "wb")
    try:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()
    server = S3Server(endpoint=f"http://{ip}:{ports['s3.port']}", access_key=access_key,
                      secret_key=secret_key, dir=root, proc=proc)
    timeout = float(os.environ.get("RLARK_S3_SERVER_UP_TIMEOUT", "90"))
    deadline = time.monotonic() + timeout
    client = server.client()
    last = "nothing yet"
    while True:
        if proc.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise S3ServerUnavailable(f"weed server exited with status {proc.returncode}:\n{tail}")
        try:
            client.list_buckets()
            return server
        except Exception as exc:  # noqa: BLE001 - not answering yet: connection refused, 503
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            tail = server.log_tail()
            server.stop()
            raise S3ServerUnavailable(
                f"the S3 server on {server.endpoint} did not list buckets within {timeout:.0f} s "
                f"(RLARK_S3_SERVER_UP_TIMEOUT; last: {last}); its log:\n{tail}")
        time.sleep(0.5)  # polling interval of the bounded wait above


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3 server for the session (see the module's docstring); fails under CI, skips
    elsewhere, when it cannot be built or started."""
    try:
        server = start_s3_server()
    except S3ServerUnavailable as exc:
        reason = f"S3 server unavailable: {exc}"
        if _required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.stop()
