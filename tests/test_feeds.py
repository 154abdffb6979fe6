"""Feed exports: the documented schema, the pre-flight check of ``FEEDS``, and unique documents
exported to a real S3 endpoint (moto's standalone server on 127.0.0.1)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scrapy.settings import Settings

from crawler.commands.preflight import (
    UnknownSettingError,
    check_unknown_settings,
    known_setting_names,
)
from crawler.content.text import visible_text
from crawler.items import EXPORT_FIELDS
from crawler.outputs.feeds import FeedError, check_feeds, export_fields
from crawler.outputs.formats import mask_url
from tests.conftest import ROOT, crawl_command, free_port, run_crawl

# --- pre-flight check of FEEDS --------------------------------------------------------------


def _settings(feeds: dict, **extra) -> Settings:
    settings = Settings()
    settings.set("FEEDS", feeds)
    for name, value in extra.items():
        settings.set(name, value)
    return settings


@pytest.mark.parametrize(("uri", "options", "message"), [
    ("ftp2://host/x.jl", {"format": "jsonlines"}, "unknown storage scheme 'ftp2'"),
    ("out.jl", {"format": "yaml"}, "unknown format 'yaml'"),
    ("out.jl", {}, "no format"),
    ("out.jl", {"format": "jsonlines", "batch_item_count": 10}, "no %(batch_id)d"),
    ("out.jl", {"format": "jsonlines", "postprocessing": ["nowhere.Plugin"]},
     "post-processing plugin 'nowhere.Plugin' cannot be loaded"),
    ("s3:///key.jl", {"format": "jsonlines"}, "no bucket"),
    ("s3://bucket", {"format": "jsonlines"}, "no object key"),
])  # fmt: skip
def test_feed_that_cannot_work_is_refused_with_one_line(tmp_path, uri, options, message):
    if not uri.startswith("s3") and "://" not in uri:
        uri = str(tmp_path / uri)
    with pytest.raises(FeedError) as info:
        check_feeds(_settings({uri: options}))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_feed_file_under_a_file_or_a_folder_name_is_refused(tmp_path):
    afile = tmp_path / "plain"
    afile.write_text("x")
    with pytest.raises(FeedError, match="is not a folder"):
        check_feeds(_settings({str(afile / "out.jl"): {"format": "jsonlines"}}))
    with pytest.raises(FeedError, match="is a folder"):
        check_feeds(_settings({str(tmp_path): {"format": "jsonlines"}}))


def test_good_feeds_pass_and_batches_with_placeholder_pass(tmp_path):
    feeds = {
        str(tmp_path / "new" / "dir" / "out-%(batch_id)03d.jl.gz"): {
            "format": "jsonlines", "batch_item_count": 10,
            "postprocessing": ["scrapy.extensions.postprocessing.GzipPlugin"]},
        f"file://{tmp_path}/b.csv": {"format": "csv"},
        "s3://bucket/pages/%(batch_id)05d.jl": {"format": "jsonlines", "batch_item_count": 5},
    }  # fmt: skip
    check_feeds(_settings(feeds))  # nothing raised
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_missing_boto3_names_the_extra(tmp_path):
    # A Python that cannot import boto3, as after the default install (no ``s3`` extra).
    blocker = tmp_path / "block"
    (blocker / "boto3").mkdir(parents=True)
    (blocker / "boto3" / "__init__.py").write_text("raise ImportError('No module named boto3')\n")
    code = ("from scrapy.settings import Settings\nfrom crawler.outputs.feeds import check_feeds\n"
            "s = Settings(); s.set('FEEDS', {'s3://b/k.jl': {'format': 'jsonlines'}})\n"
            "check_feeds(s)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": f"{blocker}:{ROOT}"})
    assert result.returncode != 0
    assert "storage 's3' unavailable: missing boto3 library" in result.stderr
    assert "pip install 'dedup-crawler[s3]'" in result.stderr


def test_mask_uri_hides_a_secret_in_the_uri():
    assert mask_url("s3://AKIA:s3cr3t@bucket/k.jl") == "s3://AKIA:***@bucket/k.jl"
    assert mask_url("s3://bucket/k.jl") == "s3://bucket/k.jl"


def scrapy(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(crawl_command(list(args)), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_crawl_refuses_an_unwritable_feed_before_anything_starts(tmp_path):
    afile = tmp_path / "plain"
    afile.write_text("x")
    db = tmp_path / "c.db"
    result = scrapy("crawl", "web", "-a", "urls=http://127.0.0.1:1/", "-s",
                    f"STORAGE_URL=sqlite:///{db}", "-o", f"{afile}/out.jsonl")
    assert result.returncode == 2
    assert result.stderr == f"error: feed {afile}/out.jsonl: {afile} is not a folder\n"
    assert not db.exists()


# --- misspelled settings --------------------------------------------------------------------


def test_typo_in_a_project_setting_names_the_setting_meant():
    with pytest.raises(UnknownSettingError) as info:
        check_unknown_settings({"SIMHASH_MAX_DISTANC": "2"})
    assert str(info.value) == ("unknown setting SIMHASH_MAX_DISTANC='2': "
                               "did you mean SIMHASH_MAX_DISTANCE?")
    with pytest.raises(UnknownSettingError, match="did you mean BLOOM_ERROR_RATE"):
        check_unknown_settings({"BLOOM_EROR_RATE": 0.1})
    with pytest.raises(UnknownSettingError, match="no setting of dedup-crawler has this name"):
        check_unknown_settings({"DEDUP_WHATEVER": 1})


def test_every_project_and_scrapy_setting_passes():
    import importlib

    try:
        base = importlib.import_module("crawler.settings.base")
    except ImportError:  # the settings before they moved into the package
        base = importlib.import_module("settings.base")
    names = [n for n in dir(base) if n.isupper()]
    assert len(names) > 40
    check_unknown_settings({n: getattr(base, n) for n in names})  # nothing raised
    # Other prefixes are not ours to judge (a project's own MYAPP_* settings).
    check_unknown_settings({"MYAPP_THING": 1, "CONCURRENT_REQUESTS": 3, "REDIS_PARAMS": {}})
    assert {"SIMHASH_MAX_DISTANCE", "DOWNLOAD_DELAY"} <= known_setting_names()


def test_crawl_stops_on_a_typo_before_anything_starts(tmp_path):
    db = tmp_path / "c.db"
    result = scrapy("crawl", "web", "-a", "urls=http://127.0.0.1:1/", "-s",
                    f"STORAGE_URL=sqlite:///{db}", "-s", "SIMHASH_MAX_DISTANC=2")
    assert result.returncode == 2
    assert result.stderr == ("error: unknown setting SIMHASH_MAX_DISTANC='2': "
                             "did you mean SIMHASH_MAX_DISTANCE?\n")
    assert not db.exists()


# --- the export schema ----------------------------------------------------------------------


def test_export_fields_follow_the_html_setting():
    assert export_fields(Settings()) == list(EXPORT_FIELDS)
    assert export_fields(Settings({"FEED_EXPORT_HTML": True})) == [*EXPORT_FIELDS, "html"]
    for internal in ("blocks", "binary", "fingerprints", "lease", "html"):
        assert internal not in EXPORT_FIELDS


def test_feed_items_follow_the_schema_with_simhash_as_hex(crawl, demo_server, tmp_path):
    out = tmp_path / "pages.jsonl"
    run = crawl(urls=[demo_server.base_url + "/"], settings={"FEEDS": json.dumps(
        {str(out): {"format": "jsonlines"}})})
    assert run.returncode == 0, run.stderr[-2000:]
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(items) > 100
    for item in items:
        assert list(item) == list(EXPORT_FIELDS)  # exactly the schema, in order
    stored = dict(run.rows("SELECT url, simhash FROM documents"))
    hexes = [item for item in items if item["simhash"] is not None]
    assert hexes
    for item in hexes:
        assert len(item["simhash"]) == 16 and int(item["simhash"], 16) >= 0
        if item["url"] in stored:  # stored as a signed 64-bit integer: the same bits
            assert int(item["simhash"], 16) == stored[item["url"]] & (2**64 - 1)
    # html on request only
    out2 = tmp_path / "with-html.jsonl"
    run2 = crawl(workdir=tmp_path / "run2", urls=[demo_server.base_url + "/"],
                 settings={"FEEDS": json.dumps({str(out2): {"format": "jsonlines"}}),
                           "FEED_EXPORT_HTML": True, "CLOSESPIDER_ITEMCOUNT": 3})
    assert run2.returncode == 0, run2.stderr[-2000:]
    first = json.loads(out2.read_text().splitlines()[0])
    assert list(first) == [*EXPORT_FIELDS, "html"]
    assert "<html" in first["html"].lower()


# --- unique documents to S3 (moto's standalone server) -------------------------------------


@pytest.fixture
def s3_server(tmp_path):
    moto = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if moto is None:
        pytest.skip("moto_server not installed (pip install -e '.[test]')")
    port = free_port()
    log = (tmp_path / "moto.log").open("w")
    proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("moto_server did not start")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _s3(url: str):
    import boto3

    return boto3.client("s3", endpoint_url=url, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def _s3_settings(url: str, uri: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION_NAME": "us-east-1",
        "FEEDS": json.dumps({uri: {
            "format": "jsonlines", "batch_item_count": 40,
            "postprocessing": ["scrapy.extensions.postprocessing.GzipPlugin"]}}),
    }  # fmt: skip


def test_unique_documents_reach_the_bucket_exactly(crawl, demo_server, s3_server):
    client = _s3(s3_server)
    client.create_bucket(Bucket="pages")
    run = crawl(urls=[demo_server.base_url + "/"],
                settings=_s3_settings(s3_server, "s3://pages/demo/%(batch_id)04d.jsonl.gz"))
    assert run.returncode == 0, run.stderr[-2000:]
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="pages")["Contents"])
    assert len(keys) >= 3  # batches of 40 pages
    assert all(k.startswith("demo/") and k.endswith(".jsonl.gz") for k in keys)
    exported: list[dict] = []
    for key in keys:
        body = client.get_object(Bucket="pages", Key=key)["Body"].read()
        exported += [json.loads(line) for line in gzip.decompress(body).splitlines()]
    exported_urls = [item["url"] for item in exported]
    assert len(exported_urls) == len(set(exported_urls))  # each page once
    # The bucket holds every stored page and no dropped one: a copy stored before the page it
    # duplicates was preferred (named canonical, a shorter URL...) is not in it
    assert set(exported_urls) == run.stored_urls()
    dropped = {r[0] for r in run.rows("SELECT url FROM dropped")} - run.stored_urls()
    assert dropped and not dropped & set(exported_urls)
    assert all(list(item) == list(EXPORT_FIELDS) for item in exported)


def test_crawl_refuses_a_missing_bucket_with_one_line(tmp_path, s3_server):
    db = tmp_path / "c.db"
    args = ["crawl", "web", "-a", "urls=http://127.0.0.1:1/", "-s", f"STORAGE_URL=sqlite:///{db}"]
    for name, value in _s3_settings(s3_server, "s3://nobucket/p-%(batch_id)d.jsonl.gz").items():
        args += ["-s", f"{name}={value}"]
    result = scrapy(*args)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: feed s3://nobucket/p-%(batch_id)d.jsonl.gz: bucket 'nobucket' at {s3_server} "
        "does not exist")


# --- feeds of the stored pages (issue 25, item 4) ------------------------------------------

#: Rules of a page stored first and moved to ``dropped`` later (a canonical swap, a preferred
#: twin, a refreshed fingerprint, the settle step).
DEMOTED = "('canonical', 'preferred', 'refreshed', 'settled')"


def _stored_rows(run) -> dict[str, dict]:
    """The crawl's stored pages as the database holds them, by URL."""
    import sqlite3

    with sqlite3.connect(run.db_path) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT d.* FROM documents d JOIN crawl_documents c "
                            "ON c.canonical_url = d.canonical_url").fetchall()
    return {row["url"]: dict(row) for row in rows}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(("partner_first", "concurrency"), [(False, 1), (True, 8)],
                         ids=["home-first-serial", "partner-first-parallel"])
