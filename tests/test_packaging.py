"""What the package installs, and that it works where it is installed.

* the wheel: the ``crawler`` package only (no top-level ``settings``, no ``crawler/sitegen``, no
  ``crawler/sitegen/server.py``), ``py.typed``, the migrations, the ``scrapy`` settings entry point,
  the optional dependencies only behind extras;
* the migrations run from a zipped package (as scrapyd runs an egg), with a clean ``sys.path``;
* (slow) a fresh venv with the wheel and its default dependencies only crawls a local site.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from crawler.sitegen import demo_site
from crawler.sitegen.server import SiteServer
from tests.conftest import ROOT

OPTIONAL_DISTRIBUTIONS = {"redis", "scrapy-redis", "psycopg", "psycopg-binary", "pybloom-live",
                          "simhash", "boto3", "warcio", "scrapyd", "scrapyd-client"}  # fmt: skip


def source_copy(target: Path) -> Path:
    """The checkout's files as a release would have them: tracked and new files, not ignored
    ones (no stale ``*.egg-info``, ``build/`` or ``__pycache__``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    src = source_copy(root / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(root / "dist"), str(src)], check=True, timeout=300,
                   capture_output=True)  # fmt: skip
    (found,) = (root / "dist").glob("dedup_crawler-*.whl")
    return found


def test_the_wheel_holds_the_crawler_package_only(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"crawler", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                   + ".dist-info"}  # fmt: skip
    assert "crawler/py.typed" in names
    assert not [n for n in names if n.startswith("crawler/sitegen")]
    assert "crawler/sitegen/server.py" not in names
    for needed in ("crawler/settings/__init__.py", "crawler/settings/base.py",
                   "crawler/settings/distributed.py", "crawler/storage/migrations/env.py",
                   "crawler/storage/migrations/script.py.mako",
                   "crawler/spiders/embed.py"):  # fmt: skip
        assert needed in names
    versions = [n for n in names if n.startswith("crawler/storage/migrations/versions/0")]
    checkout = sorted((ROOT / "crawler/storage/migrations/versions").glob("0*.py"))
    assert len(versions) == len(checkout) > 0


def test_the_wheel_metadata_keeps_optional_dependencies_behind_extras(wheel):
    archive = zipfile.ZipFile(wheel)
    info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(archive.read(info).decode())
    required = meta.get_all("Requires-Dist") or []
    default = {r.split(";")[0].split("<")[0].split(">")[0].split("[")[0].strip().lower()
               for r in required if "extra ==" not in r}  # fmt: skip
    assert not default & OPTIONAL_DISTRIBUTIONS, default & OPTIONAL_DISTRIBUTIONS
    assert {"scrapy", "sqlalchemy", "alembic", "numpy"} <= default
    assert set(meta.get_all("Provides-Extra") or []) >= {
        "postgres", "redis", "s3", "warc", "bench", "scrapyd", "test"}
    entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
    assert "[scrapy]\nsettings = crawler.settings" in archive.read(entry_points).decode()


