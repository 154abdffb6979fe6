"""``scrapy dedupreport --serve`` (crawler.review.serve): the local review server.

Real things only: a crawl of a crafted site into SQLite (three near duplicates at 1, 2 and 3
bits, the one at 2 bits with a hostile title), a hand-made database of 20,000 drops for the
server-side filters, the real server in a thread (and once as ``scrapy dedupreport --serve``
in a subprocess, stopped with SIGTERM or Ctrl-C), plain HTTP for the security checks and the
actions, and headless Chromium driven by Playwright for the pages and their buttons. The
browser tests fail in CI when Chromium is missing and skip elsewhere; the screenshots are
copied to /tmp/shots/.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest

from crawler.review import CrawlDB
from crawler.review.serve import ReviewServer
from crawler.storage import ReviewError, Store
from tests.conftest import IN_CI, ROOT, CrawlRun
from tests.test_dedupreport import HOSTILE_TITLE, crawl_near_site
from tests.test_review import ORIGIN, T0, build_db, doc, drop

if TYPE_CHECKING:
    from collections.abc import Iterator

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path("/tmp/shots")
MANY = 20_000


@pytest.fixture(scope="module")
def near_crawl(tmp_path_factory: pytest.TempPathFactory) -> CrawlRun:
    run = crawl_near_site(tmp_path_factory.mktemp("near"), (1, 2, 3, 4), 3)
    assert sorted(d for (d,) in run.rows("SELECT distance FROM dropped")) == [1, 2, 3]
    return run


@pytest.fixture
def near_db(near_crawl: CrawlRun, tmp_path: Path) -> Path:
    """A copy of the crawl's database that a test may write."""
    path = tmp_path / "crawl.db"
    shutil.copy(near_crawl.db_path, path)
    return path


