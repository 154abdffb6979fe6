"""WARC output (crawler.outputs.warc): real crawls of generated sites, read back with warcio and
its CLI.

The demo crawl (byte-identical copies, advert/date mirrors, canonical swaps) runs once per module
with a small ``WARC_MAX_SIZE`` so it also rotates; every archive is checked against the crawl
database: each stored page is a response record whose payload gives the stored text, each exact
copy a revisit of a stored page with the same payload digest, each near duplicate a metadata
record with the kept page and the distance.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from scrapy.http import HtmlResponse, Request
from warcio.archiveiterator import ArchiveIterator

from crawler import config
from crawler.content.text import extract, is_binary
from crawler.outputs.warc import WarcOptions, check_warc, split_output
from crawler.outputs.warc.capture import capture_of, wants_page
from crawler.outputs.warc.extension import WarcWriter
from crawler.outputs.warc.files import OPEN_SUFFIX, WarcFiles, file_name
from crawler.outputs.warc.index import index_path
from crawler.outputs.warc.records import Capture, sha1_digest
from crawler.sitegen import Site, demo_site, link_heavy_site
from crawler.sitegen.server import SiteServer
from crawler.sitegen.site import page
from crawler.vocab import EXACT_DUPLICATE, NEAR_DUPLICATE
from tests.conftest import ROOT, crawl_command, run_crawl

WARCIO = [str(Path(sys.executable).with_name("warcio"))]  # the CLI of this venv
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
def warc_settings(output: Path, **extra: Any) -> dict[str, Any]:
    """``WARC_OUTPUT`` on top of the project's settings, which list the WARC components."""
    return {"WARC_OUTPUT": f"{output}/", **extra}


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a WARC file: type, headers, HTTP head, raw payload, warc-fields."""
    out = []
    with path.open("rb") as handle:
        for record in ArchiveIterator(handle):
            http = record.http_headers
            payload = record.raw_stream.read()
            fields = {}
            if record.rec_type in ("metadata", "warcinfo"):
                for line in payload.decode("utf-8").splitlines():
                    name, _, value = line.partition(": ")
                    fields[name] = value
            out.append({"type": record.rec_type, "warc": dict(record.rec_headers.headers),
                        "http": http, "payload": payload, "fields": fields,
                        "file": path.name})  # fmt: skip
    return out


def decoded(record: dict[str, Any]) -> bytes:
    """The payload decompressed per its Content-Encoding (gzip or none here)."""
    encoding = (record["http"].get_header("Content-Encoding") or "").lower()
    if encoding in ("gzip", "x-gzip"):
        return gzip.decompress(record["payload"])
    assert encoding in ("", "identity"), encoding
    return record["payload"]


def stored_text(record: dict[str, Any]) -> str:
    """The visible text the spider would extract from the archived response."""
    url = record["warc"]["WARC-Target-URI"]
    response = HtmlResponse(url, body=decoded(record), headers=record["http"].headers)
    return extract(response.text, url, tokenize=False).text


@pytest.fixture(scope="module")
def demo_warc_server():
    """The demo site on a server of this module's own: its hits are the demo crawl's."""
    with SiteServer(demo_site()) as server:
        yield server


@pytest.fixture(scope="module")
def demo_warc(demo_warc_server, tmp_path_factory):
    """A demo crawl with WARC output rotating every 100 kB."""
    workdir = tmp_path_factory.mktemp("warc-demo")
    output = workdir / "warc"
    run = run_crawl(workdir, urls=[demo_warc_server.base_url + "/"],
                    settings=warc_settings(output, WARC_MAX_SIZE=100_000))
    assert run.returncode == 0, run.stderr[-3000:]
    files = sorted(output.glob("*.warc.gz"))
    records = [r for f in files for r in read_records(f)]
    return run, files, records


def by_type(records: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["type"] == kind:
            out[record["warc"]["WARC-Target-URI"]].append(record)
    return out


# --- end to end: the demo crawl --------------------------------------------------------------


def test_warcio_check_and_index_pass_on_every_file(demo_warc):
    _, files, records = demo_warc
    assert len(files) >= 3 and all(f.name.endswith(".warc.gz") for f in files)
    for path in files:
        check = subprocess.run([*WARCIO, "check", "-v", str(path)], capture_output=True,
                               text=True, timeout=60)  # fmt: skip
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
        assert "digest pass" in check.stdout and "fail" not in check.stdout
        index = subprocess.run([*WARCIO, "index", "-f", "warc-type,warc-target-uri,offset",
                                str(path)], capture_output=True, text=True, timeout=60)
        assert index.returncode == 0, index.stderr[-2000:]
        lines = [json.loads(line) for line in index.stdout.splitlines()]
        assert len(lines) == sum(1 for r in records if r["file"] == path.name)
        assert lines[0]["warc-type"] == "warcinfo"


def captures(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Response and revisit records by URL: what a replay tool serves."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["type"] in ("response", "revisit"):
            out[record["warc"]["WARC-Target-URI"]].append(record)
    return out


def test_every_exchange_of_the_crawl_is_archived(demo_warc_server, demo_warc):
    """Every request the site answered is a capture, whatever its status or type: redirects
    with their Location, 404s, robots.txt, the PDF and the JSON, the soft-404 probe."""
    run, _, records = demo_warc
    server = demo_warc_server
    hits = dict(server.hits)
    site = server.site
    assert len(hits) >= 180
    by_url = captures(records)
    for target, count in hits.items():
        assert len(by_url[server.base_url + target]) == count, target
    assert len(by_url) == len(hits)  # and nothing else
    status = {url: rs[0]["http"].get_statuscode() for url, rs in by_url.items()}
    kinds = {url: (rs[0]["http"].get_header("Content-Type") or "").split(";")[0]
             for url, rs in by_url.items()}  # fmt: skip
    assert site.redirects
    for source, target in site.redirects.items():
        (record,) = by_url[server.base_url + source]
        assert record["http"].get_statuscode() == "301"
        assert record["http"].get_header("Location") in (target, server.url(target))
    assert status[server.base_url + "/robots.txt"] == "200"
    assert kinds[server.base_url + "/files/annual-report-2024.pdf"] == "application/pdf"
    assert kinds[server.base_url + "/api/articles.json"] == "application/json"
    assert site.broken
    for target in site.broken:
        assert status[server.base_url + target] == "404"
    probes = [u for u, s in status.items() if s == "404" and u.removeprefix(server.base_url)
              not in site.broken]  # fmt: skip
    assert probes, "the soft-404 probe answered 404: archived"
    decided = run.stored_urls() | {url for url, _ in run.rows("SELECT url, 1 FROM dropped")}
    others = [r for url, rs in by_url.items() if url not in decided for r in rs]
    revisits = [r for r in others if r["type"] == "revisit"]  # a payload archived before
    assert run.stats["warc/exchange"] == len(others) - len(revisits) > 0


def replayed(record: dict[str, Any], ids: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The response record a replay serves for ``record``: itself, or a revisit's original."""
    if record["type"] == "revisit":
        return ids[record["warc"]["WARC-Refers-To"]]
    return record


