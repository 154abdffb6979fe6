"""Optional extras: a default-install crawl never imports them, and a setting that needs a missing
one stops the crawl with one line naming the extra.

"Missing" is real to the process: the crawl runs under a wrapper whose import hook refuses the
extras' modules (as a fresh venv without them would) and records every attempt to import one.
``test_packaging.py`` repeats the crawl in a fresh venv that has only the default dependencies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crawler import extras
from crawler.sitegen import demo_site
from crawler.sitegen.server import SiteServer
from tests.conftest import ROOT

#: Top-level modules of the optional extras (and of the bench baselines).
OPTIONAL = sorted({m for modules in extras.EXTRAS.values() for m in modules})

WRAPPER = textwrap.dedent('''
    """Run `scrapy ARGS` with the optional modules made unimportable; record attempts."""
    import atexit, json, sys

    BLOCKED = set(json.loads(sys.argv[1]))
    RECORD = sys.argv[2]
    attempts = []

    class Refuse:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                attempts.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Refuse)
    atexit.register(lambda: open(RECORD, "w").write(json.dumps(attempts)))
    sys.argv = ["scrapy", *sys.argv[3:]]
    from scrapy.cmdline import execute
    execute()
''')


def run_without_extras(tmp_path: Path, args: list[str], env: dict[str, str] | None = None,
                       timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    wrapper = tmp_path / "without_extras.py"
    wrapper.write_text(WRAPPER)
    attempts = tmp_path / "attempts.json"
    proc = subprocess.run(
        [sys.executable, str(wrapper), json.dumps(OPTIONAL), str(attempts), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    return proc, json.loads(attempts.read_text()) if attempts.exists() else ["<no record>"]


def crawl_args(tmp_path: Path, url: str, profile_storage: bool = False,
               **settings: str) -> list[str]:
    merged = {"STORAGE_URL": f"sqlite:///{tmp_path / 'crawl.db'}",
              "DROPPED_LOG": str(tmp_path / "dropped.jsonl"), "DOWNLOAD_DELAY": "0",
              "LOG_LEVEL": "INFO", "DEDUP_PROGRESS_INTERVAL": "0", **settings}  # fmt: skip
    if profile_storage:
        del merged["STORAGE_URL"]
    args = ["crawl", "web", "-a", f"urls={url}"]
    for name, value in merged.items():
        args += ["-s", f"{name}={value}"]
    return args


def test_default_crawl_imports_no_optional_module(tmp_path):
    site = demo_site()
    with SiteServer(site) as server:
        proc, attempts = run_without_extras(tmp_path, crawl_args(tmp_path, server.base_url + "/"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert attempts == [], f"the default crawl tried to import {attempts}"
    import sqlite3

    with sqlite3.connect(tmp_path / "crawl.db") as conn:
        reasons = dict(conn.execute("SELECT reason, count(*) FROM dropped GROUP BY reason"))
        stored = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    assert reasons == {"exact_duplicate": len(site.exact_duplicates),
                       "near_duplicate": len(site.near_duplicates)}  # fmt: skip
    assert stored > len(site.distinct_pages) // 2


@pytest.mark.parametrize(
    ("settings", "env", "expected"),
    [
        ({"DEDUP_BACKEND": "redis"}, {},
         "error: DEDUP_BACKEND=redis needs the redis extra: pip install 'dedup-crawler[redis]'"),
        ({"STORAGE_URL": "postgresql://bot:s3cret@127.0.0.1:1/crawl"}, {},
         "error: STORAGE_URL=postgresql://... needs the postgres extra: "
         "pip install 'dedup-crawler[postgres]'"),
        ({}, {"SCRAPY_SETTINGS_MODULE": "settings.distributed"},
         "error: DEDUP_BACKEND=redis, SCHEDULER=crawler.cluster.scheduler.SharedScheduler and "
         "STORAGE_URL=postgresql+psycopg://... need the redis and postgres extras: "
         "pip install 'dedup-crawler[redis,postgres]'"),
        ({"WARC_OUTPUT": "/nonexistent-warcs-never-created/"}, {},
         "error: WARC_OUTPUT needs the warc extra: pip install 'dedup-crawler[warc]'"),
    ],
    ids=["redis-backend", "postgres-url", "distributed-profile", "warc-output"],
)
def test_a_setting_needing_a_missing_extra_is_one_line(tmp_path, settings, env, expected):
    args = crawl_args(tmp_path, "http://127.0.0.1:9/", profile_storage=bool(env), **settings)
    proc, _ = run_without_extras(tmp_path, args, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [expected], proc.stderr
    assert "s3cret" not in proc.stderr
    assert not (tmp_path / "crawl.db").exists()


def test_a_postgres_store_without_the_driver_names_the_extra(tmp_path):
    """Outside the crawl's checks (``scrapy dropped --db``), the engine says it too."""
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from crawler.storage import Store, StorageError\n"
            "try:\n"
            "    Store.from_settings({'STORAGE_URL': 'postgresql://bot:pw@127.0.0.1:1/c'}).check()\n"
            "except StorageError as exc:\n"
            "    print(exc)\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.stdout.strip() == (
        "STORAGE_URL postgresql+psycopg://bot:***@127.0.0.1:1/c: PostgreSQL needs the postgres "
        "extra: pip install 'dedup-crawler[postgres]'"
    ), proc.stderr[-2000:]


def test_require_lists_only_what_is_missing():
    extras.require({"DEDUP_BACKEND=redis": "redis"})  # installed in the test venv: no error
    saved = extras.EXTRAS.copy()
    extras.EXTRAS["nothing"] = ("no_such_module_for_dedup_crawler",)
    try:
        with pytest.raises(extras.MissingExtraError) as caught:
            extras.require({"A=1": "nothing", "B=2": "redis", "C=3": "nothing"})
    finally:
        extras.EXTRAS.clear()
        extras.EXTRAS.update(saved)
    assert str(caught.value) == ("A=1 and C=3 need the nothing extra: "
                                 "pip install 'dedup-crawler[nothing]'")  # fmt: skip
    assert caught.value.name == "A"
