"""``rlark login/logout/whoami``, ``user``, ``token``, ``project``, ``audit`` and the project of
Job commands: the real command in a subprocess against the server ``rlark server`` builds
(tests/server.py AppServer: authentication on, local runtime, controller running), each person
with their own ``$RLARK_HOME``. The Jobs here have one Worker that prepares for as long as the
test lasts (:func:`preparing_job_yaml`): the controller launches it and ``rlark stop`` ends it
as on any server, and it never starts a Ray node. Also ``rlark server --no-auth``: refused
beyond loopback, loud on loopback.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from rlark.cli import credentials
from tests.access import make_user
from tests.server import AppServer, free_port

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PASSWORD = "correct horse battery"
ACCESS_COMMANDS = {("login",), ("logout",), ("whoami",), ("audit",), ("user",), ("token",),
                   ("project",), ("user", "create"), ("user", "list"), ("user", "get"),
                   ("user", "disable"), ("user", "enable"), ("user", "set-admin"),
                   ("user", "passwd"), ("user", "delete"), ("token", "create"), ("token", "list"),
                   ("token", "revoke"), ("project", "create"), ("project", "list"),
                   ("project", "get"), ("project", "delete"), ("project", "add-member"),
                   ("project", "remove-member"), ("project", "use")}


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a person whose ``rlark`` keeps its credentials in ``home``: nothing
    from the test's own environment decides the server, token or project."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RLARK_SERVER", "RLARK_TOKEN", "RLARK_PROJECT", "NO_COLOR", "FORCE_COLOR")}
    env.update(RLARK_HOME=str(home), COLUMNS="250", **extra)
    return env


def rlark(*args: str, env: dict[str, str], input: str | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "rlark.cli", *args], env=env, input=input,
                          capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def table(stdout: str) -> list[list[str]]:
    """A table's rows (header first), split on runs of two or more spaces."""
    import re

    return [re.split(r"\s{2,}", line.strip()) for line in stdout.splitlines() if line.strip()]


def preparing_job_yaml(name: str) -> str:
    """One Worker whose prepare script outlasts the test: launched by the controller (its Worker
    preparing, a Run to stop), never as far as a Ray node; a tenth of a CPU, so two fit beside
    each other and beside other tests' Workers."""
    doc = {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"headRole": "head", "runScript": "true", "terminationGracePeriodSeconds": 5,
                    "roles": [{"name": "head", "image": "docker.io/rlinf/rlinf:0.3.0",
                               "resources": {"cpu": 0.1, "memory": "256Mi"},
                               "prepareScript": "sleep 3600"}]}}
    return yaml.safe_dump(doc)


class Site:
    """The server ``rlark server`` builds, authentication on; ``admin`` runs ``rlark`` as the
    site administrator (the token the server's first start stored), ``person(name)`` as
    someone else."""

    def __init__(self, server: AppServer, home: Path, tmp: Path):
        self.server = server
        self.store = server.store
        self.home = home
        self.tmp = tmp
        self.url = server.url

    def admin(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return rlark(*args, env=env_for(self.home, RLARK_SERVER=self.url), **kw)

    def home_of(self, name: str) -> Path:
        home = self.tmp / f"home-{name}"
        home.mkdir(exist_ok=True)
        return home

    def person(self, name: str, *args: str, **kw) -> subprocess.CompletedProcess:
        """``rlark`` as ``name``, with whatever their own credentials file holds."""
        kw.setdefault("env", env_for(self.home_of(name)))
        return rlark(*args, **kw)

    def login(self, name: str, token: str) -> None:
        proc = self.person(name, "login", "--server", self.url, "--token-stdin", input=token + "\n")
        assert proc.returncode == 0, proc.stderr

    def job_file(self, name: str = "demo") -> Path:
        path = self.tmp / f"{name}.yaml"
        path.write_text(preparing_job_yaml(name))
        return path


@pytest.fixture
def site(rlark_home, tmp_path):
    server = AppServer(rlark_home).start()
    try:
        yield Site(server, rlark_home, tmp_path)
    finally:
        server.stop()  # and every Run the test left active


# --- help ---------------------------------------------------------------------------------------


def test_every_access_command_exists_and_teaches_with_an_example():
    from tests.test_cli import all_commands

    assert ACCESS_COMMANDS <= set(all_commands())
    leaves = [c for c in ACCESS_COMMANDS if c not in {("user",), ("token",), ("project",)}]
    job_commands = [("submit",), ("apply",), ("get", "jobs"), ("describe", "job"), ("logs",),
                    ("stop",), ("start",), ("restart",), ("delete",), ("record",)]
    env = env_for(Path("/nonexistent"))
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda c: (c, rlark(*c, "--help", env=env)), leaves + job_commands))
    by = dict(procs)
    # every Job command takes the project, from the option or RLARK_PROJECT
    for cmd in job_commands:
        assert "--project" in by[cmd].stdout and "RLARK_PROJECT" in by[cmd].stdout, cmd
    for cmd, proc in procs[:len(leaves)]:
        assert proc.returncode == 0, (cmd, proc.stderr)
        assert "Example" in proc.stdout and f"rlark {' '.join(cmd)}" in proc.stdout, cmd
    assert "--token-stdin" in by[("login",)].stdout and "--user" in by[("login",)].stdout
    assert "--revoke" in by[("logout",)].stdout
    for cmd in (("whoami",), ("audit",), ("user", "list"), ("token", "list"), ("project", "list")):
        assert "--output" in by[cmd].stdout, cmd


