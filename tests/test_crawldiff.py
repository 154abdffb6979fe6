"""``scrapy crawldiff``: the O(1) verdict, the listing, the formats and the exit codes.

Listing, limits, JSON and errors run against crawls written through the Store into real
SQLite files; the end-to-end tests crawl a small generated site served on 127.0.0.1 (crawls
as subprocesses), before and after the site changed. Commands run through
``scrapy.cmdline.execute`` in this process.
"""

from __future__ import annotations

import html
import json
import random
from pathlib import Path
from typing import Any

import pytest

from crawler.commands.crawldiff import compare_pages
from crawler.sitegen import Page, Site
from crawler.sitegen.server import SiteServer
from crawler.sitegen.text import TextMaker
from crawler.storage import Store
from tests.conftest import run_crawl


def write_crawls(path: Path, *crawls: list[tuple[str, str | None]]) -> str:
    """A crawl database at ``path`` with one crawl per list of (url, content hash) pages."""
    url = f"sqlite:///{path}"
    with Store(url) as store:
        for pages in crawls:
            crawl = store.start_crawl("web")
            store.write_batch([{"url": u, "canonical_url": u, "content_hash": h,
                                "crawl_id": crawl} for u, h in pages], [])
            store.finish_crawl(crawl, "finished", {})
    return url


BASE = [(f"http://s/{i:02d}", f"{i:016x}{i:016x}") for i in range(12)] + [("http://s/bin", None)]


