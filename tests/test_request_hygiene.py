"""Request hygiene on a real server (uvicorn on a loopback port, the app without a controller):
the Host allow-list, refusal of cross-site state changes, API body types, CORS, session cookies
on the API, the login rate limit, how tokens are kept, and the audit trail of Job changes.

Every refused request must leave the Store as it was.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from rlark.api.security import SESSION_COOKIE, SecurityPolicy, api_routes
from rlark.services.auth import AuthService, utcnow
from rlark.services.jobs import JobService
from rlark.store import AuditRow, Store, TokenRow
from tests.access import bearer, make_user
from tests.server import ThreadedServer
from tests.test_api import job_yaml, set_run_state, snapshot
from tests.test_job_service import ROOMY_HOST

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

YAML = {"Content-Type": "application/yaml"}
MIA_PASSWORD = "mia-has-a-long-password"


class Served:
    """A ThreadedServer on its own Store with the Job ``demo`` (finished) and user ``mia``
    (member of ``default``, with a password)."""

    def __init__(self, home: Path, policy: SecurityPolicy | None = None):
        self.store = Store(f"sqlite:///{home / 'rlark.db'}")
        self.jobs = JobService(self.store, host=ROOMY_HOST)
        self.jobs.create(job_yaml("demo"))
        set_run_state(self.store, "demo", "Succeeded", released=True)
        self.server = ThreadedServer(self.jobs, policy=policy).start()
        self.url = self.server.url
        self.admin = self.server.token
        self.mia = make_user(self.store, "mia", "default", "member", password=MIA_PASSWORD)
        self.http = httpx.Client(base_url=self.url, timeout=30, follow_redirects=False)

    def close(self) -> None:
        self.http.close()
        self.server.stop()
        self.store.dispose()


@pytest.fixture
def served(rlark_home):
    s = Served(rlark_home)
    yield s
    s.close()


def unchanged(served: Served, send) -> httpx.Response:
    """``send()`` a request that must be refused; the Store must not change."""
    before = snapshot(served.store)
    r = send()
    assert snapshot(served.store) == before, f"a refused request changed the Store: {r.text[:300]}"
    return r


def unsafe_routes(served: Served) -> list[tuple[str, str]]:
    """(method, concrete URL) of every state-changing route, API and console, with its path
    parameters filled (the refusals here come before any route runs, so any value does)."""
    out = []
    for path, route in api_routes(served.server.app):
        for method in sorted(route.methods - {"GET", "HEAD", "OPTIONS"}):
            url = re.sub(r"{(\w+)(?::\w+)?}", lambda m: {"token_id": "1", "fmt": "txt",
                                                         "action": "stop"}.get(m.group(1), "demo"),
                         path)
            out.append((method, url))
    return out


# --- Host ----------------------------------------------------------------------------------------

FOREIGN_HOSTS = ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil",
                 "rebind.attacker.test:8470", "", "[::2]", "bad host"]


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs/demo", "/jobs", "/jobs/demo",
                                  "/docs", "/redoc", "/openapi.json", "/login", "/static/app.css",
                                  "/healthz", "/api/v1/server"])
def test_a_foreign_host_is_refused_everywhere(served, path):
    """DNS rebinding: a page on a name that resolves to this server reaches it with its own
    name in Host. A token does not help (the browser of a logged-in user would send a cookie)."""
    for host in FOREIGN_HOSTS:
        r = served.http.get(path, headers={"Host": host, **bearer(served.admin)})
        assert r.status_code == 400, (host, r.status_code, r.text[:200])
        assert r.json()["detail"]["code"] == "HostNotAllowed"
        assert "--allowed-host" in r.json()["detail"]["message"]
    port = served.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        r = served.http.get(path, headers={"Host": host, **bearer(served.admin)})
        assert r.status_code != 400, (host, r.text[:200])


def test_healthz_tells_a_probe_it_is_up_and_nobody_anything_about_the_server(served):
    """``/healthz`` goes through the Host allow-list like every route (a probe names an allowed
    host) and answers no name, version or leader; the server's state is the site
    administrator's."""
    r = served.http.get("/healthz", headers={"Host": "kubelet-probe.internal"})
    assert r.status_code == 400 and r.json()["detail"]["code"] == "HostNotAllowed"
    r = served.http.get("/healthz")
    assert r.status_code == 200 and r.json() == {"ok": True}
    assert served.http.get("/api/v1/server").status_code == 401
    r = served.http.get("/api/v1/server", headers=bearer(served.mia))
    assert r.status_code == 403, r.text
    r = served.http.get("/api/v1/server", headers=bearer(served.admin))
    assert r.status_code == 200 and {"version", "controller", "workerIsolation"} <= set(r.json())