# --- login, whoami, logout ------------------------------------------------------------------------


def test_login_with_a_token_stores_it_privately_and_whoami_shows_only_its_prefix(site):
    token = make_user(site.store, "alice", "default", "member")
    proc = site.person("alice", "login", "--server", site.url, "--token-stdin", input=token + "\n")
    assert proc.returncode == 0, proc.stderr
    assert f"Logged in to {site.url} as alice" in proc.stdout
    assert "Projects: default (member)" in proc.stdout
    assert token not in proc.stdout + proc.stderr and token[:12] + "..." in proc.stdout

    path = site.home_of("alice") / "credentials"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["current"] == site.url
    assert data["servers"][site.url]["token"] == token and data["servers"][site.url]["user"] == "alice"

    # no --server and no RLARK_SERVER: the server `rlark login` made current
    who = site.person("alice", "whoami")
    assert who.returncode == 0, who.stderr
    assert "User:      alice" in who.stdout and f"Server:    {site.url}" in who.stdout
    assert f"Token:     {token[:12]}..." in who.stdout and token not in who.stdout
    assert "Project:   default" in who.stdout
    info = json.loads(site.person("alice", "whoami", "-o", "json").stdout)
    assert info["name"] == "alice" and info["admin"] is False and info["projects"] == {"default": "member"}
    assert info["tokenPrefix"] == token[:12] + "..." and token not in json.dumps(info)


def test_login_refuses_a_bad_token_and_stores_nothing(site):
    proc = site.person("mallory", "login", "-s", site.url, "--token-stdin",
                       input="rlark_" + "x" * 43 + "\n")
    assert proc.returncode == 1
    assert f"{site.url} refused the token" in error_line(proc) and "unknown API token" in error_line(proc)
    assert not (site.home_of("mallory") / "credentials").exists()
    both = site.person("mallory", "login", "-s", site.url, "--token-stdin", "--user", "x", input="")
    assert both.returncode == 1 and "not both" in error_line(both)


def test_login_with_user_and_password_makes_a_new_token(site):
    make_user(site.store, "bob", "default", "viewer", password=PASSWORD)
    wrong = site.person("bob", "login", "-s", site.url, "--user", "bob", "--password-stdin",
                        input="not the password\n")
    assert wrong.returncode == 1 and "wrong user name or password" in error_line(wrong)
    assert not (site.home_of("bob") / "credentials").exists()

    proc = site.person("bob", "login", "-s", site.url, "--user", "bob", "--password-stdin",
                       "--expires-in", "7", input=PASSWORD + "\n")
    assert proc.returncode == 0, proc.stderr
    assert "as bob" in proc.stdout and "default (viewer)" in proc.stdout
    stored = credentials.entry(site.url, site.home_of("bob") / "credentials")["token"]
    assert stored.startswith("rlark_") and stored not in proc.stdout
    tokens = json.loads(site.person("bob", "token", "list", "-o", "json").stdout)
    made = next(t for t in tokens if t["name"].startswith("rlark login on "))
    assert made["prefix"] == stored[:12] + "..." and made["state"] == "active"
    days = (time.mktime(time.strptime(made["expiresAt"][:19], "%Y-%m-%dT%H:%M:%S"))
            - time.mktime(time.strptime(made["createdAt"][:19], "%Y-%m-%dT%H:%M:%S"))) / 86400
    assert 6.99 < days < 7.01


