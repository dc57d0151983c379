"""The console's door: logging in and out, the session cookie, CSRF tokens on every form, what
each role sees and may do, the admin pages, the project switcher, and error pages.

A real app (create_app) on a real SQLite store, driven through HTTP with the TestClient on an
allowed Host; users are made through AccountService (tests/access.py). No controller runs.
"""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from rlark.api.security import PROJECT_COOKIE, SESSION_COOKIE, SecurityPolicy
from rlark.services.accounts import AccountService
from rlark.services.auth import ANONYMOUS, OPEN_PRINCIPAL, AuthService
from rlark.store import ProjectRole
from tests.access import BASE_URL, admin_token, api_client, make_user
from tests.test_console import HOST, _visible_text, finish, job_doc, wizard_form

PASSWORD = "correct horse battery"


@pytest.fixture
def service(rlark_home):
    from rlark.services.jobs import JobService
    from rlark.store import Store

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    yield JobService(store, host=HOST)
    store.dispose()


@pytest.fixture
def app(service):
    from rlark.server import create_app

    return create_app(service)


@pytest.fixture
def admin(service) -> str:
    """The site administrator's API token."""
    return admin_token(service.store)


def browser(app, base_url: str = BASE_URL):
    """A client with no credentials of its own, that keeps cookies like a browser."""
    return TestClient(app, base_url=base_url, follow_redirects=False,
                      raise_server_exceptions=False)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]*)"', html).group(1)


def login(app, *, token: str | None = None, user: str | None = None, password: str = PASSWORD,
          base_url: str = BASE_URL):
    """A client logged in through POST /login, and its session's CSRF token."""
    c = browser(app, base_url)
    form = {"token": token} if token else {"user": user, "password": password}
    r = c.post("/login", data=form)
    assert r.status_code == 303, r.text
    return c, csrf_of(c.get("/tokens").text)


def post(c, url: str, data: dict | None = None, **kw):
    return c.post(url, content=urlencode(data or {}),
                  headers={"Content-Type": "application/x-www-form-urlencoded", **kw.pop("headers", {})},
                  **kw)


def audit(store, action: str) -> list[dict]:
    return AccountService(AuthService(store)).audit(OPEN_PRINCIPAL, action=action)["items"]


def error_message(html: str) -> str:
    return unescape(re.search(r'id="error-message">([^<]*)<', html).group(1))


# --- logging in and out ---------------------------------------------------------------------------


def test_login_page_then_session_then_logout(app, service, admin):
    make_user(service.store, "ada", password=PASSWORD)
    c = browser(app)
    r = c.get("/jobs/x?tab=logs")
    assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Fjobs%2Fx%3Ftab%3Dlogs"
    page = c.get(r.headers["location"])
    assert page.status_code == 200 and 'id="password-form"' in page.text and 'id="token-form"' in page.text
    assert "$RLARK_HOME/credentials" in page.text  # where the first admin token is
    assert 'name="next" value="/jobs/x?tab=logs"' in page.text

    r = post(c, "/login", {"user": "ada", "password": PASSWORD, "next": "/jobs?q=a"})
    assert r.status_code == 303 and r.headers["location"] == "/jobs?q=a"
    jobs = c.get("/jobs?q=a")
    assert jobs.status_code == 200 and 'data-user="ada"' in jobs.text and 'id="logout"' in jobs.text
    assert c.get("/login").headers["location"] == "/jobs"  # already in
    assert c.get("/api/v1/me").json()["name"] == "ada"  # the API reads with the session too
    assert [e["actor"] for e in audit(service.store, "login.ok")] == ["ada"]

    cookie = c.cookies.get(SESSION_COOKIE)
    r = post(c, "/logout", {"csrf_token": csrf_of(jobs.text)})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert 'rlark_session=""' in r.headers["set-cookie"] and "Max-Age=0" in r.headers["set-cookie"]
    assert "You are logged out." in c.get("/login").text
    stale = browser(app)
    stale.cookies.set(SESSION_COOKIE, cookie)  # the old cookie is dead on the server too
    assert stale.get("/jobs").status_code == 303
    assert [e["actor"] for e in audit(service.store, "logout")] == ["ada"]

    # an API token logs in as well; `next` never leaves the site
    r = post(c, "/login", {"token": admin, "next": "https://evil.example/"})
    assert r.status_code == 303 and r.headers["location"] == "/jobs"
    assert 'data-user="admin"' in c.get("/jobs").text


