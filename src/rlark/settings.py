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
        home.mkdir(parents=True, exist_ok=True)
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
    """Parent of the Workers' Ray ``--temp-dir`` (``$RLARK_RAY_TMP``, default ``/tmp/rlark-ray``).

    Kept short on purpose: Ray puts Unix sockets below it and socket paths are limited to 107
    bytes.
    """
    root = os.environ.get("RLARK_RAY_TMP") or "/tmp/rlark-ray"
    if len(root) > MAX_RAY_TMP_LENGTH:
        raise ValueError(
            f"RLARK_RAY_TMP={root!r} is {len(root)} characters; Ray's socket paths below it would "
            f"pass the 107-byte limit of Unix sockets. Use a path of at most "
            f"{MAX_RAY_TMP_LENGTH} characters, e.g. /tmp/rlark-ray"
        )
    return root


def keep_ray_temp() -> bool:
    """``RLARK_KEEP_RAY_TEMP=1`` keeps each Worker's Ray temp dir (Ray's own logs) after it ends."""
    return os.environ.get("RLARK_KEEP_RAY_TEMP", "") == "1"


def csv_env(name: str) -> list[str]:
    """A comma-separated environment variable as a list (blank items dropped)."""
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def positive_float_env(name: str, default: float) -> float:
    """A positive number from the environment (``default`` when unset).

    Raises:
        ValueError: set, but not a positive number.
    """
    return _seconds(name, default, unit="")


def _seconds(name: str, default: float, unit: str = " of seconds") -> float:
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


def k8s_status_policy():
    """Kubernetes runtime: how long Kubernetes may retry before RLark names a failure.

    ``RLARK_K8S_PENDING_TIMEOUT`` (default 300 s; a Pod still unscheduled then fails the Run as
    ``Unschedulable``; capped per Job at 0.9 x its joinTimeoutSeconds), ``RLARK_K8S_IMAGE_PULL_GRACE``
    (30 s of ErrImagePull/ImagePullBackOff before ``ImagePull``), ``RLARK_K8S_MOUNT_GRACE`` (60 s
    of FailedMount before ``MountFailed``).

    Raises:
        ValueError: a value is not a positive number.
    """
    from rlark.runtimes.kubernetes.status import StatusPolicy

    return StatusPolicy(
        image_pull_grace_seconds=_seconds("RLARK_K8S_IMAGE_PULL_GRACE", 30.0),
        mount_grace_seconds=_seconds("RLARK_K8S_MOUNT_GRACE", 60.0),
        pending_timeout_seconds=_seconds("RLARK_K8S_PENDING_TIMEOUT", 300.0),
    )


def k8s_ray_dashboard() -> bool:
    """``RLARK_K8S_RAY_DASHBOARD=1`` starts Ray's dashboard on each head Pod (port 8265 of the
    head Service; the image needs ``ray[default]``)."""
    return os.environ.get("RLARK_K8S_RAY_DASHBOARD", "") == "1"
