"""Who may call what: every route of the app x every kind of caller -> the expected status.

The table is generated from the app's own route list (``rlark.api.security.api_routes``, which
also sees the routes of included routers) and each route's declared rule (``route_rule``): a
route added without a rule fails here (and the app refuses to build). The expected status
follows from the rule:

* ``public``: never 401/403 and never sent to the login page;
* no token, an unknown, a revoked or an expired token: 401 on the API (JSON), 303 to
  ``/login?next=...`` on console pages;
* project rules: 404 without a role in the project (nobody learns it exists), 403 with a weaker
  role, success with enough;
* site administrators only: 403 for everyone else;
* ``user`` (any authenticated caller): success, unless the service itself decides from what the
  route touches (:data:`SERVICE_RULES`: another user's record, someone else's token, the audit
  log).

Success is exactly 2xx on the API; on the console 2xx, or a redirect that is not to the login
page (forms answer with a redirect to the page they came from, ``/`` with one to ``/jobs``). Path parameters name real objects (the
Job ``demo`` in project ``default``, user ``mia``, one of her tokens ...) and every body is one
that succeeds, so "success" means the route really did its job. A caller reaches the console with
an API token in ``Authorization`` (which needs no CSRF token, as a browser never sends one on its
own); console sessions and their CSRF tokens have their own test at the end.

Each state-changing case that passes the door runs on its own copy of a prepared SQLite store
(copying the file is much faster than building a store), so order does not matter.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from fastapi import APIRouter, FastAPI
from sqlalchemy import text, update

from rlark.server import create_app
from rlark.secretbox import SecretBox, new_key
from rlark.services.secrets import SecretService
from rlark.services.webhooks import WebhookService
from rlark.api.security import (
    SESSION_COOKIE,
    Rule,
    allow_user,
    api_routes,
    check_every_route_has_a_rule,
    is_api_path,
    route_rule,
)
from rlark.services.accounts import AccountService
from rlark.services.auth import OPEN_PRINCIPAL, AuthService, utcnow
from rlark.services.jobs import JobService
from rlark.store import ProjectRole, Store, TokenRow
from tests.access import admin_token, api_client, bearer, make_user
from tests.test_api import job_yaml, set_run_state, set_worker_logs
from tests.test_job_service import ROOMY_HOST

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MIA_PASSWORD = "mia-has-a-long-password"
SAFE = {"GET", "HEAD", "OPTIONS"}

#: the callers: who they are, and the role each has in the project ``default``
UNAUTHENTICATED = ("no token", "bad token", "revoked token", "expired token")
IDENTITIES = UNAUTHENTICATED + ("viewer", "other project", "member", "project admin",
                                "site admin")
ROLE_IN_DEFAULT = {"viewer": ProjectRole.viewer, "other project": None,
                   "member": ProjectRole.member, "project admin": ProjectRole.admin,
                   "site admin": ProjectRole.admin}
#: user names behind the identities (``mia`` is the member)
USER_OF = {"viewer": "vera", "other project": "otto", "member": "mia", "project admin": "pat",
           "site admin": "admin"}

# One app for the module; each case puts a Store (and the services on it) behind it.
APP = create_app(JobService(None))  # type: ignore[arg-type]
BOX = SecretBox([new_key().encode()])


def is_console(path: str) -> bool:
    return not is_api_path(path)


@dataclass(frozen=True)
class RouteCase:
    method: str
    path: str
    rule: Rule

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"


def route_table(app: FastAPI) -> list[RouteCase]:
    """(method, path, rule) of every API and console route of ``app``; ``/openapi.json`` (a
    plain route FastAPI adds) is there too: it describes every operation, so it needs a login."""
    out = [RouteCase(m, path, route_rule(r)) for path, r in api_routes(app) for m in sorted(r.methods)]
    out.append(RouteCase("GET", "/openapi.json", Rule.user))
    return out


ROUTES = route_table(APP)

#: "user" routes whose service decides by what they touch (user mia, a token of mia's, the
#: audit log): identity -> status; identities not named succeed
SERVICE_RULES: dict[str, dict[str, int]] = {
    "GET /api/v1/users/{name}": {"viewer": 403, "other project": 403, "project admin": 403},
    "PATCH /api/v1/users/{name}": {"viewer": 403, "other project": 403, "project admin": 403},
    "DELETE /api/v1/tokens/{token_id}": {"viewer": 404, "other project": 404,
                                         "project admin": 404},
    "GET /api/v1/audit": {"viewer": 403, "other project": 403, "member": 403},
    "GET /admin/audit": {"viewer": 403, "other project": 403, "member": 403},
}

#: bodies that succeed, by route (API: JSON or YAML; console: a form)
JOB_DOC = {"content": job_yaml("fresh"), "headers": {"Content-Type": "application/yaml"}}
BODIES: dict[str, dict] = {
    "POST /api/v1/jobs": JOB_DOC,
    "PUT /api/v1/jobs/{name}": {"content": job_yaml("demo"),
                                "headers": {"Content-Type": "application/yaml"}},
    "POST /api/v1/validate": JOB_DOC,
    "POST /api/v1/check": JOB_DOC,
    "POST /api/v1/login": {"json": {"user": "mia", "password": MIA_PASSWORD}},
    "POST /api/v1/tokens": {"json": {"name": "made-here"}},
    "POST /api/v1/users": {"json": {"name": "newbie"}},
    "PATCH /api/v1/users/{name}": {"json": {"password": "a-brand-new-password",
                                            "currentPassword": MIA_PASSWORD}},
    "POST /api/v1/projects": {"json": {"name": "fresh-project"}},
    "PUT /api/v1/projects/{project}/members/{user}": {"json": {"role": "viewer"}},
    "PUT /api/v1/projects/{project}/quotas": {"json": {"maxJobs": 40}},
    "PUT /api/v1/projects/{project}/queue": {"json": {"queue": None}},
    "POST /login": {"data": {"user": "mia", "password": MIA_PASSWORD}},
    "POST /create/yaml": {"data": {"yaml": job_yaml("fresh")}},
    "POST /admin/users": {"data": {"name": "newbie"}},
    "POST /admin/projects": {"data": {"name": "fresh-project"}},
    "POST /admin/projects/{project}/members": {"data": {"user": "otto", "role": "viewer"}},
    "POST /tokens": {"data": {"name": "made-here"}},
    "POST /secrets": {"data": {"name": "fresh", "key": "k", "value": "v"}},
    "POST /secrets/{name}/delete": {"data": {}},
    "PATCH /api/v1/secrets/{name}": {"json": {"data": {"k": "v2"}}},
    "PUT /api/v1/secrets/{name}": {"json": {"data": {"k": "v3"}}},
    "GET /api/v1/record/diff": {"params": {"a": "demo", "b": "demo:1"}},
    "POST /api/v1/webhooks": {"json": {"name": "fresh", "url": "https://hooks.example.com/x"}},
    "POST /webhooks": {"data": {"name": "fresh", "url": "https://hooks.example.com/x",
                                "events": "run.failed"}},
    "POST /webhooks/{name}/delete": {"data": {}},
    "GET /api/v1/jobs/{name}/outputs/{output}/file": {"params": {"path": "f.txt"}},
    "GET /jobs/{name}/outputs/{output}/file": {"params": {"path": "f.txt"}},
}


def set_output_record(store: Store, name: str, out: Path) -> None:
    """Job ``name``'s current Run (ended) as if it had written the file ``f.txt`` to output
    ``logs`` on a hostPath mount: its record, read back as the controller reads it."""
    import copy

    from rlark.record.finish import finish_record
    from rlark.store import JobRow, RunRow

    (out / "f.txt").write_text("an output\n")
    out.chmod(0o755)
    with store.session() as s:
        job = s.query(JobRow).filter_by(name=name).one()
        run = s.get(RunRow, job.current_run_id)
        spec = copy.deepcopy(run.spec)
        spec["spec"]["outputs"] = [{"name": "logs", "path": str(out)}]
        head = next(r for r in spec["spec"]["roles"] if r["name"] == spec["spec"]["headRole"])
        head["mounts"] = [{"name": "out", "type": "hostPath", "source": str(out),
                           "mountPath": str(out)}]
        run.spec = spec
        for w in run.workers:
            w.facts = {**(w.facts or {}), "python": "3.11.7"}
        run.record = finish_record(run, None, keys={})


def path_values(case: RouteCase, env: "Env") -> dict[str, object]:
    """Real objects for a route's path parameters."""
    values: dict[str, object] = {"name": "demo", "project": "default", "user": "vera",
                                 "token_id": env.mia_token_id, "action": "stop", "fmt": "txt",
                                 "locale": "en", "number": 1, "output": "logs"}
    if case.path.startswith(("/api/v1/users/", "/admin/users/")):
        values.update(name="mia", action="disable")
    if case.path.endswith("record.{fmt}"):
        values["fmt"] = "json"
    if case.method == "PUT" and "/members/" in case.path:
        values["user"] = "otto"  # give otto (of project other) a role in default
    if case.path in ("/api/v1/projects/{project}", "/admin/projects/{project}/delete") \
            and case.method != "GET":
        values["project"] = "spare"  # default cannot be deleted; spare is empty
    return values