def test_wrong_password_or_token_is_401_and_audited(app, service):
    make_user(service.store, "ada", password=PASSWORD)
    c = browser(app)
    r = post(c, "/login", {"user": "ada", "password": "wrong password", "next": "/nodes"})
    assert r.status_code == 401 and SESSION_COOKIE not in r.headers.get("set-cookie", "")
    assert "Wrong user name or password." in r.text
    assert 'id="login-user" name="user" value="ada"' in r.text and 'value="/nodes"' in r.text
    assert "wrong password" not in r.text  # the password is never echoed
    r = post(c, "/login", {"token": "rlark_" + "x" * 43})
    assert r.status_code == 401 and "That API token is not valid" in r.text
    failed = audit(service.store, "login.failed")
    # newest first; a token that is no one's is "(anonymous)", never RLark itself (None)
    assert [e["actor"] for e in failed] == [ANONYMOUS, "ada"]
    assert c.get("/jobs").status_code == 303  # still not logged in


def test_repeated_failures_are_rate_limited_with_retry_after(app, service):
    make_user(service.store, "ada", password=PASSWORD)
    c = browser(app)
    statuses = [post(c, "/login", {"user": "ada", "password": f"guess {i}"}).status_code
                for i in range(10)]
    assert statuses == [401] * 10
    r = post(c, "/login", {"user": "ada", "password": PASSWORD})  # even the right one, now
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "Too many failed logins; try again in" in r.text
    assert SESSION_COOKIE not in r.headers.get("set-cookie", "")


def _cookie_attrs(set_cookie: str) -> set[str]:
    return {part.strip().split("=")[0].lower() for part in set_cookie.split(";")[1:]} | {
        part.strip().lower() for part in set_cookie.split(";")[1:]}


def test_session_cookie_flags_over_http_and_https(service, admin):
    from rlark.server import create_app

    app = create_app(service)
    r = post(browser(app), "/login", {"token": admin})
    flags = _cookie_attrs(r.headers["set-cookie"])
    assert r.headers["set-cookie"].startswith(f"{SESSION_COOKIE}=")
    assert {"httponly", "samesite=lax", "path=/"} <= flags and "secure" not in flags
    r = post(browser(app, "https://127.0.0.1"), "/login", {"token": admin})
    assert {"httponly", "samesite=lax", "path=/", "secure"} <= _cookie_attrs(r.headers["set-cookie"])
    # behind a TLS proxy that uvicorn does not see: the policy says so
    app = create_app(service, policy=SecurityPolicy(secure_cookies=True))
    r = post(browser(app), "/login", {"token": admin})
    assert "secure" in _cookie_attrs(r.headers["set-cookie"])


def test_landing_project_after_login(app, service):
    token = make_user(service.store, "bo", project="alpha", role="member")
    c = browser(app)
    r = post(c, "/login", {"token": token})
    assert f"{PROJECT_COOKIE}=alpha" in r.headers["set-cookie"]  # default is not theirs
    assert c.get("/jobs").status_code == 200


# --- CSRF ------------------------------------------------------------------------------------------


