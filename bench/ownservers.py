"""Servers of a test's or benchmark's own, to stop, crash, restore: never the shared ones.

:class:`OwnPostgres`: ``initdb`` in a fresh directory, a free port, trust auth, for runs that
stop, crash or restart the database under a crawl (the shared server on 5432 is never
touched); it runs as the ``postgres`` system user when the tests run as root (the server
refuses root), with ``fsync=off`` (the runs are about outages, not power cuts).
:class:`OwnRedis`: a ``redis-server`` on a free port (no persistence, an append-only file, or
an RDB snapshot to come back from), to pause, kill or restore.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from crawler.backends.redis import connect

REDIS_SERVER = "/usr/bin/redis-server"


class NoServer(RuntimeError):
    """The server binaries are not installed."""

BIN_ROOT = Path("/usr/lib/postgresql")


def pg_bin() -> Path | None:
    """The newest installed server's ``bin`` directory, None without one."""
    versions = sorted(BIN_ROOT.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return versions[-1].parent if versions else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnPostgres:
    """``initdb`` + ``pg_ctl`` on a free port (:meth:`start`, :meth:`stop`, :meth:`crash`)."""

    def __init__(self) -> None:
        binary = pg_bin()
        if binary is None:
            raise NoServer("no PostgreSQL server binaries (initdb) on this machine")
        self.bin = binary
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="ownpg-"))
        self.data = self.root / "data"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C")

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=check)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as a crash, no checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop",
                  check=False)

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def remove(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def wait_until(predicate, timeout: float, poll: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until true or ``timeout`` seconds passed (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return bool(predicate())


class OwnRedis:
    """A ``redis-server`` on a free port: no persistence; with ``aof_dir`` an append-only file
    synced at every write (a kill loses nothing); with ``rdb_dir`` an RDB snapshot kept there
    and no automatic saves (``SAVE`` it, :meth:`stop` it, :meth:`start` it again and it comes
    back as that older snapshot)."""

    def __init__(self, aof_dir: Path | None = None, rdb_dir: Path | None = None) -> None:
        if aof_dir is not None:
            self.persistence = ["--appendonly", "yes", "--appendfsync", "always",
                                "--dir", str(aof_dir)]  # fmt: skip
        else:
            self.persistence = ["--appendonly", "no",
                                *(["--dir", str(rdb_dir)] if rdb_dir is not None else [])]
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *self.persistence], stdout=subprocess.DEVNULL)  # fmt: skip

        def answers() -> bool:
            try:
                connect(self.url).close()
                return True
            except Exception:
                return False

        if not wait_until(answers, 10):
            raise RuntimeError("redis-server did not start")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        """SIGKILL (woken first if it was stopped): nothing is saved on the way out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
