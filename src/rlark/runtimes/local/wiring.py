"""The local runtime opened for ``rlark server``: its isolation probed and said at start, who
its Workers run as said once the store is open, and the RLinf composer jailed as the Workers
would be (:func:`rlark.runtimes.open_runtime`)."""

from __future__ import annotations

import logging
from typing import Callable

from rlark import settings
from rlark.runtimes.base import Opened
from rlark.runtimes.local.identity import Identity
from rlark.runtimes.local.isolation import Isolation
from rlark.runtimes.local.profile import LocalProfile
from rlark.runtimes.local.runtime import LocalRuntime, probed_isolation
from rlark.runtimes.local.settings import worker_isolation as isolation_setting

#: the server's own log: these lines are what the server says at start
log = logging.getLogger("rlark.server")


def log_identity(identity: Identity) -> None:
    """Say at start who local Workers run as (loudly when it is the server's own user)."""
    if identity.own_uid:
        log.info("%s", identity.summary())
        return
    log.warning("!!! WORKERS RUN AS THIS SERVER'S OWN USER (--worker-identity %s)",
                identity.requested)
    log.warning("!!! %s", identity.summary())
    log.warning("!!! a server that serves more than one user refuses local Jobs so (docs/security.md)")


def log_isolation(isolation: Isolation) -> None:
    """Say at start what isolation local Workers get (loudly when it is weak)."""
    if isolation.strong:
        log.info("%s", isolation.summary())
        return
    for line in (f"WEAK WORKER ISOLATION (--worker-isolation {isolation.requested}): a process",
                 "a Worker starts that calls setsid() or drops its environment can outlive the",
                 "Worker and its Run. " + isolation.summary()):
        log.warning("!!! %s", line)


def open_local(worker_isolation: str | None = None) -> Opened:
    """The local runtime of a server: ``worker_isolation`` (default
    :func:`rlark.runtimes.local.settings.worker_isolation`) probed once here and logged.

    Raises:
        ValueError: a setting is unusable (e.g. ``RLARK_RAY_TMP`` too long, an isolation this
            server cannot make when asked for it).
    """
    settings.ray_tmp_root()
    runtime = LocalRuntime(isolation=probed_isolation(worker_isolation or isolation_setting(),
                                                      settings.cgroup_parent()))
    log_isolation(runtime.isolation)

    def started(many_users: Callable[[], str | None]) -> None:
        from rlark.rlinf_config.isolated import set_jail

        runtime.serves_many = many_users
        log_identity(runtime.identity)
        set_jail(runtime.composer_jail)  # the composer reads what the Workers may

    def shutdown(_runtime) -> None:
        """The jail is this process's: it ends with the server that set it (an app built again
        in the same process, as tests do, sets its own)."""
        from rlark.rlinf_config.isolated import set_jail

        set_jail(None)

    profile = LocalProfile(isolation={**runtime.isolation.view(),
                                      "identity": runtime.identity.view()},
                           runtime_checks=runtime.preflight, path_reachable=runtime.path_reachable)
    return Opened(runtime=runtime, profile=profile, started=started, shutdown=shutdown)
