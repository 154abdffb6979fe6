"""``scrapy dedupreport`` and crawler.report: numbers, what-if replay, HTML, a real browser.

The report of one real demo crawl (a subprocess, once per module) is parsed with
``html.parser`` and compared with the database; hand-made databases check the replay and the
error paths. The browser test renders the page in headless Chromium (Debian ``chromium``): it
fails in CI when the browser is missing and skips elsewhere.
"""

from __future__ import annotations

import html
import json
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler import report
from crawler.dedup.overrides import Overrides, read_file
from crawler.report.html import render_html
from crawler.report.markup import human
from crawler.review import CrawlDB, ReviewError
from crawler.sitegen.orderweb import order_web
from crawler.sitegen.server import serve_web
from crawler.storage import Store
from tests.conftest import IN_CI, ROOT, CrawlRun, run_crawl
from tests.test_overrides import slugs
from tests.test_review import build_db

KEPT_RGB = (0x4C, 0x78, 0xA8)


@pytest.fixture(scope="module")
def demo_report(demo_crawl: CrawlRun, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("report")
    html_path, json_path = out / "report.html", out / "report.json"
    for fmt, path in (("html", html_path), ("json", json_path)):
        proc = subprocess.run(
            [str(ROOT / ".venv/bin/scrapy"), "dedupreport", "--db", str(demo_crawl.db_path),
             "--format", fmt, "-o", str(path)], cwd=ROOT, capture_output=True, text=True,
            timeout=120)
        assert proc.returncode == 0, proc.stderr
    return {"html": html_path, "data": json.loads(json_path.read_text()),
            "page": Page.parse(html_path.read_text())}


class Page(HTMLParser):
    """Text by element id, attributes of rows and bars, and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, str] = {}
        self.rows: list[dict[str, str]] = []
        self.bars: list[dict[str, str]] = []
        self.tags: list[tuple[str, dict[str, str]]] = []
        self._open: list[tuple[str | None, list[str]]] = []
        self._row: list[str] | None = None
        self._in_cell = False

    @classmethod
    def parse(cls, text: str) -> Page:
        page = cls()
        page.feed(text)
        page.close()
        return page

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "g" and "bar" in a.get("class", ""):
            self.bars.append(a)
        if tag == "tr":
            self._row = []
            self.rows.append({**a, "_cells": self._row})  # type: ignore[dict-item]
        if tag in ("td", "th") and self._row is not None:
            self._row.append("")
            self._in_cell = True
        if tag not in ("rect", "line", "meta", "br"):
            self._open.append((a.get("id"), []))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._in_cell = False
        if tag == "tr":
            self._row = None
        if tag in ("rect", "line", "meta", "br") or not self._open:
            return
        ident, parts = self._open.pop()
        if ident:
            self.by_id[ident] = "".join(parts).strip()
        if self._open:
            self._open[-1][1].extend(parts)

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][1].append(data)
        if self._row and self._in_cell:
            self._row[-1] += data

    def row(self, **attrs: str) -> list[str]:
        found = [r for r in self.rows if all(r.get(k) == v for k, v in attrs.items())]
        assert len(found) == 1, attrs
        return found[0]["_cells"]  # type: ignore[return-value]


def _count(run: CrawlRun, sql: str) -> int:
    return run.rows(sql)[0][0]


# --- the demo crawl's report --------------------------------------------------------------


def test_report_numbers_equal_the_database(demo_crawl: CrawlRun, demo_report: dict) -> None:
    page = demo_report["page"]
    kept = _count(demo_crawl, "SELECT COUNT(*) FROM documents")
    exact = _count(demo_crawl, "SELECT COUNT(*) FROM dropped WHERE reason = 'exact_duplicate'")
    near = _count(demo_crawl, "SELECT COUNT(*) FROM dropped WHERE reason = 'near_duplicate'")
    assert int(page.by_id["total-kept"]) == kept > 0
    assert int(page.by_id["total-exact_duplicate"]) == exact
    assert int(page.by_id["total-near_duplicate"]) == near
    assert int(page.by_id["total-dropped"]) == exact + near
    assert int(page.by_id["total-pages"]) == kept + exact + near
    (host,) = {r["host"] for r in demo_report["data"]["by_host"]}
    assert page.row(**{"data-host": host})[1:] == [
        str(kept + exact + near), str(kept), str(exact), str(near),
        f"{(exact + near) / (kept + exact + near):.1%}"]
    assert page.row(**{"data-reason": "near_duplicate"})[1] == str(near)


def test_what_if_row_for_the_crawls_threshold_equals_the_drops(
        demo_crawl: CrawlRun, demo_report: dict) -> None:
    data, page = demo_report["data"], demo_report["page"]
    k = data["threshold"]
    dropped = _count(demo_crawl, "SELECT COUNT(*) FROM dropped")
    assert dropped > 0, "the dedup pipeline dropped nothing on the demo site"
    cells = page.row(**{"data-threshold": str(k)})
    assert int(cells[1]) == dropped and cells[5] == "+0"
    rows = [r["threshold"] for r in data["what_if"]["rows"]]
    assert rows == list(range(len(rows))) and rows[-1] >= k + 8
    assert data["what_if"]["mismatches"] == 0
    drops = [r["dropped"] for r in data["what_if"]["rows"]]
    assert drops == sorted(drops), "a looser threshold never drops fewer pages"


@pytest.fixture(scope="module")
def ruled_crawl(demo_server: Any, tmp_path_factory: pytest.TempPathFactory) -> CrawlRun:
    """The demo site crawled with a rules file that drops every page under /section/."""
    workdir = tmp_path_factory.mktemp("ruled")
    rules = workdir / "rules.txt"
    rules.write_text(f"drop {demo_server.base_url}/section/*\n")
    run = run_crawl(workdir, urls=[demo_server.base_url + "/"],
                    settings={"DEDUP_OVERRIDES_FILE": str(rules)})
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_pages_a_persons_rule_dropped_have_their_own_row(ruled_crawl: CrawlRun) -> None:
    """A drop rule's pages count in the pages decided (the totals add up) and nowhere in the
    duplicate rate, the histogram or the what-if: no page was compared with them, so the
    replay reproduces the crawl (it kept them when they were in it: a mismatch each)."""
    by_person = _count(ruled_crawl, "SELECT COUNT(*) FROM dropped WHERE reason = 'override'")
    kept = _count(ruled_crawl, "SELECT COUNT(*) FROM documents")
    exact = _count(ruled_crawl, "SELECT COUNT(*) FROM dropped WHERE reason = 'exact_duplicate'")
    near = _count(ruled_crawl, "SELECT COUNT(*) FROM dropped WHERE reason = 'near_duplicate'")
    rows = _count(ruled_crawl, "SELECT COUNT(*) FROM dropped")
    assert by_person > 0 and exact + near > 0 and rows == exact + near + by_person
    with CrawlDB.open(str(ruled_crawl.db_path)) as db:
        data = report.build_report(db)
    totals = data["totals"]
    assert data["what_if"]["mismatches"] == 0
    assert totals["duplicate_rate"] == round((exact + near) / (kept + exact + near), 4)
    assert totals["override"] == by_person and totals["soft_404"] == 0
    assert totals["pages"] == kept + rows == (totals["kept"] + totals["dropped"]
                                              + totals["soft_404"] + totals["override"])
    assert totals["compared"] == kept + exact + near
    assert data["histogram"]["pages"] + data["histogram"]["without_fingerprint"] \
        + data["histogram"]["isolated"] == kept + exact + near
    (host,) = data["by_host"]
    assert (host["pages"], host["override"], host["duplicate_rate"]) == (
        totals["pages"], by_person, totals["duplicate_rate"])
    page = Page.parse(render_html(data))
    assert int(page.by_id["total-override"]) == by_person
    assert page.row(**{"data-host": host["host"]})[5:] == [
        str(by_person), f"{(exact + near) / (kept + exact + near):.1%}"]
    assert page.by_id["duplicate-rate"] == (
        f"{(exact + near) / (kept + exact + near):.1%} of {kept + exact + near} pages compared "
        f"(the {by_person} a person's rule dropped left out)")


def test_histogram_has_one_bar_per_distance_bucket(demo_report: dict) -> None:
    page, hist = demo_report["page"], demo_report["data"]["histogram"]
    bars = [(int(b["data-distance"]), int(b["data-kept"]), int(b["data-dropped"]))
            for b in page.bars]
    assert bars == [(b["distance"], b["kept"], b["dropped"]) for b in hist["buckets"]]
    assert [d for d, _, _ in bars] == list(range(len(bars)))
    assert sum(k + d for _, k, d in bars) == hist["pages"] > 0
    assert sum(d for _, _, d in bars) > 0, "dropped pages are drawn"


def test_html_is_self_contained(demo_crawl: CrawlRun, demo_report: dict) -> None:
    text = demo_report["html"].read_text()
    tags = demo_report["page"].tags
    assert not [t for t, a in tags if t in ("script", "link", "img", "iframe")]
    assert not [a for _, a in tags if "src" in a]
    hrefs = {a["href"] for t, a in tags if "href" in a}
    crawled = {row[0] for row in demo_crawl.rows("SELECT url FROM documents UNION "
                                                 "SELECT url FROM dropped")}
    assert hrefs and hrefs <= crawled, "links only to the crawled pages"
    assert "url(" not in text and "@import" not in text


def test_near_misses_are_kept_pairs_beyond_k(demo_crawl: CrawlRun, demo_report: dict) -> None:
    data = demo_report["data"]
    kept = {row[0] for row in demo_crawl.rows("SELECT url FROM documents")}
    k = data["threshold"]
    for miss in data["near_misses"]["listed"]:
        assert {miss["a"], miss["b"]} <= kept and k < miss["distance"] <= k + 3
        assert miss["command"].startswith("scrapy dropped --db ")


# --- a real browser ----------------------------------------------------------------------------


def _browser() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if IN_CI:
            pytest.fail("chromium is not installed (CI: .ci/run installs the Debian package)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


def _chromium(browser: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'profile'}", "--window-size=1000,1400"]
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=90)


def png_pixels(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw rows) of an 8-bit RGB/RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * bpp
    out, prev = bytearray(), bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for x in range(stride) if kind else ():
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return width, height, bpp, bytes(out)


# --- hand-made databases --------------------------------------------------------------------


def test_replay_reproduces_a_hand_made_crawl(tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")  # drops at distance 0 (exact), 2 and 3; k = 3
    with CrawlDB.open(str(info["path"])) as db:
        data = report.build_report(db)
    rows = {r["threshold"]: r for r in data["what_if"]["rows"]}
    assert data["what_if"]["mismatches"] == 0 and data["what_if"]["actual_dropped"] == 3
    assert [rows[t]["dropped"] for t in range(7)] == [1, 1, 2, 3, 3, 3, 3]
    assert rows[0]["exact_duplicate"] == 1 and rows[3]["change"] == 0
    assert data["totals"] == {"pages": 7, "kept": 4, "dropped": 3, "exact_duplicate": 1,
                              "near_duplicate": 2, "soft_404": 0, "override": 0,
                              "compared": 7, "duplicate_rate": round(3 / 7, 4),
                              "prior_documents": 0, "canonical_swaps": 0}
    buckets = {b["distance"]: b for b in data["histogram"]["buckets"]}
    assert buckets[0] == {"distance": 0, "kept": 1, "dropped": 1}  # the copy and its original
    assert data["near_misses"]["count"] == 0


def test_sampling_is_stated(tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")
    with CrawlDB.open(str(info["path"])) as db:
        data = report.build_report(db, exact_limit=4)
    assert data["sample"] == {"exact": False, "pages": 7, "sample_size": 4, "limit": 4, "seed": 0}
    assert data["totals"]["pages"] == 7  # totals always count every row
    assert "Sampled" in render_html(data)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 2**64 - 1)), max_size=40),
       st.integers(0, 8))
def test_neighbours_equal_brute_force(values: list[int | None], radius: int) -> None:
    nb = report.neighbours(values, radius)
    for i, a in enumerate(values):
        others = [((a ^ b).bit_count(), j) for j, b in enumerate(values)
                  if j != i and a is not None and b is not None]
        want = min(others)[0] if others else 255
        assert int(nb.nearest[i]) == want
        assert sorted(nb.earlier[i]) == sorted((j, d) for d, j in others if j < i and d <= radius)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 2**64 - 1)),
                          st.sampled_from(["kept", "prior", "near_duplicate"])), max_size=40))
def test_closest_kept_pair_equals_brute_force(pages: list[tuple[int | None, str]]) -> None:
    values, status = [v for v, _ in pages], [s for _, s in pages]
    nb = report.neighbours(values, 3, status)
    pairs = [(values[i] ^ values[j]).bit_count() for j in range(len(pages))
             for i in range(j) if values[i] is not None and values[j] is not None
             and status[i] in ("kept", "prior") and status[j] == "kept"]
    assert nb.closest_kept == (min(pairs) if pairs else None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 63)),
                          st.sampled_from(["kept", "prior", "near_duplicate"]), st.booleans()),
                max_size=30),
       st.sets(st.tuples(st.integers(0, 29), st.integers(0, 29))))
def test_closest_kept_pair_leaves_out_the_pairs_a_rule_keeps_apart(
        pages: list[tuple[int | None, str, bool]], named: set[tuple[int, int]]) -> None:
    """A later page a keep rule names is never dropped; an earlier one within k, or a pair a
    distinct rule names, was kept apart by the rule: none is where a looser k drops a page."""
    values, status = [v for v, _, _ in pages], [s for _, s, _ in pages]
    held = frozenset(i for i, (_, _, h) in enumerate(pages) if h)
    apart = frozenset((i, j) for i, j in named if i < j < len(pages))
    nb = report.neighbours(values, 3, status, report.Ruled(2, held, apart))
    pairs = []
    for j, b in enumerate(values):
        for i, a in enumerate(values[:j]):
            if a is None or b is None or status[i] not in ("kept", "prior") or \
                    status[j] != "kept" or j in held or (i, j) in apart:
                continue
            if i not in held or (a ^ b).bit_count() > 2:
                pairs.append((a ^ b).bit_count())
    assert nb.closest_kept == (min(pairs) if pairs else None)


def test_report_errors(cli: Any, tmp_path: Path) -> None:
    code, _, err = cli("dedupreport", "--db", str(tmp_path / "none.db"), "-o",
                       str(tmp_path / "r.html"))
    assert code == 1 and "does not exist" in err and not (tmp_path / "r.html").exists()
    empty = tmp_path / "empty.db"
    store = Store(f"sqlite:///{empty}")
    store.start_crawl("web", [], {})
    store.close()
    code, _, err = cli("dedupreport", "--db", str(empty), "-o", str(tmp_path / "r.html"))
    assert code == 1 and "has no pages" in err
    info = build_db(tmp_path / "crawl.db")
    code, _, err = cli("dedupreport", "--db", str(info["path"]), "--crawl", "7")
    assert code == 1 and "unknown crawl 7" in err
    with CrawlDB.open(str(info["path"])) as db, pytest.raises(ReviewError):
        report.build_report(db, 7)


def test_kept_pairs_within_k_count_as_k_plus_1(tmp_path: Path) -> None:
    """The crawl kept two pages 1 bit apart (its fingerprints differed): replay still agrees."""
    import sqlite3

    from crawler.storage import to_signed64

    info = build_db(tmp_path / "crawl.db")
    p3 = info["docs"][3]["simhash"]
    with sqlite3.connect(info["path"]) as conn:
        conn.execute("UPDATE documents SET simhash = ? WHERE url = ?",
                     (to_signed64(p3 ^ 1), info["docs"][0]["url"]))
    with CrawlDB.open(str(info["path"])) as db:
        data = report.build_report(db)
    w = data["what_if"]
    assert w["adjusted_pairs"] == 1 and w["mismatches"] == 0
    assert [r["dropped"] for r in w["rows"]][:7] == [1, 1, 3, 3, 4, 4, 4]
    assert data["near_misses"]["count"] == 1
    assert data["near_misses"]["listed"][0]["distance"] == 4


def test_advice_reads_the_gap_around_k() -> None:
    def hist(counts: dict[int, int]) -> dict[str, Any]:
        return {"threshold": 3, "buckets": [{"distance": d, "kept": counts.get(d, 0),
                                             "dropped": 0} for d in range(12)]}

    assert "from 0 to 7" in report.advice(hist({0: 5, 8: 2, 11: 9}))
    assert "no gap" in report.advice(hist({3: 1, 4: 1}))
    assert "mostly duplicates" in report.advice(hist({0: 4}))


def test_a_second_crawl_is_replayed_against_the_first_ones_pages(tmp_path: Path) -> None:
    """With SIMHASH_PERSIST the first crawl's documents were in the index: seeded as kept."""
    from datetime import timedelta

    from tests.test_review import T0, doc, drop

    store = Store(f"sqlite:///{tmp_path / 'crawl.db'}")
    first = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3, "SIMHASH_PERSIST": True})
    old = doc(0, 0xABCD_0000_0000_0000, crawl_id=first)
    store.write_batch([old], [])
    store.finish_crawl(first, "finished", {})
    second = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3, "SIMHASH_PERSIST": True})
    new = doc(1, 0x0000_0000_0000_FFFF, crawl_id=second, fetched_at=T0 + timedelta(days=1))
    again = drop("http://site.test/again.html", old, "near_duplicate", old["simhash"] ^ 1,
                 86_400 + 5, "text", crawl_id=second)
    store.write_batch([new], [again])
    store.finish_crawl(second, "finished", {})
    store.close()
    with CrawlDB.open(str(tmp_path / "crawl.db")) as db:
        data = report.build_report(db)  # the latest crawl
        assert report.build_report(db, first)["totals"]["pages"] == 1
    assert data["crawl"]["id"] == second
    assert data["totals"] == {"pages": 2, "kept": 1, "dropped": 1, "exact_duplicate": 0,
                              "near_duplicate": 1, "soft_404": 0, "override": 0, "compared": 2,
                              "duplicate_rate": 0.5, "prior_documents": 1, "canonical_swaps": 0}
    rows = data["what_if"]["rows"]
    assert data["what_if"]["mismatches"] == 0 and [r["dropped"] for r in rows[:3]] == [0, 1, 1]
    assert data["by_host"] == [{"host": "site.test", "pages": 2, "kept": 1,
                                "exact_duplicate": 0, "near_duplicate": 1, "override": 0,
                                "duplicate_rate": 0.5}]


