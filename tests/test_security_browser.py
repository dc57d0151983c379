"""Hostile pages against a real ``rlark server``, in a real browser (Debian's Chromium through
Playwright) whose user IS logged in to the console.

* a page on a second loopback origin (``http://127.0.0.2:<port>/``) tries (a) a ``no-cors``
  ``fetch`` POST of a Job as ``text/plain`` with the user's credentials, and (b) auto-submitted
  forms to the console's delete action and to the Jobs API;
* (c) a page on ``http://localhost:<other port>/`` -- the same *site* as the console on
  ``http://localhost:<rlark port>/``, so the browser does send the session cookie -- posts a
  form to a Job's stop action;
* (e) a page of another origin (another site, or the same site on another port, whose frame
  gets the session cookie) puts the console in a frame (clickjacking);
* (d) DNS rebinding: a forward proxy (every request of the browser goes through it) answers the
  first request for ``http://rebind.test:<rlark port>/`` with the hostile page, then "rebinds"
  the name to RLark (127.0.0.1) -- the page's same-origin requests reach RLark with
  ``Host: rebind.test:<port>``.

Each attack must be refused by RLark itself: the tests read the status RLark answered each
request with (as the browser saw it), and afterwards check through the API, with the
administrator's token, that no Job was created and the existing one was neither stopped nor
deleted, and that the audit log holds no Job change.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from tests.server import RlarkServer, free_port, serve
from tests.test_console_browser import CHROMIUM, CHROMIUM_ARGS, IMAGE, failing_job

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

EXISTING = "existing"
REBIND_HOST = "rebind.test"
#: headers a proxy does not pass on
HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization",
              "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade"}


def attack_job(name: str) -> str:
    return f"""apiVersion: rlark.io/v1
kind: Job
metadata: {{name: {name}}}
spec:
  headRole: head
  roles:
    - {{name: head, workers: 1, image: "{IMAGE}", prepareScript: "touch /tmp/rlark-pwned"}}
  runScript: echo pwned
"""


# --- the hostile side ------------------------------------------------------------------------------


def _pages(rlark_port: int) -> dict[str, str]:
    """The hostile pages, by path."""
    api = f"http://127.0.0.1:{rlark_port}/api/v1/jobs"
    doc = attack_job("pwned-fetch")
    # a text/plain form sends "name=value": the YAML is the name, and "=x" lands in a comment
    form_doc = attack_job("pwned-form").rstrip("\n") + " #"
    head = '<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head><body>'
    cross_site = head + f"""
<iframe name="f1"></iframe><iframe name="f2"></iframe>
<form id="delete" method="post" action="http://127.0.0.1:{rlark_port}/jobs/{EXISTING}/delete" target="f1">
  <input type="hidden" name="next" value="/jobs"></form>
<form id="api" method="post" action="{api}" enctype="text/plain" target="f2">
  <input type="hidden" name="{_attr(form_doc)}" value="x"></form>
<script>
window.results = {{}};
fetch({json.dumps(api)}, {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: {json.dumps(doc)}}})
  .then(function (r) {{ window.results.fetch = r.type; }},
        function (e) {{ window.results.fetch = "error: " + e; }});
document.getElementById("delete").submit();
document.getElementById("api").submit();
</script></body></html>"""
    same_site = head + f"""
<iframe name="f"></iframe>
<form id="stop" method="post" action="http://localhost:{rlark_port}/jobs/{EXISTING}/stop" target="f">
  <input type="hidden" name="next" value="/jobs"></form>
<script>document.getElementById("stop").submit();</script></body></html>"""
    rebind = head + f"""
<script>
window.results = {{}};
(async function () {{
  async function call(key, url, init) {{
    try {{ const r = await fetch(url, init); window.results[key] = [r.status, await r.text()]; }}
    catch (e) {{ window.results[key] = [0, String(e)]; }}
  }}
  await call("post", "/api/v1/jobs", {{method: "POST", headers: {{"Content-Type": "application/yaml"}},
                                       body: {json.dumps(attack_job("pwned-rebind"))}}});
  await call("get", "/api/v1/jobs", {{}});
  await call("console", "/jobs", {{}});
  window.results.done = true;
}})();
</script></body></html>"""
    # clickjacking: the console under an invisible frame of a page that invites clicks
    frame = head + f"""