def test_every_stored_page_replays_as_stored(demo_warc):
    run, _, records = demo_warc
    by_url = captures(records)
    ids = {r["warc"]["WARC-Record-ID"]: r for r in records if r["type"] == "response"}
    rows = run.rows("SELECT url, text FROM documents")
    assert len(rows) >= 150
    for url, text in rows:
        assert len(by_url.get(url, [])) == 1, url
        capture = by_url[url][0]
        assert capture["http"].get_statuscode() == "200"
        assert capture["warc"]["WARC-IP-Address"] == "127.0.0.1"
        record = replayed(capture, ids)
        assert record["warc"]["WARC-Payload-Digest"] == sha1_digest(record["payload"])
        assert record["warc"]["WARC-Payload-Digest"] == capture["warc"]["WARC-Payload-Digest"]
        if text is None:  # the binary body served as text/html: stored without text
            assert is_binary(decoded(record))
        else:
            assert stored_text(record) == text, url
    requests = by_type(records, "request")
    assert by_url
    for url, records_of_url in by_url.items():
        assert len(requests[url]) == len(records_of_url), url
        rec_ids = {r["warc"]["WARC-Record-ID"] for r in records_of_url}
        for request in requests[url]:
            assert request["warc"]["WARC-Concurrent-To"] in rec_ids
            assert request["payload"] == b"" and request["http"].protocol in ("GET", "HEAD")


def test_byte_identical_payloads_are_revisits_of_their_first_capture(demo_warc_server,
                                                                     demo_warc):
    """Every 2xx payload archived before (an exact copy, a stored page whose twin was stored
    first and demoted, the same file under two URLs) is a revisit of its first capture: no
    payload is in the archive twice."""
    run, _, records = demo_warc
    ids = {r["warc"]["WARC-Record-ID"]: r for r in records if r["type"] == "response"}
    revisits = by_type(records, "revisit")
    rows = run.rows("SELECT url, duplicate_of, rule FROM dropped WHERE reason = ?",
                    (EXACT_DUPLICATE,))
    assert len(rows) == len(demo_warc_server.site.exact_duplicates) == 11
    # a copy dropped as the near duplicate of a page demoted later is repointed to the page kept
    # instead, and becomes exact in the database: the archive has its metadata record
    for url, kept, rule in rows:
        if rule == "repointed":
            (note,) = by_type(records, "metadata")[url]
            assert kept_now(run, note["fields"]["duplicate-of"]) == kept
    exact = [url for url, _, rule in rows if rule is None]
    assert exact and all(url in revisits for url in exact)
    assert revisits
    for url, (revisit,) in revisits.items():
        head = revisit["warc"]
        assert head["WARC-Profile"] == REVISIT_PROFILE and revisit["payload"] == b""
        original = ids[head["WARC-Refers-To"]]
        assert original["warc"]["WARC-Target-URI"] == head["WARC-Refers-To-Target-URI"] != url
        assert original["warc"]["WARC-Date"] == head["WARC-Refers-To-Date"] <= head["WARC-Date"]
        assert original["warc"]["WARC-Payload-Digest"] == head["WARC-Payload-Digest"]
        assert revisit["http"].get_statuscode().startswith("2")
    first: dict[str, str] = {}
    for record in records:  # in file order: no 2xx payload has two response records
        if record["type"] == "response" and record["http"].get_statuscode().startswith("2") \
                and record["payload"] and "WARC-Truncated" not in record["warc"]:
            digest = record["warc"]["WARC-Payload-Digest"]
            assert digest not in first, (record["warc"]["WARC-Target-URI"], first.get(digest))
            first[digest] = record["warc"]["WARC-Target-URI"]