# --- a crafted crawl: near duplicates at 1..k bits, a kept pair at k+1 -----------------------

HOSTILE_TITLE = '<script>alert("t")</script> Two & "quotes"'


def _fingerprint(html: str) -> int:
    """The pipeline's SimHash of a page without template blocks (none are shared here)."""
    from crawler.content.simhash import features, fingerprint
    from crawler.content.text import extract
    from crawler.content.tokens import block_tokens, main_tokens

    return fingerprint(features(main_tokens(block_tokens(extract(html).blocks), 20), 1))


def _article(title: str, paragraphs: list[list[str]], nav: str = "") -> str:
    from crawler.sitegen.site import escape

    body = "".join(f"<p>{escape(' '.join(p))}</p>" for p in paragraphs)
    return (f"<!DOCTYPE html><html><head><title>{escape(title)}</title></head><body>"
            f"<nav>{nav}</nav><main><h1>{escape(title)}</h1>{body}</main></body></html>")


def _variant(rng: Any, words: list[str], paragraphs: list[list[str]], target: int,
             ) -> list[list[str]]:
    """Paragraphs whose SimHash is exactly ``target`` bits from ``paragraphs``' (greedy)."""
    base = _fingerprint(_article("t", paragraphs))
    current = paragraphs
    for _ in range(100):
        best: tuple[int, list[list[str]]] | None = None
        for _ in range(40):
            cand = [list(p) for p in current]
            p = rng.randrange(len(cand))
            cand[p][rng.randrange(len(cand[p]))] = rng.choice(words)
            gap = abs((_fingerprint(_article("t", cand)) ^ base).bit_count() - target)
            if gap == 0:
                return cand
            if best is None or gap < best[0]:
                best = (gap, cand)
        assert best is not None
        current = best[1]
    raise AssertionError(f"no variant at {target} bits")