<iframe id="console" src="http://localhost:{rlark_port}/jobs"></iframe></body></html>"""
    return {"/": cross_site, "/same-site": same_site, "/rebind": rebind, "/frame": frame}


def _attr(text: str) -> str:
    return (text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace("\n", "&#10;"))


class _Pages(BaseHTTPRequestHandler):
    pages: dict[str, str] = {}

    def do_GET(self):  # noqa: N802
        body = self.pages.get(urlsplit(self.path).path)
        if body is None:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Proxy(BaseHTTPRequestHandler):
    """A forward proxy for plain HTTP: passes every request on to the host it names, except
    ``rebind.test``, whose first request goes to the hostile page and every later one to RLark
    (the DNS answer changed), the ``Host`` header left as the browser sent it."""

    server: "ProxyServer"

    def _forward(self) -> None:
        url = urlsplit(self.path)
        host, port = url.hostname or "", url.port or 80
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        if host == REBIND_HOST:
            with self.server.lock:
                first = not self.server.rebound
                self.server.rebound = True
            if first:
                host, port, path = self.server.hostile
            else:
                host = "127.0.0.1"
                self.server.rebound_requests.append((self.command, path, self.headers.get("Host")))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            conn.request(self.command, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as exc:
            self.send_error(502, str(exc))
            return
        finally:
            conn.close()
        with self.server.lock:
            self.server.answers.append((self.command, self.path, resp.status, data))
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _forward

    def log_message(self, *args):
        pass


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hostile: tuple[str, int, str]):
        super().__init__(("127.0.0.1", free_port()), _Proxy)
        self.hostile = hostile
        self.lock = threading.Lock()
        self.rebound = False
        self.rebound_requests: list[tuple[str, str, str | None]] = []
        #: (method, URL, status, body) of every answer it passed on
        self.answers: list[tuple[str, str, int, bytes]] = []


def _start(server: ThreadingHTTPServer) -> ThreadingHTTPServer:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("security-home"))


@pytest.fixture(scope="module")
def existing(server: RlarkServer) -> dict:
    """A Job that is there before the attacks (its prepare script fails: no Ray, no Workers
    left running)."""
    server.submit(failing_job(EXISTING))
    return server.wait_released(EXISTING, timeout=60)


@pytest.fixture(scope="module")
def hostile(server: RlarkServer):
    """The attacker's web servers: 127.0.0.2 (another site) and 127.0.0.1 on another port
    (reached as ``localhost``: the console's site), and the rebinding proxy."""
    handler = type("Pages", (_Pages,), {"pages": _pages(server.port)})
    other = _start(ThreadingHTTPServer(("127.0.0.2", free_port()), handler))
    same = _start(ThreadingHTTPServer(("127.0.0.1", free_port()), handler))
    proxy = _start(ProxyServer(("127.0.0.2", other.server_address[1], "/rebind")))
    yield {"other": f"http://127.0.0.2:{other.server_address[1]}",
           "same_site": f"http://localhost:{same.server_address[1]}", "proxy": proxy}
    for s in (other, same, proxy):
        s.shutdown()
        s.server_close()


@pytest.fixture(scope="module")
def victim(playwright, server: RlarkServer, hostile, existing):
    """One Chromium, every request through the proxy (``<-loopback>``: loopback too), and a
    user logged in to the console as the administrator on both of its names."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip("Debian chromium is not installed (scripts/test installs it with apt-get)")
    proxy_port = hostile["proxy"].server_address[1]
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True,
        args=[*CHROMIUM_ARGS, f"--proxy-server=http://127.0.0.1:{proxy_port}",
              "--proxy-bypass-list=<-loopback>"])
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    for origin in (server.url, f"http://localhost:{server.port}"):
        page.goto(origin + "/login")
        page.fill("#login-token", server.token)
        page.click("#token-submit")
        page.wait_for_url(origin + "/jobs")
        expect(page.locator(f"tr[data-job={EXISTING}]")).to_be_visible()  # logged in, can see it
    page.goto("about:blank")
    yield page
    context.close()
    browser.close()


def server_state(server: RlarkServer) -> dict:
    """What the attacks must not change, read with the administrator's token."""
    jobs = server.http.get("/api/v1/jobs").json()
    job = server.job(EXISTING)
    changes = server.http.get("/api/v1/audit", params={"action": "job."}).json()["items"]
    return {"jobs": sorted(j["name"] for j in jobs["items"]),
            "existing": (job["desired"], job["deleting"], job["run"], len(job["runs"]), job["phase"]),
            "job audit": [(a["id"], a["action"]) for a in changes]}


def _refusal(response, proxy: "ProxyServer") -> dict:
    """The error RLark answered ``response`` with, as the proxy passed it on: the browser does
    not keep the body of an answer it refused to show in a frame (``frame-ancestors``) or of an
    opaque response."""
    with proxy.lock:
        bodies = [body for method, url, _, body in proxy.answers
                  if method == response.request.method and url == response.url]
    try:
        return json.loads(bodies[-1])["detail"]
    except (IndexError, ValueError, KeyError):
        return {}


# --- the attacks ------------------------------------------------------------------------------------


def test_another_site_cannot_post_a_job_or_submit_console_forms(victim, server, hostile):
    before = server_state(server)
    assert before["jobs"] == [EXISTING] and before["job audit"][-1][1] == "job.create"
    api = f"{server.url}/api/v1/jobs"
    page = victim
    with page.expect_response(lambda r: r.url == api and r.request.resource_type == "fetch") as fetched, \
            page.expect_response(lambda r: r.url == api and r.request.resource_type == "document") as form_api, \
            page.expect_response(lambda r: r.url.endswith(f"/jobs/{EXISTING}/delete")) as form_delete:
        page.goto(hostile["other"] + "/")
    page.wait_for_function("window.results.fetch !== undefined")
    for response in (fetched.value, form_api.value, form_delete.value):
        assert response.request.method == "POST"
        assert response.status == 403, (response.url, response.status)  # RLark said no
    for response in (form_api.value, form_delete.value):
        assert _refusal(response, hostile["proxy"])["code"] == "CrossSiteRefused"
    assert "text/plain" in fetched.value.request.headers.get("content-type", "")
    assert server_state(server) == before


def test_a_same_site_page_with_the_session_cookie_cannot_stop_a_job(victim, server, hostile):
    before = server_state(server)
    page = victim
    with page.expect_response(lambda r: r.url.endswith(f"/jobs/{EXISTING}/stop")) as stopped:
        page.goto(hostile["same_site"] + "/same-site")
    response = stopped.value
    # the browser did send the console's session cookie (same site): the server refused anyway
    assert "rlark_session=" in response.request.all_headers().get("cookie", "")
    assert response.request.all_headers().get("sec-fetch-site") == "same-site"
    assert response.status == 403
    assert _refusal(response, hostile["proxy"])["code"] == "CrossSiteRefused"
    assert server_state(server) == before


def test_dns_rebinding_reaches_rlark_with_a_foreign_host_and_is_refused(victim, server, hostile):
    before = server_state(server)
    page = victim
    page.goto(f"http://{REBIND_HOST}:{server.port}/")
    page.wait_for_function("window.results && window.results.done === true")
    results = page.evaluate("window.results")
    for key in ("post", "get", "console"):
        status, body = results[key]
        assert status == 400 and json.loads(body)["detail"]["code"] == "HostNotAllowed", (key, body)
        assert EXISTING not in body
    # those requests did reach RLark, with the rebound name as Host
    proxied = hostile["proxy"].rebound_requests
    assert [(m, p) for m, p, _ in proxied] == [("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs"),
                                               ("GET", "/jobs")]
    assert {h for _, _, h in proxied} == {f"{REBIND_HOST}:{server.port}"}
    assert server_state(server) == before


def test_no_page_of_another_origin_can_frame_the_console(victim, server, hostile):
    """RLark answers the framed request (the same-site page's frame even carries the session
    cookie: the Jobs page; the other site's gets the login page), and Chromium refuses to show
    it: ``frame-ancestors 'none'`` (and ``X-Frame-Options: DENY``)."""
    page = victim
    console = f"http://localhost:{server.port}/"
    for origin, shown in ((hostile["same_site"], "/jobs"), (hostile["other"], "/login")):
        with page.expect_console_message(lambda m: "frame-ancestors" in m.text) as refused, \
                page.expect_response(lambda r: r.url.startswith(console) and r.status == 200) as framed:
            page.goto(origin + "/frame")
        response = framed.value
        assert response.url.startswith(console + shown.lstrip("/")), response.url
        assert response.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert "blocked" in refused.value.text, refused.value.text
        child = next(f for f in page.frames if f is not page.main_frame)
        assert not child.url.startswith(f"http://localhost:{server.port}"), child.url
        assert child.evaluate("document.querySelector('#logout, #login-token') === null")
    page.goto("about:blank")


#: the console's pages, each with what shows it works (a selector that must become visible)
CONSOLE_PAGES = [
    ("/jobs", f"tr[data-job={EXISTING}]"),
    (f"/jobs/{EXISTING}", "#workers-table"),
    (f"/jobs/{EXISTING}?tab=events", "#tab-events [data-reason]"),
    (f"/jobs/{EXISTING}?tab=logs", "#log-lines"),
    (f"/jobs/{EXISTING}?tab=record", "[data-download=json]"),
    (f"/jobs/{EXISTING}?tab=spec", "#tab-spec"),
    ("/create", "#wizard"),
    ("/nodes", "#nodes-table"),
    ("/queue", "#queue-table"),
    ("/secrets", "main"),
    ("/tokens", "#tokens-table"),
    ("/admin/users", "tr[data-user=admin]"),
    ("/admin/projects", "section[data-project=default]"),
    ("/admin/audit", "#audit-table"),
    ("/docs", ".opblock-summary-path"),
]

_REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (e) {
  window.cspViolation([document.location.pathname, e.violatedDirective, e.blockedURI,
                       e.sourceFile + ":" + e.lineNumber].join(" "));
});
"""


def _watch(page) -> list[str]:
    """Every CSP violation (the page's own ``securitypolicyviolation`` events) and every console
    error of ``page`` from now on."""
    problems: list[str] = []
    page.expose_function("cspViolation", lambda text: problems.append(f"violation: {text}"))
    page.add_init_script(_REPORT_VIOLATIONS)
    page.on("console", lambda m: problems.append(f"console.{m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.set_default_timeout(20_000)
    return problems


def test_the_console_works_under_its_content_security_policy(victim, server):
    """Every main page, logged in and not, loads with the security headers and works (htmx
    polls and posts, the wizard steps, the log follow streams) with no CSP violation at all."""
    from rlark.api.security import CONTENT_SECURITY_POLICY

    browser = victim.context.browser
    anonymous = browser.new_context()
    try:
        page = anonymous.new_page()
        problems = _watch(page)
        response = page.goto(server.url + "/login")
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        page.fill("#login-token", server.token)
        page.click("#token-submit")
        page.wait_for_url(server.url + "/jobs")

        for path, works in CONSOLE_PAGES:
            response = page.goto(server.url + path)
            assert response.status == 200, (path, response.status)
            headers = response.headers
            assert headers["x-frame-options"] == "DENY", path
            assert headers["x-content-type-options"] == "nosniff", path
            assert headers["referrer-policy"] == "same-origin", path
            assert "frame-ancestors 'none'" in headers["content-security-policy"], path
            if path != "/docs":
                assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
            expect(page.locator(works).first).to_be_visible()

        # htmx at work: the Jobs table polls, and its filter asks the server as one types
        page.goto(server.url + "/jobs")
        with page.expect_response(lambda r: "/jobs/_table" in r.url and r.status == 200):
            pass
        with page.expect_response(lambda r: "q=exist" in r.url and r.status == 200):
            page.fill("#filter-q", "exist")
        expect(page.locator(f"tr[data-job={EXISTING}]")).to_be_visible()
        # the wizard posts each step with htmx (the CSRF token in its header)
        page.goto(server.url + "/create")
        page.click("#wizard-next")
        expect(page.locator("[data-code=InvalidName]")).to_have_count(1)
        page.fill("#f-name", "csp-check")
        page.click("#wizard-next")
        expect(page.locator("#wizard")).to_have_attribute("data-step", "2")
        # ... and from a YAML document to its review, then back. htmx carries some attributes
        # of the fields both steps have over to the new ones: never a style attribute (which
        # the CSP refuses to set), even where a browser extension styled a field (allowed: it
        # goes through CSSOM) as password managers do
        page.goto(server.url + "/create")
        page.locator(".yaml-start summary").click()
        page.fill("#yaml-text", attack_job("csp-yaml"))
        page.get_by_role("button", name="Load into the wizard").click()
        expect(page.locator("#wizard")).to_have_attribute("data-step", "4")
        page.evaluate("document.querySelector('#f-name').style.outline = '1px solid red'")
        for step in ("3", "2", "1"):
            page.get_by_role("button", name="Back").click()
            expect(page.locator("#wizard")).to_have_attribute("data-step", step)
        # the log follow (offered while the Run's Workers live): a Server-Sent Events stream of
        # the API, that ends when they do
        server.submit(failing_job("follow").replace('prepareScript: "echo preparing; exit 4"',
                                                    'prepareScript: "echo preparing; sleep 60"'))
        server.wait_phase("follow", {"Starting"}, timeout=60)
        page.goto(server.url + "/jobs/follow?tab=logs")
        page.click("#log-follow")
        expect(page.locator("#log-status")).to_have_text("Following new lines…")
        server.cli("stop", "follow")
        expect(page.locator("#log-status")).to_have_text(
            "The Workers have ended; every line is shown.", timeout=30_000)
        assert not problems, problems
    finally:
        anonymous.close()
