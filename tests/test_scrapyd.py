"""The project deployed to a real scrapyd and crawling from its egg (README, "Running under
scrapyd").

scrapyd and ``scrapyd-deploy`` run in an overlay venv: its ``sys.path`` holds the test venv's
site-packages as a plain directory, so the packages are there but the editable install of this
checkout is not (its import hook lives in a ``.pth`` file that only a site directory runs). The
job therefore imports ``crawler`` from the deployed egg, the way a production scrapyd does.
``scrapyd-deploy`` builds the egg from a clean copy of the checkout with this ``setup.py``.
"""

from __future__ import annotations

import json
import os
import socket
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
from crawler.siteserver import SiteServer
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def test_deploy_schedule_and_crawl_under_scrapyd(scrapyd, tmp_path):
    base, root, python = scrapyd
    src = source_copy(tmp_path / "src")
    cfg = (src / "scrapy.cfg").read_text().replace("http://127.0.0.1:6800/", base + "/")
    (src / "scrapy.cfg").write_text(cfg)
    started = time.monotonic()
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

    site = demo_site()
    db = tmp_path / "crawl.db"
    with SiteServer(site) as server:
        job = call(base + "/schedule.json", [
            ("project", PROJECT), ("spider", "web"), ("urls", server.base_url + "/"),
            ("setting", f"STORAGE_URL=sqlite:///{db}"),
            ("setting", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}"),
            ("setting", "DOWNLOAD_DELAY=0"),
        ])  # fmt: skip
        assert job["status"] == "ok", job
        jobid = job["jobid"]

        def finished() -> dict | None:
            jobs = call(f"{base}/listjobs.json?project={PROJECT}")
            return next((j for j in jobs["finished"] if j["id"] == jobid), None)

        done = wait_until(finished, 120, "the scrapyd job finishing")
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