def near_site(distances: tuple[int, ...], seed: int = 7) -> Any:
    """A site of pairs ``/gD/a`` (original) and ``/gD/b`` (a copy D SimHash bits away): at
    D <= k the crawl drops one of them, above k it keeps both. The copy at 2 bits has a
    hostile title."""
    import random

    from crawler.sitegen.site import Site, page
    from crawler.sitegen.text import load_words

    rng = random.Random(seed)
    words = [w for values in load_words().sections.values() for w in values
             if w.isalpha() and " " not in w]
    pages, nav = {}, "".join(f'<a href="/g{d}/{s}">g{d}{s}</a> ' for d in distances
                             for s in "ab")
    pages["/"] = page(_article("Index", [[rng.choice(words) for _ in range(25)]], nav))
    for d in distances:
        original = [[rng.choice(words) for _ in range(25)] for _ in range(8)]
        copy = _variant(rng, words, original, d)
        title = HOSTILE_TITLE if d == 2 else f"Copy at {d} bits"
        pages[f"/g{d}/a"] = page(_article(f"Original {d}", original, nav))
        pages[f"/g{d}/b"] = page(_article(title, copy, nav))
    return Site("near", pages, canonical_pages=set(pages))


def crawl_near_site(workdir: Path, distances: tuple[int, ...], k: int) -> CrawlRun:
    from crawler.sitegen.server import SiteServer

    with SiteServer(near_site(distances)) as server:
        run = run_crawl(workdir, urls=[server.base_url + "/"],
                        settings={"SIMHASH_MAX_DISTANCE": k, "ROBOTSTXT_OBEY": False})
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def near_crawl(tmp_path_factory: pytest.TempPathFactory) -> CrawlRun:
    return crawl_near_site(tmp_path_factory.mktemp("near"), (1, 2, 3, 4), 3)


