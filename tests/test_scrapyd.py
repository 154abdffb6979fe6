"""The project deployed to a real scrapyd and crawling from its egg (docs/operations.md,
"Running under scrapyd").

scrapyd and ``scrapyd-deploy`` run in an overlay venv: its ``sys.path`` holds the test venv's
site-packages as a plain directory, so the packages are there but the editable install of this
checkout is not (its import hook lives in a ``.pth`` file that only a site directory runs). The
job therefore imports ``crawler`` from the deployed egg, the way a production scrapyd does.
``scrapyd-deploy`` builds the egg from a clean copy of the checkout with this ``setup.py``.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sysconfig
import time
import urllib.parse
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from crawler.sitegen import demo_site
from crawler.sitegen.server import SiteServer
from tests.conftest import free_port
from tests.test_packaging import source_copy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
PROJECT = "dedup_crawler"

SCRAPYD_CONF = """[scrapyd]
bind_address = 127.0.0.1
http_port = {port}
eggs_dir = {root}/eggs
logs_dir = {root}/logs
dbs_dir = {root}/dbs
items_dir =
jobs_to_keep = 5
max_proc = 1
poll_interval = 0.2
"""


def overlay_python(root: Path) -> Path:
    """A venv whose site-packages points at ours (see the module docstring)."""
    venv.create(root, with_pip=False)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.strip()  # fmt: skip
    (Path(purelib) / "test_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def call(url: str, data: list[tuple[str, str]] | None = None) -> dict:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    with urllib.request.urlopen(url, data=body, timeout=10) as response:
        return json.loads(response.read())


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


@pytest.fixture
def scrapyd(tmp_path):
    """A real scrapyd on a free port of 127.0.0.1: ``(base URL, its directory, python)``."""
    python = overlay_python(tmp_path / "venv")
    root = tmp_path / "scrapyd"
    root.mkdir()
    port = free_port()
    (root / "scrapyd.conf").write_text(SCRAPYD_CONF.format(port=port, root=root))
    log = (root / "scrapyd.out").open("w")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCRAPY_", "PYTHONPATH"))}
    proc = subprocess.Popen([str(python), "-m", "scrapyd", "--nodaemon", "--pidfile="],
                            cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return call(base + "/daemonstatus.json")["status"] == "ok"
        except OSError:
            assert proc.poll() is None, (root / "scrapyd.out").read_text()[-3000:]
            return False

    try:
        wait_until(up, 30, "scrapyd answering")
        yield base, root, python
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def deploy(base: str, root: Path, python: Path, tmp_path: Path) -> None:
    """``scrapyd-deploy`` of a clean copy of the checkout to the scrapyd at ``base``."""
    src = source_copy(tmp_path / "src")
    cfg = (src / "scrapy.cfg").read_text().replace("http://127.0.0.1:6800/", base + "/")
    (src / "scrapy.cfg").write_text(cfg)
    deploy = subprocess.run(
        [str(python), "-m", "scrapyd_client.deploy", "--version", "1"],
        cwd=src, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    print(deploy.stdout + deploy.stderr)
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    answer = json.loads(deploy.stdout)
    assert (answer["status"], answer["spiders"]) == ("ok", 1), answer
    assert not (src / "setup.py").read_text().startswith("# Automatically created by: scrapyd")
    egg = zipfile.ZipFile(next((root / "eggs" / PROJECT).glob("*.egg")))
    names = egg.namelist()
    assert {n.split("/")[0] for n in names} == {"crawler", "EGG-INFO"}, "only crawler in the egg"
    assert not [n for n in names if "sitegen" in n or "siteserver" in n]
    assert "settings = crawler.settings" in egg.read("EGG-INFO/entry_points.txt").decode()


def run_job(base: str, fields: list[tuple[str, str]], timeout: float = 120) -> dict:
    """Schedule ``web`` with ``fields`` (spider arguments, ``setting=``) and wait until
    ``listjobs.json`` lists the job as finished: its entry there."""
    job = call(base + "/schedule.json", [("project", PROJECT), ("spider", "web"), *fields])
    assert job["status"] == "ok", job
    jobid = job["jobid"]

    def finished() -> dict | None:
        jobs = call(f"{base}/listjobs.json?project={PROJECT}")
        return next((j for j in jobs["finished"] if j["id"] == jobid), None)

    return wait_until(finished, timeout, "the scrapyd job finishing")


def job_log(base: str, job: dict) -> list[str]:
    """The job's log, read where ``listjobs.json`` says (``log_url``), as lines."""
    assert job["log_url"], f"no log_url: {job}"
    with urllib.request.urlopen(base + job["log_url"], timeout=10) as response:
        return response.read().decode().splitlines()