#: ``dropped.rule`` of a page stored first and dropped later
LATE = ("canonical", "preferred", "refreshed", "settled")


def kept_now(run, url: str) -> str:
    """Where a page the archive names as kept ended up: demoted pages (``rule`` canonical or
    refreshed) followed to the page kept instead."""
    demoted = dict(run.rows("SELECT url, duplicate_of FROM dropped WHERE rule IN "
                            "('canonical', 'preferred', 'refreshed', 'settled')"))  # fmt: skip
    for _ in range(len(demoted) + 1):
        if url not in demoted:
            return url
        url = demoted[url]
    raise AssertionError(f"demotion loop at {url}")


def test_near_duplicates_and_demotions_have_metadata_records(demo_warc):
    run, _, records = demo_warc
    metadata = by_type(records, "metadata")
    responses = by_type(records, "response")
    near = run.rows("SELECT url, duplicate_of, distance, rule FROM dropped WHERE reason = ?",
                    (NEAR_DUPLICATE,))
    assert len(near) >= 20
    for url, kept, distance, rule in near:
        fields = [m["fields"] for m in metadata[url]]
        if rule in LATE:  # stored first: its response stays, and a
            (note,) = [f for f in fields if f.get("rule") == rule]  # record says it was dropped
            (response,) = responses[url]
            (record,) = [m for m in metadata[url] if m["fields"] is note]
            assert record["warc"]["WARC-Refers-To"] == response["warc"]["WARC-Record-ID"]
        else:  # WARC_NEAR_DUPLICATES = "response" (default): the capture and its decision
            (response,) = responses[url]
            (note,) = fields
            (record,) = metadata[url]
            assert record["warc"]["WARC-Concurrent-To"] == response["warc"]["WARC-Record-ID"]
        if rule == "repointed":  # the archive names the page demoted since; its record says so
            assert kept_now(run, note["duplicate-of"]) == kept
        else:
            assert note["duplicate-of"] == kept and int(note["distance"]) == distance
        assert note["reason"] == NEAR_DUPLICATE
    # the demo's /partners/ copies name their original canonical: when a copy is stored
    # before its original arrives it is swapped (rule canonical), else dropped at once; which
    # happens depends on arrival order, so the swap is proven on its own site below


def test_rotation_leaves_closed_files_each_with_warcinfo(demo_warc):
    run, files, records = demo_warc
    assert not any(f.name.endswith(OPEN_SUFFIX) for f in files)
    infos = [r for r in records if r["type"] == "warcinfo"]
    assert [r["file"] for r in infos] == [f.name for f in files]  # one each, first
    for info, path in zip(infos, files, strict=True):
        assert info["warc"]["WARC-Filename"] == path.name
        assert info["fields"]["isPartOf"] == f"crawl {run.stats['dedup/crawl_id']}"
        assert json.loads(info["fields"]["dedup-settings"])["SIMHASH_MAX_DISTANCE"] == 3
    for path in files[:-1]:  # closed by rotation: full
        assert path.stat().st_size >= 100_000
    assert run.stats["warc/files"] == len(files)
    total = sum(f.stat().st_size for f in files)
    assert run.stats["warc/bytes"] == total - _warcinfo_bytes(files)


def test_each_closed_file_has_its_cdxj_index(demo_warc):
    """cdxj-indexer's index beside each file: sorted, one line per capture, each offset and
    length the gzip member of that capture."""
    run, files, records = demo_warc
    assert files
    for path in files:
        lines = index_path(path).read_text(encoding="utf-8").splitlines()
        keys = [line.split(" ", 2)[:2] for line in lines]
        assert keys == sorted(keys)
        entries = [json.loads(line.split(" ", 2)[2]) for line in lines]
        in_file = [r for r in records
                   if r["file"] == path.name and r["type"] in ("response", "revisit")]
        assert len(entries) == len(in_file) > 0
        with path.open("rb") as handle:
            for entry in entries:
                assert entry["filename"] == path.name
                handle.seek(int(entry["offset"]))
                member = handle.read(int(entry["length"]))
                record = next(iter(ArchiveIterator(io.BytesIO(member))))
                assert record.rec_headers.get_header("WARC-Target-URI") == entry["url"]
    assert run.stats["warc/indexes"] == len(files)


def _warcinfo_bytes(files: list[Path]) -> int:
    """Bytes of the warcinfo members (not counted in ``warc/bytes``)."""
    total = 0
    for path in files:
        with path.open("rb") as handle:
            iterator = ArchiveIterator(handle)
            next(iterator)
            iterator.read_to_end()
            total += iterator.get_record_length()
    return total


# --- raw bytes: a gzip-encoded response ---------------------------------------------------------