def test_logout_forgets_the_token_and_revoke_makes_it_fail(site):
    token = make_user(site.store, "carol", "default", "member")
    site.login("carol", token)
    proc = site.person("carol", "logout")
    assert proc.returncode == 0 and f"Logged out of {site.url}" in proc.stdout
    assert credentials.entry(site.url, site.home_of("carol") / "credentials") is None
    # without a stored token: 401, and how to log in
    who = site.person("carol", "whoami", "-s", site.url)
    assert who.returncode == 1 and f"rlark login --server {site.url}" in error_line(who)
    # only forgotten here, not revoked: the token still works
    env = env_for(site.home_of("carol"), RLARK_TOKEN=token, RLARK_SERVER=site.url)
    assert site.person("carol", "whoami", env=env).returncode == 0

    site.login("carol", token)
    proc = site.person("carol", "logout", "--revoke")
    assert proc.returncode == 0, proc.stderr
    assert "revoked token" in proc.stdout and token[:12] + "..." in proc.stdout
    assert credentials.entry(site.url, site.home_of("carol") / "credentials") is None
    dead = site.person("carol", "whoami", env=env)
    assert dead.returncode == 1
    assert "was revoked" in error_line(dead) and "rlark login" in error_line(dead)
    assert httpx.get(f"{site.url}/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    # nothing stored: nothing to do
    again = site.person("carol", "logout", "-s", site.url)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_rlark_token_overrides_the_credentials_file(site):
    token = make_user(site.store, "dave", "default", "member")
    site.login("dave", token)
    assert "User:      dave" in site.person("dave", "whoami").stdout
    env = env_for(site.home_of("dave"), RLARK_TOKEN=site.server.token)
    who = site.person("dave", "whoami", env=env)
    assert who.returncode == 0 and "User:      admin" in who.stdout
    assert "(from RLARK_TOKEN)" in who.stdout


def test_a_credentials_file_others_can_read_is_refused(site):
    token = make_user(site.store, "erin", "default", "member")
    site.login("erin", token)
    path = site.home_of("erin") / "credentials"
    path.chmod(0o644)
    for args in (("whoami",), ("get", "jobs"), ("project", "list"), ("logout",)):
        proc = site.person("erin", *args, "-s", site.url)
        assert proc.returncode == 1, args
        assert f"chmod 600 {path}" in error_line(proc), args
        assert token not in proc.stdout + proc.stderr


# --- users, tokens, projects, audit ---------------------------------------------------------------


def created_token(proc: subprocess.CompletedProcess) -> str:
    """The token a create command printed (the one time it is shown)."""
    assert "store it now; it is not shown again" in proc.stdout, proc.stdout
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("rlark_")]
    assert len(lines) == 1, proc.stdout
    return lines[0]