def test_deploy_schedule_and_crawl_under_scrapyd(scrapyd, tmp_path):
    base, root, python = scrapyd
    started = time.monotonic()
    deploy(base, root, python, tmp_path)

    site = demo_site()
    db = tmp_path / "crawl.db"
    with SiteServer(site) as server:
        done = run_job(base, [
            ("urls", server.base_url + "/"),
            ("setting", f"STORAGE_URL=sqlite:///{db}"),
            ("setting", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}"),
            ("setting", "DOWNLOAD_DELAY=0"),
        ])  # fmt: skip
        jobid = done["id"]
    print(f"deploy + crawl under scrapyd: {time.monotonic() - started:.1f} s; job {done}")
    log = (root / "logs" / PROJECT / "web" / f"{jobid}.log").read_text()
    assert "Spider closed (finished)" in log, log[-3000:]
    assert "Dedup summary" in log
    assert "Migrating the crawl database from an empty schema" in log  # scripts from the egg
    assert "Traceback" not in log, log[-3000:]
    with sqlite3.connect(db) as conn:
        reasons = dict(conn.execute("SELECT reason, count(*) FROM dropped GROUP BY reason"))
        stored = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        finish = conn.execute("SELECT finish_reason FROM crawls").fetchall()
    print(f"stored {stored}, dropped {reasons}, crawls {finish}")
    assert reasons == {"exact_duplicate": len(site.exact_duplicates),
                       "near_duplicate": len(site.near_duplicates)}  # fmt: skip
    assert stored == len(site.distinct_pages) + len(site.mislabelled)
    assert finish == [("finished",)]


#: A line of the job's log in Scrapy's default ``LOG_FORMAT``: ``(logger, level, message)``.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[([\w.]+)\] ([A-Z]+): (.*)$")


def log_records(lines: list[str]) -> list[tuple[str, str, str]]:
    return [m.groups() for m in map(LOG_LINE.match, lines) if m]


