"""A PostgreSQL server for tests.

``RLARK_TEST_POSTGRES_URL`` (any ``postgresql://`` / ``postgresql+psycopg://`` URL of a role that
may ``CREATE DATABASE``) selects an existing server. Otherwise a throwaway PostgreSQL cluster is
made with the machine's own binaries (``initdb`` / ``pg_ctl``, e.g. from Debian's ``postgresql``
package under ``/usr/lib/postgresql/<version>/bin``): its own data and socket directories under
``/tmp`` and its own port, so several pytest processes on one machine never share a cluster.
``initdb`` refuses to run as root, so as root the cluster runs as the ``postgres`` OS user.

Every :meth:`PostgresServer.create_database` call returns the URL of a new, empty database.
"""

from __future__ import annotations

import atexit
import glob
import os
import random
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

ENV_URL = "RLARK_TEST_POSTGRES_URL"
PORTS = range(15432, 16000)  # below 32768, the start of the ephemeral port range
INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found; install them with "
    "`apt-get install postgresql` (Debian/Ubuntu), put their directory on PATH, or set "
    f"{ENV_URL}=postgresql://user:password@host:port/postgres to use an existing server"
)


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH first, then the newest
    ``/usr/lib/postgresql/<version>/bin``, then ``/usr/local/pgsql/bin``."""
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).parent / "pg_ctl").exists():
        return Path(initdb).parent

    def version(path: str) -> tuple:
        part = Path(path).parent.name
        return tuple(int(x) for x in part.split(".") if x.isdigit())

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version, reverse=True)
    candidates += glob.glob("/usr/local/pgsql/bin/initdb")
    for initdb in candidates:
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _libpq_url(sqlalchemy_url: str) -> str:
    """``postgresql+psycopg://...`` -> ``postgresql://...`` (what psycopg.connect takes)."""
    scheme, rest = sqlalchemy_url.split("://", 1)
    if not scheme.startswith("postgres"):
        raise ValueError(f"{ENV_URL} must be a postgresql:// URL, got {sqlalchemy_url!r}")
    return "postgresql://" + rest