def test_the_feed_holds_exactly_the_stored_pages_in_either_order(crawl, demo_server, tmp_path,
                                                                 partner_first, concurrency):
    """``-o``: one item per stored page, final (pages demoted after they were stored are not
    in it: a ``/partners/`` copy seeded first is stored, then swapped for the article it names
    canonical), equal to the page's row and to what ``scrapy export`` writes; each page's HTML
    with ``FEED_EXPORT_HTML``. Two orders: the home page alone one request at a time, and a
    partner copy seeded before it with 8 in flight."""
    partner = sorted(p for p in demo_server.site.pages if p.startswith("/partners/"))[0]
    seeds = [demo_server.base_url + "/"]
    if partner_first:
        seeds.insert(0, demo_server.base_url + partner)
    out = tmp_path / "items.jsonl"
    run = crawl(urls=seeds, settings={
        "FEEDS": json.dumps({str(out): {"format": "jsonlines"}}),
        "CONCURRENT_REQUESTS": concurrency, "FEED_EXPORT_HTML": True})
    assert run.returncode == 0, run.stderr[-2000:]
    items = _jsonl(out)
    rows = _stored_rows(run)
    assert len(rows) > 150
    assert len(items) == len(rows) and {i["url"] for i in items} == set(rows)
    demoted = {r[0] for r in run.rows(f"SELECT url FROM dropped WHERE rule IN {DEMOTED}")}
    assert demoted  # pages stored, then moved to dropped: each was in the old feed
    if partner_first:
        swapped = run.rows("SELECT rule FROM dropped WHERE url = ?",
                           (demo_server.base_url + partner,))
        assert ("canonical",) in swapped
    assert not demoted & {i["url"] for i in items}
    for item in items:
        row = rows[item["url"]]
        assert list(item) == [*EXPORT_FIELDS, "html"]
        for name in ("canonical_url", "status", "content_type", "encoding", "depth", "referer",
                     "content_hash", "canonical_link"):
            assert item[name] == row[name], name
        assert (item["title"], item["text"]) == (row["title"] or "", row["text"] or "")
        signed = None if row["simhash"] is None else row["simhash"] & (2**64 - 1)
        assert item["simhash"] == (None if signed is None else format(signed, "016x"))
        assert item["fetched_at"].endswith("+00:00")
        if row["content_hash"] is not None:  # binary pages have neither text nor HTML
            assert visible_text(item["html"]) == item["text"]  # this page's HTML
    assert f"Feeds: {len(rows)} stored pages of crawl 1" in run.stderr
    # scrapy export of the same crawl writes the same items (no HTML: storage keeps none)
    exported = tmp_path / "export.jsonl"
    done = scrapy("export", "--db", str(run.db_path), "-o", str(exported))
    assert done.returncode == 0, done.stderr
    assert _jsonl(exported) == [{k: v for k, v in i.items() if k != "html"} for i in items]


