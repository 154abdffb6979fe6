"""The report in a real browser: headless Chromium screenshots and the DOM it builds.

Two reports: the demo crawl's (k = 3, every duplicate at 0 bits) and a crafted crawl at
SIMHASH_MAX_DISTANCE=12 with copies at 2, 5, 9 and 12 bits and a kept pair at 13. Each is
rendered to a 1280x4000 PNG (kept under the test's tmp dir) and dumped as DOM; the DOM must
hold the decision list, live links to both pages of each decision and the extended what-if.
Fails in CI when Chromium is missing, skips elsewhere. Every browser call is bounded (30 s).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crawler import report
from crawler.report.html import render_html
from crawler.review import CrawlDB
from tests.conftest import CrawlRun
from tests.test_dedupreport import KEPT_RGB, Page, _browser, crawl_near_site, png_pixels

DROPPED_RGB = (0xE4, 0x57, 0x56)


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp / 'profile'}", "--window-size=1280,4000"]
    return subprocess.run([_browser(), *flags, *args], capture_output=True, text=True,
                          timeout=30)


def _render(run: CrawlRun, out: Path) -> tuple[Path, dict]:
    with CrawlDB.open(str(run.db_path)) as db:
        data = report.build_report(db, db_arg=str(run.db_path))
    out.write_text(render_html(data))
    return out, data


def _shoot_and_dump(html: Path, tmp: Path) -> tuple[bytes, Page]:
    shot = html.with_suffix(".png")
    result = _chromium(tmp, f"--screenshot={shot}", html.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    dom = _chromium(tmp, "--dump-dom", html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    return shot.read_bytes(), Page.parse(dom.stdout)


def _has_colour(png: bytes, rgb: tuple[int, int, int]) -> bool:
    _, _, bpp, pixels = png_pixels(png)
    want = bytes(rgb)
    return any(pixels[i:i + 3] == want for i in range(0, len(pixels), bpp))


def _check_dom(page: Page, data: dict) -> None:
    k = data["threshold"]
    items = [a for t, a in page.tags if t == "li" and a.get("class") == "decision"]
    want = [str(d["distance"]) for d in data["decisions"]["near"]]
    assert [a["data-distance"] for a in items] == want and want
    hrefs = {a["href"] for t, a in page.tags if t == "a"}
    for d in data["decisions"]["near"]:
        assert {d["url"], d["duplicate_of"]} <= hrefs
    rows = [int(a["data-threshold"]) for t, a in page.tags if t == "tr" and "data-threshold" in a]
    assert rows[0] == 0 and rows[-1] >= min(64, k + 8)
    first = data["what_if"]["first_change_above"]
    assert first is None or first in rows


@pytest.mark.slow
def test_demo_report_in_chromium(demo_crawl: CrawlRun, tmp_path: Path) -> None:
    html, data = _render(demo_crawl, tmp_path / "demo-report.html")
    png, page = _shoot_and_dump(html, tmp_path)
    _check_dom(page, data)
    assert _has_colour(png, KEPT_RGB) and _has_colour(png, DROPPED_RGB)
    k = data["threshold"]
    bins = [a for t, a in page.tags if t == "g" and a.get("class") == "zoom-bin"]
    assert [int(a["data-distance"]) for a in bins] == list(range(max(0, k - 3), k + 9))


@pytest.mark.slow
def test_report_at_k12_in_chromium(tmp_path: Path) -> None:
    run = crawl_near_site(tmp_path / "crawl", (2, 5, 9, 12, 13), 12)
    assert sorted(d for (d,) in run.rows("SELECT distance FROM dropped")) == [2, 5, 9, 12]
    html, data = _render(run, tmp_path / "k12-report.html")
    png, page = _shoot_and_dump(html, tmp_path)
    _check_dom(page, data)
    assert [d["distance"] for d in data["decisions"]["near"]] == [12, 9, 5, 2]
    assert data["what_if"]["first_change_above"] == 13
    cells = page.row(**{"data-threshold": "13", "class": "changed"})
    assert cells[5] == "+1" and "/g13/" in cells[6]
    assert _has_colour(png, DROPPED_RGB)