def url_of(case: RouteCase, env: "Env") -> str:
    names = re.findall(r"{(\w+)(?::\w+)?}", case.path)
    values = path_values(case, env)
    missing = [n for n in names if n not in values]
    assert not missing, f"{case.key}: give path_values() a real object for {missing}"
    return re.sub(r"{(\w+)(?::\w+)?}", lambda m: quote(str(values[m.group(1)]), safe=""), case.path)


def expected(case: RouteCase, identity: str) -> int | str:
    """``"ok"``, ``"login"`` (console: 303 to the login page), ``"not-refused"`` (public) or a
    status."""
    if case.rule is Rule.public:
        return "not-refused"
    if identity in UNAUTHENTICATED:
        return "login" if is_console(case.path) else 401
    if case.rule is Rule.site_admin:
        return "ok" if identity == "site admin" else 403
    if case.rule in (Rule.project_viewer, Rule.project_member, Rule.project_admin):
        needed = {Rule.project_viewer: ProjectRole.viewer, Rule.project_member: ProjectRole.member,
                  Rule.project_admin: ProjectRole.admin}[case.rule]
        role = ROLE_IN_DEFAULT[identity]
        if role is None:
            return 404
        return "ok" if role.allows(needed) else 403
    assert case.rule is Rule.user, case
    return SERVICE_RULES.get(case.key, {}).get(identity, "ok")


