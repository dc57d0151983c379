"""Where RLark keeps its state and how clients find the server (environment variables)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_PORT = 8470  # below 32768, the start of the ephemeral port range
DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"


def rlark_home() -> Path:
    """``$RLARK_HOME`` (default ``~/.rlark``), created on first use.

    Raises:
        ValueError: it exists and is not a directory, or cannot be created.
    """
    home = Path(os.environ.get("RLARK_HOME") or Path.home() / ".rlark").expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)  # database, logs and tokens
    except OSError as exc:
        raise ValueError(
            f"RLARK_HOME={str(home)!r} cannot be RLark's state directory ({exc.strerror}); "
            "point RLARK_HOME at a directory you can write"
        ) from None
    return home


def database_url() -> str:
    """``$RLARK_DATABASE_URL``, else SQLite at ``$RLARK_HOME/rlark.db``.

    PostgreSQL: ``postgresql+psycopg://user:pass@host:port/db`` (a plain ``postgresql://`` URL is
    taken to mean the psycopg 3 driver).
    """
    url = os.environ.get("RLARK_DATABASE_URL", "").strip()
    if not url:
        return f"sqlite:///{rlark_home() / 'rlark.db'}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def redact_url(text: str, url: str | None = None) -> str:
    """``text`` with the password of a database URL replaced by ``***`` (``url``: the URL whose
    password to hide inside ``text``; default: ``text`` is the URL)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url or text)
    except (ArgumentError, ValueError):
        return text
    if not parsed.password:
        return text
    return text.replace(str(parsed.password), "***") if url else parsed.render_as_string(hide_password=True)


def logs_dir() -> Path:
    """Worker log files: ``$RLARK_HOME/logs/<project>/<job>/<run number>/<worker>.log``."""
    path = rlark_home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def job_logs_dir(project: str, job: str) -> Path:
    """A Job's Worker logs: ``$RLARK_HOME/logs/<project>/<job>`` (one directory per Run below)."""
    return logs_dir() / project / job


def server_url(explicit: str | None = None) -> str:
    """The REST API base URL: ``--server``, else ``$RLARK_SERVER``, else the local default."""
    url = explicit or os.environ.get("RLARK_SERVER") or DEFAULT_SERVER
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


#: <root>/<run uid>-<rank>/session_<date>_<time>_<pid>/sockets/plasma_store must fit in 107 bytes
MAX_RAY_TMP_LENGTH = 30


def ray_tmp_root() -> str:
    """Parent of the Workers' Ray ``--temp-dir`` (one ``<run uid>-<rank>`` directory per Worker,
    removed when it ends unless ``RLARK_KEEP_RAY_TEMP=1``).

    The rule: ``$RLARK_RAY_TMP`` when set; else ``$RLARK_HOME/ray`` when that path has at most
    :data:`MAX_RAY_TMP_LENGTH` characters (``/root/.rlark/ray``, ``/home/alice/.rlark/ray``);
    else ``/tmp/rlark-ray-<uid>`` (this user's). Ray puts Unix sockets below it and a socket
    path may not pass 107 bytes, hence the limit.

    Raises:
        ValueError: ``RLARK_RAY_TMP`` is longer than :data:`MAX_RAY_TMP_LENGTH` characters.
    """
    root = os.environ.get("RLARK_RAY_TMP")
    if root:
        if len(root) > MAX_RAY_TMP_LENGTH:
            raise ValueError(
                f"RLARK_RAY_TMP={root!r} is {len(root)} characters; Ray's socket paths below it "
                f"would pass the 107-byte limit of Unix sockets. Use a path of at most "
                f"{MAX_RAY_TMP_LENGTH} characters, e.g. /tmp/rlark-ray, or unset it"
            )
        return root
    in_home = str(rlark_home() / "ray")
    if len(in_home) <= MAX_RAY_TMP_LENGTH:
        return in_home
    return f"/tmp/rlark-ray-{os.geteuid()}"


def lock_dir() -> str:
    """Where local Workers' host-wide reservations (loopback addresses, port blocks) are held as
    ``flock`` files: ``$RLARK_LOCK_DIR``, default ``/tmp/rlark-locks``. Not under
    ``$RLARK_HOME`` on purpose: every RLark server on this machine, whatever its home or user,
    must see the same reservations, or two servers give one port block to two Workers."""
    return os.environ.get("RLARK_LOCK_DIR") or "/tmp/rlark-locks"


