"""What an attack pass against the first authenticated release found, each pinned here: the
server's environment never reaches a Finding; only project members compose configs; sessions
end with the token or password they came from; forwarded addresses are believed only from a
trusted proxy; strict Host parsing; refusals of unsafe settings; bad bodies answer 4xx; the
state directory is private."""

from __future__ import annotations

import stat

import httpx
import pytest
import yaml

from rlark.api.security import host_allowed
from rlark.server import security_policy
from rlark.services.accounts import AccountService
from rlark.services.auth import OPEN_PRINCIPAL, AuthService, LoginLimiter
from rlark.services.errors import Invalid, TooManyRequests, Unauthenticated
from rlark.services.jobs import JobService
from rlark.store import Store
from tests.access import admin_token, api_client, make_user
from tests.conftest import EXAMPLES
from tests.server import RlarkServer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PASSWORD = "a-long-enough-password"


def quickstart_with_override(override: str) -> dict:
    doc = yaml.safe_load((EXAMPLES / "quickstart" / "job.yaml").read_text())
    doc["spec"]["workingDir"] = str(EXAMPLES / "quickstart")
    doc["spec"]["rlinf"]["overrides"] = [override]
    return doc


def test_check_never_echoes_the_servers_environment(app_store, monkeypatch):
    app, store = app_store
    monkeypatch.setenv("RLARK_TEST_SERVER_SECRET", "s3cret-value-of-the-server")
    member = api_client(app, make_user(store, "mia", "default", "member"))
    for override in ("cluster.num_nodes=${oc.env:RLARK_TEST_SERVER_SECRET}",
                     "+cluster.extra=${oc.env:RLARK_TEST_SERVER_SECRET}"):
        r = member.post("/api/v1/check", json=quickstart_with_override(override))
        assert r.status_code == 200, r.text
        assert "s3cret-value-of-the-server" not in r.text
    # the head role's own env is what ${oc.env:...} sees
    doc = quickstart_with_override("cluster.num_nodes=${oc.env:MY_NODES}")
    doc["spec"]["roles"][0]["env"] = [{"name": "MY_NODES", "value": "7"}]
    findings = member.post("/api/v1/check", json=doc).json()["findings"]
    assert any("7" in f["message"] and "num_nodes" in f["message"] for f in findings), findings


def test_only_members_of_the_project_may_compose_configs_on_the_server(app_store):
    app, store = app_store
    viewer = api_client(app, make_user(store, "vera", "default", "viewer"))
    stranger = api_client(app, make_user(store, "otto", "other", "member"))
    body = quickstart_with_override("cluster.num_nodes=3")
    assert viewer.post("/api/v1/check", json=body).status_code == 403
    assert stranger.post("/api/v1/check", json=body).status_code == 404
    assert stranger.post("/api/v1/check?project=other", json=body).status_code == 200