def test_fingerprint_text_is_the_text_without_its_site_template(demo_crawl, tmp_path):
    """``text`` keeps the navigation and footer (the exact-copy hash is of it);
    ``fingerprint_text`` leaves the site's template out, and on the demo its SimHash is the
    stored one for nearly every page."""
    from crawler.content.template import block_hashes
    from crawler.dedup.pages import Fingerprinter

    out = tmp_path / "export.jsonl"
    assert scrapy("export", "--db", str(demo_crawl.db_path), "-o", str(out)).returncode == 0
    items = [i for i in _jsonl(out) if i["content_hash"] is not None]
    nav = "Home Gardening Cycling Astronomy"
    assert all(nav in i["text"] for i in items if "/articles/" in i["url"])
    assert not any(nav in i["fingerprint_text"] for i in items)
    for item in items:
        lines = item["fingerprint_text"].splitlines()
        assert set(lines) <= set(item["text"].splitlines())
    fingerprinter = Fingerprinter()
    same = 0
    for item in items:
        lines = item["fingerprint_text"].splitlines()
        simhash = fingerprinter.simhash(list(zip(block_hashes(lines), lines, strict=True)))
        same += simhash is not None and format(simhash, "016x") == item["simhash"]
    assert same >= 0.95 * sum(i["simhash"] is not None for i in items)


