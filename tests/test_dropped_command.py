"""``scrapy dropped``: listing, filters, formats, ``--explain`` and error paths.

The listing tests run against one real crawl of the demo site (a subprocess, once per module);
the error paths use small hand-made databases. Commands run through ``scrapy.cmdline.execute``
in this process (the real command line, without a subprocess per call).
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from crawler.sitegen import demo_site
from tests.conftest import CrawlRun
from tests.test_review import ORIGIN, build_db

COLUMNS = "url, reason, duplicate_of, distance, simhash, duplicate_simhash, crawl_id, title"


@pytest.fixture(scope="module")
def site() -> Any:
    return demo_site()


def table_rows(run: CrawlRun, where: str = "", params: tuple = ()) -> list[dict[str, Any]]:
    """The dropped table itself, newest first, in the command's JSON shape."""
    sql = f"SELECT {COLUMNS} FROM dropped {where} ORDER BY dropped_at DESC, id DESC"
    out = []
    for url, reason, kept, dist, fp, kept_fp, crawl_id, title in run.rows(sql, params):
        out.append({"url": url, "reason": reason, "duplicate_of": kept, "distance": dist,
                    "simhash": None if fp is None else f"{fp & (2**64 - 1):016x}",
                    "duplicate_simhash": None if kept_fp is None else
                    f"{kept_fp & (2**64 - 1):016x}", "crawl_id": crawl_id, "title": title})
    return out


def listed(cli: Any, run: CrawlRun, *args: str) -> list[dict[str, Any]]:
    code, out, err = cli("dropped", "--db", str(run.db_path), "--format", "json", *args)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    return [{key: r[key] for key in COLUMNS.split(", ")} for r in records]


# --- on the demo crawl ------------------------------------------------------------------------


def test_demo_crawl_dropped_duplicates(demo_crawl: CrawlRun) -> None:
    (count,) = demo_crawl.rows("SELECT COUNT(*) FROM dropped")[0]
    assert count > 0, "the dedup pipeline dropped nothing on the demo site"


def test_lists_exactly_the_dropped_table(cli: Any, demo_crawl: CrawlRun) -> None:
    assert listed(cli, demo_crawl) == table_rows(demo_crawl)


def test_table_fits_80_columns_with_one_row_per_drop(cli: Any, demo_crawl: CrawlRun) -> None:
    code, out, _ = cli("dropped", "--db", str(demo_crawl.db_path))
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines)
    rows = table_rows(demo_crawl)
    header = next(i for i, line in enumerate(lines) if line.startswith("DIST"))
    body = lines[header + 1:-1]
    assert len(body) == len(rows)
    assert lines[-1].startswith(f"{len(rows)} dropped page(s)")
    first = urlsplit(rows[0]["url"])
    assert body[0].split()[2].rstrip("…").startswith(first.path[:10])


@pytest.mark.parametrize(("args", "where", "params"), [
    (("--reason", "near"), "WHERE reason = ?", ("near_duplicate",)),
    (("--reason", "exact_duplicate"), "WHERE reason = ?", ("exact_duplicate",)),
    (("--min-distance", "1"), "WHERE distance >= ?", (1,)),
    (("--max-distance", "0"), "WHERE distance <= ?", (0,)),
    (("--min-distance", "1", "--max-distance", "2"), "WHERE distance BETWEEN ? AND ?", (1, 2)),
    (("--host", "localhost"), "", ()),
    (("--host", "elsewhere.invalid"), "WHERE 0", ()),
    (("--since", "2000-01-01"), "", ()),
    (("--since", "2999-01-01T00:00:00Z"), "WHERE 0", ()),
])
def test_each_filter_narrows_like_sql(cli: Any, demo_crawl: CrawlRun, args: tuple,
                                      where: str, params: tuple) -> None:
    assert listed(cli, demo_crawl, *args) == table_rows(demo_crawl, where, params)


def test_crawl_and_limit_filters(cli: Any, demo_crawl: CrawlRun) -> None:
    (crawl_id,) = demo_crawl.rows("SELECT MAX(id) FROM crawls")[0]
    assert listed(cli, demo_crawl, "--crawl", str(crawl_id)) == table_rows(demo_crawl)
    assert listed(cli, demo_crawl, "--limit", "3") == table_rows(demo_crawl)[:3]
    code, _, err = cli("dropped", "--db", str(demo_crawl.db_path), "--crawl", "999")
    assert code == 1 and "unknown crawl 999" in err


def test_json_and_csv_parse_back_to_the_same_records(cli: Any, demo_crawl: CrawlRun) -> None:
    db = str(demo_crawl.db_path)
    _, out_json, _ = cli("dropped", "--db", db, "--format", "json")
    _, out_csv, _ = cli("dropped", "--db", db, "--format", "csv")
    records = [json.loads(line) for line in out_json.splitlines()]
    parsed = list(csv.DictReader(io.StringIO(out_csv)))
    assert len(parsed) == len(records) > 0
    for row, record in zip(parsed, records, strict=True):
        assert row.keys() == record.keys()
        assert row == {k: "" if v is None else str(v) for k, v in record.items()}