@pytest.fixture(scope="module")
def many_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20,000 drops of 20 kept pages on two hosts: distance i % 7 (0: exact), titles "Drop i"."""
    path = tmp_path_factory.mktemp("many") / "crawl.db"
    store = Store(f"sqlite:///{path}")
    cid = store.start_crawl("web", [ORIGIN + "/"], {"SIMHASH_MAX_DISTANCE": 6})
    docs = [doc(i, (i * 0x9E3779B97F4A7C15) & (2**64 - 1), crawl_id=cid,
                host=ORIGIN if i % 2 else "http://other.test") for i in range(20)]
    drops = []
    for i in range(MANY):
        kept, distance = docs[i % 20], i % 7
        reason = "exact_duplicate" if distance == 0 else "near_duplicate"
        drops.append(drop(f"{kept['url'].rsplit('/', 1)[0]}/copy/{i:05d}.html", kept, reason,
                          kept["simhash"] ^ ((1 << distance) - 1), i, f"text {i}",
                          title=f"Drop {i}", crawl_id=cid))
    store.write_batch(docs, drops)
    store.finish_crawl(cid, "finished", {})
    store.close()
    return path


@contextmanager
def serving(db_path: Path, **options: Any) -> Iterator[ReviewServer]:
    """The review server of the latest crawl of ``db_path``, in a thread, on a free port."""
    with CrawlDB.open(str(db_path)) as db:
        picked = db.select()
    server = ReviewServer(str(db_path), picked, 0, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def call(server: ReviewServer, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request with ``Host: 127.0.0.1:PORT`` unless ``headers`` say otherwise."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    sent = {"Host": f"127.0.0.1:{server.port}", **(headers or {})}
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=sent)
    response = conn.getresponse()
    answer = response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    conn.close()
    return answer


def drops(server: ReviewServer, **params: Any) -> dict[str, Any]:
    status, _, body = call(server, "GET", "/api/drops?" + urlencode(params))
    assert status == 200, body
    return json.loads(body)


def post(server: ReviewServer, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    status, _, raw = call(server, "POST", path, body, {
        "Content-Type": "application/json", "X-Review-Token": server.token})
    return status, json.loads(raw)


def table_rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


# --- HTTP: security -------------------------------------------------------------------------


def test_a_foreign_host_header_is_refused(near_db: Path) -> None:
    with serving(near_db) as server:
        for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1",
                     f"127.0.0.1:{server.port + 1}"):
            status, headers, body = call(server, "GET", "/", headers={"Host": host})
            assert status == 403 and headers["content-type"].startswith("application/json")
            assert "Host header refused" in json.loads(body)["error"]
        for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}"):
            assert call(server, "GET", "/", headers={"Host": host})[0] == 200
        assert server.server_address[0] == "127.0.0.1"


def test_a_post_needs_the_token_and_json(near_db: Path) -> None:
    dropped = table_rows(near_db, "SELECT url FROM dropped WHERE distance = 1")[0][0]
    keep = {"action": "keep", "target": dropped}
    with serving(near_db) as server:
        page = call(server, "GET", "/")[2].decode()
        assert f'<meta name="review-token" content="{server.token}">' in page
        refused = [
            call(server, "POST", "/api/override", keep, {"Content-Type": "application/json"}),
            call(server, "POST", "/api/override", keep, {
                "Content-Type": "application/json", "X-Review-Token": "guessed"}),
            call(server, "POST", "/api/override", urlencode(keep).encode(), {
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Review-Token": server.token}),
            call(server, "POST", "/api/override", b"[1, 2]", {
                "Content-Type": "application/json", "X-Review-Token": server.token}),
        ]
    assert [status for status, _, _ in refused] == [403, 403, 415, 400]
    for _, headers, body in refused:
        assert headers["content-type"].startswith("application/json")
        assert json.loads(body)["error"] and "\n" not in json.loads(body)["error"]
    assert table_rows(near_db, "SELECT url FROM dropped WHERE distance = 1") == [(dropped,)]


def test_crawled_text_is_escaped_and_the_pages_carry_a_strict_csp(near_db: Path) -> None:
    hostile = table_rows(near_db, "SELECT url FROM dropped WHERE distance = 2")[0][0]
    with serving(near_db) as server:
        _, list_headers, list_page = call(server, "GET", "/")
        status, headers, pair = call(server, "GET", "/pair?" + urlencode({"url": hostile}))
        rows = drops(server, q="quotes")["rows"]
    assert status == 200
    text = pair.decode()
    assert HOSTILE_TITLE not in text and "<script>alert" not in text
    assert '&lt;script&gt;alert(&quot;t&quot;)&lt;/script&gt; Two &amp; &quot;quotes&quot;' in text
    assert [r["title"] for r in rows] == [HOSTILE_TITLE]  # JSON keeps it; the page sets text
    for page, head in ((text, headers), (list_page.decode(), list_headers)):
        nonce = re.search(r"script-src 'nonce-([\w-]+)'", head["content-security-policy"])
        assert nonce and "default-src 'none'" in head["content-security-policy"]
        scripts = re.findall(r"<script([^>]*)>", page)
        assert scripts == [f' nonce="{nonce.group(1)}"']
        assert re.findall(r"<style([^>]*)>", page) == [f' nonce="{nonce.group(1)}"']
        markup = page.split("<script")[0]  # no inline style or handler: the CSP blocks them
        assert not re.search(r"<[^>]*\s(on\w+|style)=", markup)


def test_errors_are_one_line_of_json(near_db: Path) -> None:
    with serving(near_db) as server:
        answers = [call(server, "GET", path) for path in (
            "/nowhere", "/pair", "/pair?url=http://nowhere.test/x", "/api/drops?sort=title",
            "/api/drops?min=-1", "/api/drops?reason=canonical")]
        answers.append(call(server, "DELETE", "/api/override"))
    assert [a[0] for a in answers] == [404, 400, 400, 400, 400, 400, 501]
    errors = [json.loads(body)["error"] for _, _, body in answers]
    assert "neither a dropped nor a kept page" in errors[2]
    assert "sort='title' is not one of distance, reason, url, kept, time" in errors[3]
    assert all("\n" not in e for e in errors)


# --- HTTP: the drop list --------------------------------------------------------------------


def test_the_list_filters_sorts_and_pages_on_the_server(many_db: Path) -> None:
    with serving(many_db) as server:
        first = drops(server, limit=50)
        assert first["total"] == first["all"] == MANY and len(first["rows"]) == 50
        assert [r["distance"] for r in first["rows"]] == [6] * 50  # distance, largest first
        near = drops(server, reason="near_duplicate", min=2, max=3, sort="url", order="asc",
                     limit=500)
        assert near["total"] == sum(1 for i in range(MANY) if i % 7 in (2, 3))
        urls = [r["url"] for r in near["rows"]]
        assert urls == sorted(urls) and {r["distance"] for r in near["rows"]} == {2, 3}
        host = drops(server, host="other", reason="exact_duplicate")
        assert host["total"] == sum(1 for i in range(MANY) if i % 7 == 0 and i % 2 == 0)
        assert all("other.test" in r["url"] for r in host["rows"]) and host["rows"]
        assert drops(server, q="drop 12345")["rows"][0]["title"] == "Drop 12345"
        newest = drops(server, sort="time", order="desc", limit=3, offset=2)["rows"]
        assert [r["title"] for r in newest] == ["Drop 19997", "Drop 19996", "Drop 19995"]
        oldest = drops(server, sort="time", order="asc", limit=1)["rows"][0]
        assert oldest["time"] == (T0 + timedelta(seconds=0)).isoformat()
        started = time.monotonic()
        drops(server, q="copy", sort="kept", order="asc", limit=100)
        assert time.monotonic() - started < 3, "a filtered page of 20,000 drops is quick"


def test_rows_show_their_review_and_override(near_db: Path) -> None:
    """A row carries its newest review and the rule that names it: here a line of the rules
    file, which the next crawl applies (a "distinct" button would store the page at once)."""
    url, kept = table_rows(near_db, "SELECT url, duplicate_of FROM dropped WHERE distance = 3")[0]
    rules_file = near_db.with_name("rules.txt")
    rules_file.write_text(f"distinct {url} {kept}\n")
    with serving(near_db, overrides_file=str(rules_file)) as server:
        assert drops(server, reviewed="yes")["total"] == 0
        status, outcome = post(server, "/api/review", {"url": url, "verdict": "correct",
                                                       "note": "same article"})
        assert status == 200 and outcome["review"]["verdict"] == "correct", outcome
        reviewed = drops(server, reviewed="yes")["rows"]
        unreviewed = drops(server, reviewed="no")["rows"]
        status, outcome = post(server, "/api/override", {"remove": True, "target": url})
    assert status == 400 and outcome["error"].startswith("no override names"), outcome
    assert [r["url"] for r in reviewed] == [url] and len(unreviewed) == 2
    assert reviewed[0]["review"]["note"] == "same article"
    assert reviewed[0]["override"].startswith("distinct ")
    assert all(r["review"] is None and r["override"] is None for r in unreviewed)


def _last_line(log: Path, url: str) -> dict[str, Any]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["url"] == url][-1]


def test_an_override_is_applied_at_once_and_removed(near_crawl: CrawlRun, near_db: Path) -> None:
    """The rule goes to the database and the rules file, the moves to the drop log."""
    url, kept = table_rows(near_db, "SELECT url, duplicate_of FROM dropped WHERE distance = 2")[0]
    history = "/api/history?" + urlencode({"url": url, "other": kept})
    log, rules_file = near_db.with_name("dropped.jsonl"), near_db.with_name("rules.txt")
    shutil.copy(near_crawl.dropped_log, log)
    with serving(near_db, overrides_file=str(rules_file), drop_log=str(log)) as server:
        status, outcome = post(server, "/api/override", {"action": "keep", "target": url,
                                                         "note": "its own article"})
        assert status == 200 and outcome["stored"] == [url], outcome
        assert f"keep {url} # its own article" in rules_file.read_text().splitlines()
        assert _last_line(log, url)["reason"] == "kept"
        assert drops(server)["total"] == 2  # the list reads the moved page's absence
        rules = json.loads(call(server, "GET", history)[2])["overrides"]
        assert [(r["action"], r["note"]) for r in rules] == [("keep", "its own article")]
        status, outcome = post(server, "/api/override", {"remove": True,
                                                         "target": rules[0]["target"]})
        assert status == 200 and outcome["dropped"] == [url], outcome
        assert json.loads(call(server, "GET", history)[2])["overrides"] == []
        assert drops(server)["total"] == 3
        assert _last_line(log, url)["reason"] == "near_duplicate"
        assert url not in rules_file.read_text()
    assert table_rows(near_db, "SELECT count(*) FROM overrides") == [(0,)]
    assert url in {u for u, in table_rows(near_db, "SELECT url FROM dropped")}


def test_always_drop_moves_a_kept_page_and_its_pair_page_shows_why(near_db: Path) -> None:
    kept = table_rows(near_db, "SELECT duplicate_of FROM dropped WHERE distance = 3")[0][0]
    with serving(near_db) as server:
        status, outcome = post(server, "/api/override", {"action": "drop", "target": kept})
        assert status == 200 and outcome["dropped"] == [kept], outcome
        rows = drops(server, reason="override")["rows"]
        status, _, page = call(server, "GET", "/pair?" + urlencode({"url": kept}))
    assert [(r["url"], r["override"].split(" (")[0]) for r in rows] == [(kept, f"drop {kept}")]
    assert status == 200
    assert "dropped by a person&#x27;s rule (an override)" in page.decode()


def test_a_rule_drop_names_no_preference_order(tmp_path: Path) -> None:
    """A page a crawl dropped by a person's rule has no rule of the preference order behind
    it (the pair page said "preference")."""
    info = build_db(tmp_path / "crawl.db")
    url = ORIGIN + "/section/a.html"
    store = Store(f"sqlite:///{info['path']}")
    store.write_batch([], [{"url": url, "canonical_url": url, "reason": "override",
                            "duplicate_of": None, "distance": None, "simhash": 5,
                            "title": "A", "text": "Some text", "crawl_id": info["crawl_id"],
                            "dropped_at": T0 + timedelta(seconds=20)}])
    store.close()
    with serving(info["path"]) as server:
        status, _, page = call(server, "GET", "/pair?" + urlencode({"url": url}))
    facts = dict(re.findall(r'data-fact="(\w+)">([^<]*)<', page.decode()))
    assert status == 200 and facts["reason"] == "override"
    assert facts["rule"] == "—" and facts["distance"] == "unknown"


@pytest.mark.parametrize("where", ["here", "outside"])
def test_the_list_shows_both_moves_of_always_drop(near_db: Path, where: str) -> None:
    """'Always drop' on a kept page with exactly one duplicate moves the page in and the
    duplicate out: the number of drops stays 3, and the list (read before) reads both moves,
    whether the button did it or ``scrapy dropped --drop`` (its library) meanwhile."""
    from crawler.review import actions

    copy, kept = table_rows(near_db, "SELECT url, duplicate_of FROM dropped WHERE distance = 3")[0]
    assert [of for of, in table_rows(near_db, "SELECT duplicate_of FROM dropped")].count(kept) == 1
    with serving(near_db) as server:
        before = {r["url"]: r["reason"] for r in drops(server)["rows"]}
        if where == "here":
            status, outcome = post(server, "/api/override", {"action": "drop", "target": kept})
            assert status == 200, outcome
        else:
            done = actions.add_override(str(near_db), "drop", kept)
            outcome = {"stored": done.stored, "dropped": done.dropped}
        assert outcome["stored"] == [copy] and outcome["dropped"] == [kept], outcome
        after = drops(server)
    assert before[copy] == "near_duplicate" and kept not in before
    rows = {r["url"]: r["reason"] for r in after["rows"]}
    assert after["total"] == len(before) == 3
    assert rows[kept] == "override" and copy not in rows
    assert copy in {u for u, in table_rows(near_db, "SELECT url FROM documents")}


def test_rules_file_rules_show_with_their_line_and_are_removed_from_it(near_db: Path) -> None:
    """The command's DEDUP_OVERRIDES_FILE: its rules are badges and history like the
    database's (named FILE:LINE), and "Remove override" takes the rule out of the file."""
    url, kept = table_rows(near_db, "SELECT url, duplicate_of FROM dropped WHERE distance = 1")[0]
    rules_file = near_db.with_name("rules.txt")
    rules_file.write_text(f"# hand-written\ndistinct {url} {kept} # two articles\n")
    history = "/api/history?" + urlencode({"url": url, "other": kept})
    with serving(near_db, overrides_file=str(rules_file)) as server:
        row = next(r for r in drops(server)["rows"] if r["url"] == url)
        rules = json.loads(call(server, "GET", history)[2])["overrides"]
        status, outcome = post(server, "/api/override", {"remove": True, "target": rules[0][
            "target"], "other": rules[0]["other"]})
        after = json.loads(call(server, "GET", history)[2])["overrides"]
        row_after = next(r for r in drops(server)["rows"] if r["url"] == url)
    assert row["override"] == f"distinct {min(url, kept)} {max(url, kept)} ({rules_file}:2)"
    assert [(r["action"], r["note"], r["source"]) for r in rules] == [
        ("distinct", "two articles", f"{rules_file}:2")]
    assert status == 200 and outcome["message"].startswith("removed "), outcome
    assert after == [] and row_after["override"] is None
    assert rules_file.read_text() == "# hand-written\n"