def test_gzip_response_is_archived_with_its_raw_bytes(tmp_path):
    text = "<html><head><title>Squeezed</title></head><body><p>{}</p></body></html>".format(
        " ".join(f"word{i}" for i in range(300)))
    raw = gzip.compress(text.encode(), mtime=0)
    pages = {"/": page('<html><body><a href="/gz">gz</a><p>root page</p></body></html>'),
             "/gz": page(text, **{"Content-Encoding": "gzip"})}
    pages["/gz"].body = raw
    with SiteServer(Site("gzip", pages)) as server:
        run = run_crawl(tmp_path / "run", urls=[server.base_url + "/"],
                        settings=warc_settings(tmp_path / "warc"))
    assert run.returncode == 0, run.stderr[-3000:]
    (path,) = (tmp_path / "warc").glob("*.warc.gz")
    (record,) = by_type(read_records(path), "response")[server.base_url + "/gz"]
    assert record["http"].get_header("Content-Encoding") == "gzip"
    assert record["payload"] == raw  # as received, not decompressed
    assert record["warc"]["WARC-Payload-Digest"] == sha1_digest(raw)
    (stored,) = run.rows("SELECT text FROM documents WHERE url = ?", (server.base_url + "/gz",))
    assert stored_text(record) == stored[0] and "word299" in stored[0]
    check = subprocess.run([*WARCIO, "check", str(path)], capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout


def small_site_crawl(tmp_path: Path, **settings: Any) -> tuple[Any, SiteServer, Path]:
    """A crawl of a four-page site with a 60 kB page, a PDF and a broken link."""
    big = "<html><head><title>Big</title></head><body><p>{}</p></body></html>".format(
        " ".join(f"word{i}" for i in range(8000)))
    pages = {"/": page('<html><body><a href="/big">big</a> <a href="/doc.pdf">pdf</a> '
                       '<a href="/gone">gone</a><p>the root page of the site</p></body></html>'),
             "/big": page(big),
             "/doc.pdf": page("%PDF-1.4 not really", "application/pdf")}  # fmt: skip
    with SiteServer(Site("small", pages)) as server:
        run = run_crawl(tmp_path / "run", urls=[server.base_url + "/"],
                        settings=warc_settings(tmp_path / "warc", **settings))
    assert run.returncode == 0, run.stderr[-3000:]
    return run, server, tmp_path / "warc"


def test_a_copy_swapped_for_its_canonical_original_keeps_its_response_and_a_note(tmp_path):
    """The original is linked only from the copy, so the copy is stored first, whatever the
    order of the rest: the swap writes a metadata record referring to the copy's response."""
    body = "<p>{}</p>".format(" ".join(f"story word{i}" for i in range(200)))
    copy = ('<html><head><link rel="canonical" href="/orig"></head><body>'
            f'<a href="/orig">original</a>{body}<p>syndicated</p></body></html>')  # fmt: skip
    pages = {"/": page('<html><body><a href="/copy">copy</a><p>root of the site</p>'
                       "</body></html>"),
             "/copy": page(copy),
             "/orig": page(f"<html><body>{body}</body></html>")}  # fmt: skip
    for concurrency in (1, 8):
        out = tmp_path / f"c{concurrency}"
        with SiteServer(Site("swap", pages)) as server:
            run = run_crawl(out / "run", urls=[server.base_url + "/"],
                            settings=warc_settings(out / "warc",
                                                   CONCURRENT_REQUESTS=concurrency))
        assert run.returncode == 0, run.stderr[-3000:]
        (row,) = run.rows("SELECT url, duplicate_of, rule FROM dropped")
        assert row == (server.base_url + "/copy", server.base_url + "/orig", "canonical")
        records = [r for f in (out / "warc").glob("*.warc.gz") for r in read_records(f)]
        (response,) = by_type(records, "response")[server.base_url + "/copy"]
        (note,) = by_type(records, "metadata")[server.base_url + "/copy"]
        assert note["fields"]["rule"] == "canonical"
        assert note["fields"]["duplicate-of"] == server.base_url + "/orig"
        assert note["warc"]["WARC-Refers-To"] == response["warc"]["WARC-Record-ID"]


def test_a_payload_over_the_cap_is_truncated_and_says_so(tmp_path):
    run, server, output = small_site_crawl(tmp_path, WARC_RECORD_MAX_BYTES=10_000)
    (path,) = output.glob("*.warc.gz")
    responses = by_type(read_records(path), "response")
    (big,) = responses[server.base_url + "/big"]
    assert big["warc"]["WARC-Truncated"] == "length" and len(big["payload"]) == 10_000
    assert big["warc"]["WARC-Payload-Digest"] == sha1_digest(big["payload"])
    (small,) = responses[server.base_url + "/"]
    assert "WARC-Truncated" not in small["warc"]
    assert run.stats["warc/truncated"] == 1
    (stored,) = run.rows("SELECT text FROM documents WHERE url = ?", (server.base_url + "/big",))
    assert "word7999" in stored[0]  # the page itself is whole
    check = subprocess.run([*WARCIO, "check", str(path)], capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout


def test_wacz_packages_the_files_with_their_index_and_pages(tmp_path):
    run, server, output = small_site_crawl(tmp_path, WARC_WACZ=True, WARC_MAX_SIZE=2_000)
    warcs = sorted(output.glob("*.warc.gz"))
    (package,) = output.glob("*.wacz")
    assert len(warcs) >= 2 and not list(output.glob("*.open"))
    with zipfile.ZipFile(package) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        assert all(info.compress_type == zipfile.ZIP_STORED for info in infos.values())
        for warc in warcs:
            assert archive.read(f"archive/{warc.name}") == warc.read_bytes()
        merged = sorted(line for w in warcs
                        for line in index_path(w).read_text(encoding="utf-8").splitlines())
        assert archive.read("indexes/index.cdx").decode().splitlines() == merged
        pages = [json.loads(line) for line in archive.read("pages/pages.jsonl").splitlines()]
        assert pages[0]["format"] == "json-pages-1.0"
        assert {p["url"] for p in pages[1:]} == run.stored_urls() == {
            server.base_url + "/", server.base_url + "/big"}
        package_json = archive.read("datapackage.json")
        meta = json.loads(package_json)
        assert meta["wacz_version"] == "1.1.1" and meta["title"].startswith("crawl ")
        resources = {r["path"]: r for r in meta["resources"]}
        assert set(resources) == set(infos) - {"datapackage.json", "datapackage-digest.json"}
        for name, resource in resources.items():
            assert re.fullmatch(r"[-a-z0-9._/]+", resource["name"])  # Frictionless names
            data = archive.read(name)
            assert resource["bytes"] == len(data)
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
        digest = json.loads(archive.read("datapackage-digest.json"))
        assert digest["hash"] == "sha256:" + hashlib.sha256(package_json).hexdigest()
    assert run.stats["warc/wacz"] == 1 and run.stats["warc/indexes"] == len(warcs)


# --- a crawl killed with SIGKILL ------------------------------------------------------------------


def complete_prefix(path: Path) -> tuple[int, int]:
    """``(records, bytes)`` of the records that read back whole from the start of ``path``."""
    count = end = 0
    with path.open("rb") as handle:
        iterator = ArchiveIterator(handle, check_digests=True)
        try:
            for record in iterator:
                record.raw_stream.read()
                iterator.read_to_end(record)
                count += 1
                end = iterator.get_record_offset() + iterator.get_record_length()
        except Exception:  # a torn last member: the records before it count
            pass
    return count, end


@pytest.mark.slow
def test_sigkill_leaves_closed_files_and_a_readable_open_file(tmp_path):
    output = tmp_path / "warc"
    site = link_heavy_site(pages=3000, links_per_page=20)
    with SiteServer(site) as server:
        settings = {**warc_settings(output, WARC_MAX_SIZE=60_000),
                    "STORAGE_URL": f"sqlite:///{tmp_path / 'crawl.db'}",
                    "DROPPED_LOG": tmp_path / "dropped.jsonl", "DOWNLOAD_DELAY": 0,
                    "LOG_LEVEL": "WARNING", "STORAGE_BATCH_SECONDS": 0.2}  # fmt: skip
        args = ["crawl", "web", "-a", f"urls={server.base_url}/"]
        for key, value in settings.items():
            args += ["-s", f"{key}={value}"]
        log = (tmp_path / "crawl.log").open("w")
        proc = subprocess.Popen(crawl_command(args), cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        try:
            while True:
                names = [p.name for p in output.iterdir()] if output.exists() else []
                closed = [n for n in names if n.endswith(".warc.gz")]
                if len(closed) >= 2 and any(n.endswith(OPEN_SUFFIX) for n in names):
                    break
                assert proc.poll() is None, (tmp_path / "crawl.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "no rotation within 60 s"
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(30)
            log.close()
    # a kill can land inside an atomic write of the CDXJ index: its temp file is not a WARC
    files = sorted(f for f in output.iterdir() if not f.name.endswith(".tmp"))
    open_files = [f for f in files if f.name.endswith(OPEN_SUFFIX)]
    assert len(open_files) == 1
    for path in files:
        if path in open_files:
            continue
        check = subprocess.run([*WARCIO, "check", str(path)], capture_output=True, timeout=60)
        assert check.returncode == 0, (path, check.stdout)
    (torn,) = open_files
    count, end = complete_prefix(torn)
    size = torn.stat().st_size
    assert count >= 2 or size == 0  # the warcinfo and a page, or killed right after creation
    if end:
        copy = tmp_path / "prefix.warc.gz"
        copy.write_bytes(torn.read_bytes()[:end])
        check = subprocess.run([*WARCIO, "check", str(copy)], capture_output=True, timeout=60)
        assert check.returncode == 0, check.stdout
    assert size - end < 60_000  # at most the capture being written is missing


# --- settings -------------------------------------------------------------------------------------


def test_check_warc_refuses_an_unwritable_output_in_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(config.SettingError) as caught:
        check_warc({"WARC_OUTPUT": f"{blocker}/warcs/"})
    message = str(caught.value)
    assert "\n" not in message and message.startswith("setting WARC_OUTPUT=")
    assert "writable" in message and "Not a directory" in message
    check_warc({"WARC_OUTPUT": ""})  # off: nothing checked
    check_warc({"WARC_OUTPUT": f"{tmp_path}/new/dir/"})
    assert (tmp_path / "new" / "dir").is_dir() and not any((tmp_path / "new" / "dir").iterdir())


@pytest.mark.parametrize(("name", "value"), [("WARC_MAX_SIZE", 0), ("WARC_MAX_SIZE", "1GB"),
                                             ("WARC_NEAR_DUPLICATES", "revisit"),
                                             ("WARC_RECORD_MAX_BYTES", -1),
                                             ("WARC_CDXJ", "perhaps")])
def test_bad_warc_settings_name_the_setting(name, value):
    with pytest.raises(config.SettingError, match=f"setting {name}="):
        WarcOptions.from_settings({"WARC_OUTPUT": "out/", name: value})


def test_wacz_needs_an_output_and_an_existing_file_is_no_output(tmp_path):
    with pytest.raises(config.SettingError, match=r"setting WARC_WACZ=.*WARC_OUTPUT set"):
        WarcOptions.from_settings({"WARC_WACZ": True})
    existing = tmp_path / "archive.warc.gz"
    existing.write_bytes(b"")
    with pytest.raises(config.SettingError, match="not an existing file"):
        WarcOptions.from_settings({"WARC_OUTPUT": str(existing)})
    assert WarcOptions.from_settings({"WARC_OUTPUT": str(tmp_path / "run1")}).prefix == "run1"


def test_output_is_a_directory_or_a_prefix(tmp_path):
    assert split_output(f"{tmp_path}/w/", "bot") == (tmp_path / "w", "bot")
    assert split_output(str(tmp_path), "bot") == (tmp_path, "bot")  # an existing directory
    assert split_output(f"{tmp_path}/run1", "bot") == (tmp_path, "run1")


# --- the pieces, without a crawl ------------------------------------------------------------------


def _capture(url: str, body: bytes, date: str = "2026-01-02T03:04:05.000006Z") -> Capture:
    request = Request(url, callback=lambda r: None)
    response = HtmlResponse(url, body=body, headers={"Content-Type": "text/html"},
                            request=request)  # fmt: skip
    assert wants_page(request, response)
    capture = capture_of(request, response)
    capture.date = date
    return capture


def test_files_get_unique_names_and_rotate_by_size(tmp_path):
    files = WarcFiles(tmp_path, "pre", max_size=1, info=lambda: {"software": "test"})
    first = files.path
    for i in range(3):
        files.write(list(files.builder.exchange(_capture(f"http://h/{i}", b"<p>x</p>"))))
        assert files.path is not None and files.path.with_name(
            files.path.name + OPEN_SUFFIX).exists()
    files.close()
    files.close()  # idempotent
    names = sorted(p.name for p in tmp_path.iterdir())
    assert first is None and len(names) == 3 == len(set(names))
    assert all(n.startswith("pre-") and n.endswith(f"~{files.host}.warc.gz") for n in names)
    assert [n.split("-")[2] for n in names] == ["00000", "00001", "00002"]
    assert names == [p.name for p in files.closed_files]


def test_file_name_pattern():
    from datetime import UTC, datetime

    opened = datetime(2026, 1, 2, 3, 4, 5, 678900, tzinfo=UTC)
    assert file_name("crawl", opened, 7, 42, "node~1") == \
        "crawl-20260102030405678-00007-42~node_1.warc.gz"


def test_revisit_needs_identical_bytes(tmp_path):
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files, memory=2)
    kept = _capture("http://h/kept", b"<p>same text</p>")
    writer.stored(kept)
    copy = _capture("http://h/copy", b"<p>same text</p>")
    respelled = _capture("http://h/respelled", b"<p>same  text</p>")
    elsewhere = _capture("http://h/other-worker", b"<p>other</p>")
    row = {"reason": EXACT_DUPLICATE, "distance": 0}
    writer.dropped(copy, {**row, "url": copy.url, "duplicate_of": kept.url})
    writer.dropped(respelled, {**row, "url": respelled.url, "duplicate_of": kept.url})
    writer.dropped(elsewhere, {**row, "url": elsewhere.url, "duplicate_of": "http://x/gone"})
    for i in range(2):  # the kept page falls out of a memory of 2
        writer.stored(_capture(f"http://h/new{i}", f"<p>{i}</p>".encode()))
    late = _capture("http://h/late-copy", b"<p>same text</p>")
    writer.dropped(late, {**row, "url": late.url, "duplicate_of": kept.url})
    files.close()
    (path,) = tmp_path.iterdir()
    records = read_records(path)
    revisits, metadata = by_type(records, "revisit"), by_type(records, "metadata")
    assert set(revisits) == {copy.url}
    assert revisits[copy.url][0]["warc"]["WARC-Refers-To-Date"] == kept.date
    assert "payload differs" in metadata[respelled.url][0]["fields"]["note"]
    for url in (elsewhere.url, late.url):
        assert "not archived by this process" in metadata[url][0]["fields"]["note"]


def test_near_duplicate_in_response_mode_keeps_the_page_and_a_note(tmp_path):
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files, near_duplicates="response")
    mirror = _capture("http://h/mirror", b"<p>text and an advert</p>")
    writer.dropped(mirror, {"url": mirror.url, "reason": NEAR_DUPLICATE, "distance": 2,
                            "duplicate_of": "http://h/kept", "simhash": 5,
                            "duplicate_simhash": 6})  # fmt: skip
    files.close()
    (path,) = tmp_path.iterdir()
    records = read_records(path)
    (response,) = by_type(records, "response")[mirror.url]
    (note,) = by_type(records, "metadata")[mirror.url]
    assert response["payload"] == mirror.body
    assert note["warc"]["WARC-Concurrent-To"] == response["warc"]["WARC-Record-ID"]
    assert note["fields"]["duplicate-of"] == "http://h/kept"
    assert note["fields"]["distance"] == "2" and note["fields"]["simhash"] == f"{5:016x}"


def test_an_exchange_with_a_payload_archived_before_is_a_revisit(tmp_path):
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files)
    first = _capture("http://h/a.pdf", b"%PDF same bytes")
    writer.exchange(first)
    again = _capture("http://h/b.pdf", b"%PDF same bytes", date="2026-01-02T03:04:06.000000Z")
    empty = [_capture(f"http://h/moved{i}", b"") for i in range(2)]  # nothing to refer to
    errors = [_capture(f"http://h/gone{i}", b"not found") for i in range(2)]
    for capture in errors:
        capture.status = 404  # an error page replays whole: never a revisit
    for capture in (again, *empty, *errors):
        writer.exchange(capture)
    files.close()
    (path,) = tmp_path.glob("*.warc.gz")
    records = read_records(path)
    (response,) = by_type(records, "response")[first.url]
    (revisit,) = by_type(records, "revisit")[again.url]
    assert revisit["warc"]["WARC-Refers-To"] == response["warc"]["WARC-Record-ID"]
    assert revisit["warc"]["WARC-Refers-To-Target-URI"] == first.url
    assert revisit["warc"]["WARC-Refers-To-Date"] == first.date
    assert set(by_type(records, "revisit")) == {again.url}
    assert all(len(by_type(records, "response")[c.url]) == 1 for c in (*empty, *errors))


def test_the_middleware_sends_every_exchange_and_keeps_pages_for_their_fate():
    from scrapy.utils.test import get_crawler

    from crawler import signals as dedup_signals
    from crawler.meta import WARC_CAPTURE as CAPTURE_META
    from crawler.outputs.warc.capture import RawCaptureMiddleware

    crawler = get_crawler(settings_dict={"WARC_OUTPUT": "out/"})
    crawler._apply_settings()  # stats and the fingerprinter, as a crawl start makes them
    sent: list[Any] = []
    crawler.signals.connect(lambda capture, **_: sent.append(capture),
                            signal=dedup_signals.exchange_captured, weak=False)
    middleware = RawCaptureMiddleware.from_crawler(crawler)
    page = Request("http://h/page", callback=lambda r: None)
    html = HtmlResponse(page.url, body=b"<p>x</p>", headers={"Content-Type": "text/html"},
                        request=page)  # fmt: skip
    middleware.process_response(page, html)
    assert page.meta[CAPTURE_META].status == 200 and not sent  # waits for its fate
    # a meta refresh made a new request of the 200, meta copied: the earlier capture goes out
    follow = page.replace(url="http://h/next")
    missing = HtmlResponse(follow.url, status=404, body=b"gone", request=follow)
    middleware.process_response(follow, missing)
    assert [(c.url, c.status) for c in sent] == [("http://h/page", 200), ("http://h/next", 404)]
    assert CAPTURE_META not in follow.meta
    moved = HtmlResponse("http://h/old", status=301, headers={"Location": "/new"},
                         request=Request("http://h/old", callback=lambda r: None))  # fmt: skip
    cached = HtmlResponse("http://h/c", body=b"<p>c</p>", flags=["cached"],
                          request=Request("http://h/c", callback=lambda r: None))  # fmt: skip
    middleware.process_response(moved.request, moved)
    middleware.process_response(cached.request, cached)
    assert [c.url for c in sent][2:] == ["http://h/old"]  # the cache replay is no exchange
    assert ("Location", "/new") in sent[2].headers


def test_a_page_the_settle_step_stores_again_gets_a_kept_record(tmp_path):
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files)
    mirror = _capture("http://h/mirror", b"<p>text and an advert</p>")
    writer._pending["fp-mirror"] = mirror
    writer.batch_committed(fingerprints=["fp-mirror"], documents=[], dropped=[
        {"url": mirror.url, "reason": NEAR_DUPLICATE, "distance": 2, "rule": None,
         "duplicate_of": "http://h/kept", "simhash": 5, "duplicate_simhash": 6}])
    writer.batch_committed(fingerprints=[], documents=[mirror.url], dropped=[
        {"url": mirror.url, "reason": "kept", "distance": None, "rule": "settled",
         "duplicate_of": None, "simhash": 5, "duplicate_simhash": None}])
    files.close()
    (path,) = tmp_path.glob("*.warc.gz")
    records = read_records(path)
    assert len(by_type(records, "response")[mirror.url]) == 1  # written once, when dropped
    duplicate, kept = by_type(records, "metadata")[mirror.url]
    assert duplicate["fields"]["duplicate-of"] == "http://h/kept"
    assert kept["fields"]["reason"] == "kept" and kept["fields"]["rule"] == "settled"
    assert "stored again" in kept["fields"]["note"]


