"""``scrapy dedupreport`` and crawler.report: numbers, what-if replay, HTML, a real browser.

The report of one real demo crawl (a subprocess, once per module) is parsed with
``html.parser`` and compared with the database; hand-made databases check the replay and the
error paths. The browser test renders the page in headless Chromium (Debian ``chromium``): it
fails in CI when the browser is missing and skips elsewhere.
"""

from __future__ import annotations

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
from crawler.review import CrawlDB, ReviewError
from crawler.storage import Store
from tests.conftest import IN_CI, ROOT, CrawlRun
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
    assert page.row(**{"data-host": host})[1:] == [str(kept + exact + near), str(kept),
                                                   str(exact), str(near)]
    assert page.row(**{"data-reason": "near_duplicate"})[1] == str(near)


def test_what_if_row_for_the_crawls_threshold_equals_the_drops(
        demo_crawl: CrawlRun, demo_report: dict) -> None:
    data, page = demo_report["data"], demo_report["page"]
    k = data["threshold"]
    dropped = _count(demo_crawl, "SELECT COUNT(*) FROM dropped")
    assert dropped > 0, "the dedup pipeline dropped nothing on the demo site"
    cells = page.row(**{"data-threshold": str(k)})
    assert int(cells[1]) == dropped and cells[5] == "+0"
    assert [r["threshold"] for r in data["what_if"]["rows"]] == list(range(k + 4))
    assert data["what_if"]["mismatches"] == 0
    drops = [r["dropped"] for r in data["what_if"]["rows"]]
    assert drops == sorted(drops), "a looser threshold never drops fewer pages"


def test_histogram_has_one_bar_per_distance_bucket(demo_report: dict) -> None:
    page, hist = demo_report["page"], demo_report["data"]["histogram"]
    bars = [(int(b["data-distance"]), int(b["data-kept"]), int(b["data-dropped"]))
            for b in page.bars]
    assert bars == [(b["distance"], b["kept"], b["dropped"]) for b in hist["buckets"]]
    assert [d for d, _, _ in bars] == list(range(len(bars)))
    assert sum(k + d for _, k, d in bars) == hist["pages"] > 0
    assert sum(d for _, _, d in bars) > 0, "dropped pages are drawn"


def test_html_is_self_contained(demo_report: dict) -> None:
    text = demo_report["html"].read_text()
    tags = demo_report["page"].tags
    assert not [t for t, a in tags if t in ("script", "link", "img", "iframe")]
    assert not [a for _, a in tags if any(k in a for k in ("src", "href"))]
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


def test_report_renders_in_headless_chromium(demo_report: dict, tmp_path: Path) -> None:
    browser = _browser()
    probe = tmp_path / "probe.html"  # a copy with a script that measures the drawn SVG
    probe.write_text(demo_report["html"].read_text().replace(
        "</body>", "<script>const r = document.getElementById('histogram')"
        ".getBoundingClientRect(); document.body.setAttribute('data-svg', "
        "Math.round(r.width) + 'x' + Math.round(r.height));</script></body>"))
    dom = _chromium(browser, tmp_path, "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    width, height = _svg_size(dom.stdout)
    assert width > 100 and height > 50
    shot = tmp_path / "shot.png"
    result = _chromium(browser, tmp_path, f"--screenshot={shot}", demo_report["html"].as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    _, _, bpp, pixels = png_pixels(shot.read_bytes())
    colours = {pixels[i:i + 3] for i in range(0, len(pixels), bpp * 7)}
    assert len(colours) > 8, "the screenshot is blank"
    assert any(pixels[i:i + 3] == bytes(KEPT_RGB) for i in range(0, len(pixels), bpp)), \
        "no histogram bar in the screenshot"


def _svg_size(dom: str) -> tuple[int, int]:
    page = Page.parse(dom)
    (body,) = [a for t, a in page.tags if t == "body"]
    w, h = body["data-svg"].split("x")
    return int(w), int(h)


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
                              "near_duplicate": 2, "duplicate_rate": round(3 / 7, 4),
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
    assert "Sampled" in report.render_html(data)


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


def test_report_errors(cli: Any, tmp_path: Path) -> None:  # noqa: F811
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
    assert [r["dropped"] for r in w["rows"]] == [1, 1, 3, 3, 4, 4, 4]
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
                              "near_duplicate": 1, "duplicate_rate": 0.5, "prior_documents": 1,
                              "canonical_swaps": 0}
    rows = data["what_if"]["rows"]
    assert data["what_if"]["mismatches"] == 0 and [r["dropped"] for r in rows[:3]] == [0, 1, 1]
    assert data["by_host"] == [{"host": "site.test", "pages": 2, "kept": 1,
                                "exact_duplicate": 0, "near_duplicate": 1}]