def test_a_bad_rules_file_is_one_line_before_serving(near_db: Path) -> None:
    rules_file = near_db.with_name("rules.txt")
    rules_file.write_text("keep\n")
    with CrawlDB.open(str(near_db)) as db:
        picked = db.select()
    with pytest.raises(ReviewError, match=rf"^{re.escape(str(rules_file))}:1: a rule is: "):
        ReviewServer(str(near_db), picked, 0, overrides_file=str(rules_file))


# --- the command ----------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_the_command_serves_until_stopped(near_db: Path, stop: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "dedupreport", "--serve", "--port", "0", "--db",
         str(near_db)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"serving the review of crawl 1 at http://127\.0\.0\.1:(\d+)/ "
                             r"\(Ctrl-C to stop\)\n", line)
        assert match, line
        conn = http.client.HTTPConnection("127.0.0.1", int(match.group(1)), timeout=30)
        conn.request("GET", "/api/drops")
        assert json.loads(conn.getresponse().read())["total"] == 3
        conn.close()
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0 and "Traceback" not in err, err


@pytest.fixture
def scrapy_cli(cli: Any) -> Iterator[Any]:
    """``cli``, with the root handler and level Scrapy's ``execute`` set undone afterwards."""
    from scrapy.utils import log as scrapy_log

    level = logging.root.level
    yield cli
    scrapy_log._uninstall_scrapy_root_handler()
    logging.root.setLevel(level)