def test_identical_crawls_are_same_with_exit_0(cli, tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    write_crawls(db, BASE, list(reversed(BASE)))
    code, out, err = cli("crawldiff", "1", "2", "--db", str(db))
    assert (code, err) == (0, "")
    assert "same: both crawls stored the same 13 URLs with the same contents" in out
    fingerprint_lines = [line for line in out.splitlines() if line.endswith("same")]
    assert len(fingerprint_lines) == 3  # URLs, contents, pages


def test_differences_are_listed_sorted_with_a_limit(cli, tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    changed = [(u, "f" * 32 if u == "http://s/03" else h) for u, h in BASE if u != "http://s/05"]
    changed += [(f"http://s/new{i}", f"{100 + i:016x}" * 2) for i in range(4)]
    write_crawls(db, BASE, changed)
    code, out, _ = cli("crawldiff", "1", "2", "--db", str(db), "--limit", "2")
    assert code == 1
    assert "differ: URLs and contents differ" in out
    assert "only in A (1 URL):\n  http://s/05\n" in out
    assert ("only in B (4 URLs):\n  http://s/new0\n  http://s/new1\n  … and 2 more\n") in out
    assert f"content changed (1 URL):\n  http://s/03  {3:016x} -> {'f' * 16}\n" in out
    code, out, _ = cli("crawldiff", "1", "2", "--db", str(db), "--json", "--limit", "1")
    data = json.loads(out)
    assert code == 1 and not data["same"] and not data["same_urls"]
    assert data["only_in_b"] == {"count": 4, "urls": ["http://s/new0"]}
    assert data["content_changed"] == {"count": 1, "pages": [
        {"url": "http://s/03", "a": f"{3:016x}" * 2, "b": "f" * 32}]}
    assert data["a"]["urls"]["count"] == 13 and len(data["a"]["pages"]["fingerprint"]) == 32


def test_swapped_contents_differ_although_urls_and_contents_are_the_same(cli, tmp_path):
    db = tmp_path / "c.db"
    write_crawls(db, [("http://s/a", "1" * 32), ("http://s/b", "2" * 32)],
                 [("http://s/a", "2" * 32), ("http://s/b", "1" * 32)])
    code, out, _ = cli("crawldiff", "1", "2", "--db", str(db))
    assert code == 1
    assert "differ: the same URLs and contents, but not on the same URLs" in out
    assert "content changed (2 URLs)" in out


def test_two_databases_by_option_and_by_db_colon_id(cli, tmp_path: Path) -> None:
    one = tmp_path / "one.db"
    two = tmp_path / "two.db"
    write_crawls(one, BASE[:3], BASE)
    write_crawls(two, BASE)
    assert cli("crawldiff", "2", "1", "--db", str(one), "--db-b", str(two))[0] == 0
    code, out, _ = cli("crawldiff", f"{one}:latest", f"{two}:1")
    assert code == 0 and f"A: crawl 2 in sqlite:///{one}" in out
    code, out, _ = cli("crawldiff", f"{one}:1", f"sqlite:///{two}:1", "--limit", "0")
    assert code == 1 and "only in B (10 URLs):\n" in out and "http://s/05" not in out


@pytest.mark.parametrize("args, message", [
    (["1"], "expected two crawls"),
    (["1", "x:y"], "crawl B 'x:y': expected an id"),
    (["1", ":2"], "crawl B ':2'"),
    (["1", "2", "--limit", "-1"], "--limit must be >= 0"),
])
def test_bad_arguments_exit_2(cli, tmp_path: Path, args: list[str], message: str) -> None:
    code, _, err = cli("crawldiff", *args, "--db", str(tmp_path / "none.db"))
    assert code == 2 and message in err


def test_unknown_crawl_or_missing_database_exit_2(cli, tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    write_crawls(db, BASE, BASE)
    code, out, err = cli("crawldiff", "1", "7", "--db", str(db))
    assert (code, out) == (2, "")
    assert err == f"error: crawl B: no crawl 7 in sqlite:///{db} (crawls: 1, 2)\n"
    code, _, err = cli("crawldiff", "1", "2", "--db", str(tmp_path / "missing.db"))
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "missing.db").exists()


def test_compare_pages() -> None:
    diff = compare_pages(iter([("a", "1"), ("b", None), ("c", "3")]),
                         iter([("c", "4"), ("b", None), ("d", "5")]))
    assert (diff.only_a, diff.only_b, diff.changed) == (["a"], ["d"], [("c", "3", "4")])
    assert not compare_pages(iter([("a", "1")]), iter([("a", "1")]))


# --- two real crawls of a site that changed between them ------------------------------------

def article(seed: int) -> tuple[str, str]:
    maker = TextMaker(random.Random(seed))
    topic = maker.words.topics[seed % len(maker.words.topics)]
    maker.set_focus(topic)
    title = maker.title(topic)
    body = "".join(f"<p>{html.escape(p)}</p>" for p in maker.paragraphs(topic, 4))
    return title, body


def render(title: str, body: str) -> bytes:
    return (f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head>"
            f"<body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>").encode()


def build_pages(articles: dict[str, tuple[str, str]]) -> dict[str, Page]:
    links = "".join(f'<li><a href="{path}">{html.escape(title)}</a></li>'
                    for path, (title, _) in sorted(articles.items()))
    pages = {"/": Page(render("Home", f"<ul>{links}</ul>")),
             "/robots.txt": Page(b"User-agent: *\n", content_type="text/plain")}
    pages.update({path: Page(render(title, body)) for path, (title, body) in articles.items()})
    return pages


@pytest.fixture(scope="module")
def crawled(tmp_path_factory) -> dict[str, Any]:
    """Crawls 1 and 2 of the site into one database, then the site changes (a page added, one
    page's text changed, one page unlinked) and crawl 3 goes into the same database and crawl
    1 of a second one."""
    tmp = tmp_path_factory.mktemp("crawldiff")
    articles = {f"/articles/{i}": article(i) for i in range(6)}
    site = Site("crawldiff", dict(build_pages(articles)))
    runs = []
    with SiteServer(site) as server:
        base = server.base_url
        for _ in range(2):
            runs.append(run_crawl(tmp / "one", urls=[base + "/"]))
        title, _ = articles["/articles/2"]
        articles["/articles/2"] = (title, article(99)[1])  # same title, another text
        articles["/articles/new"] = article(42)
        del articles["/articles/5"]
        site.pages.clear()  # type: ignore[attr-defined]
        site.pages.update(build_pages(articles))  # type: ignore[attr-defined]
        runs.append(run_crawl(tmp / "one", urls=[base + "/"]))
        runs.append(run_crawl(tmp / "two", urls=[base + "/"]))
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    return {"base": base, "one": tmp / "one" / "crawl.db", "two": tmp / "two" / "crawl.db"}


@pytest.mark.slow
def test_two_crawls_of_an_unchanged_site_are_the_same(cli, crawled) -> None:
    code, out, _ = cli("crawldiff", "1", "2", "--db", str(crawled["one"]))
    assert code == 0, out
    assert "same: both crawls stored the same 7 URLs with the same contents" in out


@pytest.mark.slow
def test_a_changed_site_lists_exactly_what_changed(cli, crawled) -> None:
    base = crawled["base"]
    code, out, _ = cli("crawldiff", "2", "3", "--db", str(crawled["one"]), "--json")
    data = json.loads(out)
    assert code == 1 and not data["same"]
    assert data["only_in_a"]["urls"] == [f"{base}/articles/5"]
    assert data["only_in_b"]["urls"] == [f"{base}/articles/new"]
    assert [p["url"] for p in data["content_changed"]["pages"]] == [
        f"{base}/", f"{base}/articles/2"]  # the home page lists the new and unlinked pages
    # the same answer across two databases, and crawl 3 equals the other database's crawl
    code, out2, _ = cli("crawldiff", f"{crawled['one']}:2", f"{crawled['two']}:1", "--json")
    assert code == 1 and json.loads(out2)["only_in_b"] == data["only_in_b"]
    assert cli("crawldiff", f"{crawled['one']}:3", f"{crawled['two']}:latest")[0] == 0