@pytest.mark.parametrize("route", ["/api/v1/login", "/api/v1/tokens", "/api/v1/users"])
def test_a_yaml_body_on_a_json_route_is_a_4xx_not_a_500(app_store, route):
    app, store = app_store
    client = api_client(app, admin_token(store))
    r = client.post(route, content=b"user: x\nname: y\n", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["code"] == "Invalid"


def test_a_console_session_ends_with_the_token_it_was_opened_with(app_store):
    app, store = app_store
    auth: AuthService = app.state.auth
    token = make_user(store, "mia", "default", "member")
    cookie, _ = auth.login("10.0.0.1", token=token)
    assert auth.from_session(cookie).name == "mia"
    accounts = AccountService(auth)
    mine = accounts.list_tokens(auth.from_token(token))
    accounts.revoke_token(OPEN_PRINCIPAL, None, mine[0]["id"])
    with pytest.raises(Unauthenticated):
        auth.from_session(cookie)


def test_a_password_change_ends_the_password_sessions(app_store):
    app, store = app_store
    auth: AuthService = app.state.auth
    admin_token(store)
    make_user(store, "mia", "default", "member", password=PASSWORD)
    cookie, _ = auth.login("10.0.0.1", name="mia", password=PASSWORD)
    assert auth.from_session(cookie).name == "mia"
    AccountService(auth).update_user(OPEN_PRINCIPAL, None, "mia", password=PASSWORD + "-new")
    with pytest.raises(Unauthenticated):
        auth.from_session(cookie)


def test_changing_your_own_password_takes_the_current_one(app_store):
    """A stolen token or a console left open must not be enough to take over the account's
    password: the current one is asked for, a wrong one is refused, audited and counted by the
    login rate limit; a site administrator still sets another user's password without it."""
    from sqlalchemy import select

    from rlark.store import AuditRow

    app, store = app_store
    auth: AuthService = app.state.auth
    admin = api_client(app, admin_token(store))
    mia = api_client(app, make_user(store, "mia", "default", "member", password=PASSWORD))
    new = PASSWORD + "-new"
    auth.limiter = LoginLimiter("2/5 minutes")

    for body in ({"password": new}, {"password": new, "currentPassword": "not-her-password"},
                 {"password": new, "currentPassword": ""}):
        r = mia.patch("/api/v1/users/mia", json=body)
        assert r.status_code == 403, (body, r.status_code, r.text)
        assert "current password" in r.json()["detail"]["message"], r.text
    auth.check_password("mia", PASSWORD, "10.0.0.9")  # unchanged
    with store.session() as s:
        failed = s.scalars(select(AuditRow).where(AuditRow.action == "user.password",
                                                  AuditRow.outcome == "failed")).all()
        # the two wrong ones (none given is no guess)
        assert [(a.actor, a.target) for a in failed] == [("mia", "mia")] * 2
    # the wrong guesses count as failed logins do: the third try waits, even a right one
    r = mia.patch("/api/v1/users/mia", json={"password": new, "currentPassword": PASSWORD})
    assert r.status_code == 429 and "Retry-After" in r.headers, r.text
    with pytest.raises(TooManyRequests):
        auth.login("testclient", name="mia", password=PASSWORD)
    auth.limiter = LoginLimiter()  # time passes

    r = mia.patch("/api/v1/users/mia", json={"password": new, "currentPassword": PASSWORD})
    assert r.status_code == 200, r.text
    auth.check_password("mia", new, "10.0.0.9")
    # a site administrator sets another user's password without knowing it (audited) ...
    r = admin.patch("/api/v1/users/mia", json={"password": PASSWORD})
    assert r.status_code == 200, r.text
    auth.check_password("mia", PASSWORD, "10.0.0.9")
    # ... and their own first one; a later change, like anyone's, takes the current one
    assert admin.patch("/api/v1/users/admin", json={"password": new}).status_code == 200
    r = admin.patch("/api/v1/users/admin", json={"password": PASSWORD})
    assert r.status_code == 403 and "current password" in r.text
    with store.session() as s:
        changes = [(a.actor, a.target, a.detail) for a in s.scalars(
            select(AuditRow).where(AuditRow.action == "user.update").order_by(AuditRow.id))]
    assert changes[-3:] == [("mia", "mia", "password changed (current password given)"),
                            ("admin", "mia", "password set by a site administrator"),
                            ("admin", "admin", "first password set")]
    # a user without a password cannot give herself one with just a token: a site
    # administrator sets the first one
    otto = api_client(app, make_user(store, "otto", "default", "member"))
    r = otto.patch("/api/v1/users/otto", json={"password": new})
    assert r.status_code == 403 and "site administrator" in r.json()["detail"]["message"], r.text


def _after_next_commit(store: Store, do) -> None:
    """Run ``do`` (in a connection of its own) right after the next commit of one of ``store``'s
    sessions: what another request does between two steps of this one."""
    from sqlalchemy import event

    def hook(_session) -> None:
        with store.engine.begin() as conn:
            do(conn)

    event.listen(store._sessions, "after_commit", hook, once=True)


def test_a_token_or_user_deleted_during_a_login_answers_401_not_a_500(app_store):
    """A login checks its credentials in one transaction and opens the session (or makes the
    token) in the next; a token or user deleted in between (another request) used to fail with
    AttributeError (a 500). Found by the static type checker: ``Session.get`` may give None."""
    from sqlalchemy import delete

    from rlark.store import TokenRow, UserRow

    app, store = app_store
    auth: AuthService = app.state.auth
    admin_token(store)
    token = make_user(store, "mia", "default", "member", password=PASSWORD)
    _after_next_commit(store, lambda conn: conn.execute(delete(TokenRow)))
    with pytest.raises(Unauthenticated, match="revoked or deleted meanwhile"):
        auth.login("10.0.0.1", token=token)

    make_user(store, "otto", "default", "member", password=PASSWORD)
    _after_next_commit(store, lambda conn: conn.execute(delete(UserRow).where(UserRow.name == "otto")))
    with pytest.raises(Unauthenticated, match="deleted or disabled meanwhile"):
        auth.login("10.0.0.1", name="otto", password=PASSWORD)

    # the API's password login (check the password, then make a token) answers 401 too
    make_user(store, "ida", "default", "member", password=PASSWORD)
    client = api_client(app, None)
    _after_next_commit(store, lambda conn: conn.execute(delete(UserRow).where(UserRow.name == "ida")))
    r = client.post("/api/v1/login", json={"user": "ida", "password": PASSWORD})
    assert r.status_code == 401, r.text
    assert r.json()["detail"]["code"] == "Unauthenticated"
    assert "deleted or disabled meanwhile" in r.json()["detail"]["message"]


@pytest.mark.parametrize("host", ["evil.com@localhost", "localhost/evil", "localhost#.x",
                                  "localhost?.x", "localhost:99999", "localhost.", "", "[::1"])
def test_host_headers_that_are_not_plain_host_port_are_refused(host):
    assert not host_allowed(host, ("localhost", "127.0.0.1", "::1"))


def test_no_auth_with_every_host_allowed_is_refused():
    with pytest.raises(ValueError, match="DNS rebinding"):
        security_policy("127.0.0.1", auth=False, allowed_hosts=("*",))


def test_bad_names_and_values_on_the_access_routes_are_refused(app_store):
    app, store = app_store
    admin = api_client(app, admin_token(store))
    r = admin.post("/api/v1/tokens", json={"name": "safe\u202egpj.exe"})
    assert r.status_code == 422 and "not valid" in r.json()["detail"]["message"]
    for days in ("1", True, 1.5):
        assert admin.post("/api/v1/tokens", json={"name": "t", "expiresInDays": days}).status_code == 422
    r = admin.post("/api/v1/projects", json={"name": "sys", "namespace": "kube-system"})
    assert r.status_code == 422 and "Kubernetes itself" in r.json()["detail"]["message"]
    with pytest.raises(Invalid):
        AccountService(app.state.auth).create_token(OPEN_PRINCIPAL, None, "\x00", user="admin")


def test_forwarded_addresses_are_ignored_and_the_home_is_private(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    server = RlarkServer(home).start()
    try:
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        for i in range(3):
            r = httpx.post(f"{server.url}/api/v1/login", json={"user": "admin", "password": "x" * 12},
                           headers={"X-Forwarded-For": f"10.9.9.{i}"})
            assert r.status_code == 401
        r = server.http.get("/api/v1/audit", params={"action": "login.failed"})
        assert {a["client"] for a in r.json()["items"]} == {"127.0.0.1"}
    finally:
        server.stop()


def test_a_followed_log_ends_when_the_callers_token_is_revoked(rlark_home):
    from rlark.services.auth import OPEN_PRINCIPAL as ADMIN
    from tests.server import ThreadedServer
    from tests.test_api import job_yaml, set_run_state, set_worker_logs
    from tests.test_job_service import ROOMY_HOST

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    jobs = JobService(store, host=ROOMY_HOST)
    jobs.create(job_yaml("demo"))
    set_worker_logs(store, "demo", {"demo-head-0": ["hello"]})
    set_run_state(store, "demo", "Running")  # the Worker is live: the stream would never end
    server = ThreadedServer(jobs).start()
    try:
        token = make_user(store, "vera", "default", "viewer")
        accounts = AccountService(AuthService(store))
        events = []
        with httpx.stream("GET", f"{server.url}/api/v1/jobs/demo/logs",
                          params={"follow": "true", "worker": "demo-head-0"},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    events.append(line[6:].strip())
                if line.startswith("data:") and "hello" in line:  # streaming: now take it away
                    mine = accounts.list_tokens(AuthService(store).from_token(token))
                    accounts.revoke_token(ADMIN, None, mine[0]["id"])
                if line.startswith("data:") and "AccessEnded" in line:
                    break
        assert events[0] == "workers" and events[-1] == "end", events
    finally:
        server.stop()
        store.dispose()
