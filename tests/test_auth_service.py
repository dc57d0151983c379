"""The rules of AuthService and AccountService, below the HTTP layer: the first start, tokens,
sessions, passwords, the login limit, who may manage users, projects, members and tokens, the
last site administrator, project namespaces, and what is audited.

Principals are made the way the server makes them: from a real token (``AuthService.from_token``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from rlark.services.accounts import AccountService, project_namespace
from rlark.services.auth import (
    ANONYMOUS,
    MIN_PASSWORD_LENGTH,
    OPEN_PRINCIPAL,
    AuthService,
    LoginLimiter,
    Principal,
    authorize,
    digest,
    utcnow,
)
from rlark.services.errors import Conflict, Forbidden, Invalid, NotFound, TooManyRequests, Unauthenticated
from rlark.services.jobs import JobService
from rlark.store import (
    AuditRow,
    MembershipRow,
    ProjectRole,
    ProjectRow,
    RunRow,
    SessionRow,
    Store,
    TokenRow,
    UserRow,
)
from tests.test_job_service import ROOMY_HOST, small

PASSWORD = "a-long-enough-password"


class World:
    """A store with the site administrator ``admin`` and, in project ``default``: ``vera``
    (viewer), ``mia`` (member), ``pat`` (admin); ``otto`` is a member of project ``other``."""

    def __init__(self, store: Store, server_namespace: str | None = None):
        self.store = store
        self.auth = AuthService(store)
        self.accounts = AccountService(self.auth, server_namespace=server_namespace)
        self.tokens = {"admin": self.auth.bootstrap()}
        self.accounts.create_project(OPEN_PRINCIPAL, None, "other")
        for name, project, role in [("vera", "default", "viewer"), ("mia", "default", "member"),
                                    ("pat", "default", "admin"), ("otto", "other", "member")]:
            user = self.accounts.create_user(OPEN_PRINCIPAL, None, name, project=project,
                                             role=ProjectRole(role), token_name="first")
            self.tokens[name] = user["token"]

    def who(self, name: str) -> Principal:
        return self.auth.from_token(self.tokens[name])

    def audit(self, action: str) -> list[AuditRow]:
        with self.store.session() as s:
            return s.scalars(select(AuditRow).where(AuditRow.action == action)
                             .order_by(AuditRow.id)).all()


@pytest.fixture
def world(rlark_home) -> World:
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    yield World(store)
    store.dispose()


# --- the first start ----------------------------------------------------------------------------


def test_bootstrap_makes_one_site_administrator_once(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        auth = AuthService(store)
        token = auth.bootstrap()
        assert token.startswith("rlark_")
        admin = auth.from_token(token)
        assert (admin.name, admin.is_admin, admin.roles) == ("admin", True, {"default": ProjectRole.admin})
        assert auth.bootstrap() is None  # users exist: nothing is made, no second secret
        with store.session() as s:
            assert s.scalar(select(func.count()).select_from(UserRow)) == 1
            assert s.scalar(select(func.count()).select_from(TokenRow)) == 1
            entry = s.scalar(select(AuditRow).where(AuditRow.action == "user.create"))
            assert (entry.actor, entry.target) == (None, "admin")  # RLark itself
    finally:
        store.dispose()


def test_bootstrap_takes_a_given_token_only_when_it_is_a_usable_token(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        auth = AuthService(store)
        # short, without the prefix (it could never be used: tokens start with rlark_), or the
        # placeholder of deploy/kubernetes/secret.example.yaml
        for bad in ("rlark_short", "k" * 43, "rlark_CHANGE-ME-to-a-long-random-value-of-32-characters-or-more"):
            with pytest.raises(ValueError, match="'rlark_' followed by at least 32"):
                auth.bootstrap(bad)
        given = "rlark_" + "k" * 40
        assert auth.bootstrap(given) == given
        assert auth.from_token(given).name == "admin"
    finally:
        store.dispose()


# --- authorization -------------------------------------------------------------------------------


def test_authorize_hides_projects_without_a_role_and_refuses_weaker_roles(world):
    mia, otto, admin = world.who("mia"), world.who("otto"), world.who("admin")
    assert authorize(mia, "default", ProjectRole.viewer) == ProjectRole.member
    assert authorize(mia, "default", ProjectRole.member) == ProjectRole.member
    with pytest.raises(Forbidden, match="role in project 'default' is member"):
        authorize(mia, "default", ProjectRole.admin)
    with pytest.raises(NotFound) as hidden:
        authorize(otto, "default", ProjectRole.viewer)
    with pytest.raises(NotFound) as missing:
        authorize(otto, "nowhere", ProjectRole.viewer)
    # the same words for a project that exists and one that does not (but its name)
    assert hidden.value.message == missing.value.message.replace("nowhere", "default")
    # site administrators are admins everywhere, even in projects made after they logged in
    world.accounts.create_project(admin, None, "later")
    assert authorize(admin, "later", ProjectRole.admin) == ProjectRole.admin
    assert mia.readable_projects() == ["default"] and admin.readable_projects() is None


def test_roles_are_ordered_viewer_member_admin():
    v, m, a = ProjectRole.viewer, ProjectRole.member, ProjectRole.admin
    assert [r.rank for r in (v, m, a)] == [0, 1, 2]
    assert a.allows(m) and a.allows(v) and m.allows(v) and m.allows(m)
    assert not v.allows(m) and not m.allows(a)


# --- tokens --------------------------------------------------------------------------------------


def test_a_token_is_stored_as_its_digest_and_recognised_by_its_prefix(world):
    made = world.accounts.create_token(world.who("mia"), "10.0.0.1", "ci", expires_in_days=3)
    raw = made["token"]
    with world.store.session() as s:
        row = s.get(TokenRow, made["id"])
        assert row.digest == digest(raw) and len(row.digest) == 64
        assert row.prefix == raw[:12] and raw not in (row.digest, row.prefix, row.name)
        assert row.expires_at is not None
    # the audit names the token by prefix and id, never by value
    (entry,) = world.audit("token.create")[-1:]
    assert raw not in entry.detail and raw[:12] in entry.detail and entry.client == "10.0.0.1"


@pytest.mark.parametrize("raw", ["", "rlark", "rlark_", "rlark_nope", "ghp_abc", "rlark_" + "x" * 300,
                                 "rlark_\udcff"])
def test_unknown_tokens_are_refused(world, raw):
    with pytest.raises(Unauthenticated):
        world.auth.from_token(raw)


def test_revoked_expired_and_disabled_users_tokens_are_refused(world):
    admin, mia = world.who("admin"), world.who("mia")
    made = world.accounts.create_token(mia, None, "soon-gone", expires_in_days=1)
    assert world.auth.from_token(made["token"]).name == "mia"
    with world.store.session() as s:
        s.execute(update(TokenRow).where(TokenRow.id == made["id"])
                  .values(expires_at=utcnow() - timedelta(seconds=1)))
    with pytest.raises(Unauthenticated, match="expired"):
        world.auth.from_token(made["token"])

    world.accounts.revoke_token(mia, None, world.who("mia").token_id)
    with pytest.raises(Unauthenticated, match="revoked"):
        world.auth.from_token(world.tokens["mia"])

    world.accounts.update_user(admin, None, "vera", disabled=True)
    with pytest.raises(Unauthenticated, match="disabled"):
        world.auth.from_token(world.tokens["vera"])
    world.accounts.update_user(admin, None, "vera", disabled=False)
    assert world.auth.from_token(world.tokens["vera"]).name == "vera"


def test_token_use_is_recorded_at_most_once_a_minute(world):
    world.who("mia")
    with world.store.session() as s:
        first = s.scalar(select(TokenRow.last_used_at).join(UserRow).where(UserRow.name == "mia"))
    assert first is not None
    world.who("mia")
    with world.store.session() as s:
        again = s.scalar(select(TokenRow.last_used_at).join(UserRow).where(UserRow.name == "mia"))
    assert again == first


def test_tokens_are_listed_and_revoked_by_their_owner_or_a_site_administrator(world):
    admin, mia, pat = world.who("admin"), world.who("mia"), world.who("pat")
    second = world.accounts.create_token(mia, None, "second")
    assert "token" in second  # shown this once
    mine = world.accounts.list_tokens(mia)
    assert [t["name"] for t in mine] == ["first", "second"]
    assert all(t["user"] == "mia" and "token" not in t for t in mine)
    # another user's tokens are not for a project admin to see or revoke
    with pytest.raises(Forbidden):
        world.accounts.list_tokens(pat, user="mia")
    with pytest.raises(Forbidden):
        world.accounts.list_tokens(pat, all_users=True)
    with pytest.raises(NotFound):  # not even that it exists
        world.accounts.revoke_token(pat, None, second["id"])
    with pytest.raises(NotFound):
        world.accounts.revoke_token(mia, None, 424242)
    with pytest.raises(Forbidden):
        world.accounts.create_token(pat, None, "for-mia", user="mia")
    # a site administrator sees and revokes anyone's, and makes tokens for anyone
    assert [t["name"] for t in world.accounts.list_tokens(admin, user="mia")] == ["first", "second"]
    assert {t["user"] for t in world.accounts.list_tokens(admin, all_users=True)} == {
        "admin", "vera", "mia", "pat", "otto"}
    assert world.accounts.revoke_token(admin, None, second["id"])["state"] == "revoked"
    assert world.accounts.revoke_token(mia, None, second["id"])["state"] == "revoked"  # idempotent
    assert len(world.audit("token.revoke")) == 1
    made = world.accounts.create_token(admin, None, "for-mia", user="mia")
    assert world.auth.from_token(made["token"]).name == "mia"


@pytest.mark.parametrize("name, days", [("", None), (" ", None), ("x" * 64, None), ("tab\there", None),
                                        ("ok", 0), ("ok", 3651), ("ok", -1)])
def test_bad_token_names_and_expiries_are_invalid(world, name, days):
    with pytest.raises(Invalid):
        world.accounts.create_token(world.who("mia"), None, name, expires_in_days=days)


def test_a_server_without_authentication_has_no_user_to_make_tokens_for(world):
    with pytest.raises(Invalid, match="without authentication"):
        world.accounts.create_token(OPEN_PRINCIPAL, None, "x")


# --- passwords, sessions and the login limit ---------------------------------------------------------


def test_passwords_have_a_minimum_length_and_are_kept_as_argon2_hashes(world):
    admin, mia = world.who("admin"), world.who("mia")
    short = "p" * (MIN_PASSWORD_LENGTH - 1)
    with pytest.raises(ValueError, match=str(MIN_PASSWORD_LENGTH)):
        world.auth.hash_password(short)
    with pytest.raises(Invalid, match="password"):
        world.accounts.create_user(admin, None, "shorty", password=short)
    with pytest.raises(Invalid, match="password"):
        world.accounts.update_user(mia, None, "mia", password=short)
    # a member's first password is set by a site administrator (check_current_password)
    assert world.accounts.update_user(admin, None, "mia", password=PASSWORD)["hasPassword"] is True
    with world.store.session() as s:
        stored = s.scalar(select(UserRow.password_hash).where(UserRow.name == "mia"))
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    assert world.auth.check_password("mia", PASSWORD, "10.0.0.2").name == "mia"
    for name, password in [("mia", PASSWORD + "x"), ("nobody", PASSWORD), ("vera", ""), ("vera", PASSWORD)]:
        with pytest.raises(Unauthenticated, match="wrong user name or password"):
            world.auth.check_password(name, password, "10.0.0.2")
    failed = world.audit("login.failed")
    # an unknown name is not stored (it may be a password typed into the name field)
    assert [(a.actor, a.client, a.outcome, a.detail) for a in failed] == [
        ("mia", "10.0.0.2", "failed", "wrong password"),
        (ANONYMOUS, "10.0.0.2", "failed", "unknown user name"),
        ("vera", "10.0.0.2", "failed", "wrong password"),
        ("vera", "10.0.0.2", "failed", "wrong password")]
    # a disabled user's right password does not log them in
    world.accounts.update_user(admin, None, "mia", disabled=True)
    with pytest.raises(Unauthenticated):
        world.auth.check_password("mia", PASSWORD, "10.0.0.2")


def test_only_yourself_or_a_site_administrator_sets_a_password(world):
    with pytest.raises(Forbidden):
        world.accounts.update_user(world.who("pat"), None, "mia", password=PASSWORD)
    with pytest.raises(Forbidden):  # nor your own admin or disabled state
        world.accounts.update_user(world.who("mia"), None, "mia", admin=True)
    assert world.accounts.update_user(world.who("admin"), None, "mia", password=PASSWORD)["hasPassword"]


def test_sessions_start_with_a_password_or_token_and_end_on_logout_expiry_or_disable(world):
    admin = world.who("admin")
    world.accounts.update_user(admin, None, "mia", password=PASSWORD)
    cookie, principal = world.auth.login("10.0.0.3", name="mia", password=PASSWORD)
    assert principal.via == "session" and principal.csrf and len(principal.csrf) >= 32
    again = world.auth.from_session(cookie)
    assert (again.name, again.csrf, again.roles) == ("mia", principal.csrf, {"default": ProjectRole.member})
    with world.store.session() as s:  # only the digest of the cookie is kept
        assert s.scalar(select(SessionRow.digest)) == digest(cookie)
    world.auth.logout(cookie, "10.0.0.3")
    with pytest.raises(Unauthenticated):
        world.auth.from_session(cookie)

    cookie, _ = world.auth.login("10.0.0.3", token=world.tokens["pat"])
    assert world.auth.from_session(cookie).name == "pat"
    with world.store.session() as s:
        s.execute(update(SessionRow).values(expires_at=utcnow() - timedelta(seconds=1)))
    with pytest.raises(Unauthenticated, match="ended"):
        world.auth.from_session(cookie)

    cookie, _ = world.auth.login("10.0.0.3", token=world.tokens["vera"])
    world.accounts.update_user(admin, None, "vera", disabled=True)  # ends vera's sessions
    with pytest.raises(Unauthenticated):
        world.auth.from_session(cookie)
    world.accounts.update_user(admin, None, "vera", disabled=False)
    with pytest.raises(Unauthenticated):  # and they stay ended
        world.auth.from_session(cookie)
    assert [a.actor for a in world.audit("login.ok")] == ["mia", "pat", "vera"]
    assert [a.actor for a in world.audit("logout")] == ["mia"]


def test_a_failed_token_login_is_audited_without_the_token(world):
    with pytest.raises(Unauthenticated):
        world.auth.login("10.0.0.4", token="rlark_" + "z" * 43)
    (entry,) = world.audit("login.failed")
    assert entry.client == "10.0.0.4" and "z" * 10 not in entry.detail


def test_failed_logins_are_limited_per_client_and_three_times_as_much_per_user(world):
    world.auth.limiter = LoginLimiter("3/minute")
    world.accounts.update_user(world.who("admin"), None, "mia", password=PASSWORD)
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            world.auth.check_password("mia", "wrong-password", "10.0.0.5")
    with pytest.raises(TooManyRequests, match="too many failed logins from this address") as info:
        world.auth.check_password("mia", PASSWORD, "10.0.0.5")  # not even checked
    assert 0 < info.value.retry_after <= 61 and info.value.status == 429
    # the same address is limited for another user name too
    with pytest.raises(TooManyRequests):
        world.auth.check_password("pat", "whatever-password", "10.0.0.5")
    # another address may still log in as mia: one address cannot lock her out ...
    assert world.auth.check_password("mia", PASSWORD, "10.0.0.6").name == "mia"
    # ... but guesses at one name from many addresses are bounded too (3 x 3 per minute)
    for i in range(6):
        with pytest.raises(Unauthenticated):
            world.auth.check_password("mia", "wrong-password", f"10.0.2.{i // 2}")
    with pytest.raises(TooManyRequests, match="for this user name"):
        world.auth.check_password("mia", PASSWORD, "10.0.2.9")
    # a name is limited as the 63 characters it is stored as: varying a longer tail, from
    # changing addresses, does not get around the limit
    long = "u" * 63
    for i in range(9):
        with pytest.raises(Unauthenticated):
            world.auth.check_password(f"{long}{i}", "wrong-password", f"10.0.1.{i}")
    with pytest.raises(TooManyRequests):
        world.auth.check_password(long + "next", "wrong-password", "10.0.1.99")
    # others are not: a different user from a different address
    with pytest.raises(Unauthenticated):
        world.auth.check_password("pat", "whatever-password", "10.0.0.7")
    # token logins count against the address
    limited = AuthService(world.store, login_rate="2/minute")
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            limited.login("10.0.0.8", token="rlark_bad")
    with pytest.raises(TooManyRequests):
        limited.login("10.0.0.8", token=world.tokens["pat"])


# --- users -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["vera", "mia", "pat", "otto"])
def test_only_site_administrators_manage_users_and_projects(world, who):
    p = world.who(who)
    refusals = [
        lambda: world.accounts.list_users(p),
        lambda: world.accounts.create_user(p, None, "newbie"),
        lambda: world.accounts.get_user(p, "admin"),
        lambda: world.accounts.update_user(p, None, "vera" if who != "vera" else "mia", disabled=True),
        lambda: world.accounts.delete_user(p, None, "otto" if who != "otto" else "mia"),
        lambda: world.accounts.create_project(p, None, "mine"),
        lambda: world.accounts.delete_project(p, None, "other"),
    ]
    for refuse in refusals:
        with pytest.raises(Forbidden):
            refuse()
    assert world.accounts.get_user(p, who)["name"] == who  # yourself: yes
    with world.store.session() as s:
        assert s.scalar(select(func.count()).select_from(UserRow)) == 5
        assert s.scalar(select(func.count()).select_from(ProjectRow)) == 2


def test_a_site_administrator_manages_users(world):
    admin = world.who("admin")
    made = world.accounts.create_user(admin, "10.0.0.9", "newbie", project="other",
                                      role=ProjectRole.viewer, password=PASSWORD, token_name="t")
    assert made["projects"] == {"other": "viewer"} and made["hasPassword"] and made["createdBy"] == "admin"
    assert world.auth.from_token(made["token"]).roles == {"other": ProjectRole.viewer}
    with pytest.raises(Conflict):
        world.accounts.create_user(admin, None, "newbie")
    for bad in ["", "Upper", "-dash", "a" * 64, "sp ace", "x/y"]:
        with pytest.raises(Invalid):
            world.accounts.create_user(admin, None, bad)
    with pytest.raises(Invalid, match="both a project and a role"):
        world.accounts.create_user(admin, None, "half", project="other")
    with pytest.raises(NotFound):
        world.accounts.create_user(admin, None, "lost", project="nowhere", role=ProjectRole.viewer)
    assert "lost" not in [u["name"] for u in world.accounts.list_users(admin)]
    # deleting takes tokens and memberships along (audit entries stay)
    world.accounts.delete_user(admin, None, "newbie")
    with world.store.session() as s:
        assert s.scalar(select(func.count()).select_from(TokenRow).join(UserRow)
                        .where(UserRow.name == "newbie")) == 0
        assert s.scalar(select(func.count()).select_from(MembershipRow)) == 5  # the others'
    with pytest.raises(Unauthenticated):
        world.auth.from_token(made["token"])
    assert [a.target for a in world.audit("user.delete")] == ["newbie"]
    assert world.audit("user.create")[-1].client == "10.0.0.9"


def test_the_last_site_administrator_cannot_be_removed(world):
    admin = world.who("admin")
    with pytest.raises(Conflict, match="no enabled site administrator"):
        world.accounts.update_user(admin, None, "admin", disabled=True)
    with pytest.raises(Conflict, match="no enabled site administrator"):
        world.accounts.update_user(admin, None, "admin", admin=False)
    with pytest.raises(Conflict, match="yourself"):
        world.accounts.delete_user(admin, None, "admin")
    with pytest.raises(Conflict, match="no enabled site administrator"):
        world.accounts.delete_user(OPEN_PRINCIPAL, None, "admin")  # (a server without auth)
    assert world.who("admin").is_admin  # nothing changed
    # with a second administrator, the first may go; then the second is the last one
    world.accounts.update_user(admin, None, "pat", admin=True)
    world.accounts.update_user(admin, None, "admin", disabled=True)
    pat = world.who("pat")
    with pytest.raises(Conflict):
        world.accounts.update_user(pat, None, "pat", admin=False)
    with pytest.raises(Conflict):  # a disabled administrator does not count
        world.accounts.delete_user(OPEN_PRINCIPAL, None, "pat")
    world.accounts.delete_user(pat, None, "admin")
    assert [u["name"] for u in world.accounts.list_users(pat) if u["admin"]] == ["pat"]


# --- projects and members ----------------------------------------------------------------------------


def test_project_admins_manage_their_projects_members_only(world):
    pat, mia, vera, otto, admin = (world.who(n) for n in ("pat", "mia", "vera", "otto", "admin"))
    view = world.accounts.set_member(pat, "10.0.0.10", "default", "otto", ProjectRole.viewer)
    assert {m["user"]: m["role"] for m in view["members"]} == {
        "admin": "admin", "mia": "member", "otto": "viewer", "pat": "admin", "vera": "viewer"}
    assert world.who("otto").roles == {"default": ProjectRole.viewer, "other": ProjectRole.member}
    world.accounts.set_member(pat, None, "default", "otto", ProjectRole.member)  # a new role
    world.accounts.remove_member(pat, None, "default", "otto")
    assert world.who("otto").roles == {"other": ProjectRole.member}
    with pytest.raises(NotFound, match="no role"):
        world.accounts.remove_member(pat, None, "default", "otto")
    with pytest.raises(NotFound):
        world.accounts.set_member(pat, None, "default", "nobody", ProjectRole.viewer)
    # not in a project they do not administer: weaker roles 403, no role 404
    for p in (mia, vera):
        with pytest.raises(Forbidden):
            world.accounts.set_member(p, None, "default", "otto", ProjectRole.viewer)
        with pytest.raises(Forbidden):
            world.accounts.remove_member(p, None, "default", "vera")
    with pytest.raises(NotFound):
        world.accounts.set_member(pat, None, "other", "mia", ProjectRole.admin)
    with pytest.raises(NotFound):
        world.accounts.set_member(otto, None, "default", "otto", ProjectRole.admin)
    # a site administrator manages every project's members
    world.accounts.set_member(admin, None, "other", "mia", ProjectRole.viewer)
    assert world.who("mia").roles == {"default": ProjectRole.member, "other": ProjectRole.viewer}
    entries = [(a.actor, a.action, a.project, a.target, a.detail) for a in world.audit("member.set")]
    assert entries == [("pat", "member.set", "default", "otto", "no role -> viewer"),
                       ("pat", "member.set", "default", "otto", "viewer -> member"),
                       ("admin", "member.set", "other", "mia", "no role -> viewer")]


def test_projects_are_listed_and_read_by_those_with_a_role(world):
    mia, otto, admin = world.who("mia"), world.who("otto"), world.who("admin")
    assert [(p["name"], p["role"]) for p in world.accounts.list_projects(mia)] == [("default", "member")]
    assert [(p["name"], p["role"]) for p in world.accounts.list_projects(admin)] == [
        ("default", "admin"), ("other", "admin")]
    assert world.accounts.get_project(otto, "other")["members"] == [{"user": "otto", "role": "member"}]
    with pytest.raises(NotFound):
        world.accounts.get_project(otto, "default")
    assert world.accounts.me(admin)["projects"] == {"default": "admin", "other": "admin"}
    me = world.accounts.me(mia)
    assert (me["name"], me["admin"], me["via"], me["projects"]) == ("mia", False, "token",
                                                                     {"default": "member"})


def test_projects_are_deleted_only_when_empty_and_never_default(world):
    admin = world.who("admin")
    with pytest.raises(Conflict, match="'default' cannot be deleted"):
        world.accounts.delete_project(admin, None, "default")
    JobService(world.store, host=ROOMY_HOST).create(small("busy"), project="other")
    with pytest.raises(Conflict, match="still has 1 Job"):
        world.accounts.delete_project(admin, None, "other")
    world.accounts.create_project(admin, None, "empty")
    world.accounts.set_member(admin, None, "empty", "mia", ProjectRole.admin)
    assert world.accounts.delete_project(admin, None, "empty") == {"name": "empty", "deleted": True}
    assert world.who("mia").roles == {"default": ProjectRole.member}  # the membership went too
    with pytest.raises(NotFound):
        world.accounts.delete_project(admin, None, "empty")
    for bad in ["", "Upper", "a_b", "-x", "x" * 64]:
        with pytest.raises(Invalid):
            world.accounts.create_project(admin, None, bad)
    with pytest.raises(Conflict):
        world.accounts.create_project(admin, None, "other")


# --- namespaces --------------------------------------------------------------------------------------


def test_project_namespace_mapping():
    # no project shares the server's namespace, default included (it holds RLark's Secrets)
    assert project_namespace("default", None, "rlark") == "rlark-default"
    assert project_namespace("team-a", None, "rlark") == "rlark-team-a"
    assert project_namespace("team-a", "ml-prod", "rlark") == "ml-prod"  # its own wins
    assert project_namespace("default", "elsewhere", "rlark") == "elsewhere"
    assert project_namespace("team-a", None, None) is None  # local runtime: no namespaces
    long = project_namespace("p" * 40, None, "n" * 30)
    assert len(long) == 63 and long.startswith("n" * 30 + "-")
    assert project_namespace("a" * 10, None, "n" * 62) == "n" * 62  # cut at 63, no trailing '-'
    assert project_namespace(ProjectRow(name="team-b", namespace=None), None, "rlark") == "rlark-team-b"


def test_two_projects_never_share_a_namespace(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        w = World(store, server_namespace="rlark")
        admin = w.who("admin")
        assert w.accounts.get_project(admin, "other")["namespace"] == "rlark-other"
        assert w.accounts.get_project(admin, "default")["namespace"] == "rlark-default"
        with pytest.raises(Conflict, match="already belongs to project 'default'"):
            w.accounts.create_project(admin, None, "stolen", namespace="rlark-default")
        made = w.accounts.create_project(admin, None, "team-x", namespace="rlark-team-y")
        assert made["namespace"] == "rlark-team-y"
        with pytest.raises(Conflict, match="already belongs to project 'team-x'"):
            w.accounts.create_project(admin, None, "team-y")  # its default is taken
        # names that differ only past the 63rd character of the namespace ("rlark-" + 57)
        long = "q" * 57
        w.accounts.create_project(admin, None, long + "1")
        with pytest.raises(Conflict):
            w.accounts.create_project(admin, None, long + "2")
        with pytest.raises(Invalid):
            w.accounts.create_project(admin, None, "bad-ns", namespace="Not_A_Namespace")
        names = {p["name"] for p in w.accounts.list_projects(admin)}
        assert names == {"default", "other", "team-x", long + "1"}
    finally:
        store.dispose()


def test_no_project_gets_the_servers_namespace(rlark_home):
    """The server's namespace holds RLark's own Secrets: a project given it explicitly, or
    whose derived name is cut down to it, is refused at create; a store that has one already
    (made before this was refused) stops the Kubernetes server's start and names it; a Job of
    it gets no new Run there."""
    from rlark.services.accounts import check_projects_for

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        w = World(store, server_namespace="rlark")
        admin = w.who("admin")
        with pytest.raises(Invalid, match="namespace 'rlark', the RLark server's own") as refused:
            w.accounts.create_project(admin, None, "sneaky", namespace="rlark")
        assert "--namespace, e.g. rlark-sneaky" in refused.value.message
        long_server = "n" * 62  # "<server>-<project>" cut at 63, '-' stripped: the server's own
        cut = AccountService(w.auth, server_namespace=long_server)
        with pytest.raises(Invalid, match="the RLark server's own"):
            cut.create_project(admin, None, "x")
        assert "sneaky" not in {p["name"] for p in w.accounts.list_projects(admin)}
        check_projects_for(store, "rlark")  # default maps to rlark-default: nothing to refuse
        with store.session() as s:  # as an older server let an administrator make it
            s.add(ProjectRow(name="legacy", namespace="rlark"))
        with pytest.raises(ValueError, match="project 'legacy' runs Pods in namespace 'rlark'"):
            check_projects_for(store, "rlark")
        jobs = JobService(store, runtime="kubernetes", namespace="rlark")
        with pytest.raises(Invalid, match="the RLark server's own"):
            jobs.create(small("job"), project="legacy")
        with store.session() as s:
            assert s.scalar(select(func.count()).select_from(RunRow)) == 0
    finally:
        store.dispose()


def test_an_automatic_retry_runs_in_the_namespace_of_the_run_it_retries(rlark_home):
    """The controller makes a retry with store.runs.new_run: it must not come out without a
    namespace (which the Kubernetes runtime reads as the server's own)."""
    from rlark.status import Cause
    from rlark.store import JobRow
    from rlark.store.runs import new_run

    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        World(store, server_namespace="rlark")
        JobService(store, runtime="kubernetes", namespace="rlark").create(small("job"), project="other")
        with store.session() as s:
            job = s.scalar(select(JobRow).where(JobRow.name == "job"))
            retry = new_run(job, Cause.Retry, "kubernetes")
            assert [r.namespace for r in job.runs] == ["rlark-other", "rlark-other"]
            assert retry.number == 2
            s.rollback()
    finally:
        store.dispose()


def test_a_kubernetes_run_records_its_projects_namespace(rlark_home):
    store = Store(f"sqlite:///{rlark_home / 'rlark.db'}")
    try:
        w = World(store, server_namespace="rlark")
        w.accounts.create_project(w.who("admin"), None, "own", namespace="ml-own")
        jobs = JobService(store, runtime="kubernetes", namespace="rlark")
        for project, namespace in [("default", "rlark-default"), ("other", "rlark-other"),
                                   ("own", "ml-own")]:
            jobs.create(small("job"), project=project)
            from rlark.store import JobRow, RunRow

            with store.session() as s:
                run = s.scalar(select(RunRow).join(JobRow).join(ProjectRow)
                               .where(ProjectRow.name == project))
                assert run.namespace == namespace, project
    finally:
        store.dispose()


# --- the audit log --------------------------------------------------------------------------------------


def test_the_audit_log_is_for_site_administrators_and_project_admins_for_their_projects(world):
    admin, pat, mia = world.who("admin"), world.who("pat"), world.who("mia")
    jobs = JobService(world.store, host=ROOMY_HOST)
    jobs.create(small("in-default"), actor=mia.actor("10.1.1.1"))
    jobs.create(small("in-other"), project="other", actor=world.who("otto").actor("10.1.1.2"))
    everything = world.accounts.audit(admin)["items"]
    assert {"job.create", "user.create", "project.create"} <= {a["action"] for a in everything}
    theirs = world.accounts.audit(pat)["items"]
    assert {a["project"] for a in theirs} == {"default"}
    assert [(a["action"], a["actor"], a["client"]) for a in theirs if a["action"].startswith("job.")] == [
        ("job.create", "mia", "10.1.1.1")]
    with pytest.raises(Forbidden):
        world.accounts.audit(mia)
    with pytest.raises(NotFound):
        world.accounts.audit(pat, project="other")
    assert [a["target"] for a in world.accounts.audit(admin, project="other", action="job.")["items"]] == [
        "in-other"]
    assert [a["target"] for a in world.accounts.audit(admin, actor="otto")["items"]] == ["in-other"]
    page = world.accounts.audit(admin, limit=2, offset=1)
    assert len(page["items"]) == 2 and page["items"][0]["id"] == everything[1]["id"]
    # a prefix is matched literally (no LIKE wildcards)
    assert world.accounts.audit(admin, action="job_")["items"] == []