def max_starting_nodes() -> int:
    """Local runtime: how many Ray nodes may be starting at once (``ray start`` takes about a
    core for seconds; too many at once time out): ``$RLARK_MAX_STARTING_NODES``, default the
    number of CPU cores (at least 2). A Run with more Workers than this starts when no other
    Ray node is starting.

    Raises:
        ValueError: not a whole number of at least 1.
    """
    return positive_int_env("RLARK_MAX_STARTING_NODES", max(2, os.cpu_count() or 1))


def local_devices() -> dict[str, float]:
    """Local runtime: how many of each named device (``resources.devices``) this machine has,
    for admitting Runs: ``$RLARK_LOCAL_DEVICES`` as JSON, e.g. ``{"rdma/hca": 2}``. A device not
    named here is not limited (the local runtime cannot count devices by itself).

    Raises:
        ValueError: not a JSON object of non-negative numbers.
    """
    import json

    raw = os.environ.get("RLARK_LOCAL_DEVICES", "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
        if not isinstance(value, dict) or not all(
                isinstance(v, (int, float)) and v >= 0 for v in value.values()):
            raise ValueError
    except ValueError:
        raise ValueError(f"RLARK_LOCAL_DEVICES={raw!r} is not a JSON object of device name -> "
                         'count, e.g. {"rdma/hca": 2}') from None
    return {str(k): float(v) for k, v in value.items()}


def keep_ray_temp() -> bool:
    """``RLARK_KEEP_RAY_TEMP=1`` keeps each Worker's Ray temp dir (Ray's own logs) after it ends."""
    return os.environ.get("RLARK_KEEP_RAY_TEMP", "") == "1"


def stop_runs_on_exit() -> bool:
    """``RLARK_STOP_RUNS_ON_EXIT=1`` (``rlark server --stop-runs-on-exit``): a server that shuts
    down stops every active Run (reason ``ServerShutdown``). Default: the Runs keep running and
    the next server on the same store adopts them.

    Raises:
        ValueError: set to something other than 0/1/true/false.
    """
    raw = os.environ.get("RLARK_STOP_RUNS_ON_EXIT", "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ValueError(f"RLARK_STOP_RUNS_ON_EXIT={raw!r} is not a boolean; use 1 or 0")


def worker_env() -> list[str]:
    """Local runtime: names of the server's environment variables every Worker also gets, beyond
    the fixed allow-list (:data:`rlark.runtimes.local.runtime.WORKER_ENV_NAMES`):
    ``$RLARK_WORKER_ENV``, comma-separated (``rlark server --worker-env NAME`` adds to it).

    Raises:
        ValueError: a name is not an environment variable name, or is one RLark sets itself.
    """
    import re

    names = csv_env("RLARK_WORKER_ENV")
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"RLARK_WORKER_ENV / --worker-env: {name!r} is not an environment "
                             "variable name")
        if name.startswith("RLARK_") or name in ("RAY_ADDRESS", "RLINF_NODE_RANK"):
            raise ValueError(f"RLARK_WORKER_ENV / --worker-env: {name} is set by RLark on every "
                             "Worker; it cannot come from the server's environment")
    return names


def config_roots() -> list[str]:
    """Directories the server may read RLinf configs from beyond a local Job's own
    ``spec.workingDir``: ``$RLARK_CONFIG_ROOTS``, comma-separated absolute paths (``rlark server
    --config-root DIR`` adds to it).

    Raises:
        ValueError: a path is not absolute.
    """
    roots = csv_env("RLARK_CONFIG_ROOTS")
    for root in roots:
        if not os.path.isabs(root):
            raise ValueError(f"RLARK_CONFIG_ROOTS / --config-root: {root!r} is not an absolute path")
    return roots


def csv_env(name: str) -> list[str]:
    """A comma-separated environment variable as a list (blank items dropped)."""
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def positive_float_env(name: str, default: float) -> float:
    """A positive number from the environment (``default`` when unset).

    Raises:
        ValueError: set, but not a positive number.
    """
    return seconds_env(name, default, unit="")


def positive_int_env(name: str, default: int) -> int:
    """A whole number of at least 1 from the environment (``default`` when unset).

    Raises:
        ValueError: set, but not such a number.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name}={raw!r} is not a whole number of at least 1")
    return value


def seconds_env(name: str, default: float, unit: str = " of seconds") -> float:
    """A positive number (of seconds) from the environment (``default`` when unset).

    Raises:
        ValueError: set, but not a positive number.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"{name}={raw!r} is not a positive number{unit}")
    return value


