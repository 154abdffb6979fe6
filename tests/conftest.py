"""Shared fixtures: real servers on 127.0.0.1 (the scripted web of the hostile tests among
them), and a crawl run as a subprocess.

``pg_url`` and ``redis_url`` connect to the real PostgreSQL and Redis servers. Outside CI a
missing server skips the test with the reason; with ``CI=true`` it fails, so CI can never go
green by skipping them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_URL = os.environ.get("DEDUP_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("DEDUP_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _port_open(url: str, default_port: int) -> bool:
    parts = urlsplit(url.replace("+psycopg", ""))
    try:
        address = (parts.hostname or "127.0.0.1", parts.port or default_port)
        with socket.create_connection(address, 2):
            return True
    except OSError:
        return False


def _need_service(name: str, url: str, port: int) -> str:
    if not _port_open(url, port):
        message = f"{name} is not reachable at {url}"
        if IN_CI:
            pytest.fail(message + " (CI=true: .ci/run must start it)")
        pytest.skip(message)
    return url


@pytest.fixture(scope="session")
def pg_url() -> str:
    """SQLAlchemy URL of the real PostgreSQL test database."""
    return _need_service("PostgreSQL", PG_URL, 5432)


def fresh_pg_schema(pg_url: str, prefix: str, password: str | None = None) -> Any:
    """Context: a PostgreSQL URL on a fresh schema, dropped afterwards (one helper for tests and
    benchmarks: :func:`bench.cluster.fresh_schema`)."""
    from bench.cluster import fresh_schema

    return fresh_schema(pg_url, prefix, password)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the real Redis server (database 15, reserved for tests)."""
    return _need_service("Redis", REDIS_URL, 6379)


@pytest.fixture
def services(redis_url, pg_url):
    """The real Redis and PostgreSQL, for the harness of :mod:`bench.cluster`."""
    return {"redis_url": redis_url, "pg_url": pg_url}


@pytest.fixture(scope="session")
def demo_server():
    """The built-in demo site served on 127.0.0.1 for the whole session."""
    from crawler.sitegen import demo_site
    from crawler.sitegen.server import SiteServer

    with SiteServer(demo_site()) as server:
        yield server


@pytest.fixture(scope="session")
def scripted_web():
    """One :class:`~crawler.sitegen.scripted.ScriptedWeb` for the session: three sites (ports)
    on 127.0.0.1 whose answers each test scripts; use :func:`scripted` in a test."""
    from crawler.sitegen.scripted import ScriptedWeb

    with ScriptedWeb(sites=3) as web:
        yield web


@pytest.fixture
def scripted(scripted_web):
    """The session's scripted web, its routes, scripts and logs cleared for this test."""
    yield scripted_web.reset()
    scripted_web.reset()


@dataclass
class CrawlRun:
    """What a ``scrapy crawl web`` subprocess left behind."""

    returncode: int
    stdout: str
    stderr: str
    workdir: Path
    db_path: Path
    dropped_log: Path
    stats_path: Path
    stats: dict[str, Any] = field(default_factory=dict)

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with sqlite3.connect(self.db_path) as conn:
            return conn.execute(sql, params).fetchall()

    def stored_urls(self) -> set[str]:
        return {row[0] for row in self.rows("SELECT url FROM documents")}


def python_without(module: str, code: str) -> list[str]:
    """The words ``code`` prints in a fresh interpreter where importing ``module`` (a C
    extension) fails, as in the scrapyd egg, which leaves them out; a failure raises with its
    stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.modules[{module!r}] = None\n{code}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def crawl_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "scrapy", *args]


def _limit_open_files(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def run_crawl(
    workdir: Path,
    urls: list[str] | None = None,
    seeds: Path | None = None,
    settings: dict[str, Any] | None = None,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    open_files: int | None = None,
) -> CrawlRun:
    """Run ``scrapy crawl web`` from the project root with test-friendly settings
    (``open_files``: the crawl process's open-file limit, ``ulimit -n``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    db_path = workdir / "crawl.db"
    dropped = workdir / "dropped.jsonl"
    stats_path = workdir / "stats.json"
    merged: dict[str, Any] = {
        "STORAGE_URL": f"sqlite:///{db_path}",
        "DROPPED_LOG": str(dropped),
        "STATS_FILE": str(stats_path),
        "DOWNLOAD_DELAY": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
        "LOG_LEVEL": "INFO",
        "DEDUP_PROGRESS_INTERVAL": 0,
        "STORAGE_BATCH_SECONDS": 0.5,
    }
    merged.update(settings or {})
    args = ["crawl", "web"]
    if urls:
        args += ["-a", "urls=" + ",".join(urls)]
    if seeds:
        args += ["-a", f"seeds={seeds}"]
    for key, value in merged.items():
        args += ["-s", f"{key}={value}"]
    proc = subprocess.run(
        crawl_command(args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=None if open_files is None else partial(_limit_open_files, open_files),
    )
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    return CrawlRun(proc.returncode, proc.stdout, proc.stderr, workdir, db_path, dropped,
                    stats_path, stats)


@pytest.fixture(scope="session")
def demo_crawl(demo_server, tmp_path_factory) -> CrawlRun:
    """One crawl of the demo site with the project's settings, shared by the whole session."""
    run = run_crawl(tmp_path_factory.mktemp("demo-crawl"), urls=[demo_server.base_url + "/"])
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture
def crawl(tmp_path):
    """``crawl(urls=[...], settings={...})`` runs a crawl into ``tmp_path``."""

    def _run(**kwargs: Any) -> CrawlRun:
        kwargs.setdefault("workdir", tmp_path / "run")
        return run_crawl(**kwargs)

    return _run


@pytest.fixture(autouse=True)
def _scrapy_env_restored():
    """``scrapy.cmdline.execute`` run in-process (command tests) sets ``SCRAPY_SETTINGS_MODULE``
    and friends in ``os.environ`` for good; every later subprocess would inherit this project's
    settings (a ``startproject`` project then ran with the ``web`` spider's settings)."""
    names = ("SCRAPY_SETTINGS_MODULE", "SCRAPY_PROJECT", "SCRAPY_PYTHON_SHELL")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """``cli("dropped", ...)`` -> (exit code, stdout, stderr) of the real command line, run
    in this process through ``scrapy.cmdline.execute`` from the project root."""
    from scrapy.cmdline import execute

    monkeypatch.chdir(ROOT)

    def _run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            execute(["scrapy", *args])
        out = capsys.readouterr()
        return int(exit_info.value.code or 0), out.out, out.err

    return _run


# --- a Redis a test may kill ---------------------------------------------------------------

def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def private_redis(tmp_path):
    """A throw-away redis-server (no persistence) on a free port; the test may kill it."""
    import redis

    binary = shutil.which("redis-server")
    if binary is None:
        if IN_CI:
            pytest.fail("redis-server is not installed (CI=true)")
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    for _ in range(100):  # up to ~10 s
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"redis-server on port {port} did not start")
    client.close()
    yield url, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