@pytest.fixture(scope="module")
def near_report(near_crawl: CrawlRun) -> dict:
    with CrawlDB.open(str(near_crawl.db_path)) as db:
        return report.build_report(db, db_arg=str(near_crawl.db_path))


def test_decisions_list_the_drops_closest_to_k_first(near_crawl: CrawlRun,
                                                     near_report: dict) -> None:
    recorded = sorted(d for (d,) in near_crawl.rows("SELECT distance FROM dropped"))
    assert recorded == [1, 2, 3], "the crafted copies sit at 1, 2 and 3 bits"
    dec = near_report["decisions"]
    assert [d["distance"] for d in dec["near"]] == [3, 2, 1] and dec["near_count"] == 3
    titles = dict(near_crawl.rows("SELECT url, title FROM documents UNION ALL "
                                  "SELECT url, title FROM dropped"))
    for d in dec["near"]:
        assert d["title"] == titles[d["url"]] and d["duplicate_title"] == titles[d["duplicate_of"]]
        assert d["url"].rsplit("/", 2)[1] == d["duplicate_of"].rsplit("/", 2)[1]  # same group
        assert d["difference"]["only_dropped"] and d["difference"]["only_kept"]
        assert "only in dropped: “" in d["difference"]["summary"]
        assert d["command"] == (f"scrapy dropped --db {near_crawl.db_path} --explain "
                                f"{d['url']}")
    assert dec["exact_groups"] == [] and dec["exact_count"] == 0