def test_an_index_that_fails_is_one_error_line_and_the_crawl_goes_on(tmp_path, caplog):
    from crawler.outputs.warc import WarcOptions
    from crawler.outputs.warc.index import Packaging

    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    good = _capture("http://h/page", b"<p>a page</p>")
    WarcWriter(files).stored(good)
    files.close()
    (warc,) = files.closed_files
    broken = tmp_path / "broken.warc.gz"  # gone before its index was made (a cleanup job)
    options = WarcOptions("out/", tmp_path, "t", 10**9, "response", wacz=True)
    packaging = Packaging(options, files, "test", lambda: "a crawl")
    with caplog.at_level("ERROR", logger="crawler.outputs.warc.index"):
        packaging.file_closed(warc, 0)
        packaging.file_closed(broken, 0)
        packaging.finish()
    assert packaging.indexes == [index_path(warc)] and packaging.failed == [broken]
    (message,) = [r.getMessage() for r in caplog.records if r.name == "crawler.outputs.warc.index"]
    assert "broken.warc.gz" in message and "\n" not in message
    assert not index_path(broken).exists()
    (package,) = packaging.packages  # the whole file is still packaged
    with zipfile.ZipFile(package) as archive:
        assert f"archive/{warc.name}" in archive.namelist()


# --- the review's cases: nothing lost, nothing altered ---------------------------------------