class PostgresServer:
    """One PostgreSQL server: an external one (``RLARK_TEST_POSTGRES_URL``) or a throwaway
    cluster this object started and will stop."""

    def __init__(self, admin_url: str, base_dir: Path | None = None, bindir: Path | None = None,
                 run_as: str | None = None):
        #: libpq URL of the maintenance database, used to create (and drop) test databases
        self.admin_url = _libpq_url(admin_url)
        self.base_dir = base_dir
        self.bindir = bindir
        self.run_as = run_as
        self.created: list[str] = []
        self._stopped = False
        #: ``postgres`` options of a local cluster (port, socket directory), to start it again
        self.options = ""

    # --- start ---------------------------------------------------------------------------------

    @classmethod
    def start_with_password_or_skip(cls, password: str) -> "PostgresServer":
        """A new local cluster whose TCP connections need a password (SCRAM): ``postgres``'s is
        ``password``. For tests of what a wrong password makes RLark print; ``pytest.skip``
        as :meth:`start_or_skip` when no local cluster can be made."""
        bindir = find_bindir()
        if bindir is None:
            pytest.skip(INSTALL_HINT)
        run_as = "postgres" if os.geteuid() == 0 else None
        return cls._start_local(bindir, run_as, password=password)

    @classmethod
    def start_local_or_skip(cls) -> "PostgresServer":
        """A new local cluster of this test's own, even when ``RLARK_TEST_POSTGRES_URL`` names
        a server (a test that stops and starts PostgreSQL must not do it to a shared one);
        ``pytest.skip`` as :meth:`start_or_skip` when none can be made."""
        bindir = find_bindir()
        if bindir is None:
            pytest.skip(INSTALL_HINT)
        run_as = "postgres" if os.geteuid() == 0 else None
        return cls._start_local(bindir, run_as)

    @classmethod
    def start_or_skip(cls) -> "PostgresServer":
        """The external server of ``RLARK_TEST_POSTGRES_URL``, else a new local cluster;
        ``pytest.skip`` when neither is possible (no binaries, no ``postgres`` user as root)."""
        url = os.environ.get(ENV_URL, "").strip()
        if url:
            server = cls(url)
            try:
                server._connect().close()
            except Exception as exc:  # noqa: BLE001 - report any connection problem as a failure
                pytest.fail(f"{ENV_URL}={url!r}: cannot connect: {exc}")
            return server
        bindir = find_bindir()
        if bindir is None:
            pytest.skip(INSTALL_HINT)
        run_as = None
        if os.geteuid() == 0:
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip(
                    "running as root and there is no `postgres` OS user to run initdb as "
                    "(initdb refuses root); `apt-get install postgresql` creates it"
                )
            run_as = "postgres"
        return cls._start_local(bindir, run_as)

    @classmethod
    def _start_local(cls, bindir: Path, run_as: str | None,
                     password: str | None = None) -> "PostgresServer":
        base = Path(tempfile.mkdtemp(prefix="rlark-pg-", dir="/tmp"))  # short: socket paths
        data, sock, log = base / "data", base / "sock", base / "server.log"
        sock.mkdir()
        if run_as:
            shutil.chown(base, run_as, run_as)
            shutil.chown(sock, run_as, run_as)
        server = cls("postgresql://placeholder", base, bindir, run_as)
        try:
            auth = ["-A", "trust"]
            if password is not None:
                (base / "pw").write_text(password + "\n")
                if run_as:
                    shutil.chown(base / "pw", run_as, run_as)
                auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={base / 'pw'}"]
            server._pg("initdb", "-D", str(data), *auth, "-U", "postgres",
                       "-E", "UTF8", "--locale=C", "--no-sync")
            ports = list(PORTS)
            random.shuffle(ports)  # parallel pytest processes rarely try the same port first
            tried = 0
            for port in ports:
                if not _port_is_free(port):
                    continue
                tried += 1
                opts = (f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off "
                        "-c synchronous_commit=off -c full_page_writes=off")
                proc = server._pg("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60",
                                  "-o", opts, "start", check=False)
                if proc.returncode == 0:
                    server.options = opts
                    who = f"postgres:{password}" if password is not None else "postgres"
                    server.admin_url = f"postgresql://{who}@127.0.0.1:{port}/postgres"
                    server.port = port
                    atexit.register(server.stop)
                    return server
                text = log.read_text(errors="replace") if log.exists() else ""
                # another process took the port between our check and the start: try the next
                bind_error = "could not bind" in text or "already in use" in text
                if not bind_error or tried >= 20:
                    raise RuntimeError(
                        f"pg_ctl start failed (exit {proc.returncode}): {proc.stdout}{proc.stderr}"
                        f"\n--- {log} ---\n{text[-3000:]}"
                    )
                log.unlink(missing_ok=True)
            raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")
        except BaseException:
            server._remove_dirs()
            raise

    def _pg(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bindir / program), *args]
        if self.run_as:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        proc = subprocess.run(cmd, cwd=self.base_dir, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}")
        return proc

    # --- outages -------------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop the local cluster as an outage would (``pg_ctl stop -m fast``: every session
        ends, new connections are refused), keeping its data, port and directories for
        :meth:`resume`."""
        assert self.base_dir is not None, "an outage needs a cluster of the test's own"
        self._pg("pg_ctl", "-D", str(self.base_dir / "data"), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the cluster :meth:`pause` stopped again, on the same port (``-w``: returns once
        it accepts connections)."""
        assert self.base_dir is not None
        self._pg("pg_ctl", "-D", str(self.base_dir / "data"), "-l", str(self.base_dir / "server.log"),
                 "-w", "-t", "60", "-o", self.options, "start")

    # --- databases -----------------------------------------------------------------------------

    def _connect(self):
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10)

    def create_database(self) -> str:
        """Create a new empty database; returns its SQLAlchemy URL (``postgresql+psycopg://``)."""
        from psycopg import sql
        from sqlalchemy.engine import make_url

        name = f"rlark_test_{uuid.uuid4().hex}"
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        url = make_url(self.admin_url).set(drivername="postgresql+psycopg", database=name)
        return url.render_as_string(hide_password=False)

    # --- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the local cluster and remove its directories; on an external server, drop the
        databases this object created. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        if self.base_dir is None:
            from psycopg import sql

            try:
                with self._connect() as conn:
                    for name in self.created:
                        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                                     .format(sql.Identifier(name)))
            except Exception:  # noqa: BLE001 - best effort cleanup of an external server
                pass
            return
        try:
            self._pg("pg_ctl", "-D", str(self.base_dir / "data"), "-m", "immediate", "-w",
                     "stop", check=False)
        finally:
            self._remove_dirs()

    def _remove_dirs(self) -> None:
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