def test_projects_keep_jobs_apart_and_roles_decide(site):
    for name in ("a", "b"):
        proc = site.admin("project", "create", name)
        assert proc.returncode == 0 and f"project {name} created" in proc.stdout
    alice = site.admin("user", "create", "alice", "--project", "a", "--role", "member", "--token")
    assert alice.returncode == 0, alice.stderr
    assert "user alice created; projects: a (member)" in alice.stdout
    site.login("alice", created_token(alice))
    victor = site.admin("user", "create", "victor", "-p", "a", "-r", "viewer", "--token")
    site.login("victor", created_token(victor))

    # the same Job name in two projects
    assert site.admin("submit", str(site.job_file()), "-p", "b").returncode == 0
    # alice has no role in default: her login made a her current project
    proc = site.person("alice", "submit", str(site.job_file()))
    assert proc.returncode == 0, proc.stderr

    hidden = site.person("alice", "describe", "job", "demo", "-p", "b")
    assert hidden.returncode == 1 and "no project named 'b'" in error_line(hidden)
    shown = site.person("alice", "describe", "job", "demo")
    assert shown.returncode == 0 and "Project:   a" in shown.stdout
    events = shown.stdout[shown.stdout.index("Events"):]
    header = next(row for row in table(events) if row[0] == "TIME")
    assert header == ["TIME", "RUN", "TYPE", "REASON", "USER", "MESSAGE"]
    submitted = next(row for row in table(events) if "Submitted" in row)
    assert submitted[header.index("USER")] == "alice"

    # a viewer reads but may not stop; the server's message says why
    assert site.person("victor", "get", "jobs", "-p", "a").returncode == 0
    refused = site.person("victor", "stop", "demo", "-p", "a")
    assert refused.returncode == 1
    assert "your role in project 'a' is viewer; this needs member" in error_line(refused)
    # RLARK_PROJECT picks the project too
    env = env_for(site.home_of("victor"), RLARK_PROJECT="b")
    assert "no project named 'b'" in error_line(site.person("victor", "describe", "job", "demo", env=env))

    # every project: the admin sees both, alice only hers
    proc = site.admin("get", "jobs", "-A")
    rows = table(proc.stdout)
    assert rows[0][:3] == ["PROJECT", "NAME", "PHASE"]
    assert sorted((r[0], r[1]) for r in rows[1:]) == [("a", "demo"), ("b", "demo")]
    mine = json.loads(site.person("alice", "get", "jobs", "-A", "-o", "json").stdout)
    assert [(j["project"], j["name"]) for j in mine["items"]] == [("a", "demo")]
    # the admin's current project is default: empty until `project use`
    assert "no Jobs in project default" in site.admin("get", "jobs").stdout
    assert site.admin("project", "use", "b").returncode == 0
    rows = table(site.admin("get", "jobs").stdout)
    assert rows[0][0] == "NAME" and [r[0] for r in rows[1:]] == ["demo"]
    assert credentials.entry(site.url, site.home / "credentials")["project"] == "b"
    not_hers = site.person("alice", "project", "use", "b")
    assert not_hers.returncode == 1 and "no project named 'b'" in error_line(not_hers)
    assert json.loads(site.person("alice", "whoami", "-o", "json").stdout)["currentProject"] == "a"

    # members: make victor a member, then take the role away
    proc = site.admin("project", "add-member", "a", "victor", "--role", "member")
    assert proc.returncode == 0 and "victor is member in project a" in proc.stdout
    assert site.person("victor", "stop", "demo", "-p", "a").returncode == 0
    got = json.loads(site.admin("project", "get", "a", "-o", "json").stdout)
    assert {m["user"]: m["role"] for m in got["members"]} == {"alice": "member", "victor": "member"}
    assert got["jobs"] == 1
    text = site.admin("project", "get", "a").stdout
    assert ["victor", "member"] in table(text)
    rows = table(site.admin("project", "list").stdout)
    assert rows[0] == ["NAME", "ROLE", "NAMESPACE", "QUEUE", "JOBS"]
    assert ["a", "admin", "-", "-", "1"] in rows and ["default", "admin", "-", "-", "0"] in rows
    assert [p["name"] for p in json.loads(site.person("alice", "project", "list", "-o", "json").stdout)] == ["a"]
    assert site.admin("project", "remove-member", "a", "victor").returncode == 0
    gone = site.person("victor", "describe", "job", "demo", "-p", "a")
    assert gone.returncode == 1 and "no project named 'a'" in error_line(gone)
    # a project admin's business; a member gets the server's 403
    refused = site.person("alice", "project", "add-member", "a", "victor", "--role", "viewer")
    assert refused.returncode == 1 and "your role in project 'a' is member" in error_line(refused)

    busy = site.admin("project", "delete", "a")
    assert busy.returncode == 1 and "still has 1 Job" in error_line(busy)
    assert site.admin("project", "create", "c").returncode == 0
    assert site.admin("project", "delete", "c").returncode == 0
    listed = yaml.safe_load(site.admin("project", "list", "-o", "yaml").stdout)
    assert [p["name"] for p in listed] == ["a", "b", "default"]