def all_routes(app) -> list[tuple[str, APIRoute]]:
    """(full path, route) of every APIRoute, also those of included routers (FastAPI 0.165
    keeps them as lazily flattened ``_IncludedRouter`` entries in ``app.routes``)."""
    found: list[tuple[str, APIRoute]] = []

    def walk(routes, prefix: str) -> None:
        for r in routes:
            if isinstance(r, APIRoute):
                found.append((prefix + r.path, r))
            elif hasattr(r, "original_router"):
                walk(r.original_router.routes, prefix + (getattr(r.include_context, "prefix", "") or ""))

    walk(app.routes, "")
    return found


def console_posts(app) -> list[str]:
    """Paths of the console's state-changing routes (all but the public login)."""
    return [path for path, r in all_routes(app) if "POST" in r.methods
            and not path.startswith("/api/") and path != "/login"]


def test_every_console_route_declares_who_may_call_it(app):
    from rlark.api.security import Rule, route_rule

    console = [(p, r) for p, r in all_routes(app) if not p.startswith("/api/")]
    assert len(console) > 20
    rules = {p: route_rule(r) for p, r in console}
    assert None not in rules.values(), [p for p, rule in rules.items() if rule is None]
    assert rules["/login"] == rules["/lang/{locale}"] == Rule.public
    assert rules["/logout"] == rules["/tokens"] == Rule.user
    assert rules["/admin/users"] == Rule.site_admin
    assert rules["/admin/projects/{project}/members"] == Rule.project_admin
    assert rules["/jobs/{name}/{action}"] == Rule.project_member


def test_every_console_post_route_refuses_a_missing_or_wrong_csrf_token(app, service, admin):
    service.create(job_doc("victim"))
    make_user(service.store, "bob", project="team", role="viewer")
    store = service.store
    tok = AccountService(AuthService(store)).create_token(OPEN_PRINCIPAL, None, "keep", user="admin")
    fill = {"name": "victim", "action": "delete", "project": "team", "user": "bob",
            "token_id": str(tok["id"])}
    c, csrf = login(app, token=admin)
    routes = console_posts(app)
    # the console's state-changing routes, whatever is added later, are all in this test
    assert set(routes) >= {"/logout", "/jobs/{name}/{action}", "/create", "/create/yaml",
                           "/admin/users", "/tokens", "/tokens/{token_id}/revoke"}
    before = {"jobs": service.list()["total"], "audit": len(audit(store, ""))}
    forms = {"/create": wizard_form(step="4"), "/admin/users": {"name": "mallory", "token": "1"},
             "/tokens": {"name": "stolen"}, "/admin/projects": {"name": "evil"},
             "/create/yaml": {"yaml": job_doc("other")},
             "/admin/projects/{project}/members": {"user": "bob", "role": "admin"}}
    for path in routes:
        url = path.format(**{k: fill[k] for k in re.findall(r"\{(\w+)", path)})
        for sent in ({}, {"csrf_token": "wrong"}, {"csrf_token": ""}):
            r = post(c, url, {**forms.get(path, {}), **sent})
            assert r.status_code == 403, (url, sent, r.status_code)
            assert "did not carry this page's security token" in error_message(r.text), url
        r = post(c, url, forms.get(path, {}), headers={"X-CSRF-Token": "wrong"})
        assert r.status_code == 403, url
    job = service.get("victim")
    assert job["desired"] == "Running" and not job["deleting"]
    assert service.list()["total"] == before["jobs"]
    assert len(audit(store, "")) == before["audit"]  # nothing changed, nothing to audit
    assert [t["state"] for t in AccountService(AuthService(store)).list_tokens(
        OPEN_PRINCIPAL, "admin")] == ["active", "active"]
    assert c.get("/jobs").status_code == 200  # not even logged out

    # the right token, as a field or as htmx's header, is accepted
    r = post(c, "/jobs/victim/stop", {"csrf_token": csrf})
    assert r.status_code == 303 and service.get("victim")["desired"] == "Stopped"
    r = post(c, "/create", {**wizard_form(step="2"), "action": "next"},
             headers={"X-CSRF-Token": csrf, "HX-Request": "true"})
    assert r.status_code == 200 and 'data-step="3"' in r.text


