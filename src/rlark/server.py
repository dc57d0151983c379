"""Wiring for ``rlark server``: store -> runtime -> controller -> services -> API."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from rlark import settings
from rlark.cli import credentials
from rlark.api.app import create_api
from rlark.api.security import LOOPBACK_HOSTS, SecurityPolicy
from rlark.console import mount_console
from rlark.services.auth import AuthService
from rlark import runtimes
from rlark.controller.loop import Controller
from rlark.runtimes import RUNTIMES
from rlark.runtimes.base import Opened
from rlark.secretbox import SecretBox
from rlark.services.jobs import JobService
from rlark.services.metrics import ServerMetrics
from rlark.services.notifications import WebhookSettings
from rlark.services.notifier import Notifier
from rlark.services.secrets import server_box
from rlark.store import Store
from rlark.store.lock import ControllerLock, owner_info

if TYPE_CHECKING:  # imported where used: the local runtime never loads the Kubernetes client
    from rlark.controller.leader import Leadership

log = logging.getLogger("rlark.server")


def is_loopback(host: str) -> bool:
    """``host`` (a listen address) accepts connections from this machine only."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def security_policy(host: str, auth: bool = True, allowed_hosts: tuple[str, ...] = (),
                    cors_origins: tuple[str, ...] = ()) -> SecurityPolicy:
    """The request policy for a server listening on ``host``: loopback names, plus the listen
    address and this machine's names when it listens beyond loopback, plus ``allowed_hosts``
    (and ``$RLARK_ALLOWED_HOSTS``, comma-separated); CORS origins from ``cors_origins`` and
    ``$RLARK_CORS_ORIGINS``.

    Raises:
        ValueError: authentication off on a non-loopback address (it would let anyone on the
            network run code as the server's user).
    """
    if not auth and not is_loopback(host):
        raise ValueError(f"--no-auth is refused with --host {host}: without authentication anyone who "
                         "can reach the server runs code as its user. Turn authentication off "
                         "only on 127.0.0.1 (or keep it on and use API tokens)")
    names = list(LOOPBACK_HOSTS)
    if not is_loopback(host):
        if host not in ("0.0.0.0", "::", ""):
            names.append(host)
        names += [socket.gethostname(), socket.getfqdn()]
    names += settings.csv_env("RLARK_ALLOWED_HOSTS") + list(allowed_hosts)
    if not auth and "*" in names:
        raise ValueError("--no-auth is refused with --allowed-host '*': a page on any name that "
                         "resolves to this machine (DNS rebinding) could then act as administrator")
    origins = settings.csv_env("RLARK_CORS_ORIGINS") + list(cors_origins)
    return SecurityPolicy(auth=auth, allowed_hosts=tuple(dict.fromkeys(n.lower() for n in names if n)),
                          cors_origins=tuple(dict.fromkeys(o.rstrip("/").lower() for o in origins)))


def local_urls(host: str, port: int, scheme: str = "http") -> list[str]:
    """The URLs the CLI on this machine may use for a server listening on ``host``."""
    if host in ("0.0.0.0", "::", "") or is_loopback(host):
        return [f"{scheme}://127.0.0.1:{port}", f"{scheme}://localhost:{port}"]
    return [f"{scheme}://{host}:{port}"]


def bootstrap_admin(auth: AuthService, urls: list[str]) -> None:
    """First start: make the site administrator and store its token in the credentials file
    for ``urls`` (``RLARK_ADMIN_TOKEN`` gives the token instead, e.g. from a Secret). Later
    starts on another address: a token of the credentials file that this store still accepts
    is stored for the new ``urls`` too, so the CLI on this machine keeps working. The token
    itself is never logged.

    Raises:
        ValueError: a first start with neither ``RLARK_ADMIN_TOKEN`` nor ``urls``: the new
            administrator's token would be kept nowhere; or RLARK_ADMIN_TOKEN is unusable.
    """
    given = os.environ.pop("RLARK_ADMIN_TOKEN", None) or None  # no child process inherits it
    if given is None and not urls and not auth.has_users():
        raise ValueError("the first start creates the site administrator, and its token must be "
                         "kept somewhere: set RLARK_ADMIN_TOKEN, or serve on an address "
                         "(`rlark server --host/--port`) whose credentials entry the CLI reads")
    token = auth.bootstrap(given)
    if token is None:
        _carry_token_to(auth, urls)
        return
    if given:
        log.warning("first start: created the site administrator 'admin' with the token from "
                    "RLARK_ADMIN_TOKEN")
        return
    for i, url in enumerate(urls):
        where = credentials.put(url, token, user="admin", project="default", current=i == 0)
    log.warning("first start: created the site administrator 'admin'; its API token is in %s "
                "(mode 0600), where `rlark` on this machine finds it. Log in to the console with "
                "it, or give people their own: `rlark user create NAME --project default --role member`",
                where)