def test_a_foreign_host_cannot_change_anything(served):
    for method, url in unsafe_routes(served):
        r = unchanged(served, lambda: served.http.request(
            method, url, content=job_yaml("demo"),
            headers={"Host": "evil.example", **YAML, **bearer(served.admin)}))
        assert r.status_code == 400, (method, url, r.status_code)


def test_configured_host_names_are_accepted(rlark_home):
    policy = SecurityPolicy(allowed_hosts=("127.0.0.1", "rlark.example.com", "*.corp.example"))
    s = Served(rlark_home, policy)
    try:
        for host, status in [("rlark.example.com", 200), ("RLARK.example.com:443", 200),
                             ("a.b.corp.example", 200), ("corp.example.evil", 400),
                             ("localhost", 400), ("example.com", 400)]:
            r = s.http.get("/api/v1/jobs", headers={"Host": host, **bearer(s.admin)})
            assert r.status_code == status, (host, r.text[:200])
    finally:
        s.close()


# --- cross-site state changes -----------------------------------------------------------------------

CROSS_SITE = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port or subdomain: same site, other origin
    {"Origin": "http://evil.example"},
    {"Origin": "null"},  # sandboxed frames, file: pages, some redirects
    {"Origin": "http://127.0.0.1:1"},  # this host, another port: another origin
    {"Origin": "https://127.0.0.1"},  # another scheme
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
]