def test_serve_refuses_a_report_file_option(scrapy_cli: Any, near_db: Path) -> None:
    code, _, err = scrapy_cli("dedupreport", "--serve", "--db", str(near_db), "-o", "x.html")
    assert code == 2 and "-o and --format are for a report file" in err


def test_a_port_in_use_is_one_line(scrapy_cli: Any, near_db: Path) -> None:
    with serving(near_db) as server:
        code, out, err = scrapy_cli("dedupreport", "--serve", "--port", str(server.port), "--db",
                             str(near_db))
    assert code == 1 and out == ""
    assert err.splitlines()[-1].startswith(f"error: cannot listen on 127.0.0.1:{server.port}: ")


# --- a real browser -------------------------------------------------------------------------


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} (CI: .ci/run installs chromium and the test extra)")
    pytest.skip(what)


@contextmanager
def browser_page() -> Iterator[tuple[Any, list[str]]]:
    """A Playwright page in headless Chromium and the list of console/page errors it raised."""
    if not Path(CHROMIUM).exists():
        _missing(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install playwright)")
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(15_000)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda dialog: errors.append("dialog: " + dialog.message))
            yield page, errors
        finally:
            browser.close()


def _shown(page: Any) -> list[str]:
    return page.locator("#drops tbody tr").evaluate_all("rows => rows.map(r => r.dataset.url)")


