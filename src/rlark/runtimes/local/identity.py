"""Who a local Worker runs as: a uid of its Run's own, or (where this server cannot give one)
the server's own user.

``uid`` (the default where possible)
    Each Run's Workers run under a uid (and gid of the same number) taken from a range the
    server owns, ``RLARK_WORKER_UIDS`` (default :data:`DEFAULT_RANGE`, above the ranges systemd
    hands out: systemd.io/UIDS-GIDS lists 0x00080000-0x6FFFFFFF for containers, and 2^31 and up
    as unusable), one no other live Run of any RLark server on this machine holds (a host-wide
    reservation, like ports). No such user exists in ``/etc/passwd``, so no file on the machine
    belongs to it: the Worker reads what others may read, and writes only its own directories
    (:mod:`rlark.runtimes.local.sandbox`). Needs root (CAP_SETUID, CAP_SETGID) and the
    ``pid-namespace`` isolation (CAP_SYS_ADMIN: the Worker's mount namespace is built there).
    Why a range of uids and not a user namespace: switching to a plain unprivileged uid takes
    nothing from the kernel beyond what every Linux has, leaves the Worker no capability at all
    (in a user namespace it would be root of its own namespace, with a larger kernel surface),
    and needs no ``newuidmap``/``/etc/subuid`` set-up.
``server-user``
    Workers run as the server's own user and can read what it can (its credentials, secret
    key, database, other Runs' logs). Only a single-user server on loopback may run Jobs so:
    a server that serves more than one user refuses to (``IdentityUnavailable``), and one that
    may says so loudly at start and in every submission's Findings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: the default uid range of Workers (inclusive): 0x70000000 and the 65535 uids after it
DEFAULT_RANGE = (0x70000000, 0x70000000 + 65535)
MODES = ("auto", "uid", "server-user")


@dataclass(frozen=True)
class UidRange:
    """An inclusive range of uids for Workers."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> "UidRange":
        """``"A-B"`` (inclusive, ``1000 <= A <= B < 2**31``).

        Raises:
            ValueError: the text is not such a range (the message says what is wrong).
        """
        a, sep, b = text.strip().partition("-")
        try:
            first, last = int(a), int(b)
        except ValueError:
            raise ValueError(f"RLARK_WORKER_UIDS={text!r} is not a range FIRST-LAST, e.g. "
                             f"{DEFAULT_RANGE[0]}-{DEFAULT_RANGE[1]}") from None
        if not sep or not 1000 <= first <= last < 2 ** 31:
            raise ValueError(f"RLARK_WORKER_UIDS={text!r}: need 1000 <= FIRST <= LAST < 2^31 (uids "
                             "below 1000 are the system's; 2^31 and above break 32-bit tools)")
        return cls(first, last)

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last


def candidates(run_uid: str, rng: UidRange, taken: frozenset[int] | set[int]):
    """The uids a Run may take, in the order to try them (pure): every uid of ``rng`` not in
    ``taken``, starting at one picked from the Run's uid (a hex id), so consecutive Runs spread
    over the range and a uid is reused as late as possible."""
    try:
        start = int(run_uid, 16) % rng.size
    except ValueError:
        start = sum(run_uid.encode()) % rng.size
    for i in range(rng.size):
        uid = rng.first + (start + i) % rng.size
        if uid not in taken:
            yield uid


@dataclass(frozen=True)
class Identity:
    """What identity this server gives its local Workers, as found at its start.

    ``mode``: ``uid`` or ``server-user``; ``requested``: ``auto`` or the mode asked for;
    ``why``: why ``uid`` is not in use (empty when it is); ``uids``: the range."""

    mode: str
    requested: str = "auto"
    why: str = ""
    uids: UidRange = UidRange(*DEFAULT_RANGE)

    @property
    def own_uid(self) -> bool:
        return self.mode == "uid"

    def view(self) -> dict:
        """JSON-ready, for ``/api/v1/nodes`` and the server log."""
        return {"mode": self.mode, "requested": self.requested, "why": self.why or None,
                "uids": f"{self.uids.first}-{self.uids.last}" if self.own_uid else None}

    def summary(self) -> str:
        """One line for the server log."""
        if self.own_uid:
            return (f"Worker identity: a uid of each Run's own from {self.uids.first}-"
                    f"{self.uids.last}, with a mount namespace that hides the server's files")
        return (f"Worker identity: the server's own user (uid {os.geteuid()}): a run script can "
                f"read this server's credentials, secret key and database ({self.why})")


def choose(requested: str, *, root: bool, pid_namespace: bool, rng: UidRange) -> Identity:
    """The identity to use (pure): ``uid`` when asked or ``auto`` and this server is root with
    PID namespaces; ``server-user`` when asked or nothing better is possible.

    Raises:
        ValueError: ``requested`` is unknown, or is ``uid`` where it cannot be given.
    """
    if requested not in MODES:
        raise ValueError(f"--worker-identity {requested!r} is not one of {', '.join(MODES)}")
    why = ""
    if not root:
        why = "the server is not root, so it cannot switch a Worker to another uid"
    elif not pid_namespace:
        why = ("the server cannot make PID and mount namespaces (no CAP_SYS_ADMIN), where a "
               "Worker's view of the files is built")
    if requested == "server-user":
        return Identity("server-user", requested, why or "asked for (--worker-identity server-user)",
                        rng)
    if why:
        if requested == "uid":
            raise ValueError(f"--worker-identity uid is not available here: {why}; run the "
                             "server as root, or use --worker-identity auto")
        return Identity("server-user", requested, why, rng)
    return Identity("uid", requested, "", rng)


def many_users_message(why: str) -> str:
    """Why a server that serves more than one user refuses local Jobs when its Workers would run
    as itself (``why``: what makes it a shared server)."""
    return (f"this server serves more than one user ({why}) and cannot run a Worker under an "
            "identity of its own, so a run script could read the server's credentials and every "
            "Run's files; it refuses Jobs on the local runtime. Run the server as root (each "
            "Run's Workers then get their own uid), or serve one user on loopback only")