def test_migrations_run_from_a_zipped_package(tmp_path):
    """The crawl database is created from a zip of ``crawler`` (the way scrapyd imports an
    egg), with neither the checkout nor the editable install on ``sys.path``."""
    archive = tmp_path / "crawler.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted((ROOT / "crawler").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                out.write(path, path.relative_to(ROOT).as_posix())
    db = tmp_path / "zipped.db"
    code = (
        "import sys; sys.path[:0] = sys.argv[1:3]\n"
        "import crawler, crawler.storage.migrations as m, os\n"
        "from crawler.storage import check_storage\n"
        "check_storage({'STORAGE_URL': 'sqlite:///' + sys.argv[3]})\n"
        "print(crawler.__file__); print(m.script_location()); print(m.head())\n"
    )
    site_packages = sysconfig.get_paths()["purelib"]
    proc = subprocess.run(  # -I -S: no cwd, no PYTHONPATH, no .pth files (editable finder)
        [sys.executable, "-I", "-S", "-c", code, str(archive), site_packages, str(db)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    module_file, location, head = proc.stdout.split()
    assert module_file.startswith(str(archive) + os.sep)
    assert "dedup-crawler-migrations-" in location
    assert not Path(location).exists(), "the copied-out scripts outlive the process"
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    assert {"documents", "dropped", "crawls", "alembic_version"} <= tables
    assert version == [(head,)]


def test_migrations_use_the_package_directory_in_place():
    from crawler.storage import migrations

    assert Path(migrations.script_location()) == ROOT / "crawler" / "storage" / "migrations"


def test_checkout_settings_shims_are_the_package_settings():
    import crawler.settings as packaged
    import crawler.settings.distributed as packaged_distributed
    import settings as shim
    import settings.distributed as shim_distributed

    names = [n for n in dir(packaged) if n.isupper()]
    assert len(names) > 50
    assert all(getattr(shim, n) == getattr(packaged, n) for n in names)
    assert shim_distributed.SCHEDULER == packaged_distributed.SCHEDULER
    assert "[settings]\ndefault = crawler.settings" in (ROOT / "scrapy.cfg").read_text()


def test_demo_without_the_site_generator_is_one_line(tmp_path):
    code = ("import sys; sys.modules['crawler.sitegen'] = None\n"
            "sys.argv = ['scrapy', 'demo', '--out', sys.argv[1]]\n"
            "from scrapy.cmdline import execute; execute()\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "demo")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: scrapy demo needs a checkout of dedup-crawler: its demo site generator "
        "(crawler/sitegen) is not part of the installed package"]
    assert proc.stdout == ""


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_fresh_venv_with_default_dependencies_crawls(wheel, tmp_path):
    """pip installs the wheel and its default dependencies only (from the index: slow), then
    ``scrapy crawl web`` runs from a directory that holds just a ``scrapy.cfg``."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          str(wheel)], capture_output=True, text=True, timeout=780)  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    installed = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert "dedup-crawler" in installed
    assert not installed & OPTIONAL_DISTRIBUTIONS, installed & OPTIONAL_DISTRIBUTIONS
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True,
                             timeout=60).stdout.strip()  # fmt: skip
    assert not (Path(purelib) / "settings").exists()
    print(f"\ndefault install: site-packages {du(Path(purelib)) / 2**20:.0f} MiB")

    project = tmp_path / "project"
    project.mkdir()
    (project / "scrapy.cfg").write_text("[settings]\ndefault = crawler.settings\n")
    site = demo_site()
    db = tmp_path / "crawl.db"
    with SiteServer(site) as server:
        crawl = subprocess.run(
            [str(env_dir / "bin" / "scrapy"), "crawl", "web", "-a", f"urls={server.base_url}/",
             "-s", f"STORAGE_URL=sqlite:///{db}", "-s", "DOWNLOAD_DELAY=0",
             "-s", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}"],
            cwd=project, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert crawl.returncode == 0, crawl.stderr[-3000:]
    assert "Migrating the crawl database" in crawl.stderr
    with sqlite3.connect(db) as conn:
        reasons = dict(conn.execute("SELECT reason, count(*) FROM dropped GROUP BY reason"))
    assert reasons == {"exact_duplicate": len(site.exact_duplicates),
                       "near_duplicate": len(site.near_duplicates)}  # fmt: skip

    redis = subprocess.run(
        [str(env_dir / "bin" / "scrapy"), "crawl", "web", "-a", "urls=http://127.0.0.1:9/",
         "-s", "DEDUP_BACKEND=redis", "-s", f"STORAGE_URL=sqlite:///{tmp_path / 'no.db'}"],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert redis.returncode == 2
    assert redis.stderr.strip().splitlines() == [
        "error: DEDUP_BACKEND=redis needs the redis extra: pip install 'dedup-crawler[redis]'"]
    demo = subprocess.run([str(env_dir / "bin" / "scrapy"), "demo"], cwd=project,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert demo.returncode == 2
    assert demo.stderr.strip().splitlines()[-1].startswith("error: scrapy demo needs a checkout")

    # the scrapyd extra in the fresh venv: scrapyd-deploy builds the egg with the venv's own
    # setuptools (65 here: setup.py lets it read the SPDX license string of pyproject.toml)
    extra = subprocess.run([str(python), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", f"{wheel}[scrapyd]"],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert extra.returncode == 0, extra.stderr[-3000:]
    src = source_copy(tmp_path / "src")
    egg = tmp_path / "project.egg"
    build = subprocess.run([str(env_dir / "bin" / "scrapyd-deploy"), "--build-egg", str(egg)],
                           cwd=src, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    names = zipfile.ZipFile(egg).namelist()
    assert {n.split("/")[0] for n in names} == {"crawler", "EGG-INFO"}
    print(f"with [scrapyd]: site-packages {du(Path(purelib)) / 2**20:.0f} MiB")