def test_log_lists_the_same_pages(cli: Any, demo_crawl: CrawlRun) -> None:
    code, out, err = cli("dropped", "--log", str(demo_crawl.dropped_log), "--format", "json")
    assert code == 0, err
    from_log = sorted((r["url"], r["reason"], r["distance"])
                      for r in map(json.loads, out.splitlines()))
    assert from_log == sorted((r["url"], r["reason"], r["distance"])
                              for r in table_rows(demo_crawl))


def _path(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _explain(cli: Any, run: CrawlRun, url: str, *extra: str) -> dict[str, Any]:
    code, out, err = cli("dropped", "--db", str(run.db_path), "--explain", url,
                         "--format", "json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_explain_a_mirror_names_its_origin_and_the_changed_lines(
        cli: Any, demo_crawl: CrawlRun, site: Any) -> None:
    pairs = {**site.near_duplicates, **{v: k for k, v in site.near_duplicates.items()}}
    mirrors = [r for r in table_rows(demo_crawl) if _path(r["url"]) in pairs]
    assert mirrors, "no mirror of the demo site was dropped"
    for row in mirrors[:5]:
        e = _explain(cli, demo_crawl, row["url"])
        dropped, kept = _path(row["url"]), _path(e["kept"]["url"])
        assert pairs[dropped] == kept, "the kept page is the mirror's origin"
        fps = int(e["dropped"]["simhash"], 16) ^ int(e["kept"]["simhash"], 16)
        assert e["distance"] == row["distance"] == fps.bit_count()
        mine, theirs = site.main_text[dropped].splitlines(), site.main_text[kept].splitlines()
        assert set(e["lines_only_dropped"]) == set(mine) - set(theirs)
        assert set(e["lines_only_kept"]) == set(theirs) - set(mine)


def test_explain_an_exact_copy_says_distance_0_and_identical(
        cli: Any, demo_crawl: CrawlRun) -> None:
    copies = table_rows(demo_crawl, "WHERE reason = ?", ("exact_duplicate",))
    assert copies, "no exact copy was dropped"
    code, out, err = cli("dropped", "--db", str(demo_crawl.db_path), "--explain", copies[0]["url"])
    assert code == 0, err
    assert f"Kept:     {copies[0]['duplicate_of']}" in out
    assert "Distance: 0 bits" in out and "Text:     identical" in out
    assert "content hashes equal" in out


def test_explain_diff_shows_the_changed_lines(cli: Any, demo_crawl: CrawlRun) -> None:
    near = table_rows(demo_crawl, "WHERE reason = ?", ("near_duplicate",))
    assert near, "no near duplicate was dropped"
    e = _explain(cli, demo_crawl, near[0]["url"], "--diff")
    assert e["diff"][0] == f"--- {e['kept']['url']}" and e["diff"][1] == f"+++ {near[0]['url']}"
    added = {line[1:].strip() for line in e["diff"] if line.startswith("+") and line[1:2] != "+"}
    assert set(e["lines_only_dropped"]) <= added


# --- hand-made databases: formats and errors --------------------------------------------------


def test_table_marks_cut_urls(cli: Any, tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")
    long_url = ORIGIN + "/" + "very-long-segment/" * 6 + "end.html"
    with sqlite3.connect(info["path"]) as conn:
        conn.execute("UPDATE dropped SET url = ? WHERE reason = 'exact_duplicate'", (long_url,))
    code, out, _ = cli("dropped", "--db", str(info["path"]))
    assert code == 0 and "…" in out and "end.html" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_missing_database_is_an_error_and_not_created(cli: Any, tmp_path: Path) -> None:
    target = tmp_path / "missing.db"
    code, out, err = cli("dropped", "--db", str(target))
    assert code == 1 and out == ""
    assert err.strip().startswith("error:") and "does not exist" in err
    assert len(err.strip().splitlines()) == 1 and not target.exists()


def test_empty_database_and_unknown_url(cli: Any, tmp_path: Path) -> None:
    from crawler.storage import Store

    empty = tmp_path / "empty.db"
    Store(f"sqlite:///{empty}").check()
    code, _, err = cli("dropped", "--db", f"sqlite:///{empty}")
    assert code == 1 and "empty" in err
    info = build_db(tmp_path / "crawl.db")
    code, _, err = cli("dropped", "--db", str(info["path"]), "--explain", ORIGIN + "/nope")
    assert code == 1 and "neither a dropped nor a kept page" in err


def test_bad_options_exit_2(cli: Any, tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")
    for args in (("--since", "last week"), ("--reason", "similar"), ("--diff",),
                 ("--min-distance", "5", "--max-distance", "1")):
        code, _, err = cli("dropped", "--db", str(info["path"]), *args)
        assert code == 2, args
        assert "error:" in err