# --- the prepared store -----------------------------------------------------------------------


@dataclass
class Env:
    template: Path
    tokens: dict[str, str | None]
    mia_token_id: int
    #: the store GET cases share (they change nothing a later case could see)
    shared: Store
    tmp: Path


#: the ``$RLARK_HOME`` whose volumes the volume routes see (set by the ``env`` fixture)
VOLUME_HOME: list[Path] = []


def _services(store: Store) -> None:
    service = JobService(store, host=ROOMY_HOST)
    APP.state.jobs = service
    APP.state.auth = AuthService(store)
    APP.state.accounts = AccountService(APP.state.auth)
    APP.state.secrets = SecretService(store, BOX)
    APP.state.webhooks = WebhookService(store, BOX)
    if VOLUME_HOME:  # volume ``demo`` of project default, again for each case that deletes it
        (VOLUME_HOME[0] / "volumes" / "default" / "demo").mkdir(parents=True, exist_ok=True)
        setattr(service.profile, "home", str(VOLUME_HOME[0]))


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Env:
    tmp = tmp_path_factory.mktemp("access-routes")
    home = tmp / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLARK_HOME", str(home))
        mp.delenv("RLARK_DATABASE_URL", raising=False)
        template = tmp / "template.db"
        store = Store(f"sqlite:///{template}")
        admin = admin_token(store)
        tokens: dict[str, str | None] = {
            "no token": None,
            "bad token": "rlark_" + "x" * 43,
            "viewer": make_user(store, "vera", "default", "viewer"),
            "other project": make_user(store, "otto", "other", "member"),
            "member": make_user(store, "mia", "default", "member", password=MIA_PASSWORD),
            "project admin": make_user(store, "pat", "default", "admin"),
            "site admin": admin,
        }
        accounts = AccountService(AuthService(store))
        # the site administrator's own tokens, revoked and expired: even the strongest user
        # gets nowhere with them
        revoked = accounts.create_token(OPEN_PRINCIPAL, None, "revoked", user="admin")
        accounts.revoke_token(OPEN_PRINCIPAL, None, revoked["id"])
        expired = accounts.create_token(OPEN_PRINCIPAL, None, "expired", user="admin",
                                        expires_in_days=1)
        with store.session() as s:
            s.execute(update(TokenRow).where(TokenRow.id == expired["id"])
                      .values(expires_at=utcnow() - timedelta(minutes=1)))
        tokens["revoked token"], tokens["expired token"] = revoked["token"], expired["token"]
        mia_token_id = accounts.list_tokens(OPEN_PRINCIPAL, user="mia")[0]["id"]
        accounts.create_project(OPEN_PRINCIPAL, None, "spare")
        jobs = JobService(store, host=ROOMY_HOST)
        jobs.create(job_yaml("demo"))
        set_worker_logs(store, "demo", {"demo-head-0": ["hello"]})
        # finished, Workers gone: start, stop, restart, replace and delete all succeed on it
        set_run_state(store, "demo", "Succeeded", released=True)
        (tmp / "out").mkdir()
        set_output_record(store, "demo", tmp / "out")
        jobs.create(job_yaml("secret"), project="other")
        SecretService(store, BOX).set(OPEN_PRINCIPAL, None, "default", "demo", {"k": "v"})
        WebhookService(store, BOX).create(OPEN_PRINCIPAL, None, "default",
                                          {"name": "demo", "url": "https://hooks.example.com/d"})
        with store.engine.connect() as conn:  # everything into the main file, to copy it
            conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
        store.dispose()
        shared = copy_store(template, tmp / "shared.db")
        VOLUME_HOME[:] = [home]
        _services(shared)
        yield Env(template, tokens, mia_token_id, shared, tmp)
        shared.dispose()
        APP.state.jobs = JobService(None)  # type: ignore[arg-type]