def test_explain_commands_of_the_report_run(cli: Any, near_report: dict) -> None:
    for d in near_report["decisions"]["near"]:
        code, out, err = cli(*d["command"].split()[1:])
        assert code == 0, err
        assert f"Distance: {d['distance']} bits" in out and d["duplicate_of"] in out


def test_what_if_reaches_the_first_change_and_names_its_pages(near_crawl: CrawlRun,
                                                              near_report: dict) -> None:
    w = near_report["what_if"]
    rows = {r["threshold"]: r for r in w["rows"]}
    assert w["mismatches"] == 0 and w["first_change_above"] == 4
    assert max(rows) == 3 + 8
    assert [rows[t]["dropped"] for t in range(6)] == [0, 1, 2, 3, 4, 4]
    (extra,) = rows[4]["changes"]["dropped"]  # the one page a 4th bit would drop
    assert extra["distance"] == 4 and "/g4/" in extra["url"] and "/g4/" in extra["duplicate_of"]
    assert extra["title"] in ("Original 4", "Copy at 4 bits")
    (spared,) = rows[2]["changes"]["kept"]  # one bit fewer keeps the copy at 3 bits
    assert "/g3/" in spared["url"]
    assert rows[3]["changes"] == {"dropped": [], "kept": [], "dropped_count": 0, "kept_count": 0}
    assert near_report["near_misses"]["count"] == 1
    assert near_report["near_misses"]["listed"][0]["distance"] == 4
    buckets = {b["distance"]: b for b in near_report["histogram"]["buckets"]}
    assert buckets[4]["kept"] == 2 and sum(buckets[d]["dropped"] for d in (1, 2, 3)) == 3