@pytest.mark.parametrize("headers", CROSS_SITE, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_every_state_changing_route_refuses_cross_site_requests(served, headers):
    """Even with a valid token and a valid body: a request a browser marks as coming from
    another site changes nothing, on the API and the console alike."""
    routes = unsafe_routes(served)
    assert len(routes) > 20 and ("POST", "/api/v1/jobs") in routes and ("POST", "/create") in routes
    for method, url in routes:
        r = unchanged(served, lambda: served.http.request(
            method, url, content=job_yaml("demo"), headers={**YAML, **bearer(served.admin), **headers}))
        assert r.status_code == 403, (method, url, r.status_code, r.text[:200])
        assert r.json()["detail"]["code"] == "CrossSiteRefused", (method, url)


def test_same_origin_requests_and_clients_without_browser_headers_pass(served):
    same_origin = {"Origin": served.url, "Sec-Fetch-Site": "same-origin"}
    r = served.http.post("/api/v1/jobs", content=job_yaml("one"),
                         headers={**YAML, **bearer(served.admin), **same_origin})
    assert r.status_code == 201, r.text
    r = served.http.post("/api/v1/jobs", content=job_yaml("two"),  # the CLI sends neither
                         headers={**YAML, **bearer(served.admin), "Sec-Fetch-Site": "none"})
    assert r.status_code == 201, r.text
    # safe methods are not refused for coming from elsewhere (nothing changes; CORS decides
    # whether the other site may read the answer)
    r = served.http.get("/api/v1/jobs/one", headers={**bearer(served.admin),
                                                     "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 200


# --- body types --------------------------------------------------------------------------------------

BROWSER_BODIES = ["text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=----x", "text/html", "application/xml", None]


@pytest.mark.parametrize("content_type", BROWSER_BODIES)
def test_api_bodies_must_be_json_or_yaml(served, content_type):
    """A page can send text/plain, form and multipart bodies to any origin without asking
    (no CORS preflight): the API takes JSON and YAML only, so such a request stores nothing."""
    headers = {**bearer(served.admin), **({"Content-Type": content_type} if content_type else {})}
    api = [(m, u) for m, u in unsafe_routes(served) if u.startswith("/api/")]
    for method, url in api:
        r = unchanged(served, lambda: served.http.request(method, url, content=job_yaml("demo"),
                                                          headers=headers))
        assert r.status_code == 415, (method, url, r.status_code, r.text[:200])
        assert r.json()["detail"]["code"] == "UnsupportedMediaType"
    assert served.jobs.list()["total"] == 1


def test_json_and_yaml_media_types_are_accepted(served):
    for i, media in enumerate(["application/json", "application/json; charset=utf-8",
                               "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"]):
        import json

        import yaml

        body = json.dumps(yaml.safe_load(job_yaml(f"j{i}"))) if "json" in media else job_yaml(f"j{i}")
        r = served.http.post("/api/v1/jobs", content=body,
                             headers={"Content-Type": media, **bearer(served.admin)})
        assert r.status_code == 201, (media, r.text[:200])


# --- CORS --------------------------------------------------------------------------------------------


def preflight(http: httpx.Client, origin: str, method: str = "POST") -> httpx.Response:
    return http.options("/api/v1/jobs", headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization, content-type"})


def test_cors_is_closed_by_default(served):
    r = preflight(served.http, "http://evil.example")
    assert "access-control-allow-origin" not in r.headers, r.headers
    assert r.status_code >= 400
    r = served.http.get("/api/v1/jobs", headers={"Origin": "http://evil.example",
                                                 **bearer(served.admin)})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_a_configured_origin_may_call_the_api_with_a_token(rlark_home):
    app_origin = "https://app.example.com"
    s = Served(rlark_home, SecurityPolicy(cors_origins=(app_origin,)))
    try:
        r = preflight(s.http, app_origin)
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == app_origin
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in r.headers  # tokens, never cookies
        r = s.http.post("/api/v1/jobs", content=job_yaml("from-app"),
                        headers={"Origin": app_origin, "Sec-Fetch-Site": "cross-site", **YAML,
                                 **bearer(s.admin)})
        assert r.status_code == 201, r.text
        assert r.headers["access-control-allow-origin"] == app_origin
        # other origins stay closed
        r = preflight(s.http, "http://evil.example")
        assert r.headers.get("access-control-allow-origin") != "http://evil.example"
        r = unchanged(s, lambda: s.http.post(
            "/api/v1/jobs", content=job_yaml("from-evil"),
            headers={"Origin": "http://evil.example", **YAML, **bearer(s.admin)}))
        assert r.status_code == 403
    finally:
        s.close()


# --- session cookies on the API --------------------------------------------------------------------


def test_a_session_cookie_reads_the_api_but_cannot_change_it(served):
    auth = AuthService(served.store)
    cookie, _ = auth.login("127.0.0.1", name="mia", password=MIA_PASSWORD)
    jar = {SESSION_COOKIE: cookie}
    r = served.http.get("/api/v1/jobs/demo", cookies=jar)
    assert r.status_code == 200 and r.json()["name"] == "demo"
    for method, url in [(m, u) for m, u in unsafe_routes(served) if u.startswith("/api/")]:
        if url == "/api/v1/login":
            continue  # public: it needs no credentials at all
        r = unchanged(served, lambda: served.http.request(method, url, content=job_yaml("demo"),
                                                          headers=YAML, cookies=jar))
        assert r.status_code == 401, (method, url, r.status_code)
        assert "API token" in r.json()["detail"]["message"]
    # the same session works on the console, where forms carry its CSRF token
    r = served.http.get("/jobs/demo", cookies=jar)
    assert r.status_code == 200 and "demo" in r.text


# --- login rate limit ------------------------------------------------------------------------------


def test_failed_logins_are_rate_limited_and_audited(served):
    statuses = []
    for _ in range(12):
        r = served.http.post("/api/v1/login", json={"user": "mia", "password": "wrong-password!"})
        statuses.append(r.status_code)
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429], statuses
    assert int(r.headers["Retry-After"]) > 0
    assert r.json()["detail"]["code"] == "TooManyRequests"
    # while limited, even the right password is not checked
    r = served.http.post("/api/v1/login", json={"user": "mia", "password": MIA_PASSWORD})
    assert r.status_code == 429
    # the console's login form shares the limit
    r = served.http.post("/login", data={"user": "mia", "password": MIA_PASSWORD})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    with served.store.session() as s:
        failed = s.scalars(select(AuditRow).where(AuditRow.action == "login.failed")).all()
        assert len(failed) == 10
        assert {(a.actor, a.client) for a in failed} == {("mia", "127.0.0.1")}
    audit = served.http.get("/api/v1/audit", params={"action": "login.failed"},
                            headers=bearer(served.admin)).json()
    assert len(audit["items"]) == 10 and audit["items"][0]["actor"] == "mia"


def test_a_good_login_gives_a_token_shown_once(served):
    r = served.http.post("/api/v1/login", json={"user": "mia", "password": MIA_PASSWORD,
                                                "tokenName": "laptop", "expiresInDays": 7})
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert token.startswith("rlark_") and r.json()["user"] == "mia"
    me = served.http.get("/api/v1/me", headers=bearer(token)).json()
    assert (me["name"], me["admin"], me["via"], me["projects"]) == (
        "mia", False, "token", {"default": "member"})


# --- tokens --------------------------------------------------------------------------------------------


def db_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in home.glob("rlark.db*"))


def test_tokens_are_shown_once_and_stored_only_as_a_digest(served, rlark_home):
    r = served.http.post("/api/v1/tokens", json={"name": "ci"}, headers=bearer(served.mia))
    assert r.status_code == 201, r.text
    made = r.json()
    raw = made["token"]
    assert raw.startswith("rlark_") and len(raw) >= 40
    assert made["prefix"] == raw[:12] + "..."
    listed = served.http.get("/api/v1/tokens", headers=bearer(served.mia)).json()
    assert {t["name"] for t in listed} == {"test", "ci"}
    assert all("token" not in t for t in listed) and raw not in str(listed)
    assert served.http.get("/api/v1/me", headers=bearer(raw)).json()["name"] == "mia"
    # the database holds no usable secret: neither the token nor its random part (WAL included)
    with served.store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(FULL)")
    data = db_bytes(rlark_home)
    for secret in (raw, served.mia, served.admin):
        assert secret.encode() not in data
        assert secret[12:].encode() not in data
    import hashlib

    assert hashlib.sha256(raw.encode()).hexdigest().encode() in data  # the digest is what is kept


def test_revoked_expired_and_disabled_tokens_get_401(served):
    a = served.http.post("/api/v1/tokens", json={"name": "a"}, headers=bearer(served.mia)).json()
    b = served.http.post("/api/v1/tokens", json={"name": "b", "expiresInDays": 1},
                         headers=bearer(served.mia)).json()
    for tok in (a, b):
        assert served.http.get("/api/v1/me", headers=bearer(tok["token"])).status_code == 200

    r = served.http.delete(f"/api/v1/tokens/{a['id']}", headers=bearer(served.mia))
    assert r.status_code == 200 and r.json()["state"] == "revoked"
    r = served.http.get("/api/v1/me", headers=bearer(a["token"]))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]["message"]

    with served.store.session() as s:  # the expiry passes
        s.execute(update(TokenRow).where(TokenRow.id == b["id"])
                  .values(expires_at=utcnow() - timedelta(seconds=1)))
    r = served.http.get("/api/v1/me", headers=bearer(b["token"]))
    assert r.status_code == 401 and "expired" in r.json()["detail"]["message"]
    states = {t["name"]: t["state"] for t in
              served.http.get("/api/v1/tokens", headers=bearer(served.mia)).json()}
    assert states == {"test": "active", "a": "revoked", "b": "expired"}

    r = served.http.patch("/api/v1/users/mia", json={"disabled": True}, headers=bearer(served.admin))
    assert r.status_code == 200 and r.json()["disabled"] is True
    for method, url in [("GET", "/api/v1/me"), ("GET", "/api/v1/jobs/demo"),
                        ("POST", "/api/v1/jobs/demo/stop")]:
        r = served.http.request(method, url, headers=bearer(served.mia))
        assert r.status_code == 401 and "disabled" in r.json()["detail"]["message"], (method, url)
    assert served.http.post("/api/v1/login", json={"user": "mia", "password": MIA_PASSWORD}
                            ).status_code == 401
    served.http.patch("/api/v1/users/mia", json={"disabled": False}, headers=bearer(served.admin))
    assert served.http.get("/api/v1/me", headers=bearer(served.mia)).status_code == 200


@pytest.mark.parametrize("authorization", ["Bearer", "Bearer rlark_", "Basic YWRtaW46YWRtaW4=",
                                           "Bearer not-a-token", "bearer rlark_" + "A" * 43,
                                           "Bearer rlark_" + "x" * 300, "Token rlark_abc"])
def test_malformed_credentials_get_401_never_5xx(served, authorization):
    r = served.http.get("/api/v1/jobs", headers={"Authorization": authorization})
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["detail"]["code"] == "Unauthenticated"


# --- audit of Job changes ------------------------------------------------------------------------------


def test_job_changes_are_audited_with_actor_and_client_and_shown_in_events(served):
    h = {**bearer(served.mia), **YAML}
    steps = [("POST", "/api/v1/jobs", job_yaml("audited"), 201),
             ("POST", "/api/v1/jobs/audited/stop", None, 200),
             ("POST", "/api/v1/jobs/audited/restart", None, 200),
             # a changed spec (an unchanged one starts nothing and is not audited)
             ("PUT", "/api/v1/jobs/audited",
              job_yaml("audited").replace("python train.py", "python train.py --seed 2"), 200)]
    for method, url, body, status in steps:
        r = served.http.request(method, url, content=body, headers=h)
        assert r.status_code == status, (url, r.text[:300])
    set_run_state(served.store, "audited", "Stopped", released=True)
    assert served.http.post("/api/v1/jobs/audited/start", headers=h).status_code == 200

    events = served.http.get("/api/v1/jobs/audited/events", headers=h).json()
    by_reason = {e["reason"]: e for e in events}
    for reason in ("Submitted", "StopRequested", "Restarted", "SpecUpdated", "Started"):
        assert by_reason[reason]["actor"] == "mia", (reason, by_reason[reason])
        assert "by mia" in by_reason[reason]["message"] or reason == "StopRequested"

    r = served.http.delete("/api/v1/jobs/audited", headers=h)
    assert r.status_code == 200 and r.json()["project"] == "default"

    audit = served.http.get("/api/v1/audit", params={"action": "job.", "user": "mia"},
                            headers=bearer(served.admin)).json()["items"]
    assert [(a["action"], a["actor"], a["client"], a["project"], a["target"], a["outcome"])
            for a in reversed(audit)] == [
        (f"job.{verb}", "mia", "127.0.0.1", "default", "audited", "ok")
        for verb in ("create", "stop", "restart", "replace", "start", "delete")]
    assert all(a["time"] for a in audit)


def test_refused_changes_are_audited_as_denied(served):
    viewer = make_user(served.store, "vera", "default", "viewer")
    r = served.http.post("/api/v1/jobs/demo/stop", headers=bearer(viewer))
    assert r.status_code == 403
    other = make_user(served.store, "otto", "other", "member")
    r = served.http.delete("/api/v1/jobs/demo", headers=bearer(other))
    assert r.status_code == 404
    denied = served.http.get("/api/v1/audit", params={"action": "request.denied"},
                             headers=bearer(served.admin)).json()["items"]
    assert [(a["actor"], a["target"], a["outcome"], a["project"]) for a in reversed(denied)] == [
        ("vera", "/api/v1/jobs/demo/stop", "denied", "default"),
        ("otto", "/api/v1/jobs/demo", "denied", "default")]
    assert served.jobs.get("demo")["desired"] == "Running"


# --- one cross-site check for the API and the console ------------------------------------------------

APP_ORIGIN = "https://app.example.com"


def cross_site_rows(port: str) -> list[tuple[str, dict[str, str]]]:
    """(row, headers): what a browser (or a client) may send with a state-changing request."""
    here = f"127.0.0.1:{port}"
    return [
        ("no browser headers (the CLI)", {}),
        ("same-origin", {"Origin": f"http://{here}", "Sec-Fetch-Site": "same-origin"}),
        ("Sec-Fetch-Site: none", {"Sec-Fetch-Site": "none"}),
        ("same origin, spelled in capitals", {"Origin": f"HTTP://LOCALHOST:{port}",
                                              "Host": f"localhost:{port}"}),
        ("same origin, default port written out", {"Origin": "http://localhost:80",
                                                   "Host": "localhost"}),
        ("same-site, other port", {"Origin": f"http://127.0.0.1:{int(port) + 1}",
                                   "Sec-Fetch-Site": "same-site"}),
        ("Sec-Fetch-Site: same-site alone", {"Sec-Fetch-Site": "same-site"}),
        ("another port, Origin alone", {"Origin": f"http://127.0.0.1:{int(port) + 1}"}),
        ("cross-site", {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}),
        ("Sec-Fetch-Site: cross-site alone", {"Sec-Fetch-Site": "cross-site"}),
        ("Origin: null", {"Origin": "null"}),
        # a TLS proxy in front that RLark does not trust: the browser is on https, RLark sees
        # http; the same host and port cannot serve both, so it is this server
        ("https, same host and port", {"Origin": f"https://{here}"}),
        ("a configured CORS origin, with a token", {"Origin": APP_ORIGIN,
                                                    "Sec-Fetch-Site": "cross-site"}),
        ("a Host not allowed", {"Host": "evil.example"}),
        ("a Host not allowed, same-origin", {"Host": "evil.example",
                                             "Origin": "http://evil.example",
                                             "Sec-Fetch-Site": "same-origin"}),
    ]


def verdict(r: httpx.Response) -> str:
    """What became of a request: refused at the door (and why), or let through to the route."""
    if r.status_code == 400 and "HostNotAllowed" in r.text:
        return "host refused"
    if r.status_code == 403 and ("CrossSiteRefused" in r.text or "another site" in r.text):
        return "cross-site refused"
    return f"passed ({r.status_code})"


def test_the_api_and_the_console_judge_cross_site_requests_alike(rlark_home):
    """The same requests against a state-changing API route and a console form post get the same
    verdict: one check decides for both."""
    s = Served(rlark_home, SecurityPolicy(cors_origins=(APP_ORIGIN,)))
    try:
        port = s.url.rsplit(":", 1)[1]
        table, disagree = [], []
        for row, headers in cross_site_rows(port):
            api = s.http.post("/api/v1/jobs/demo/stop",
                              headers={**bearer(s.admin), **YAML, **headers})
            console = s.http.post("/jobs/demo/stop", content="next=%2Fjobs",
                                  headers={**bearer(s.admin), **headers,
                                           "Content-Type": "application/x-www-form-urlencoded"})
            table.append((row, verdict(api).split(" (")[0], verdict(console).split(" (")[0]))
            if table[-1][1] != table[-1][2]:
                disagree.append(f"{row}: API {verdict(api)}, console {verdict(console)}")
        assert not disagree, "rows where the API and the console disagree:\n" + "\n".join(disagree)
        expected = {"no browser headers (the CLI)": "passed", "same-origin": "passed",
                    "Sec-Fetch-Site: none": "passed", "same origin, spelled in capitals": "passed",
                    "same origin, default port written out": "passed",
                    "https, same host and port": "passed",
                    "a configured CORS origin, with a token": "passed",
                    "a Host not allowed": "host refused",
                    "a Host not allowed, same-origin": "host refused"}
        assert {row: api for row, api, _ in table} == {
            row: expected.get(row, "cross-site refused") for row, _ in cross_site_rows(port)}
        # a configured origin is for API tokens: a page there riding on a session cookie is
        # refused at the door, by the API and the console alike
        cookie, _ = AuthService(s.store).login("127.0.0.1", name="mia", password=MIA_PASSWORD)
        for url in ("/api/v1/jobs/demo/stop", "/jobs/demo/stop"):
            r = s.http.post(url, cookies={SESSION_COOKIE: cookie},
                            headers={"Origin": APP_ORIGIN, "Sec-Fetch-Site": "cross-site"})
            assert verdict(r) == "cross-site refused", (url, r.status_code, r.text[:200])
    finally:
        s.close()


# --- security headers ------------------------------------------------------------------------------


def test_every_answer_carries_the_security_headers(served):
    """Pages, API answers, assets and every refusal at the door: none may be framed, sniffed or
    leak its URL to another origin; the console's CSP allows no inline or eval'd script."""
    from rlark.api.security import CONTENT_SECURITY_POLICY

    answers = {
        "console page": served.http.get("/jobs", headers=bearer(served.admin)),
        "login page": served.http.get("/login"),
        "asset": served.http.get("/static/console.js"),
        "API": served.http.get("/api/v1/jobs", headers=bearer(served.admin)),
        "no such route": served.http.get("/api/v1/nothing", headers=bearer(served.admin)),
        "unauthenticated": served.http.get("/api/v1/jobs"),
        "unauthenticated page": served.http.get("/jobs"),
        "host refused": served.http.get("/api/v1/jobs", headers={"Host": "evil.example"}),
        "cross-site refused": served.http.post("/api/v1/jobs", headers={
            **bearer(served.admin), **YAML, "Sec-Fetch-Site": "cross-site"}),
        "health": served.http.get("/healthz"),
        "docs": served.http.get("/docs", headers=bearer(served.admin)),
    }
    for what, r in answers.items():
        assert r.headers.get("x-frame-options") == "DENY", (what, r.status_code, r.headers)
        assert r.headers.get("x-content-type-options") == "nosniff", what
        assert r.headers.get("referrer-policy") == "same-origin", what
        csp = r.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "'unsafe-eval'" not in csp, (what, csp)
        assert csp == CONTENT_SECURITY_POLICY or what == "docs", (what, csp)
        assert r.headers.get_list("content-security-policy") == [csp], what  # one policy
    # the docs page's one inline script runs by a nonce made for that answer alone
    docs = answers["docs"]
    nonce = re.search(r"'nonce-([^']+)'", docs.headers["content-security-policy"]).group(1)
    assert f'<script nonce="{nonce}">' in docs.text and "<script>" not in docs.text
    again = served.http.get("/docs", headers=bearer(served.admin)).headers["content-security-policy"]
    assert nonce not in again
    assert "script-src 'self' 'nonce-" in docs.headers["content-security-policy"]
    assert "'unsafe-inline'" not in docs.headers["content-security-policy"].split("script-src")[1].split(";")[0]
