"""``rlark server``: its options, which set the server's settings, and the start of the server
itself (:func:`rlark.server.serve`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from rlark import settings
from rlark.cli.base import _fail


#: what `rlark server --log-level` takes (Python's logging levels, as uvicorn names them)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def server(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (beyond loopback, "
                             "authentication must stay on)."),
    port: int = typer.Option(settings.DEFAULT_PORT, min=1, max=65535, envvar="RLARK_PORT",
                             help="Port to listen on (the CLI's --server / RLARK_SERVER names it)."),
    database_url: Optional[str] = typer.Option(
        None, envvar="RLARK_DATABASE_URL",
        help="SQLAlchemy URL (default: SQLite in $RLARK_HOME, which defaults to ~/.rlark); "
             "PostgreSQL: postgresql://user:pass@host/db"),
    runtime: str = typer.Option("local", "--runtime", "-r", envvar="RLARK_RUNTIME",
                                help="Where Workers run: local (process groups on this machine) "
                                     "or kubernetes (one Pod per Worker)."),
    namespace: Optional[str] = typer.Option(
        None, "--namespace", "-n", envvar="RLARK_NAMESPACE",
        help="kubernetes: namespace of the project 'default' (default: the ServiceAccount's in a "
             "Pod, else the kubeconfig context's, else default); other projects use "
             "<namespace>-<project> unless created with their own."),
    allowed_host: Optional[list[str]] = typer.Option(
        None, "--allowed-host", metavar="NAME",
        help="Also answer requests whose Host is NAME (repeatable; *.example.com for "
             "subdomains; also $RLARK_ALLOWED_HOSTS, comma-separated). Default: loopback names "
             "(and this machine's names when --host is not loopback)."),
    cors_origin: Optional[list[str]] = typer.Option(
        None, "--cors-origin", metavar="ORIGIN",
        help="Let web pages from ORIGIN (https://app.example.com) call the API with a token "
             "(repeatable; also $RLARK_CORS_ORIGINS). Default: CORS closed."),
    no_auth: bool = typer.Option(
        False, "--no-auth",
        help="Turn authentication off: every request acts as a site administrator. Refused "
             "unless --host is a loopback address."),
    tls_cert: Optional[Path] = typer.Option(None, "--tls-cert", help="Serve HTTPS with this "
                                            "certificate (PEM); cookies are then Secure."),
    tls_key: Optional[Path] = typer.Option(None, "--tls-key", help="The certificate's key (PEM)."),
    trusted_proxy: Optional[list[str]] = typer.Option(
        None, "--trusted-proxy", metavar="ADDRESS",
        help="Believe X-Forwarded-For/-Proto from this address (a TLS proxy in front; "
             "repeatable; also $RLARK_TRUSTED_PROXIES). Default: from nobody."),
    stop_runs_on_exit: bool = typer.Option(
        False, "--stop-runs-on-exit", envvar="RLARK_STOP_RUNS_ON_EXIT",
        help="Stop every active Run when the server shuts down. Default: Runs keep running "
             "through a restart or upgrade, and the next server on the same store adopts them."),
    leader_elect: Optional[bool] = typer.Option(
        None, "--leader-elect/--no-leader-elect", envvar="RLARK_LEADER_ELECT",
        help="kubernetes: run as one of several replicas on one store (PostgreSQL): each serves "
             "the API and console, only the holder of the Lease rlark-controller in --namespace "
             "reconciles, and another takes over within 15 s when it dies. Default: on with "
             "--runtime kubernetes, off with local (one server per store)."),
    worker_env: Optional[list[str]] = typer.Option(
        None, "--worker-env", metavar="NAME",
        help="local: also give Workers the server's variable NAME (repeatable; also "
             "$RLARK_WORKER_ENV, comma-separated). By default Workers get only PATH, HOME, "
             "locale, TZ, proxy settings and what their role's env sets (docs/security.md)."),
    secret_key_file: Optional[Path] = typer.Option(
        None, "--secret-key-file", envvar="RLARK_SECRET_KEY_FILE",
        help="The key the project secrets are sealed with (default $RLARK_HOME/secret.key, made "
             "on the first start; or give the key itself in $RLARK_SECRET_KEY)."),
    config_root: Optional[list[str]] = typer.Option(
        None, "--config-root", metavar="DIR",
        help="Also let Jobs name RLinf configs (spec.rlinf.configDir) under DIR (repeatable; "
             "also $RLARK_CONFIG_ROOTS, comma-separated). By default only under the Job's own "
             "spec.workingDir."),
    worker_isolation: Optional[str] = typer.Option(
        None, "--worker-isolation", envvar="RLARK_WORKER_ISOLATION",
        metavar="auto|pid-namespace|cgroup|user-namespace|process-group",
        help="local: how each Worker's processes are kept together, so stopping a Run ends every "
             "process it started. Default auto: the strongest kind this server can make (probed "
             "at start; the server refuses to start when there is none). process-group is weak: "
             "a process that calls setsid() can outlive its Worker. docs/security.md."),
    worker_identity: Optional[str] = typer.Option(
        None, "--worker-identity", envvar="RLARK_WORKER_IDENTITY", metavar="auto|uid|server-user",
        help="local: who Workers run as. Default auto: a uid of each Run's own (from "
             "$RLARK_WORKER_UIDS) in a mount namespace that hides this server's files, when the "
             "server runs as root; else this server's own user, which only a single-user server "
             "on loopback may do (a server with more users refuses local Jobs then). "
             "docs/security.md, \"Worker identity\"."),
    worker_read_path: Optional[list[str]] = typer.Option(
        None, "--worker-read-path", metavar="DIR",
        help="local: let Workers that run under their own uid be given paths under DIR (a "
             "workingDir, a local.python) although other users of this machine cannot read "
             "them (repeatable; also $RLARK_WORKER_READ_PATHS). The server's own Python "
             "installation always is; $RLARK_HOME never is."),
    allow_unauthenticated_ray: bool = typer.Option(
        False, "--allow-unauthenticated-ray", envvar="RLARK_ALLOW_UNAUTHENTICATED_RAY",
        help="Let a Worker whose Ray is older than 2.52 (no token authentication) run without "
             "it; its record says so. Default: refused, as anyone on its network could join "
             "its Ray cluster."),
    k8s_allow_root: bool = typer.Option(
        False, "--k8s-allow-root", envvar="RLARK_K8S_ALLOW_ROOT",
        help="kubernetes: let a role run its Workers as root (kubernetes.runAsRoot; still "
             "without Linux capabilities). Default: refused; Workers run as a non-root user. "
             "docs/security.md."),
    k8s_host_path_prefix: Optional[list[str]] = typer.Option(
        None, "--k8s-host-path-prefix", metavar="DIR",
        help="kubernetes: let hostPath mounts use directories under DIR (repeatable; also "
             "$RLARK_K8S_HOST_PATH_PREFIXES, comma-separated). Default: no hostPath mounts; "
             "/ and system directories are always refused."),
    k8s_service_account: Optional[list[str]] = typer.Option(
        None, "--k8s-service-account", metavar="NAME",
        help="kubernetes: let roles name the ServiceAccount NAME (kubernetes.serviceAccountName; "
             "repeatable; also $RLARK_K8S_SERVICE_ACCOUNTS). Default: none, Workers use the "
             "namespace's default."),
    k8s_csi_driver: Optional[list[str]] = typer.Option(
        None, "--k8s-csi-driver", metavar="NAME",
        help="kubernetes: let objectStorage mounts use the CSI driver NAME inline "
             "(kubernetes.csiDriver; repeatable; also $RLARK_K8S_CSI_DRIVERS). Default: none "
             "(the driver acts on the node with the node's credentials)."),
    k8s_storage_class: Optional[list[str]] = typer.Option(
        None, "--k8s-storage-class", metavar="NAME",
        help="kubernetes: let objectStorage mounts make claims of the StorageClass NAME "
             "(kubernetes.storageClass; repeatable; also $RLARK_K8S_STORAGE_CLASSES). Default: none."),
    k8s_toleration: Optional[list[str]] = typer.Option(
        None, "--k8s-toleration", metavar="KEY[=VALUE][:EFFECT]",
        help="kubernetes: let roles tolerate taints of KEY (only VALUE, only EFFECT when given; "
             "* for any; kubernetes.tolerations; repeatable; also $RLARK_K8S_TOLERATIONS). "
             "Default: none, so tainted nodes stay out of reach."),
    k8s_queue: Optional[str] = typer.Option(
        None, "--k8s-queue", metavar="NAME", envvar="RLARK_K8S_QUEUE",
        help="kubernetes: the Kueue LocalQueue the Pods of a project's Runs wait in, all of "
             "a Run's Pods admitted together, where the project names none (`rlark project "
             "create --queue`); none: no queue (the default: Pods go to the scheduler at once). "
             "docs/kubernetes.md, \"Queues and gang admission\"."),
    k8s_priority_class: Optional[list[str]] = typer.Option(
        None, "--k8s-priority-class", metavar="NAME=VALUE",
        help="kubernetes with a queue: the WorkloadPriorityClass NAME (of value VALUE) that a "
             "Run of spec.priority VALUE names (repeatable; also $RLARK_K8S_PRIORITY_CLASSES, "
             "comma-separated). Default: none; a Job of a priority no class has is refused."),
    k8s_qps: Optional[float] = typer.Option(
        None, "--k8s-qps", min=0.001, envvar="RLARK_K8S_QPS", metavar="N",
        help="kubernetes: at most N API requests a second on average, all of the server's "
             "together (a token bucket; also $RLARK_K8S_QPS). Default 100, as the KubeRay "
             "operator's --qps."),
    k8s_burst: Optional[int] = typer.Option(
        None, "--k8s-burst", min=1, envvar="RLARK_K8S_BURST", metavar="N",
        help="kubernetes: up to N API requests at once after a quiet spell (also "
             "$RLARK_K8S_BURST). Default 200, as the KubeRay operator's --burst."),
    max_jobs_per_project: int = typer.Option(
        500, "--max-jobs-per-project", min=1, max=1_000_000, envvar="RLARK_MAX_JOBS_PER_PROJECT",
        help="Quota: Jobs a project may keep (`rlark project set-quota` sets a project's own)."),
    max_active_workers_per_project: int = typer.Option(
        256, "--max-active-workers-per-project", min=1, max=1_000_000,
        envvar="RLARK_MAX_ACTIVE_WORKERS_PER_PROJECT",
        help="Quota: Workers the active Runs of a project may hold at once."),
    log_level: str = typer.Option(
        "info", "--log-level", envvar="RLARK_LOG_LEVEL", metavar="|".join(LOG_LEVELS),
        help="The least severe log lines the server writes (RLark's own and the web server's)."),
    metrics_address: Optional[str] = typer.Option(
        None, "--metrics-address", envvar="RLARK_METRICS_ADDRESS", metavar="HOST:PORT",
        help="Also serve GET /metrics (Prometheus) on this address, a listener of its own with "
             "the same authentication (a site administrator's token) and TLS; e.g. the Pod's "
             "address for the cluster's Prometheus while the API stays behind its proxy. "
             "/metrics stays on the API's address too. docs/security.md."),
    access_log: bool = typer.Option(
        False, "--access-log/--no-access-log", envvar="RLARK_ACCESS_LOG",
        help="Also log one line per HTTP request (the web server's access log). Default off: "
             "the log keeps what RLark itself has to say (the audit log, `rlark audit`, records "
             "who changed what)."),
) -> None:
    """Run the RLark server: REST API (OpenAPI at /docs), web console and the controller.

    State (database and Worker logs) lives in $RLARK_HOME (default ~/.rlark); one server per
    store. Ctrl-C stops the server; active Runs keep running and the next `rlark server` on the
    same store adopts them (--stop-runs-on-exit stops them instead). With --runtime kubernetes the
    server uses the in-cluster ServiceAccount or your kubeconfig, and replicas elect a leader
    (--leader-elect; GET /api/v1/server says who leads); docs/kubernetes.md.

    \b
    Every request is authenticated (docs/security.md). On its first start the server creates
    the site administrator "admin" and writes its API token to $RLARK_HOME/credentials (mode
    0600), where `rlark` on this machine finds it; set RLARK_ADMIN_TOKEN to choose the token.
    Then: `rlark user create alice --project default --role member --token` for each person.
    """
    from rlark.server import serve

    from sqlalchemy.exc import SQLAlchemyError

    from rlark.services.quotas import Quotas

    from rlark.store.lock import StoreBusy

    from rlark.runtimes import RUNTIMES

    if runtime not in RUNTIMES:
        _fail(f"--runtime {runtime!r} is not supported; use {' or '.join(RUNTIMES)}")
    if log_level.lower() not in LOG_LEVELS:
        _fail(f"--log-level {log_level!r} is not a level; use {', '.join(LOG_LEVELS)}")
    # these settings are read where they are used, from the environment, as their envvars are
    for var, given in (("RLARK_WORKER_ENV", worker_env), ("RLARK_CONFIG_ROOTS", config_root),
                       ("RLARK_K8S_HOST_PATH_PREFIXES", k8s_host_path_prefix),
                       ("RLARK_K8S_SERVICE_ACCOUNTS", k8s_service_account),
                       ("RLARK_WORKER_READ_PATHS", worker_read_path),
                       ("RLARK_K8S_CSI_DRIVERS", k8s_csi_driver),
                       ("RLARK_K8S_STORAGE_CLASSES", k8s_storage_class),
                       ("RLARK_K8S_TOLERATIONS", k8s_toleration),
                       ("RLARK_K8S_PRIORITY_CLASSES", k8s_priority_class)):
        if given:
            os.environ[var] = ",".join(settings.csv_env(var) + list(given))
    if k8s_allow_root:
        os.environ["RLARK_K8S_ALLOW_ROOT"] = "1"
    if k8s_queue:
        os.environ["RLARK_K8S_QUEUE"] = k8s_queue
    if k8s_qps is not None:
        os.environ["RLARK_K8S_QPS"] = repr(k8s_qps)
    if k8s_burst is not None:
        os.environ["RLARK_K8S_BURST"] = str(k8s_burst)
    if allow_unauthenticated_ray:
        os.environ["RLARK_ALLOW_UNAUTHENTICATED_RAY"] = "1"
    if worker_identity:
        os.environ["RLARK_WORKER_IDENTITY"] = worker_identity
    if secret_key_file is not None:
        os.environ["RLARK_SECRET_KEY_FILE"] = str(secret_key_file)
    try:
        serve(host, port, database_url, runtime=runtime, namespace=namespace, auth=not no_auth,
              allowed_hosts=tuple(allowed_host or ()), cors_origins=tuple(cors_origin or ()),
              tls_cert=str(tls_cert) if tls_cert else None, tls_key=str(tls_key) if tls_key else None,
              stop_runs_on_exit=stop_runs_on_exit, leader_elect=leader_elect,
              trusted_proxies=tuple(trusted_proxy or ()), worker_isolation=worker_isolation,
              quota_defaults=Quotas(max_jobs=max_jobs_per_project,
                                    max_active_workers=max_active_workers_per_project),
              log_level=log_level.lower(), access_log=access_log,
              metrics_address=metrics_address)
    except (ValueError, StoreBusy) as exc:
        _fail(str(exc))
    except (SQLAlchemyError, OSError) as exc:
        url = database_url or os.environ.get("RLARK_DATABASE_URL") or "sqlite under $RLARK_HOME"
        _fail(f"cannot open the database {settings.redact_url(url)!r}: "
              f"{settings.redact_url(str(exc).splitlines()[0], url)}. Check RLARK_DATABASE_URL / "
              "--database-url (PostgreSQL: postgresql://user:pass@host:port/db)")