def copy_store(template: Path, to: Path) -> Store:
    shutil.copyfile(template, to)
    return Store(f"sqlite:///{to}", migrate=False)


@pytest.fixture(scope="module")
def client(env):
    return api_client(APP, None, follow_redirects=False)


def call(client, env: Env, case: RouteCase, identity: str, **extra):
    client.cookies.clear()  # a login sets a session cookie; no case may carry another's
    token = env.tokens[identity]
    kw = dict(BODIES.get(case.key, {}))
    headers = {**kw.pop("headers", {}), **(bearer(token) if token else {}), **extra.pop("headers", {})}
    return client.request(case.method, url_of(case, env), headers=headers, **kw, **extra)


# --- the table ---------------------------------------------------------------------------------


def test_every_route_declares_a_rule():
    routes = api_routes(APP)
    assert len(routes) > 40  # the API's and the console's, not only the app's own /docs
    for path, route in routes:
        assert route_rule(route) is not None, f"{sorted(route.methods)} {path}"
    paths = {path for path, _ in routes}
    assert {"/api/v1/jobs/{name}", "/jobs/{name}", "/healthz", "/docs", "/api/v1/users"} <= paths


def test_an_app_with_a_route_without_a_rule_is_refused(monkeypatch):
    # in an included router (how every RLark route is added) ...
    app = FastAPI()
    router = APIRouter(prefix="/api/v1")

    @router.get("/ruled", dependencies=[allow_user()])
    def ruled() -> dict:
        return {}

    @router.get("/forgotten")
    def forgotten() -> dict:
        return {}

    app.include_router(router)
    with pytest.raises(RuntimeError, match=r"/api/v1/forgotten") as info:
        check_every_route_has_a_rule(app)
    assert "/api/v1/ruled" not in str(info.value)

    # ... and added to RLark's own app: create_app refuses to build it
    import rlark.server as app_module

    real_mount = app_module.mount_console

    def mount_with_a_forgotten_page(app: FastAPI) -> None:
        real_mount(app)

        @app.get("/forgotten-page", include_in_schema=False)
        def page() -> dict:
            return {}

    monkeypatch.setattr(app_module, "mount_console", mount_with_a_forgotten_page)
    with pytest.raises(RuntimeError, match=r"\['GET'\] /forgotten-page"):
        create_app(JobService(None))  # type: ignore[arg-type]