def test_without_storage_the_feed_gets_items_as_scraped(crawl, demo_server, tmp_path):
    out = tmp_path / "items.jsonl"
    run = crawl(urls=[demo_server.base_url + "/"], settings={
        "FEEDS": json.dumps({str(out): {"format": "jsonlines"}}),
        "ITEM_PIPELINES": json.dumps({"crawler.pipelines.neardup.NearDuplicatePipeline": 300}),
        "CLOSESPIDER_ITEMCOUNT": 20})
    assert run.returncode == 0, run.stderr[-2000:]
    items = _jsonl(out)
    assert len(items) == run.stats["item_scraped_count"] >= 20
    assert "Feeds:" not in run.stderr
    assert all(i["fingerprint_text"] is None and i["text"] for i in items[:5])


# --- CSV keeps the data ----------------------------------------------------------------------

CONTROLS = "".join(chr(c) for c in range(32)) + "\x7f\x9b"


def test_dropped_csv_writer_keeps_every_control_character_inside_quotes():
    import csv
    import io

    from crawler.commands.console import SafeStream
    from crawler.commands.dropped import write_records
    from crawler.review import DropRecord

    record = DropRecord.from_row({"url": "http://a/b", "reason": "near_duplicate",
                                  "duplicate_of": "http://a/", "distance": 2,
                                  "title": f"t{CONTROLS}e"})
    raw = io.StringIO()
    write_records([record], "csv", SafeStream(raw))  # not a terminal: the data unchanged
    (row,) = list(csv.DictReader(io.StringIO(raw.getvalue(), newline="")))
    assert row["title"] == f"t{CONTROLS}e" and row["distance"] == "2"
    assert f'"t{CONTROLS}e"' in raw.getvalue()  # quoted

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    shown = Terminal()
    write_records([record], "csv", SafeStream(shown))  # a terminal: escaped
    assert "\x1b" not in shown.getvalue() and "\\x1b" in shown.getvalue()