def _carry_token_to(auth: AuthService, urls: list[str]) -> None:
    from rlark.services.errors import Unauthenticated

    try:
        known = credentials.load().get("servers", {})
    except credentials.CredentialsError as exc:
        log.warning("not using the credentials file: %s", exc)
        return
    if not urls or all(url in known for url in urls):
        return
    for item in known.values():
        token = item.get("token") if isinstance(item, dict) else None
        if not token:
            continue
        try:
            auth.from_token(token)  # only a token this store accepts
        except Unauthenticated:
            continue
        for url in urls:
            if url not in known:
                credentials.put(url, token, user=item.get("user"), project=item.get("project"))
        log.info("stored the credentials file's token for %s too", ", ".join(urls))
        return


def build_app(database_url: str | None = None, server_url: str | None = None,
              runtime: str = "local", namespace: str | None = None,
              policy: SecurityPolicy | None = None, admin_urls: list[str] | None = None,
              stop_runs_on_exit: bool | None = None, leader_elect: bool | None = None,
              worker_isolation: str | None = None, quota_defaults=None) -> FastAPI:
    """The full server app; the controller runs with the app.

    ``runtime``: ``local`` (process groups on this machine, the default) or ``kubernetes``
    (Pods in ``namespace``; default: the in-cluster ServiceAccount's namespace or the kubeconfig
    context's; other projects' Pods in their own namespaces). ``policy``: see
    :func:`security_policy`; ``admin_urls``: where the first administrator's token is stored
    for (:func:`bootstrap_admin`). ``stop_runs_on_exit``: the server's shutdown stops every active
    Run (default :func:`rlark.settings.stop_runs_on_exit`; otherwise Runs carry on and the next
    server adopts them). ``leader_elect`` (default: on with ``kubernetes``): replicas of this
    server share the store, every one serves the API and the console, and only the holder of
    the Lease ``rlark-controller`` in ``namespace`` reconciles (:mod:`rlark.controller.leader`).
    Kubernetes settings from the environment: ``RLARK_K8S_PENDING_TIMEOUT``,
    ``RLARK_K8S_IMAGE_PULL_GRACE``, ``RLARK_K8S_MOUNT_GRACE`` (seconds),
    ``RLARK_K8S_RAY_DASHBOARD=1``, and the Worker Pod policy (:func:`rlark.runtimes.kubernetes.settings.pod_policy`:
    ``RLARK_K8S_ALLOW_ROOT``, ``RLARK_K8S_HOST_PATH_PREFIXES``, ``RLARK_K8S_SERVICE_ACCOUNTS``,
    ``RLARK_K8S_RUN_AS_USER``, ``RLARK_K8S_CSI_DRIVERS``, ``RLARK_K8S_STORAGE_CLASSES``,
    ``RLARK_K8S_TOLERATIONS``). No project may map to ``namespace`` itself (it holds RLark's
    own Secrets): a store with such a project is refused here. ``worker_isolation``: local runtime, how each Worker's
    processes are kept together (default :func:`rlark.runtimes.local.settings.worker_isolation`; probed once
    here, logged, and shown by ``GET /api/v1/server`` and ``rlark nodes``). ``quota_defaults``: the
    per-project quotas (:class:`rlark.services.quotas.Quotas`; default from the environment).

    Raises:
        ValueError: a setting is unusable (e.g. ``RLARK_RAY_TMP`` too long, an unknown runtime,
            no Kubernetes configuration, leader election without Kubernetes, RBAC refusing the
            watches or the Lease, a project mapped to the server's namespace), before anything
            runs.
        StoreBusy: another server already runs on this store (a replica with leader election
            shares it only with other replicas).
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; use one of {', '.join(RUNTIMES)}")
    from rlark.rlinf_config.isolated import composer_slots

    settings.config_roots()  # unusable settings stop the start, not a later request
    settings.worker_env()
    composer_slots()
    notify_config = WebhookSettings.from_env()
    can_elect = runtimes.profile(runtime).leader_election
    if leader_elect is None:
        leader_elect = can_elect
    if leader_elect and not can_elect:
        raise ValueError("--leader-elect needs --runtime kubernetes (the leader holds a Kubernetes "
                         "Lease); on the local runtime one server serves a store")
    stores: list[Store] = []  # the store, once made: the runtimes read projects from it

    def projects_in(ns: str, server_ns: str) -> list[str]:
        """The projects whose Runs go to namespace ``ns`` (whose Secrets labelled for them
        their Jobs may name)."""
        from rlark.services.accounts import projects_in_namespace

        with stores[0].session() as s:
            return projects_in_namespace(s, ns, server_ns)

    opened = runtimes.open_runtime(runtime, namespace=namespace, worker_isolation=worker_isolation,
                                   projects_in=projects_in)
    # the lock first, the migrations after: a second server on a store in use must change
    # nothing, not even the schema under the running server (a newer release's migrations)
    store = Store(database_url, migrate=False)
    stores.append(store)
    lock = None
    try:
        lock = ControllerLock(store.engine, owner_info(server_url), shared=leader_elect).acquire()
        store.migrate()
        box = server_box(store)  # before the controller: a Run must never launch without it
        if opened.namespace is not None:  # no project may run its Pods beside RLark's own Secrets
            from rlark.services.accounts import check_projects_for

            check_projects_for(store, opened.namespace)
        auth = AuthService(store, session_hours=settings.positive_float_env("RLARK_SESSION_HOURS", 12.0),
                           login_rate=os.environ.get("RLARK_LOGIN_RATE") or "10/5 minutes")
        policy = policy or SecurityPolicy()
        if policy.auth:  # before the controller: a start that cannot keep the token stops here
            bootstrap_admin(auth, admin_urls or [])
    except BaseException:
        if lock is not None:
            lock.release()
        opened.shutdown(opened.runtime)
        store.dispose()
        raise
    stop_runs = settings.stop_runs_on_exit() if stop_runs_on_exit is None else stop_runs_on_exit
    controller: Any
    metrics = ServerMetrics(lambda: store)
    if leader_elect:
        controller = _leadership(store, opened, lock, stop_runs, box, metrics)
    else:
        def on_shutdown() -> None:  # as a leader's: what the runtime started stops with it
            opened.shutdown(opened.runtime)
            lock.release()

        # acts only while this server holds the store's lock: a PostgreSQL restart takes the
        # lock away, and another server may have taken the store before this one gets it back
        controller = Controller(store, opened.runtime, on_shutdown=on_shutdown,
                                stop_runs_on_exit=stop_runs, secret_box=box, may_act=lock.held,
                                on_timing=metrics.observe_controller)
    opened.started(many_users(store, server_url, policy))
    service = JobService(store, controller.wake, runtime=runtime, namespace=opened.namespace,
                         secret_box=box, isolation=opened.profile.isolation,
                         quota_defaults=quota_defaults, profile=opened.profile)
    notifier = Notifier(store, lambda: box, notify_config)
    return create_app(service, controller, policy=policy, auth=auth, secret_box=box,
                      metrics=metrics, notifier=notifier)


def create_app(service: JobService, controller=None, *, policy: SecurityPolicy | None = None,
               auth: AuthService | None = None, secret_box: SecretBox | None = None,
               metrics: ServerMetrics | None = None, notifier: Notifier | None = None) -> FastAPI:
    """The app ``rlark server`` serves: the API (:func:`rlark.api.app.create_api`, with the same
    arguments) and the web console at ``/`` (:func:`rlark.console.mount_console`), both behind
    the one request guard of :mod:`rlark.api.security`.

    Raises:
        RuntimeError: a route or page declares no access rule.
    """
    return create_api(service, controller, policy=policy, auth=auth, secret_box=secret_box,
                      metrics=metrics, notifier=notifier, fronts=(mount_console,))


def many_users(store: Store, server_url: str | None, policy: SecurityPolicy | None):
    """``() -> why this server serves more than one user, or None``, asked at every local launch
    whose Workers would run as the server's own user (:mod:`rlark.runtimes.local.identity`):
    it listens beyond loopback, or more than one user account is enabled."""
    from urllib.parse import urlsplit

    from sqlalchemy import func, select

    from rlark.store import UserRow

    host = urlsplit(server_url or "").hostname or "127.0.0.1"

    def check() -> str | None:
        if not is_loopback(host):
            return f"it listens on {host}, beyond this machine"
        if policy is not None and not policy.auth:
            return None  # --no-auth is loopback-only: whoever reaches it is this machine's user
        with store.session() as s:
            n = s.scalar(select(func.count()).select_from(UserRow).where(UserRow.disabled.is_(False)))
        return f"{n} user accounts are enabled" if n and n > 1 else None

    return check


def _leadership(store: Store, opened: Opened, lock: ControllerLock, stop_runs: bool,
                box: SecretBox | None = None, metrics: ServerMetrics | None = None) -> Leadership:
    """The controller of a replica: a :class:`~rlark.controller.leader.Leadership` whose terms
    are Controllers on a fresh runtime (``opened.runtime`` for the first term: its watches
    already run).

    Raises:
        ValueError: RBAC forbids reading the Lease (the message names the rule).
    """
    from rlark.controller.leader import LeaderElector, LeaseClient, Leadership
    from rlark.runtimes.kubernetes.client import KubeError

    assert opened.fresh is not None and opened.namespace is not None  # a runtime that can elect
    make_runtime = opened.fresh
    elector = LeaderElector(LeaseClient(opened.lease_api, opened.namespace))
    try:
        elector.check_access()
    except KubeError as exc:
        if exc.status in (401, 403):
            opened.shutdown(opened.runtime)
            lock.release()
            store.dispose()
            raise ValueError(str(exc)) from None
        log.warning("%s; trying again", exc)  # an API server that does not answer yet
    spare = [opened.runtime]

    def make_term() -> Controller:
        rt = spare.pop() if spare else make_runtime()
        return Controller(store, rt, stop_runs_on_exit=stop_runs, may_act=elector.is_leader,
                          adopt_cause=f"RLark server {elector.identity} became the leader",
                          secret_box=box, on_timing=metrics.observe_controller if metrics else None)

    def on_shutdown() -> None:
        for rt in spare:  # never led: its watches stop here
            opened.shutdown(rt)
        lock.release()

    log.info("leader election: this server is %s; Lease %s", elector.identity, elector.leases.where)
    return Leadership(elector, make_term, on_shutdown=on_shutdown)


def private_home() -> None:
    """Make ``$RLARK_HOME`` (database, logs, credentials) readable by this user only: other
    users of the machine must not read Job specs, logs or password hashes."""
    import stat

    home = settings.rlark_home()
    mode = stat.S_IMODE(home.stat().st_mode)
    if mode & 0o077 and home.stat().st_uid == os.getuid():
        home.chmod(0o700)
        log.warning("made %s private (mode %o -> 700): it holds the database, logs and tokens",
                    home, mode)


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (the OS's words, e.g. "Address already in use"),
    or None when it can: a bind with SO_REUSEADDR, as uvicorn binds, closed again at once. Checked
    before the store is opened, so a second server on a taken port changes nothing."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return str(exc)
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def serve(host: str, port: int, database_url: str | None = None, log_level: str = "info",
          runtime: str = "local", namespace: str | None = None, auth: bool = True,
          allowed_hosts: tuple[str, ...] = (), cors_origins: tuple[str, ...] = (),
          tls_cert: str | None = None, tls_key: str | None = None,
          trusted_proxies: tuple[str, ...] = (), stop_runs_on_exit: bool | None = None,
          leader_elect: bool | None = None, worker_isolation: str | None = None,
          quota_defaults=None, access_log: bool = False,
          metrics_address: str | None = None) -> None:
    """Run the server until SIGINT/SIGTERM. Active Runs keep running through a shutdown and the
    next server on the same store adopts them, unless ``RLARK_STOP_RUNS_ON_EXIT=1``. With
    ``leader_elect`` (default on with ``kubernetes``) it is one of several replicas: see
    :func:`build_app`.

    ``log_level``: the least severe lines logged (``debug``, ``info``...), RLark's and
    uvicorn's. ``access_log``: uvicorn's line per request too (off: a server used from a
    terminal, ``rlark server &``, would print one line for every call the CLI and the console
    make).

    ``trusted_proxies``: addresses whose ``X-Forwarded-For``/``-Proto`` headers are believed
    (a TLS-terminating proxy in front); from anyone else they are ignored, so a client cannot
    pose as another address (the login rate limit and the audit log key on it).

    ``metrics_address`` (``HOST:PORT``): also serve ``GET /metrics`` there, on a listener of its
    own with the same authentication, TLS and ``Host`` rules as the API's
    (:func:`rlark.api.app.create_metrics_api`; docs/security.md says when that is worth it).

    Raises:
        ValueError: a setting is refused (see :func:`security_policy`, :func:`build_app`,
            :func:`listen_address`), ``host:port`` or the metrics address cannot be listened on
            (:func:`port_in_use`), or the metrics listener did not start.
    """
    import uvicorn

    busy = port_in_use(host, port)
    if busy is not None:
        raise ValueError(f"cannot listen on {host}:{port}: {busy} (another RLark server, or "
                         f"another program, holds it); nothing was changed. Give this server "
                         f"another port: rlark server --port {port + 1}")
    side = None
    if metrics_address:
        side = listen_address(metrics_address, "--metrics-address")
        if side[1] == port:
            raise ValueError(f"--metrics-address {metrics_address} uses the API's port {port}: "
                             "give the metrics a port of their own (or leave the option out: "
                             "/metrics is on the API's address too)")
        busy = port_in_use(*side)
        if busy is not None:
            raise ValueError(f"cannot listen on --metrics-address {metrics_address}: {busy}; "
                             "nothing was changed. Give it another port")
        # the same refusals as the API's address: no --no-auth beyond loopback
        side_policy = security_policy(side[0], auth, allowed_hosts, ())
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # what the server writes (its database, logs, tokens) is its own: no other user of the
    # machine, no Worker, reads it, whatever mode a library would give it
    os.umask(0o077)
    private_home()
    policy = security_policy(host, auth, allowed_hosts, cors_origins)
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("give both --tls-cert and --tls-key, or neither")
    scheme = "https" if tls_cert else "http"
    app = build_app(database_url, f"{scheme}://{host}:{port}", runtime=runtime, namespace=namespace,
                    policy=policy, admin_urls=local_urls(host, port, scheme),
                    stop_runs_on_exit=stop_runs_on_exit, leader_elect=leader_elect,
                    worker_isolation=worker_isolation, quota_defaults=quota_defaults)
    if not auth:
        for line in ("AUTHENTICATION IS OFF (--no-auth): every request to this server acts as a",
                     "site administrator and can run code as this user. Use it only on a machine",
                     f"where you trust every local user. Listening on {host}:{port} only."):
            log.warning("!!! %s", line)
    proxies = tuple(trusted_proxies) + tuple(settings.csv_env("RLARK_TRUSTED_PROXIES"))
    metrics_server = None
    if side is not None:
        from rlark.api.app import create_metrics_api

        metrics_server = _start_metrics_listener(
            create_metrics_api(app, side_policy), side, log_level, access_log, tls_cert, tls_key)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=access_log,
                    ssl_certfile=tls_cert,
                    ssl_keyfile=tls_key, proxy_headers=bool(proxies),
                    forwarded_allow_ips=",".join(proxies) if proxies else None)
    finally:
        if metrics_server is not None:
            metrics_server.should_exit = True


#: seconds the metrics listener may take to start serving before the start is given up
METRICS_START_SECONDS = 30.0


def listen_address(text: str, option: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 address in brackets: ``[::1]:9470``) as ``(host, port)``. Pure.

    Raises:
        ValueError: not ``HOST:PORT``, or a port outside 1..65535 (the message names ``option``,
            the value and the form expected).
    """
    m = re.fullmatch(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\s\[\]/]+)):(?P<port>[0-9]{1,5})",
                     text.strip())
    if m is None:
        raise ValueError(f"{option} {text!r} is not HOST:PORT (e.g. 127.0.0.1:9470, "
                         "0.0.0.0:9470, [::1]:9470)")
    host, port_text = m.group("v6") or m.group("name"), m.group("port")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ValueError(f"{option} {text!r}: port {port} is not in 1..65535")
    return host, port


def _start_metrics_listener(app: FastAPI, where: tuple[str, int], log_level: str,
                            access_log: bool, tls_cert: str | None, tls_key: str | None):
    """uvicorn serving ``app`` on ``where`` in a thread of its own (its own event loop: a slow
    scrape never holds up the API), returned once it serves; ``should_exit = True`` ends it, and
    it ends with the process.

    Raises:
        ValueError: it did not serve within :data:`METRICS_START_SECONDS` (the log says why).
    """
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(
        app, host=where[0], port=where[1], log_level=log_level, access_log=access_log,
        ssl_certfile=tls_cert, ssl_keyfile=tls_key, lifespan="off"))
    thread = threading.Thread(target=server.run, name="rlark-metrics", daemon=True)
    thread.start()
    deadline = time.monotonic() + METRICS_START_SECONDS
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise ValueError(f"the metrics listener on {where[0]}:{where[1]} did not start "
                             f"within {METRICS_START_SECONDS:.0f} s (the log above says why)")
        time.sleep(0.02)
    log.info("serving /metrics on %s:%s too", *where)
    return server