def test_html_decision_list_links_and_escapes(near_crawl: CrawlRun, near_report: dict) -> None:
    text = render_html(near_report)
    page = Page.parse(text)
    assert not [t for t, _ in page.tags if t == "script"], "a page title became a script"
    assert "&lt;script&gt;alert(&quot;t&quot;)&lt;/script&gt; Two &amp;" in text
    items = [a for t, a in page.tags if t == "li" and a.get("class") == "decision"]
    assert [a["data-distance"] for a in items] == ["3", "2", "1"]
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    for d in near_report["decisions"]["near"]:
        assert d["url"] in hrefs and d["duplicate_of"] in hrefs
    cells = page.row(**{"data-threshold": "4", "class": "changed"})
    assert cells[1] == str(near_report["what_if"]["actual_dropped"] + 1) and "/g4/" in cells[6]


def test_hostile_urls_are_never_live_links(tmp_path: Path) -> None:
    from tests.test_review import doc, drop

    store = Store(f"sqlite:///{tmp_path / 'crawl.db'}")
    cid = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3})
    kept = doc(0, 0xFF00, title="<img src=x onerror=alert(1)>", crawl_id=cid)
    bad = drop("javascript:alert(1)", kept, "near_duplicate", 0xFF01, 5,
               "<b>bold</b>\nline", title="</title><script>x()</script>", crawl_id=cid)
    store.write_batch([kept], [bad])
    store.finish_crawl(cid, "finished", {})
    store.close()
    with CrawlDB.open(str(tmp_path / "crawl.db")) as db:
        text = render_html(report.build_report(db))
    page = Page.parse(text)
    assert not [t for t, _ in page.tags if t in ("script", "img")]
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    assert hrefs == [kept["url"]] * len(hrefs) and hrefs, "javascript: is text, not a link"
    assert "javascript:alert(1)" in text and "&lt;/title&gt;&lt;script&gt;x()" in text