def worker_read_paths() -> list[str]:
    """Local runtime: directories under which a path other users of this machine cannot read
    may still be given to Workers that run under their own uid (their ``workingDir``, their
    Python): ``rlark server --worker-read-path DIR`` / ``$RLARK_WORKER_READ_PATHS``
    (comma-separated absolute paths; :mod:`rlark.runtimes.local.sandbox`).

    Raises:
        ValueError: a path that is not absolute, or that is ``/``.
    """
    out = []
    for raw in csv_env("RLARK_WORKER_READ_PATHS"):
        if not raw.startswith("/") or os.path.normpath(raw) == "/":
            raise ValueError(f"RLARK_WORKER_READ_PATHS: {raw!r} is not an absolute directory "
                             "below /")
        out.append(os.path.normpath(raw))
    return out


def allow_unauthenticated_ray() -> bool:
    """``RLARK_ALLOW_UNAUTHENTICATED_RAY=1`` (``rlark server --allow-unauthenticated-ray``): a
    Worker whose Ray is older than 2.52 (no token authentication) may run without it, which its
    record says; by default such a Job is refused (at preflight where the Ray version can be
    read, else when the Worker starts).

    Raises:
        ValueError: not a boolean.
    """
    return bool_env("RLARK_ALLOW_UNAUTHENTICATED_RAY")


def cgroup_parent() -> str | None:
    """Local runtime, isolation ``cgroup``: the cgroup directory Workers' cgroups are made in,
    ``$RLARK_CGROUP_PARENT`` (e.g. ``/sys/fs/cgroup/rlark``); default ``rlark-workers`` below the
    server's own cgroup (cgroup v2, else the v1 freezer hierarchy).

    Raises:
        ValueError: not an absolute path.
    """
    raw = os.environ.get("RLARK_CGROUP_PARENT", "").strip()
    if not raw:
        return None
    if not raw.startswith("/"):
        raise ValueError(f"RLARK_CGROUP_PARENT={raw!r} is not an absolute path of a cgroup "
                         "directory, e.g. /sys/fs/cgroup/rlark")
    return raw


def bool_env(name: str) -> bool:
    """``1``/``true``/``yes`` or ``0``/``false``/``no`` (unset: False) from the environment.

    Raises:
        ValueError: another value.
    """
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ValueError(f"{name}={raw!r} is not a boolean; use 1 or 0")


def object_storage_allow_networks() -> list[str]:
    """Networks an ``objectStorage`` mount's S3 endpoint may lie in although they are not
    public, for the server to read a Run's outputs back from the bucket after it
    (:mod:`rlark.record.outputs`): ``$RLARK_OBJECT_STORAGE_ALLOW_NETWORKS``, comma-separated
    CIDRs (``10.20.0.0/16``, ``127.0.0.1/32``). Default none: an endpoint whose host is, or
    resolves to, a loopback, private, link-local (cloud metadata), shared, multicast or reserved
    address is not read from by the server (the Workers' own copies are not affected), so a
    Job cannot make the server call its own network.

    Raises:
        ValueError: an item is not a network.
    """
    return _networks("RLARK_OBJECT_STORAGE_ALLOW_NETWORKS")


def webhook_allow_networks() -> list[str]:
    """Networks webhook URLs may point into although they are not public:
    ``$RLARK_WEBHOOK_ALLOW_NETWORKS``, comma-separated CIDRs (``10.20.0.0/16``, ``127.0.0.1/32``,
    ``fd00::/8``). Default none: a webhook whose host is, or resolves to, a loopback, private,
    link-local (cloud metadata, 169.254.169.254), shared, multicast or reserved address is
    refused, so a project admin cannot make the server call its own network
    (:mod:`rlark.services.notifications`).

    Raises:
        ValueError: an item is not a network.
    """
    return _networks("RLARK_WEBHOOK_ALLOW_NETWORKS")


def _networks(var: str) -> list[str]:
    """``$var`` as comma-separated CIDRs, each normalised (``10.20.0.5/16`` -> ``10.20.0.0/16``).

    Raises:
        ValueError: an item is not a network (the variable, the item, the form to write).
    """
    import ipaddress

    out = []
    for raw in csv_env(var):
        try:
            out.append(str(ipaddress.ip_network(raw, strict=False)))
        except ValueError:
            raise ValueError(f"{var}: {raw!r} is not a network; write CIDRs such as "
                             "10.20.0.0/16 or 127.0.0.1/32, comma-separated") from None
    return out