def _cut(url: str, body: bytes, cap: int) -> Capture:
    request = Request(url, callback=lambda r: None)
    response = HtmlResponse(url, body=body, headers={"Content-Type": "application/pdf"},
                            request=request)  # fmt: skip
    return capture_of(request, response, max_bytes=cap)


def test_a_truncated_capture_is_never_a_revisit_nor_a_target(tmp_path):
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files)
    first = _cut("http://h/a.pdf", b"A" * 100 + b"first tail", 50)
    other = _cut("http://h/b.pdf", b"A" * 100 + b"another, different tail", 50)
    assert first.truncated == other.truncated == "length"
    assert first.payload_digest == other.payload_digest  # the first 50 bytes agree
    writer.exchange(first)
    writer.exchange(other)
    writer.stored(_cut("http://h/page", b"B" * 80, 10))
    copy = _cut("http://h/copy", b"B" * 90, 10)
    writer.dropped(copy, {"url": copy.url, "reason": EXACT_DUPLICATE, "distance": 0,
                          "duplicate_of": "http://h/page"})  # fmt: skip
    files.close()
    (path,) = tmp_path.glob("*.warc.gz")
    records = read_records(path)
    assert not by_type(records, "revisit")
    for url in ("http://h/a.pdf", "http://h/b.pdf", "http://h/page", "http://h/copy"):
        (record,) = by_type(records, "response")[url]
        assert record["warc"]["WARC-Truncated"] == "length"