def test_users_end_to_end(site):
    proc = site.admin("user", "create", "frank", "--project", "default")
    assert proc.returncode == 0 and "frank cannot log in yet" in proc.stderr
    assert "rlark_" not in proc.stdout
    rows = table(site.admin("user", "list").stdout)
    assert rows[0] == ["NAME", "ADMIN", "DISABLED", "PASSWORD", "PROJECTS", "CREATED", "CREATED BY"]
    frank = next(r for r in rows if r[0] == "frank")
    assert frank[1:5] == ["no", "no", "no", "default (member)"] and frank[6] == "admin"
    assert json.loads(site.admin("user", "get", "frank", "-o", "json").stdout)["projects"] == {"default": "member"}

    # a password, set by an administrator, twice on a terminal, once through stdin here
    proc = site.admin("user", "passwd", "frank", "--password-stdin", input=PASSWORD + "\n")
    assert proc.returncode == 0 and "password of frank set" in proc.stdout
    short = site.admin("user", "passwd", "frank", "--password-stdin", input="short\n")
    assert short.returncode == 1 and "at least 10 characters" in error_line(short)
    login = site.person("frank", "login", "-s", site.url, "--user", "frank", "--password-stdin",
                        input=PASSWORD + "\n")
    assert login.returncode == 0, login.stderr
    # frank may change his own password (no NAME: yourself) with his current one, not see
    # others
    wrong = site.person("frank", "user", "passwd", "--password-stdin",
                        input="not-his-password\n" + PASSWORD + "!\n")
    assert wrong.returncode == 1 and "current password is wrong" in error_line(wrong)
    none = site.person("frank", "user", "passwd", "--password-stdin", input=PASSWORD + "!\n")
    assert none.returncode == 1 and "no password on standard input" in error_line(none)
    own = site.person("frank", "user", "passwd", "--password-stdin",
                      input=PASSWORD + "\n" + PASSWORD + "!\n")
    assert own.returncode == 0 and "password of frank set" in own.stdout
    relogin = site.person("frank", "login", "-s", site.url, "--user", "frank", "--password-stdin",
                          input=PASSWORD + "!\n")
    assert relogin.returncode == 0, relogin.stderr
    other = site.person("frank", "user", "get", "admin")
    assert other.returncode == 1 and "only a site administrator may see other users" in error_line(other)
    refused = site.person("frank", "user", "list")
    assert refused.returncode == 1 and "only a site administrator" in error_line(refused)

    assert site.admin("user", "disable", "frank").returncode == 0
    disabled = site.person("frank", "whoami")
    assert disabled.returncode == 1 and "'frank' is disabled" in error_line(disabled)
    assert site.admin("user", "enable", "frank").returncode == 0
    assert site.person("frank", "whoami").returncode == 0

    proc = site.admin("user", "set-admin", "frank")
    assert proc.returncode == 0 and "now a site administrator" in proc.stdout
    assert "Admin:     site administrator" in site.person("frank", "whoami").stdout
    assert site.admin("user", "set-admin", "frank", "--no-admin").returncode == 0
    assert "Admin:     no" in site.person("frank", "whoami").stdout

    assert site.admin("user", "delete", "frank").returncode == 0
    missing = site.admin("user", "get", "frank")
    assert missing.returncode == 1 and "no user named 'frank'" in error_line(missing)
    self_delete = site.admin("user", "delete", "admin")
    assert self_delete.returncode == 1 and "cannot delete yourself" in error_line(self_delete)


def test_tokens_end_to_end(site):
    site.login("gina", make_user(site.store, "gina", "default", "member"))
    proc = site.person("gina", "token", "create", "--name", "ci", "--expires-in", "5")
    assert proc.returncode == 0, proc.stderr
    ci = created_token(proc)
    assert "token " in proc.stdout and "(ci) of gina created" in proc.stdout
    made = json.loads(site.person("gina", "token", "create", "--name", "nb", "-o", "json").stdout)
    assert made["token"].startswith("rlark_") and made["expiresAt"] is None

    listing = site.person("gina", "token", "list")
    rows = table(listing.stdout)
    assert rows[0] == ["ID", "NAME", "USER", "PREFIX", "STATE", "CREATED", "EXPIRES", "LAST USED"]
    assert ci not in listing.stdout and made["token"] not in listing.stdout
    by_name = {r[1]: r for r in rows[1:]}
    assert set(by_name) == {"test", "ci", "nb"}
    assert by_name["ci"][3] == ci[:12] + "..." and by_name["ci"][4] == "active"
    assert by_name["nb"][6] == "never"

    env = env_for(site.home_of("gina"), RLARK_TOKEN=ci, RLARK_SERVER=site.url)
    assert site.person("gina", "whoami", env=env).returncode == 0
    revoked = site.person("gina", "token", "revoke", by_name["ci"][0])
    assert revoked.returncode == 0 and f"ci of gina, {ci[:12]}...) revoked" in revoked.stdout
    dead = site.person("gina", "whoami", env=env)
    assert dead.returncode == 1 and "was revoked" in error_line(dead)
    state = {t["name"]: t["state"] for t in json.loads(site.person("gina", "token", "list", "-o", "json").stdout)}
    assert state == {"test": "active", "ci": "revoked", "nb": "active"}

    # others' tokens: site administrators only
    refused = site.person("gina", "token", "list", "--all")
    assert refused.returncode == 1 and "only a site administrator" in error_line(refused)
    everyone = json.loads(site.admin("token", "list", "--all", "-o", "json").stdout)
    assert {t["user"] for t in everyone} == {"admin", "gina"}
    for_gina = site.admin("token", "create", "--user", "gina", "--name", "given")
    assert for_gina.returncode == 0 and "(given) of gina created" in for_gina.stdout
    assert [t["name"] for t in json.loads(site.admin("token", "list", "--user", "gina", "-o", "json").stdout)] \
        == ["test", "ci", "nb", "given"]
    nosuch = site.person("gina", "token", "revoke", "9999")
    assert nosuch.returncode == 1 and "no token with id 9999" in error_line(nosuch)