def test_a_job_that_fails_its_checks_says_so_in_its_log(scrapyd, tmp_path):
    """scrapyd 1.6 lists every ended job as finished (no state or exit status in listjobs.json,
    status.json or the jobs page: only its own log says "Process died: exitstatus=2"). The job's
    log is where its user looks, so the one-line error and the exit status end it, both for a
    check that fails before Scrapy sets up logging (a mistyped setting: scrapyd's LOG_FILE did
    not exist yet) and for one after (the database: the file holds Scrapy's start-up lines)."""
    base, root, python = scrapyd
    deploy(base, root, python, tmp_path)
    db = tmp_path / "crawl.db"
    typo = run_job(base, [("urls", "http://127.0.0.1:9/"), ("setting", "SIMHASH_MAX_DISTANSE=2"),
                          ("setting", f"STORAGE_URL=sqlite:///{db}")])  # fmt: skip
    lines = job_log(base, typo)
    print(f"job {typo}\n" + "\n".join(lines))
    assert log_records(lines) == [
        ("crawler.commands.preflight", "ERROR",
         "error: unknown setting SIMHASH_MAX_DISTANSE='2': did you mean SIMHASH_MAX_DISTANCE?"),
        ("crawler.commands.preflight", "ERROR", "exit status 2: the crawl did not start"),
    ], lines  # fmt: skip
    assert len(lines) == 2, lines
    assert not db.exists()
    scrapyd_out = (root / "scrapyd.out").read_text()
    assert "Process died: exitstatus=2" in scrapyd_out  # what scrapyd itself keeps of it

    missing = tmp_path / "no-such-dir" / "crawl.db"
    unreachable = run_job(base, [("urls", "http://127.0.0.1:9/"),
                                 ("setting", f"STORAGE_URL=sqlite:///{missing}")])  # fmt: skip
    lines = job_log(base, unreachable)
    print(f"job {unreachable}\n" + "\n".join(lines[-3:]))
    assert any("Scrapy" in message and "started" in message
               for _, _, message in log_records(lines))  # logging was set up  # fmt: skip
    assert log_records(lines)[-2:] == [
        ("crawler.commands.preflight", "ERROR",
         f"error: cannot open sqlite:///{missing}: directory {missing.parent} does not exist "
         "(create it or change STORAGE_URL)"),
        ("crawler.commands.preflight", "ERROR", "exit status 1: the crawl did not start"),
    ], lines[-5:]  # fmt: skip
    assert lines[-1].endswith("exit status 1: the crawl did not start"), lines[-5:]


def test_a_job_that_stops_early_says_so_in_its_log(scrapyd, tmp_path):
    """A crawl that ends incomplete (here the Bloom filter full, ``BLOOM_ON_FULL=stop``) exits
    1; under scrapyd its log ends with the line ``scrapy crawl`` prints and the exit status."""
    base, root, python = scrapyd
    deploy(base, root, python, tmp_path)
    with SiteServer(demo_site()) as server:
        job = run_job(base, [
            ("urls", server.base_url + "/"), ("setting", "BLOOM_CAPACITY=20"),
            ("setting", "BLOOM_ON_FULL=stop"), ("setting", "DOWNLOAD_DELAY=0"),
            ("setting", f"STORAGE_URL=sqlite:///{tmp_path / 'crawl.db'}"),
            ("setting", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}"),
        ])  # fmt: skip
    lines = job_log(base, job)
    print("\n".join(lines[-3:]))
    assert "Spider closed (bloom_full)" in "\n".join(lines)
    assert log_records(lines)[-2:] == [
        ("crawler.commands.crawl", "ERROR", "crawl stopped early: bloom_full (see the log above)"),
        ("crawler.commands.crawl", "ERROR", "exit status 1: the crawl is incomplete"),
    ], lines[-5:]  # fmt: skip
    assert "Process died: exitstatus=1" in (root / "scrapyd.out").read_text()


@pytest.mark.timeout(600)
def test_deploy_from_a_fresh_venv_with_scrapyd_client_only(scrapyd, tmp_path):
    """``pip install scrapyd-client`` in a fresh venv (setuptools 65 from Python 3.11's
    ensurepip, older than the 77 that reads the SPDX license string of pyproject.toml; from
    the index: slow) and ``scrapyd-deploy``: the egg builds, with the crawler package only and
    the license, and scrapyd takes it."""
    base, root, _ = scrapyd
    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", "scrapyd-client"],
                         capture_output=True, text=True, timeout=500)  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    old = subprocess.run([str(python), "-c", "import setuptools; print(setuptools.__version__)"],
                         capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip
    print(f"fresh venv: setuptools {old}")
    assert int(old.split(".")[0]) < 77, "the venv no longer shows the old setuptools"
    deploy(base, root, python, tmp_path)
    egg = zipfile.ZipFile(next((root / "eggs" / PROJECT).glob("*.egg")))
    assert "\nLicense: BSD-3-Clause\n" in egg.read("EGG-INFO/PKG-INFO").decode()