def test_header_bytes_are_archived_as_received(tmp_path):
    """A UTF-8 Location and a Latin-1 cookie: warcio's own form would %-encode both (another
    URL, another cookie); the record keeps the bytes."""
    request = Request("http://user:secret@h/old", callback=lambda r: None,
                      headers={"Proxy-Authorization": "Basic dTpw", "Cookie": "a=1"})
    response = HtmlResponse("http://h/old", status=301, request=request, body=b"",
                            headers={"Location": b"/caf\xc3\xa9", "Set-Cookie": b"k=\xe9"})
    response.protocol = "h2"
    capture = capture_of(request, response)
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    WarcWriter(files).exchange(capture)
    files.close()
    (path,) = tmp_path.glob("*.warc.gz")
    raw = gzip.decompress(path.read_bytes())
    assert b"\r\nLocation: /caf\xc3\xa9\r\n" in raw and b"\r\nSet-Cookie: k=\xe9\r\n" in raw
    assert b"HTTP/1.1 301 Moved Permanently\r\n" in raw and b"GET /old HTTP/1.1\r\n" in raw
    assert b"Host: h\r\n" in raw and b"secret" not in raw  # no user:password in Host
    assert b"Proxy-Authorization" not in raw and b"Cookie: a=1\r\n" in raw
    check = subprocess.run([*WARCIO, "check", str(path)], capture_output=True, timeout=60)
    assert check.returncode == 0, check.stdout  # the digests cover those bytes