def test_a_jobs_crawls_are_reported_as_one(tmp_path: Path) -> None:
    """A JOBDIR job's crawls (a killed run and its resume): union of pages, latest settings."""
    from datetime import timedelta

    from tests.test_review import T0, doc, drop

    store = Store(f"sqlite:///{tmp_path / 'crawl.db'}")
    first = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3})
    a = doc(0, 0x0, crawl_id=first)
    store.write_batch([a], [drop("http://site.test/m.html", a, "near_duplicate", 0b11, 3, "x",
                                 crawl_id=first)])
    store.finish_crawl(first, "shutdown", {"dupefilter/filtered": 5, "urlnorm/trap/path_depth": 1})
    second = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 5})
    b = doc(1, 0xFFFF_FFFF_0000_0000, crawl_id=second, fetched_at=T0 + timedelta(hours=1))
    late = drop("http://site.test/n.html", b, "near_duplicate", b["simhash"] ^ 0b11111,
                3700, "y", crawl_id=second)
    store.write_batch([b], [late])
    store.finish_crawl(second, "finished", {"dupefilter/filtered": 7})
    store.close()
    with CrawlDB.open(str(tmp_path / "crawl.db")) as db:
        job = report.build_report(db, [second, first])
        one = report.build_report(db, first)
        assert len(report.load_population(db, [first, second], False)) == 4
    assert job["crawl"]["ids"] == [first, second] and job["crawl"]["id"] == second
    assert job["threshold"] == 5 and one["threshold"] == 3
    assert job["totals"]["pages"] == 4 and one["totals"]["pages"] == 2
    assert job["what_if"]["mismatches"] == 0
    assert [d["distance"] for d in job["decisions"]["near"]] == [5, 2]
    assert job["url_dedup"]["counters"]["dupefilter/filtered"] == 12
    assert job["url_dedup"]["traps"] == 1
    assert "crawls 1, 2 (one job)" in render_html(job)


def test_settings_and_stats_read_as_people_write_them() -> None:
    assert human(1.9188420200000564, "elapsed_time_seconds") == "1.92 s"
    assert human(0.1865, "dedup/summary/duplicate_rate") == "18.6%"
    assert human(1.4e-05, "dedup/bloom/fill_ratio") == "0.0014%"
    assert human(145968817, "dedup/bloom/bits") == "145,968,817 (17.4 MiB)"
    assert human(10_000_000, "BLOOM_CAPACITY", "URL") == "10,000,000 URLs"
    assert human(["utm_*", "gclid"]) == "utm_*, gclid"
    assert human({"b": 2, "a": True}) == "a: on, b: 2"
    assert human(None) == "not set" and human(False) == "off"
    assert human("postgresql+psycopg://u:secret@db/c") == "postgresql+psycopg://u:***@db/c"


def test_demo_report_formats_settings_and_zooms_on_k(demo_report: dict) -> None:
    page, data = demo_report["page"], demo_report["data"]
    text = demo_report["html"].read_text()
    assert "[" not in page.by_id["settings"] and "1.9188" not in text
    k = data["threshold"]
    zoom = [(t, a) for t, a in page.tags if t == "g" and a.get("class") == "zoom-bin"]
    assert [int(a["data-distance"]) for _, a in zoom] == list(range(max(0, k - 3), k + 9))
    decisions = [a for t, a in page.tags if t == "li" and a.get("class") == "decision"]
    assert len(decisions) == data["decisions"]["near_count"] > 0
    assert data["what_if"]["first_change_above"] is not None


# --- pairs a person's rule keeps apart (issue 26 probe) -----------------------------------------