def _case_id(value) -> str:
    return value.key if isinstance(value, RouteCase) else str(value)


@pytest.mark.parametrize("identity", IDENTITIES)
@pytest.mark.parametrize("case", ROUTES, ids=_case_id)
def test_route_answers_each_caller_as_its_rule_says(case, identity, env, client):
    want = expected(case, identity)
    fresh = case.method not in SAFE and identity not in UNAUTHENTICATED
    store = env.shared
    if fresh:  # a state change: on its own copy of the prepared store
        store = copy_store(env.template, env.tmp / "case.db")
        _services(store)
    try:
        r = call(client, env, case, identity)
    finally:
        if fresh:
            store.dispose()
            _services(env.shared)
    where = f"{case.key} ({case.rule.value}) as {identity}: {r.status_code} {r.text[:300]}"
    location = r.headers.get("location", "")
    to_login = r.status_code == 303 and location.startswith("/login?next=")
    if want == "not-refused":
        assert r.status_code not in (401, 403) and not to_login, where
    elif want == "login":
        assert to_login, where
        query = BODIES.get(case.key, {}).get("params")  # a page asked with a query keeps it
        asked = url_of(case, env) + (f"?{urlencode(query)}" if query else "")
        assert location == "/login?next=" + quote(asked, safe=""), where
    elif want == "ok":
        if is_console(case.path):
            assert 200 <= r.status_code < 300 or (r.is_redirect and not to_login), where
        else:
            assert 200 <= r.status_code < 300, where
    else:
        assert r.status_code == want, where
        if not is_console(case.path):
            code = {401: "Unauthenticated", 403: "Forbidden", 404: "NotFound"}[want]
            assert r.json()["detail"]["code"] == code, where
    if want == 401:
        assert r.headers["www-authenticate"].startswith("Bearer"), where


# --- another project's Jobs ---------------------------------------------------------------------

JOB_READS = [c for c in ROUTES if "{name}" in c.path and c.path.startswith(("/api/v1/jobs", "/jobs"))]


@pytest.mark.parametrize("case", JOB_READS, ids=_case_id)
def test_another_projects_job_is_answered_like_one_that_does_not_exist(case, env, client):
    """mia (member of default) asks for otto's Job ``secret`` in project ``other``: the answer
    is byte for byte the one for a Job that does not exist there, and nothing changes."""
    store = copy_store(env.template, env.tmp / "secret.db")
    _services(store)
    try:
        def ask(name: str, project: str):
            url = url_of(case, env).replace("/demo", f"/{name}", 1)
            body = dict(BODIES.get(case.key, {}))
            if case.method == "PUT":
                body["content"] = job_yaml(name)
            client.cookies.clear()
            return client.request(case.method, url, params={**body.pop("params", {}),
                                                            "project": project},
                                  headers={**body.pop("headers", {}), **bearer(env.tokens["member"])},
                                  **body)

        before = JobService(store).get("secret", "other")
        hidden = ask("secret", "other")
        missing = ask("nosuch", "other")
        assert hidden.status_code == missing.status_code == 404, (hidden.text, missing.text)
        assert hidden.text == missing.text.replace("nosuch", "secret")
        # a project that does not exist at all answers the same (only its name differs)
        unknown = ask("secret", "nowhere")
        assert unknown.status_code == 404
        assert unknown.text.replace("nowhere", "other") == hidden.text
        after = JobService(store).get("secret", "other")
        assert after["desired"] == before["desired"] and after["runs"] == before["runs"]
    finally:
        store.dispose()
        _services(env.shared)