def test_csv_of_export_and_dropped_round_trips_control_characters(tmp_path):
    """``scrapy export --format csv`` and ``scrapy dropped --format csv`` into a file or a
    pipe: the text parsed back is the stored text, ESC and every other control character
    kept (storage removes NUL: no database column keeps it)."""
    import csv
    import io

    from crawler.storage import Store

    text = f"line one\nESC {CONTROLS} end"
    stored = text.replace("\x00", "")
    db = tmp_path / "c.db"
    with Store(f"sqlite:///{db}") as store:
        crawl_id = store.start_crawl("web")
        store.write_batch([{"url": "http://a/1", "canonical_url": "http://a/1",
                            "title": f"T{CONTROLS}", "text": text, "content_hash": "h1",
                            "crawl_id": crawl_id, "status": 200}],
                          [{"url": "http://a/2", "reason": "near_duplicate",
                            "duplicate_of": "http://a/1", "distance": 1, "crawl_id": crawl_id,
                            "title": f"T{CONTROLS}", "text": text}])
    out = tmp_path / "pages.csv"
    done = scrapy("export", "--db", str(db), "-o", str(out))
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(out.open(newline="")))
    assert row["text"] == stored and row["title"] == f"T{CONTROLS}".replace("\x00", "")
    listed = subprocess.run(crawl_command(["dropped", "--db", str(db), "--format", "csv"]),
                            cwd=ROOT, capture_output=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    (drop,) = list(csv.DictReader(io.StringIO(listed.stdout.decode(), newline="")))
    assert drop["title"] == f"T{CONTROLS}".replace("\x00", "")
    assert b"\\x1b" not in listed.stdout and b"\x1b" in listed.stdout


def test_a_feed_that_could_not_be_stored_fails_the_crawl(tmp_path):
    """An FTP server that does not answer when the feed is stored at close: Scrapy logs it and
    exits 0; the crawl command says so in one line and exits 1 (the pages are in storage)."""
    from crawler.sitegen import Site
    from crawler.sitegen.server import SiteServer
    from crawler.sitegen.site import page

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pages = {"/": page("<html><body><p>the only page of the site</p></body></html>")}
    feeds = {f"ftp://user:pw@127.0.0.1:{port}/pages.jsonl": {"format": "jsonlines"}}
    with SiteServer(Site("ftp", pages)) as server:
        run = run_crawl(tmp_path, urls=[server.base_url + "/"],
                        settings={"FEEDS": json.dumps(feeds)})
    assert run.returncode == 1, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("1 feed(s) could not be stored") and "scrapy export" in last
    assert run.stored_urls() == {server.base_url + "/"}
