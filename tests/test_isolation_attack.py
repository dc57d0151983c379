"""A member's run script against the server and another project's Run (issue 18, local runtime).

Real ``rlark server`` (root, local runtime, SQLite), real Workers, real users in two projects.
The attacker's run script tries, from inside its Worker, what the issue found possible: read the
server's credentials file, secret key and database, another Run's log, environment, secrets and
Ray token, write a forged "finished, exit 0" line into the other Run's log; and, in its own Run,
print a forged success (with the Run's event token where it can find one) and exit 1. Each
attempt is denied, the victim ends as its own run script decides (Failed, exit 3, once the
attack is over: it waits for that), and the forger's Run ends Failed. Then a server whose Workers
run as itself: allowed, loudly, while it serves one user on loopback; refused once it serves more.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

import pytest
from sqlalchemy import select

from rlark.secretbox import SecretBox
from rlark.store import RunRow, Store
from tests.access import make_user
from tests.server import RlarkServer, ray_tmp_dir, serve
from tests.test_local_runtime import exchange_dir

pytestmark = pytest.mark.ray

VICTIM_VALUE = "victim-" + secrets.token_hex(12)
FORGED = '{"event": "run_finished", "exit_code": 0, "ts": 1}'


def job(name: str, run: str, env: dict[str, str] | None = None, secret: bool = False,
        grace: int = 5, shared: Path | None = None) -> str:
    """``shared``: a directory of this machine the Worker gets at its own path (hostPath)."""
    items = [{"name": k, "value": v} for k, v in (env or {}).items()]
    if secret:
        items.append({"name": "VICTIM_SECRET", "valueFrom": {"secretKeyRef": {"name": "vault",
                                                                               "key": "value"}}})
    return json.dumps({
        "apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"headRole": "head", "terminationGracePeriodSeconds": grace,
                 "failurePolicy": {"joinTimeoutSeconds": 180},
                 "roles": [{"name": "head", "workers": 1, "image": "x:1",
                            "resources": {"cpu": 1, "memory": "1Gi"}, "env": items,
                            "mounts": [{"name": "shared", "type": "hostPath", "source": str(shared),
                                        "mountPath": str(shared)}] if shared else []}],
                 "runScript": run}})


ATTACK = r"""
set +e
try() { # try WHAT COMMAND...: GOT when the command succeeds
  what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "GOT $what"; else echo "DENIED $what"; fi
}
echo "uid $(id -u)"
try credentials cat "$SERVER_HOME/credentials"
try secret-key cat "$SERVER_HOME/secret.key"
try database head -c 16 "$SERVER_HOME/rlark.db"
try victim-log cat "$VICTIM_LOG"
try list-logs ls "$SERVER_HOME/logs"
try forge-victim-line sh -c "echo 'RLARK_EVENT $FORGED' >> '$VICTIM_LOG'"
found=none
for f in /proc/[0-9]*/environ; do  # the value in two halves: not itself in this environment
  if tr '\0' '\n' < "$f" 2>/dev/null | grep -q "$VICTIM_A$VICTIM_B"; then found=$f; fi
done
[ "$found" = none ] && echo "DENIED victim-environ" || echo "GOT victim-environ $found"
echo "ray tokens seen: $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep '^RAY_AUTH_TOKEN=' | sort -u | cut -c16- | tr '\n' ' ')"
echo "processes seen: $(ls -d /proc/[0-9]* | wc -l)"
seen=none
for f in /proc/[0-9]*/cmdline; do  # a shell match: no process of this search carries the mark
  c=$(tr '\0' ' ' < "$f" 2>/dev/null)
  case "$c" in *"$MARK_A$MARK_B"*) seen=$f ;; esac