@pytest.fixture(scope="module")
def rule_kept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The order web crawled with a rules file: a keep rule keeps a mirror beside its original
    (1..k bits), a distinct rule parts another article from its mirror."""
    web = order_web()
    workdir = tmp_path_factory.mktemp("rule-kept")
    with serve_web([web.a, web.b, web.c]) as (a, b, c):
        keep, apart, _ = slugs(web)
        pairs = [(a.url("/a/" + keep), a.url("/mirror/" + keep)),
                 (a.url("/a/" + apart), a.url("/mirror/" + apart))]
        rules = workdir / "rules.txt"
        rules.write_text(f"keep {pairs[0][1]}\ndistinct {pairs[1][0]} {pairs[1][1]}\n")
        run = run_crawl(workdir / "run", urls=[s.url("/") for s in (a, b, c)],
                        settings={"ROBOTSTXT_OBEY": False, "DEDUP_OVERRIDES_FILE": str(rules)})
    assert run.returncode == 0, run.stderr[-3000:]
    return {"run": run, "rules": rules, "pairs": pairs}


def _bits(x: int, y: int) -> int:
    return ((x ^ y) & (2**64 - 1)).bit_count()


def _nearest_but_ruled(run: CrawlRun, pairs: list[tuple[str, str]], k: int) -> dict[str, int]:
    """Each kept page's nearest page of the crawl but its rule partner, as the report defines
    it: by stored SimHash, a drop's recorded distance to it, another kept page within k at
    k + 1 (the crawl judged them distinct)."""
    kept = run.rows("SELECT url, simhash FROM documents WHERE simhash IS NOT NULL")
    dropped = run.rows("SELECT url, simhash FROM dropped "
                       "WHERE simhash IS NOT NULL AND reason != 'override'")
    partner = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    recorded: dict[str, int] = {}
    for url, distance in run.rows("SELECT duplicate_of, distance FROM dropped "
                                  "WHERE distance IS NOT NULL"):
        recorded[url] = min(recorded.get(url, distance), distance)
    nearest = {}
    for url, fp in kept:
        skip = (url, partner.get(url))
        to_kept = [max(_bits(fp, other), k + 1) for u, other in kept if u not in skip]
        to_dropped = [_bits(fp, other) for u, other in dropped if u not in skip]
        nearest[url] = min([*to_kept, *to_dropped, recorded.get(url, 64)])
    return nearest


def test_pairs_a_persons_rule_keeps_apart_are_no_evidence_about_the_threshold(
        rule_kept: dict[str, Any]) -> None:
    """A kept mirror a keep rule names (1..k bits from its original) and a pair a distinct rule
    parts are neither near misses (they were at k + 1), nor the closest distinct pages of the
    advice, nor a what-if change: the rule keeps them at any k. The report counts them."""
    run, pairs = rule_kept["run"], rule_kept["pairs"]
    fps = dict(run.rows("SELECT url, simhash FROM documents"))
    assert all(a in fps and b in fps for a, b in pairs), "both rules kept both pages"
    with CrawlDB.open(str(run.db_path)) as db:
        data = report.build_report(db, rules=Overrides(read_file(rule_kept["rules"])))
        unruled = report.build_report(db, rules=Overrides())
    k = data["threshold"]
    assert 1 <= _bits(fps[pairs[0][0]], fps[pairs[0][1]]) <= k
    assert _bits(fps[pairs[1][0]], fps[pairs[1][1]]) <= k
    ruled = {frozenset(p) for p in pairs}
    unruled_near = {frozenset((m["a"], m["b"])) for m in unruled["near_misses"]["listed"]}
    assert ruled <= unruled_near, "without the rules the pairs count as k + 1"
    near = data["near_misses"]
    assert not ruled & {frozenset((m["a"], m["b"])) for m in near["listed"]}
    assert near["count"] == unruled["near_misses"]["count"] - 2
    assert data["histogram"]["kept_apart_by_rule"] == 2
    assert data["what_if"]["adjusted_pairs"] == unruled["what_if"]["adjusted_pairs"] - 2
    rows = data["what_if"]["rows"]
    assert rows and rows[-1]["threshold"] > k
    changed = {frozenset((c["url"], c["duplicate_of"])) for r in rows
               for c in r["changes"]["dropped"]}
    assert not ruled & changed
    nearest = _nearest_but_ruled(run, pairs, k)
    above = sorted(d for d in nearest.values() if d > k)
    assert above, "some page is a distinct page"
    kept_at = {b["distance"]: b["kept"] for b in data["histogram"]["buckets"]}
    assert kept_at[k + 1] == sum(d == k + 1 for d in nearest.values())
    assert f"the closest distinct pages are {above[0]} bits apart" in \
        data["histogram"]["advice"]
    assert "2 kept pairs kept apart by a person's rule" in html.unescape(render_html(data))


def test_the_databases_rules_keep_pairs_apart_in_the_report(rule_kept: dict[str, Any],
                                                            tmp_path: Path) -> None:
    """Without ``rules`` the report reads the database's (``scrapy dropped --keep`` writes
    them there)."""
    db_path = tmp_path / "crawl.db"
    shutil.copy(rule_kept["run"].db_path, db_path)
    with Store(f"sqlite:///{db_path}") as store:
        for rule in read_file(rule_kept["rules"]):
            store.add_override(rule)
    with CrawlDB.open(str(db_path)) as db:
        data = report.build_report(db)
    assert data["histogram"]["kept_apart_by_rule"] == 2
    ruled = {frozenset(p) for p in rule_kept["pairs"]}
    assert not ruled & {frozenset((m["a"], m["b"])) for m in data["near_misses"]["listed"]}
