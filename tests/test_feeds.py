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

from crawler.feeds import FeedError, check_feeds, export_fields
from crawler.formats import mask_url
from crawler.items import EXPORT_FIELDS
from crawler.preflight import UnknownSettingError, check_unknown_settings, known_setting_names
from tests.conftest import ROOT, crawl_command

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
    code = ("from scrapy.settings import Settings\nfrom crawler.feeds import check_feeds\n"
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def s3_server(tmp_path):
    moto = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if moto is None:
        pytest.skip("moto_server not installed (pip install -e '.[test]')")
    port = _free_port()
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
    # The bucket holds every stored page and no dropped one. A copy stored before the page it
    # is a duplicate of was preferred (named canonical, a shorter URL...) was exported when it
    # was stored; the swap is in the dropped table (and the drop log)
    demoted = {r[0] for r in run.rows("SELECT url FROM dropped WHERE rule IN "
                                      "('canonical', 'preferred', 'refreshed', 'settled')")}
    assert set(exported_urls) == run.stored_urls() | demoted
    dropped = {r[0] for r in run.rows("SELECT url FROM dropped")} - demoted
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