done
[ "$seen" = none ] && echo "DENIED victim-process" || echo "GOT victim-process $seen"
echo attack-done
"""

#: prints a success line as RLark's own, with the Run's event token where one can be found (the
#: bootstrap's initial environment, /proc/1/environ), then exits 1
SELF_FORGE = r"""
set +e
tok=$(tr '\0' '\n' < /proc/1/environ 2>/dev/null | sed -n 's/^RLARK_EVENT_TOKEN=//p')
echo "RLARK_EVENT {\"event\": \"run_finished\", \"exit_code\": 0, \"ts\": $(date +%s), \"tok\": \"$tok\"}"
echo "RLARK_EVENT {\"event\": \"exit\", \"code\": 0, \"ts\": $(date +%s), \"tok\": \"$tok\"}"
sleep 3
exit 1
"""


@pytest.fixture
def server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    yield from serve(home)


def as_user(server: RlarkServer, token: str):
    import httpx

    return httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"})


def submit(client, project: str, text: str) -> dict:
    r = client.post(f"/api/v1/jobs?project={project}", content=text.encode(),
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    return r.json()


def wait(server: RlarkServer, project: str, name: str, phases: set[str], timeout: float = 240) -> dict:
    import time

    deadline = time.monotonic() + timeout
    while True:
        j = server.http.get(f"/api/v1/jobs/{name}?project={project}").json()
        if j["phase"] in phases:
            return j
        assert time.monotonic() < deadline, f"{name}: still {j['phase']} ({j['message']})"
        time.sleep(0.3)


def logs(server: RlarkServer, project: str, name: str, lifecycle: bool = False) -> str:
    r = server.http.get(f"/api/v1/jobs/{name}/logs",
                        params={"project": project, "lifecycle": str(lifecycle).lower()})
    assert r.status_code == 200, r.text
    return "\n".join(line for w in r.json()["workers"] for line in w["lines"])


def test_a_members_run_script_cannot_reach_the_server_or_another_run(server):
    store = Store(f"sqlite:///{server.home / 'rlark.db'}")
    try:
        alice = as_user(server, make_user(store, "alice", "vision"))
        mallory = as_user(server, make_user(store, "mallory", "nlp"))
    finally:
        store.dispose()
    r = alice.put("/api/v1/secrets/vault?project=vision", json={"data": {"value": VICTIM_VALUE}})
    assert r.status_code == 200, r.text
    mark = "victim-" + secrets.token_hex(6)  # the victim's wait, as its processes show it
    # the victim runs until the attack is over (a gate only its Job mounts), then exits 3
    gates = exchange_dir(server.home.parent / "gates")
    gate = gates / "attack-over"
    submit(alice, "vision", job("victim", f'echo "victim uid $(id -u)"; (exec -a {mark} sh -c '
                                '\'while [ ! -e "$GATE" ]; do sleep 0.2; done\'); exit 3',
                                env={"PLAIN": VICTIM_VALUE, "GATE": str(gate)}, secret=True,
                                shared=gates))
    victim = wait(server, "vision", "victim", {"Running"})
    log_path = server.home / "logs" / "vision" / "victim" / "1" / "victim-head-0.log"
    assert log_path.is_file()
    submit(mallory, "nlp", job("attacker", ATTACK, env={
        "SERVER_HOME": str(server.home), "VICTIM_LOG": str(log_path), "FORGED": FORGED,
        "VICTIM_A": VICTIM_VALUE[:10], "VICTIM_B": VICTIM_VALUE[10:],
        "MARK_A": mark[:9], "MARK_B": mark[9:]}))
    attacker = wait(server, "nlp", "attacker", {"Succeeded", "Failed"})
    out = logs(server, "nlp", "attacker")
    assert attacker["phase"] == "Succeeded" and "attack-done" in out, out[-3000:]
    got = re.findall(r"^GOT .*$", out, re.M)
    assert not got, got
    denied = set(re.findall(r"DENIED (\S+)", out))
    assert denied == {"credentials", "secret-key", "database", "victim-log", "list-logs",
                      "forge-victim-line", "victim-environ", "victim-process"}, out[-3000:]
    # another uid than the server's and the victim's, and no view of the victim's processes
    uid = int(re.search(r"\buid (\d+)", out).group(1))
    victim_uid = int(re.search(r"victim uid (\d+)", logs(server, "vision", "victim")).group(1))
    assert uid not in (0, os.geteuid(), victim_uid) and victim_uid != 0
    assert int(re.search(r"processes seen: (\d+)", out).group(1)) < 40
    # no token of the victim's Ray cluster anywhere the attacker could look
    box = SecretBox([(server.home / "secret.key").read_bytes().strip()])
    store = Store(f"sqlite:///{server.home / 'rlark.db'}")
    try:
        with store.session() as s:
            row = s.scalars(select(RunRow).where(RunRow.uid == victim["currentRun"]["uid"])).one()
            victim_token = box.open(row.ray_token)["token"]
    finally:
        store.dispose()
    seen = re.search(r"ray tokens seen: (.*)", out).group(1).split()
    assert victim_token not in seen and len(seen) <= 1  # at most the attacker's own
    # the victim, alive through the whole attack, ran its whole course and ended as its own
    # script said
    assert wait(server, "vision", "victim", {"Running"})["phase"] == "Running"
    gate.touch()
    end = wait(server, "vision", "victim", {"Succeeded", "Failed", "Stopped"}, timeout=120)
    assert (end["phase"], end["reason"], end["currentRun"]["exitCode"]) == ("Failed", "RunFailed", 3)
    assert VICTIM_VALUE not in out  # nor did the value reach the attacker's log


def test_a_run_script_that_forges_its_own_success_and_exits_1_fails(server):
    server.submit(job("forger", SELF_FORGE))
    end = server.wait_phase("forger", {"Succeeded", "Failed"}, timeout=240)
    assert (end["phase"], end["reason"], end["currentRun"]["exitCode"]) == ("Failed", "RunFailed", 1)
    text = logs(server, "default", "forger", lifecycle=True)
    # shown as what the script printed, believed as nothing
    assert text.count('(workload) RLARK_EVENT {"event": "') == 2, text[-2000:]


def test_workers_as_the_servers_own_user_only_while_it_serves_one_user(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    srv = RlarkServer(home, {"RLARK_RAY_TMP": ray_tmp_dir(),
                             "RLARK_WORKER_IDENTITY": "server-user"}).start()
    try:
        assert "WORKERS RUN AS THIS SERVER'S OWN USER" in (home / "server.log").read_text()
        r = srv.http.post("/api/v1/check", content=job("solo", "id -u").encode(),
                          headers={"Content-Type": "application/json"})
        assert "WorkersRunAsServer" in [f["code"] for f in r.json()["findings"]], r.text
        srv.submit(job("solo", 'echo "solo uid $(id -u)"'))
        end = srv.wait_phase("solo", {"Succeeded", "Failed"}, timeout=240)
        assert end["phase"] == "Succeeded", end["message"]
        srv.submit(job("later", "true"))
        srv.cli("stop", "later")
        store = Store(f"sqlite:///{home / 'rlark.db'}")
        try:
            make_user(store, "bob", "default")
        finally:
            store.dispose()
        # a second user: submissions refused, and a launch of a stored Job fails, naming why
        r = srv.http.post("/api/v1/jobs", content=job("team", "true").encode(),
                          headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "IdentityUnavailable" in r.text, r.text
        srv.wait_phase("later", {"Stopped"}, timeout=120)
        assert srv.cli("start", "later").returncode == 0
        end = srv.wait_phase("later", {"Succeeded", "Failed"}, timeout=120)
        assert (end["phase"], end["reason"]) == ("Failed", "PolicyDenied")
        assert "serves more than one user" in end["message"]
    finally:
        srv.stop()


def test_nothing_a_job_sets_reaches_a_process_of_root(server, tmp_path):
    """A role's env (PATH, LD_PRELOAD...) is the workload's alone: the keeper (root) and
    `unshare` start from an environment of their own, and `unshare` is run by its absolute
    path (found by an attack pass: a PATH naming a directory with a fake `unshare` ran it as
    root in the host's mount namespace)."""
    import tempfile

    trap = Path(tempfile.mkdtemp(prefix="rlark-trap-", dir="/tmp"))
    try:
        trap.chmod(0o1777)
        marker = trap / "ran-as-root"
        for name in ("unshare", "python3", "sh", "bash"):
            fake = trap / name
            fake.write_text(f"#!/bin/sh\necho \"$(id -u) $0\" >> {marker}\nexec /usr/bin/{name} \"$@\"\n")
            fake.chmod(0o755)
        server.submit(job("pathjack", "echo ok", env={"PATH": f"{trap}:/usr/bin:/bin",
                                                       "LD_PRELOAD": str(trap / "nothing.so")}))
        end = server.wait_phase("pathjack", {"Succeeded", "Failed"}, timeout=240)
        lines = marker.read_text().splitlines() if marker.exists() else []
        # the workload's own shells may use its PATH; no process of root ever did
        assert not [ln for ln in lines if ln.startswith("0 ")], lines
        assert end["phase"] == "Succeeded", end["message"]
    finally:
        import shutil

        shutil.rmtree(trap, ignore_errors=True)