def test_every_post_form_of_every_page_carries_the_session_csrf_token(app, service, admin):
    service.create(job_doc("formy"))
    c, csrf = login(app, token=admin)
    pages = ["/jobs", "/jobs/formy", "/jobs/formy?tab=spec", "/create", "/jobs/formy/edit",
             "/tokens", "/admin/users", "/admin/projects", "/admin/audit", "/nodes", "/queue"]
    seen = 0
    for url in pages:
        html = c.get(url).text
        assert f'hx-headers=\'{{"X-CSRF-Token": "{csrf}"}}\'' in html, url  # htmx requests
        for form in _post_forms(html):
            seen += 1
            assert form["csrf_token"] == [csrf], (url, form["action"])
    assert seen > 15


class _Forms(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []
        self._in: dict | None = None

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if tag == "form" and (d.get("method") or "").lower() == "post":
            self._in = {"action": d.get("action"), "csrf_token": []}
            self.forms.append(self._in)
        elif tag == "input" and self._in is not None and d.get("name") == "csrf_token":
            self._in["csrf_token"].append(d.get("value"))

    def handle_endtag(self, tag):
        if tag == "form":
            self._in = None


def _post_forms(html: str) -> list[dict]:
    p = _Forms()
    p.feed(html)
    return p.forms


def test_without_authentication_forms_need_no_token_but_other_sites_are_still_refused(service):
    from rlark.server import create_app

    app = create_app(service, policy=SecurityPolicy(auth=False))
    c = browser(app)
    assert c.get("/login").headers["location"] == "/jobs"
    page = c.get("/jobs").text
    assert 'data-user="local"' in page and "no authentication" in page and 'id="logout"' not in page
    service.create(job_doc("open"))
    r = post(c, "/jobs/open/stop")
    assert r.status_code == 303 and service.get("open")["desired"] == "Stopped"
    r = post(c, "/jobs/open/delete", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and not service.get("open")["deleting"]
    r = post(c, "/jobs/open/delete", headers={"Sec-Fetch-Site": "same-site"})
    assert r.status_code == 403 and not service.get("open")["deleting"]


# --- roles --------------------------------------------------------------------------------------------


def test_viewer_sees_no_actions_and_is_refused_them(app, service):
    service.create(job_doc("look"))
    c, csrf = login(app, token=make_user(service.store, "vic", role="viewer"))
    jobs = c.get("/jobs").text
    assert 'data-job="look"' in jobs
    assert "data-action=" not in jobs and 'href="/create"' not in jobs
    for tab in ("overview", "spec"):
        page = c.get(f"/jobs/look?tab={tab}").text
        assert "data-action=" not in page and "/edit" not in page and "/clone" not in page, tab
    r = c.get("/create")
    assert r.status_code == 403 and "text/html" in r.headers["content-type"]
    assert error_message(r.text) == "Your role does not allow this; a project or site administrator can change it."
    assert "your role in project 'default' is viewer" in unescape(r.text)
    for action in ("stop", "restart", "delete"):
        r = post(c, f"/jobs/look/{action}", {"csrf_token": csrf})
        assert r.status_code == 403 and "Not allowed" in r.text, action
    r = post(c, "/create", {**wizard_form(step="4"), "action": "submit", "csrf_token": csrf})
    assert r.status_code == 403 and service.list()["total"] == 1
    job = service.get("look")
    assert job["desired"] == "Running" and not job["deleting"] and job["run"] == 1
    denied = audit(service.store, "request.denied")
    assert len(denied) == 4 and all(e["actor"] == "vic" and e["outcome"] == "denied" for e in denied)
    # nav: no admin pages for a plain user
    assert 'data-nav="tokens"' in jobs
    assert not re.search(r'data-nav="(users|projects|audit)"', jobs)


def test_member_of_another_project_gets_the_not_found_page(app, service):
    service.create(job_doc("secret"))  # in project default
    c, csrf = login(app, token=make_user(service.store, "eve", project="other", role="member"))
    hidden = c.get("/jobs/secret?project=default")
    nowhere = c.get("/jobs/secret?project=no-such-project")
    mine = c.get("/jobs/secret?project=other")  # her own project, no such Job
    for r in (hidden, nowhere, mine, c.get("/jobs/secret")):
        assert r.status_code == 404 and "text/html" in r.headers["content-type"]
        assert error_message(r.text) == "There is no Job named “secret”. It may have been deleted."
        assert 'id="error-detail"' not in r.text  # no service message that names the project
    # not a byte tells the two apart, but the address the language links go back to
    here = lambda r: re.sub(r"\?next=[^\"]*", "", r.text)  # noqa: E731
    assert here(hidden) == here(nowhere)
    for sub in ("?tab=events&project=default", "/edit?project=default", "/_live?project=default",
                "/logs.txt?project=default", "/record.json?project=default"):
        r = c.get("/jobs/secret" + sub)
        assert r.status_code == 404 and "There is no Job named “secret”" in r.text, sub
    r = post(c, "/jobs/secret/delete?project=default", {"csrf_token": csrf})
    assert r.status_code == 404 and "There is no Job named “secret”" in r.text
    assert not service.get("secret")["deleting"]
    r = c.get("/jobs?project=default")
    assert r.status_code == 404 and 'data-job="secret"' not in r.text
    # the API keeps its JSON answers
    r = c.get("/api/v1/jobs/secret?project=default")
    assert r.status_code == 404 and r.json()["detail"]["code"] == "NotFound"


# --- the project switcher and project links ---------------------------------------------------------


def test_project_switcher_and_links_that_carry_the_project(app, service, admin):
    accounts = AccountService(AuthService(service.store))
    for p in ("alpha", "beta"):
        accounts.create_project(OPEN_PRINCIPAL, None, p)
    service.create(job_doc("in-alpha"), project="alpha")
    service.create(job_doc("in-beta"), project="beta")
    service.create(job_doc("in-default"))
    token = make_user(service.store, "pat", project="alpha", role="member")
    accounts.set_member(OPEN_PRINCIPAL, None, "beta", "pat", ProjectRole.viewer)
    c, csrf = login(app, token=token)
    assert c.cookies.get(PROJECT_COOKIE) == "alpha"
    page = c.get("/jobs").text
    options = re.findall(r'<option value="([a-z-]+)"( selected)?>', re.search(
        r'<select id="project-switch".*?</select>', page, re.S).group(0))
    assert options == [("alpha", " selected"), ("beta", "")]
    assert re.findall(r'<tr data-job="([a-z-]+)"', page) == ["in-alpha"]
    assert 'href="/jobs/in-alpha?project=alpha"' in page  # a link anyone can open
    assert 'action="/jobs/in-alpha/stop?project=alpha"' in page
    assert '<span translate="no" data-project>alpha</span>' in page

    r = c.get("/project?project=beta")
    assert r.status_code == 303 and r.headers["location"] == "/jobs"
    assert f"{PROJECT_COOKIE}=beta" in r.headers["set-cookie"]
    page = c.get("/jobs").text
    assert re.findall(r'<tr data-job="([a-z-]+)"', page) == ["in-beta"]
    assert "data-action=" not in page  # a viewer in beta
    # a shared link of the other project still opens its Job
    job = c.get("/jobs/in-alpha?project=alpha")
    assert job.status_code == 200 and 'data-project>alpha<' in job.text
    assert 'hx-get="/jobs/in-alpha/_live?tab=overview&amp;project=alpha"' in job.text
    r = post(c, "/jobs/in-alpha/stop?project=alpha", {"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/jobs/in-alpha?project=alpha"
    assert service.get("in-alpha", "alpha")["desired"] == "Stopped"
    # a project that is not theirs: the not-found page, and the switcher stays where it was
    r = c.get("/project?project=default")
    assert r.status_code == 404 and PROJECT_COOKIE not in r.headers.get("set-cookie", "")
    assert c.cookies.get(PROJECT_COOKIE) == "beta"

    # someone on the default project keeps plain links
    a, _ = login(app, token=admin)
    page = a.get("/jobs").text
    assert 'href="/jobs/in-default"' in page and "?project=" not in page


# --- admin pages ------------------------------------------------------------------------------------


def test_site_admin_manages_users(app, service, admin):
    c, csrf = login(app, token=admin)
    page = c.get("/admin/users").text
    assert re.findall(r'data-nav="(\w+)"', page) == ["queue", "secrets", "tokens", "users",
                                                     "projects", "webhooks", "audit"]
    assert '<tr data-user="admin" data-admin="true" data-disabled="false">' in page
    r = post(c, "/admin/users", {"csrf_token": csrf, "name": "newbie", "password": "",
                                 "project": "default", "role": "viewer", "token": "1"})
    assert r.status_code == 200
    token = re.search(r'id="new-token-value"[^>]*value="(rlark_[^"]+)"', r.text).group(1)
    assert 'data-user="newbie"' in r.text
    assert token not in c.get("/admin/users").text  # shown once
    me = api_client(app, token).get("/api/v1/me").json()
    assert me.pop("tokenId") >= 1
    assert me == {"name": "newbie", "admin": False, "via": "token", "projects": {"default": "viewer"}}
    r = post(c, "/admin/users", {"csrf_token": csrf, "name": "newbie"})
    assert r.status_code == 409 and "a user named 'newbie' exists" in unescape(r.text)
    assert 'value="newbie"' in r.text  # the form keeps what was typed
    r = post(c, "/admin/users", {"csrf_token": csrf, "name": "Bad Name"})
    assert r.status_code == 422

    r = post(c, "/admin/users/newbie/disable", {"csrf_token": csrf})
    assert r.status_code == 303 and "User “newbie” disabled" in c.get("/admin/users").text
    assert api_client(app, token).get("/api/v1/me").status_code == 401
    post(c, "/admin/users/newbie/enable", {"csrf_token": csrf})
    assert api_client(app, token).get("/api/v1/me").status_code == 200
    post(c, "/admin/users/newbie/admin", {"csrf_token": csrf})
    assert api_client(app, token).get("/api/v1/me").json()["admin"] is True
    post(c, "/admin/users/newbie/unadmin", {"csrf_token": csrf})
    assert api_client(app, token).get("/api/v1/me").json()["admin"] is False
    r = post(c, "/admin/users/admin/delete", {"csrf_token": csrf})  # not yourself
    assert "you cannot delete yourself" in c.get(r.headers["location"]).text
    post(c, "/admin/users/newbie/delete", {"csrf_token": csrf})
    assert 'data-user="newbie"' not in c.get("/admin/users").text
    assert api_client(app, token).get("/api/v1/me").status_code == 401
    assert post(c, "/admin/users/admin/explode", {"csrf_token": csrf}).status_code == 404
    assert [e["action"] for e in audit(service.store, "user.")][:6] == [
        "user.delete", "user.update", "user.update", "user.update", "user.update", "user.create"]


def test_projects_page_for_site_admin_and_project_admin(app, service, admin):
    c, csrf = login(app, token=admin)
    r = post(c, "/admin/projects", {"csrf_token": csrf, "name": "team", "namespace": ""})
    assert r.status_code == 303
    make_user(service.store, "lead", project=None, role=None)
    make_user(service.store, "dev", project=None, role=None)
    r = post(c, "/admin/projects/team/members", {"csrf_token": csrf, "user": "lead", "role": "admin"})
    assert "“lead” now has the role “admin” in project “team”" in c.get(r.headers["location"]).text

    # the project admin: members of their project, no users page, no project creation
    lead_token = AccountService(AuthService(service.store)).create_token(
        OPEN_PRINCIPAL, None, "t", user="lead")["token"]
    p, pcsrf = login(app, token=lead_token)
    page = p.get("/admin/projects").text
    assert re.findall(r'data-nav="(\w+)"', page) == ["queue", "secrets", "tokens", "projects",
                                                     "webhooks", "audit"]
    assert re.findall(r'<section class="card project"[^>]*data-project="([a-z-]+)"', page) == ["team"]
    assert 'id="project-form"' not in page and 'data-action="delete-project"' not in page
    assert p.get("/admin/users").status_code == 403
    assert post(p, "/admin/projects", {"csrf_token": pcsrf, "name": "mine"}).status_code == 403
    r = post(p, "/admin/projects/team/members", {"csrf_token": pcsrf, "user": "dev", "role": "member"})
    assert r.status_code == 303
    page = p.get("/admin/projects").text
    assert '<tr data-member="dev" data-role="member">' in page
    r = post(p, "/admin/projects/team/members", {"csrf_token": pcsrf, "user": "ghost", "role": "member"})
    assert "no user named 'ghost'" in unescape(p.get(r.headers["location"]).text)
    r = post(p, "/admin/projects/team/members/dev/remove", {"csrf_token": pcsrf})
    assert 'data-member="dev"' not in p.get(r.headers["location"]).text
    # another project's members are out of reach (as if it did not exist)
    r = post(p, "/admin/projects/default/members", {"csrf_token": pcsrf, "user": "lead", "role": "admin"})
    assert r.status_code == 404
    # their audit view: their project's entries only
    page = p.get("/admin/audit").text
    actions = re.findall(r'data-action="([a-z._]+)"', page)
    assert actions[:3] == ["member.remove", "member.set", "member.set"]
    assert "user.create" not in actions and "login.ok" not in actions
    assert p.get("/admin/audit?project=default").status_code == 404

    # a member (not an admin) of a project: no admin links, audit refused
    d, _ = login(app, token=make_user(service.store, "plain", project="team", role="member"))
    assert d.get("/admin/audit").status_code == 403
    assert not re.search(r'data-nav="(users|projects|audit)"', d.get("/jobs").text)

    # the site admin deletes an empty project; default stays
    r = post(c, "/admin/projects/default/delete", {"csrf_token": csrf})
    assert "cannot be deleted" in c.get(r.headers["location"]).text
    service.create(job_doc("busy"), project="team")
    r = post(c, "/admin/projects/team/delete", {"csrf_token": csrf})
    assert "still has 1 Job" in c.get(r.headers["location"]).text
    finish(service, "busy", "Stopped", "Stopped", "")
    assert service.delete("busy", "team")["deleted"]
    post(c, "/admin/projects/team/delete", {"csrf_token": csrf})
    assert 'data-project="team"' not in c.get("/admin/projects").text


def test_tokens_page_creates_lists_and_revokes_your_tokens(app, service, admin):
    c, csrf = login(app, token=make_user(service.store, "tia"))
    page = c.get("/tokens").text
    assert re.findall(r'<tr data-token="\d+" data-state="(\w+)"', page) == ["active"]
    r = post(c, "/tokens", {"csrf_token": csrf, "name": "ci", "days": "30"})
    assert r.status_code == 200 and "Token “ci” created" in r.text
    token = re.search(r'value="(rlark_[^"]+)"', r.text).group(1)
    assert token not in c.get("/tokens").text  # shown once
    assert api_client(app, token).get("/api/v1/me").json()["name"] == "tia"
    row = re.search(r'<tr data-token="(\d+)" data-state="active">.*?</tr>', c.get("/tokens").text, re.S)
    assert token[:12] + "..." in row.group(0) and "never" not in row.group(0)  # it expires
    assert post(c, "/tokens", {"csrf_token": csrf, "name": "x", "days": "soon"}).status_code == 422
    assert post(c, "/tokens", {"csrf_token": csrf, "name": "", "days": ""}).status_code == 422
    r = post(c, f"/tokens/{row.group(1)}/revoke", {"csrf_token": csrf})
    assert "Token “ci” revoked." in c.get(r.headers["location"]).text
    assert api_client(app, token).get("/api/v1/me").status_code == 401
    assert 'data-state="revoked"' in c.get("/tokens").text
    # someone else's token is not found among yours, and stays valid
    admins, = AccountService(AuthService(service.store)).list_tokens(OPEN_PRINCIPAL, "admin")
    r = post(c, f"/tokens/{admins['id']}/revoke", {"csrf_token": csrf})
    assert "among yours" in c.get(r.headers["location"]).text
    assert api_client(app, admin).get("/api/v1/me").status_code == 200
    r = post(c, "/tokens/not-a-number/revoke", {"csrf_token": csrf})
    assert "There is no such token." in c.get(r.headers["location"]).text


def test_audit_page_filters_newest_first(app, service, admin):
    c, csrf = login(app, token=admin)
    service.create(job_doc("aud"))
    post(c, "/jobs/aud/stop", {"csrf_token": csrf})
    post(c, "/jobs/aud/restart", {"csrf_token": csrf})
    page = c.get("/admin/audit").text
    ids = [int(i) for i in re.findall(r'<tr data-audit="(\d+)"', page)]
    assert ids == sorted(ids, reverse=True) and len(ids) >= 4
    assert re.findall(r'data-action="(job\.[a-z]+)"', page) == ["job.restart", "job.stop", "job.create"]
    page = c.get("/admin/audit?action=job.stop&user=admin&project=default").text
    assert re.findall(r'data-action="([a-z._]+)" data-outcome', page) == ["job.stop"]
    assert c.get("/admin/audit?user=nobody").text.count("<tr data-audit=") == 0
    assert c.get("/admin/audit?action=DROP%20TABLE").status_code == 200  # ignored, not an error
    # the Job's Events tab names who did it
    events = c.get("/jobs/aud?tab=events").text
    assert '<span class="actor" data-actor="admin">by <span translate="no">admin</span></span>' in events


def test_error_pages_are_html_on_the_console_and_json_on_the_api(app, service):
    c, _ = login(app, token=make_user(service.store, "ed"))
    r = c.get("/admin/users")
    assert r.status_code == 403 and r.headers["content-type"].startswith("text/html")
    assert "<h1>Not allowed</h1>" in r.text and "only a site administrator may" in r.text
    c.cookies.set("rlark_lang", "zh-CN")
    assert "<h1>无权操作</h1>" in c.get("/admin/users").text
    r = api_client(app, make_user(service.store, "ed2")).get("/api/v1/users")
    assert r.status_code == 403 and r.json()["detail"]["code"] == "Forbidden"


def test_login_and_refusal_pages_speak_chinese(app, service):
    from rlark.console.i18n import catalog

    en, zh = catalog("en"), catalog("zh-CN")
    english = {v for k, v in en.items() if v != zh[k] and "{" not in v}
    c = browser(app)
    c.cookies.set("rlark_lang", "zh-CN")
    page = c.get("/login").text
    assert '<html lang="zh-CN">' in page and "<h1>登录</h1>" in page
    assert not [t for t in _visible_text(page) if t in english]
    r = post(c, "/login", {"user": "nobody", "password": "x"})
    assert r.status_code == 401 and "用户名或密码错误。" in r.text
    c, _ = login(app, token=make_user(service.store, "lin", role="viewer"))
    c.cookies.set("rlark_lang", "zh-CN")
    r = c.get("/create")
    assert r.status_code == 403 and not [t for t in _visible_text(r.text) if t in english]
