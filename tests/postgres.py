"""A throwaway PostgreSQL server for tests: Debian's binaries, a temp dir, a loopback port.

Started by the fixture that needs it and stopped at the end (``pg_ctl stop``). As root,
the server runs as the ``postgres`` system user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tuner.net import free_port


def pg_bin() -> Path | None:
    """Debian's PostgreSQL server binaries (the newest installed major version)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class PgUrl(str):
    """The database's URL, with the server's ``stop()`` and ``start()`` (a restart test)."""

    def __new__(cls, url: str, ctl: list[str]) -> PgUrl:
        obj = super().__new__(cls, url)
        obj.ctl = ctl
        return obj

    @property
    def log_path(self) -> Path:
        """The server's log (``pg_ctl -l``): connections refused, statements that failed."""
        return Path(self.ctl[self.ctl.index("-l") + 1])

    def stop(self) -> None:
        subprocess.run([*self.ctl, "-m", "fast", "-w", "stop"], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        subprocess.run([*self.ctl, "-w", "start"], check=True, capture_output=True, timeout=120)


@contextlib.contextmanager
def postgres_server(password: str | None = None) -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh database on a private server (a :class:`PgUrl`).

    ``password``: TCP connections must authenticate with it (scram-sha-256), and the URL
    carries it; without, the server trusts every connection."""
    bindir = pg_bin()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries not found (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    prefix: list[str] = ["runuser", "-u", "postgres", "--"] if as_root else []
    base = Path(tempfile.mkdtemp(prefix="tuner-pg-", dir="/tmp"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if as_root:
        pw = pwd.getpwnam("postgres")
        os.chmod(base, 0o755)
        for path in (base, sock):
            os.chown(path, pw.pw_uid, pw.pw_gid)
    port = free_port()
    run: dict = dict(check=True, capture_output=True, timeout=120)
    auth = ["--auth=trust"]
    if password is not None:
        pwfile = base / "pwfile"
        pwfile.write_text(password + "\n")
        if as_root:
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                *auth,
                "-E",
                "UTF8",
                "--no-sync",
            ],
            **run,
        )
        subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(base / "server.log"),
                "-w",
                "-o",
                f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
                "start",
            ],
            **run,
        )
        try:
            subprocess.run(
                [
                    *prefix,
                    str(bindir / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-U",
                    "postgres",
                    "tuner",
                ],
                env=dict(os.environ, PGPASSWORD=password or ""),
                **run,
            )
            options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
            ctl = [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(base / "server.log"),
                "-o",
                options,
            ]
            user = "postgres" if password is None else f"postgres:{password}"
            yield PgUrl(f"postgresql+psycopg://{user}@127.0.0.1:{port}/tuner", ctl)
        finally:
            subprocess.run(
                [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=120,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