@pytest.mark.slow
def test_review_in_chromium(near_db: Path, tmp_path: Path) -> None:
    by_distance = dict(table_rows(near_db, "SELECT distance, url FROM dropped"))
    wrong = by_distance[1]
    shots = tmp_path / "shots"
    shots.mkdir()
    with serving(near_db) as server, browser_page() as (page, errors):
        page.goto(server.url)
        page.wait_for_selector("#drops tbody tr")
        assert _shown(page) == [by_distance[3], by_distance[2], by_distance[1]]
        assert page.locator("#summary").inner_text().startswith("rows 1 to 3 of 3 matching")
        hostile = page.locator(f'tr[data-url="{by_distance[2]}"] a.open')
        assert hostile.inner_text() == HOSTILE_TITLE  # shown as text, never run
        page.screenshot(path=str(shots / "list.png"), full_page=True)

        page.click('button[data-sort="distance"]')  # the same column again: ascending
        page.wait_for_function("() => document.querySelector('#drops tbody tr')"
                               ".dataset.distance === '1'")
        assert _shown(page) == [by_distance[1], by_distance[2], by_distance[3]]
        page.fill('input[name="min"]', "2")
        page.wait_for_function("() => document.querySelectorAll('#drops tbody tr').length === 2")
        page.fill('input[name="q"]', "quotes")
        page.wait_for_function("() => document.querySelectorAll('#drops tbody tr').length === 1")
        assert _shown(page) == [by_distance[2]]
        page.fill('input[name="q"]', "")
        page.fill('input[name="min"]', "")
        page.wait_for_function("() => document.querySelectorAll('#drops tbody tr').length === 3")

        page.click(f'tr[data-url="{wrong}"] a.open')
        page.wait_for_selector("#pair")
        page.wait_for_selector("#history li")
        assert page.locator(".side .line.only").count() >= 2  # each side has its own lines
        marked = page.locator('.side[data-side="dropped"] mark').all_inner_texts()
        kept_text = page.locator('.side[data-side="kept"] .text').inner_text().casefold()
        assert marked and not any(re.search(rf"\b{w.casefold()}\b", kept_text) for w in marked)
        page.fill("#note", "not the same article")
        page.click('button[data-value="wrong"]')
        page.wait_for_function("() => document.getElementById('status').textContent !== ''")
        assert "error" not in (page.get_attribute("#status", "class") or "")
        page.wait_for_selector("#history .badge.wrong")
        assert page.locator("#history li").count() == 1  # the review, listed once
        page.click('button[data-value="keep"]')
        page.wait_for_selector('#history li:has-text("override: keep")')
        status = page.locator("#status").inner_text()
        page.screenshot(path=str(shots / "pair.png"), full_page=True)
        assert not page.locator('button[data-kind="remove"]').is_disabled()
    assert errors == []
    assert status and "keep" in status.lower()
    reviews = table_rows(near_db, "SELECT url, verdict, note FROM reviews")
    assert reviews == [(wrong, "wrong", "not the same article")]
    assert [a for a, in table_rows(near_db, "SELECT action FROM overrides")] == ["keep"]
    assert wrong in {u for u, in table_rows(near_db, "SELECT url FROM documents")}
    assert wrong not in {u for u, in table_rows(near_db, "SELECT url FROM dropped")}
    SHOTS.mkdir(exist_ok=True)
    for name in ("list.png", "pair.png"):
        assert (shots / name).stat().st_size > 10_000
        shutil.copy(shots / name, SHOTS / f"review-{name}")


@pytest.mark.slow
def test_the_list_pages_through_20000_drops_in_chromium(many_db: Path) -> None:
    with serving(many_db) as server, browser_page() as (page, errors):
        page.goto(server.url)
        page.wait_for_selector("#drops tbody tr")
        summary = page.locator("#summary")
        assert summary.inner_text() == f"rows 1 to 100 of {MANY} matching ({MANY} dropped in all)"
        page.click("#next")
        page.wait_for_function("() => document.getElementById('summary').textContent"
                               ".startsWith('rows 101 to 200')")
        page.select_option('select[name="reason"]', "exact_duplicate")
        exact = sum(1 for i in range(MANY) if i % 7 == 0)
        page.wait_for_function(f"() => document.getElementById('summary').textContent"
                               f".startsWith('rows 1 to 100 of {exact} matching')")
        assert set(page.locator("#drops tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.reason)")) == {"exact_duplicate"}
        page.click('button[data-sort="url"]')
        page.wait_for_function("() => document.querySelector('th[aria-sort=\"descending\"] "
                               "button[data-sort=\"url\"]') !== null")
        urls = _shown(page)
        assert urls == sorted(urls, reverse=True) and len(urls) == 100
    assert errors == []