def test_job_lists_hide_other_projects(env, client):
    member = bearer(env.tokens["member"])
    listed = client.get("/api/v1/jobs", headers=member).json()
    assert [(j["name"], j["project"]) for j in listed["items"]] == [("demo", "default")]
    hidden = client.get("/api/v1/jobs", params={"project": "other"}, headers=member)
    unknown = client.get("/api/v1/jobs", params={"project": "nowhere"}, headers=member)
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.text == unknown.text.replace("nowhere", "other")
    everything = client.get("/api/v1/jobs", headers=bearer(env.tokens["site admin"])).json()
    assert {(j["name"], j["project"]) for j in everything["items"]} == {
        ("demo", "default"), ("secret", "other")}
    theirs = client.get("/api/v1/jobs", headers=bearer(env.tokens["other project"])).json()
    assert [(j["name"], j["project"]) for j in theirs["items"]] == [("secret", "other")]


# --- console sessions and CSRF ------------------------------------------------------------------

CONSOLE_POSTS = [c for c in ROUTES if is_console(c.path) and c.method == "POST"
                 and c.rule is not Rule.public]


@pytest.mark.parametrize("case", CONSOLE_POSTS, ids=_case_id)
def test_console_posts_with_a_session_need_its_csrf_token(case, env, client):
    """A browser's session cookie rides along on a form another site submits: a console POST
    with a session but without the session's CSRF token is refused (403) and changes nothing;
    with it, the site administrator's session gets what the site administrator's token gets.
    Without any session the door comes first (303 to the login page)."""
    store = copy_store(env.template, env.tmp / "csrf.db")
    _services(store)
    try:
        cookie, principal = APP.state.auth.login("127.0.0.1", token=env.tokens["site admin"])
        body = dict(BODIES.get(case.key, {"data": {}}))
        url = url_of(case, env)
        from tests.test_api import snapshot

        client.cookies.clear()
        r = client.post(url, **body)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), r.text[:300]

        before = snapshot(store)
        for csrf in (None, "not-the-token"):
            form = dict(body.get("data", {}))
            if csrf is not None:
                form["csrf_token"] = csrf
            client.cookies.clear()
            r = client.post(url, data=form, cookies={SESSION_COOKIE: cookie})
            assert r.status_code == 403, (case.key, csrf, r.status_code, r.text[:300])
        assert snapshot(store) == before, f"{case.key}: a refused form changed the Store"

        form = {**body.get("data", {}), "csrf_token": principal.csrf}
        client.cookies.clear()
        r = client.post(url, data=form, cookies={SESSION_COOKIE: cookie})
        to_login = r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        assert (200 <= r.status_code < 300 or r.is_redirect) and not to_login, \
            (case.key, r.status_code, r.text[:300])
        # htmx sends the token in a header instead of the form
        client.cookies.clear()
        r = client.post(url, data=body.get("data", {}), cookies={SESSION_COOKIE: cookie},
                        headers={"X-CSRF-Token": principal.csrf, "HX-Request": "true"})
        assert r.status_code not in (401, 403) and r.status_code < 500, (case.key, r.text[:300])
    finally:
        client.cookies.clear()
        store.dispose()
        _services(env.shared)


def test_a_session_cookie_reads_the_api_but_changes_nothing_there(env, client):
    cookie, _ = APP.state.auth.login("127.0.0.1", token=env.tokens["member"])
    client.cookies.clear()
    r = client.get("/api/v1/jobs/demo", cookies={SESSION_COOKIE: cookie})
    assert r.status_code == 200 and r.json()["name"] == "demo"
    r = client.post("/api/v1/jobs/demo/stop", cookies={SESSION_COOKIE: cookie})
    assert r.status_code == 401 and "API token" in r.json()["detail"]["message"]
    assert JobService(env.shared).get("demo")["desired"] == "Running"
    client.cookies.clear()


def test_openapi_says_which_operations_need_a_token():
    schema = APP.openapi()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for case in ROUTES:
        op = schema["paths"].get(case.path, {}).get(case.method.lower())
        if op is None:
            continue
        if case.rule is Rule.public:
            assert op.get("security") == [], case.key
        else:
            assert op.get("security", schema["security"]) == [{"bearer": []}], case.key