def test_audit_shows_who_did_what(site):
    site.admin("project", "create", "a")
    site.login("hana", created_token(site.admin("user", "create", "hana", "-p", "a", "-r", "admin",
                                                "--token")))
    assert site.person("hana", "submit", str(site.job_file()), "-p", "a").returncode == 0
    assert site.person("hana", "stop", "demo", "-p", "a").returncode == 0

    rows = table(site.admin("audit").stdout)
    assert rows[0] == ["TIME", "USER", "ACTION", "PROJECT", "TARGET", "OUTCOME", "DETAIL", "CLIENT"]
    actions = [(r[1], r[2]) for r in rows[1:]]
    assert ("hana", "job.stop") in actions and ("hana", "job.create") in actions
    assert ("admin", "user.create") in actions and ("admin", "project.create") in actions
    jobs = json.loads(site.admin("audit", "--action", "job.", "-o", "json").stdout)["items"]
    assert [(a["actor"], a["action"], a["project"], a["target"]) for a in jobs] == [
        ("hana", "job.stop", "a", "demo"), ("hana", "job.create", "a", "demo")]
    assert all(a["client"] == "127.0.0.1" for a in jobs)
    only = json.loads(site.admin("audit", "--user", "admin", "--limit", "1", "-o", "json").stdout)["items"]
    assert len(only) == 1 and only[0]["actor"] == "admin"
    # a project admin sees their project's entries, not the site's
    hers = json.loads(site.person("hana", "audit", "-o", "json").stdout)["items"]
    assert hers and {a["project"] for a in hers} == {"a"}
    site.login("ivan", make_user(site.store, "ivan", "default", "member"))
    refused = site.person("ivan", "audit")
    assert refused.returncode == 1 and "only a site administrator" in error_line(refused)


# --- rlark server --no-auth ------------------------------------------------------------------------


def test_server_refuses_no_auth_beyond_loopback(tmp_path):
    proc = rlark("server", "--host", "0.0.0.0", "--no-auth", "--port", str(free_port()),
                 env=env_for(tmp_path / "home"))
    assert proc.returncode == 1
    line = error_line(proc)
    assert "--no-auth is refused with --host 0.0.0.0" in line and "only on 127.0.0.1" in line
    assert not (tmp_path / "home" / "credentials").exists()


@pytest.mark.timeout(120)
def test_server_without_auth_on_loopback_says_so_loudly(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "rlark.cli", "server", "--no-auth",
                                   "--port", str(port)], env=env_for(home),
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        # no token anywhere, and every request acts as a site administrator
        assert not (home / "credentials").exists()
        me = httpx.get(f"{url}/api/v1/me").json()
        assert me["admin"] is True and me["via"] == "open"
        who = rlark("whoami", "-s", url, env=env_for(home))
        assert who.returncode == 0 and "Auth:      OFF on this server" in who.stdout
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    text = log_path.read_text()
    assert "AUTHENTICATION IS OFF (--no-auth)" in text
    assert f"Listening on 127.0.0.1:{port} only" in text