def test_a_failed_write_is_cut_back_and_later_records_read(tmp_path, monkeypatch):
    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files)
    writer.exchange(_capture("http://h/1", b"<p>one</p>"))
    real_write, failures = os.write, [1]

    def full_disk(fd: int, data: Any) -> int:
        if failures:  # half a record goes out, then the disk is full
            failures.pop()
            real_write(fd, bytes(data[:100]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("crawler.outputs.warc.files.os.write", full_disk)
    writer.exchange(_capture("http://h/2", b"<p>two</p>"))  # lost, with one error line
    writer.exchange(_capture("http://h/3", b"<p>three</p>"))
    files.close()
    (path,) = tmp_path.glob("*.warc.gz")
    records = read_records(path)  # every record reads back: no torn member in the middle
    assert [r["warc"].get("WARC-Target-URI") for r in records if r["type"] == "response"] == [
        "http://h/1", "http://h/3"]
    assert writer.files.size == path.stat().st_size


def test_a_page_fetched_twice_or_refreshed_away_is_still_archived(tmp_path):
    from scrapy.http import Response

    from crawler.exceptions import Undecided
    from crawler.meta import WARC_CAPTURE as CAPTURE_META

    files = WarcFiles(tmp_path, "t", max_size=10**9, info=dict)
    writer = WarcWriter(files)
    page = Request("http://h/page", callback=lambda r: None)
    for body in (b"<p>first fetch</p>", b"<p>second fetch</p>"):  # a lease requeued
        page.meta[CAPTURE_META] = _capture(page.url, body)
        writer.response_received(Response(page.url, request=page), page)
    refresh = Request("http://h/refresh", callback=lambda r: None)
    refresh.meta[CAPTURE_META] = _capture(refresh.url, b"<meta http-equiv=refresh>")
    writer.request_scheduled(refresh.replace(url="http://h/next"))  # the meta came along
    undecided = Request("http://h/outage", callback=lambda r: None)
    undecided.meta[CAPTURE_META] = _capture(undecided.url, b"<p>database down</p>")
    response = Response(undecided.url, request=undecided)
    writer.response_received(response, undecided)
    writer.item_failed(None, response, Undecided(undecided.url, "storage unavailable"))
    assert list(writer._pending) == [writer._fingerprint(page)]  # the second fetch waits
    files.close()
    (path,) = tmp_path.glob("*.warc.gz")
    responses = by_type(read_records(path), "response")
    assert responses["http://h/page"][0]["payload"] == b"<p>first fetch</p>"
    assert set(responses) == {"http://h/page", "http://h/refresh", "http://h/outage"}
