"""``scrapy dropped``: listing, filters, formats, ``--explain`` and error paths.

The listing tests run against one real crawl of the demo site (a subprocess, once per module);
the error paths use small hand-made databases. Commands run through ``scrapy.cmdline.execute``
in this process (the real command line, without a subprocess per call), except the terminal
tests, which run the command in a subprocess whose stdout is a real pseudo-terminal.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import sqlite3
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from crawler.review import DropRecord
from crawler.sitegen import demo_site
from tests.conftest import ROOT, CrawlRun, run_crawl
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


def test_piped_table_prints_whole_urls_one_row_per_drop(cli: Any, demo_crawl: CrawlRun) -> None:
    code, out, err = cli("dropped", "--db", str(demo_crawl.db_path))
    assert code == 0, err
    lines = out.splitlines()
    rows = table_rows(demo_crawl)
    assert lines[0].startswith("DIST WHY   DROPPED URL") and "…" not in out
    body = lines[1:-1]
    assert [line.split()[2:] for line in body] == [[r["url"], r["duplicate_of"]] for r in rows]
    assert lines[-1].startswith(f"{len(rows)} dropped page(s)")
    assert max(map(len, body)) > 80, "whole URLs of the demo site do not fit 80 columns"


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


def test_a_long_url_is_never_cut(cli: Any, tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")
    long_url = ORIGIN + "/" + "very-long-segment/" * 6 + "end.html"
    with sqlite3.connect(info["path"]) as conn:
        conn.execute("UPDATE dropped SET url = ? WHERE reason = 'exact_duplicate'", (long_url,))
    code, out, _ = cli("dropped", "--db", str(info["path"]))
    assert code == 0 and "…" not in out and long_url in out.split()
    pty_out = in_terminal(["--db", str(info["path"])], columns=60)
    assert "…" not in pty_out and long_url[len(ORIGIN):] in pty_out.split()


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
                 ("--min-distance", "5", "--max-distance", "1"), ("--explain", " "),
                 ("--pair", "/p1.html", ""), ("--crawl", "1", "--all-crawls")):
        code, _, err = cli("dropped", "--db", str(info["path"]), *args)
        assert code == 2, args
        assert "error:" in err


# --- on a terminal: a real pseudo-terminal of a chosen width ---------------------------------


def in_terminal(args: list[str], columns: int, rows: int = 50) -> str:
    """stdout of ``scrapy dropped ARGS`` written to a pseudo-terminal ``columns`` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "scrapy", "dropped", *args], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE,
                            env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait(timeout=60) == 0, err
    return b"".join(chunks).decode().replace("\r\n", "\n")


def printed_rows(out: str) -> tuple[str, list[tuple[str, str]]]:
    """(the origin note, [(dropped, kept) as printed]) of a table in either layout."""
    lines = out.splitlines()
    note = lines[0] if not lines[0].startswith("DIST") else ""
    body = [line for line in lines if line[:4].strip().isdigit() or line.startswith("     kept")]
    if body and body[-1].startswith("     kept"):  # two lines per row
        return note, [(a.split()[2], b.split()[1]) for a, b in zip(body[::2], body[1::2],
                                                                      strict=True)]
    return note, [(line.split()[2], line.split()[3]) for line in body]


@pytest.mark.parametrize("columns", [80, 60, 200])
def test_terminal_table_fits_and_prints_usable_spellings(demo_crawl: CrawlRun,
                                                         columns: int) -> None:
    from crawler import review
    from crawler.review import resolve_url

    out = in_terminal(["--db", str(demo_crawl.db_path)], columns)
    rows = table_rows(demo_crawl)
    note, printed = printed_rows(out)
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(rows[0]["url"]))
    assert note == f"all URLs on {origin}" and "…" not in out
    assert printed == [(_path(r["url"]), _path(r["duplicate_of"])) for r in rows]
    longest = max(len(_path(r["url"])) for r in rows)
    if 11 + longest <= columns:  # a path alone fits: so does every line
        assert max(map(len, out.splitlines())) <= columns
    else:  # a path is never cut: only lines holding one whole path run past the edge
        assert all(len(line) <= columns or line[11:] in {p for pair in printed for p in pair}
                   for line in out.splitlines())
    with review.CrawlDB.open(str(demo_crawl.db_path)) as db:
        for (dropped, kept), row in zip(printed, rows, strict=True):
            assert resolve_url(db, dropped, dropped=True) == row["url"]
            assert resolve_url(db, kept) == row["duplicate_of"]


def test_terminal_80_columns_uses_one_line_per_row_when_it_fits(tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")
    out = in_terminal(["--db", str(info["path"])], 80)
    lines = out.splitlines()
    assert lines[0] == f"paths are on {ORIGIN}; other URLs are whole"
    assert lines[1].startswith("DIST WHY   DROPPED URL") and "KEPT (DUPLICATE OF)" in lines[1]
    assert lines[2].split() == ["3", "near", "http://b.test/far.html", "http://b.test/p3.html"]
    assert lines[3].split() == ["0", "exact", "/copy/p2.html", "/p2.html"]
    assert lines[-1] == "3 dropped page(s): 1 exact_duplicate, 2 near_duplicate"


def test_wide_prints_whole_urls_on_a_narrow_terminal(demo_crawl: CrawlRun) -> None:
    out = in_terminal(["--db", str(demo_crawl.db_path), "--wide"], 60)
    lines = out.splitlines()
    assert lines[0].startswith("DIST WHY   DROPPED URL")
    assert [line.split()[2:] for line in lines[1:-1]] == [
        [r["url"], r["duplicate_of"]] for r in table_rows(demo_crawl)]


def test_every_printed_spelling_is_accepted_by_explain(cli: Any, demo_crawl: CrawlRun) -> None:
    row = table_rows(demo_crawl, "WHERE reason = ?", ("near_duplicate",))[0]
    url = row["url"]
    parts = urlsplit(url)
    spellings = [url, _path(url), url.split("://", 1)[1], url + "/",
                 url.split("://", 1)[1] + "/", _path(url) + "/",
                 f"{parts.scheme.upper()}://{parts.netloc.upper()}{parts.path}"]
    for spelling in spellings:
        e = _explain(cli, demo_crawl, spelling)
        assert e["dropped"]["url"] == url and e["kept"]["url"] == row["duplicate_of"], spelling
    code, _, err = cli("dropped", "--db", str(demo_crawl.db_path), "--explain",
                       _path(row["duplicate_of"]))
    assert code == 1 and f"{row['duplicate_of']} was kept, not dropped" in err


def test_pair_names_the_pages_a_and_b(cli: Any, demo_crawl: CrawlRun) -> None:
    row = table_rows(demo_crawl, "WHERE reason = ?", ("near_duplicate",))[0]
    code, out, err = cli("dropped", "--db", str(demo_crawl.db_path), "--pair",
                         row["url"], row["duplicate_of"])
    assert code == 0, err
    assert f"Page A:   {row['url']}" in out and f"Page B:   {row['duplicate_of']}" in out
    assert "page a page" not in out.lower()  # was "Lines only in the page a page"
    assert "Lines only in page A (" in out and "Lines only in page B (" in out
    assert "Words only in page A (" in out and "only in page A," in out
    code, by_path, err = cli("dropped", "--db", str(demo_crawl.db_path), "--pair",
                             _path(row["url"]), _path(row["duplicate_of"]))
    assert code == 0 and by_path == out, err


def test_a_path_on_several_hosts_is_named_in_one_line(cli: Any, tmp_path: Path) -> None:
    from crawler.storage import Store
    from tests.test_review import doc, drop

    info = build_db(tmp_path / "crawl.db")
    store = Store(f"sqlite:///{info['path']}")
    kept = doc(1, 0xFFFF_0000_FFFF_0000, host="https://c.test", crawl_id=info["crawl_id"])
    store.write_batch([kept], [drop("https://c.test/mirror/p1.html", kept, "near_duplicate",
                                    kept["simhash"] ^ 1, 20, "x", crawl_id=info["crawl_id"])])
    store.close()
    db = str(info["path"])
    code, out, err = cli("dropped", "--db", db, "--explain", "/mirror/p1.html")
    assert code == 1 and out == ""
    assert err == (f"error: path /mirror/p1.html matches pages on 2 hosts: {ORIGIN}, "
                   "https://c.test; pass the whole URL\n")
    code, out, err = cli("dropped", "--db", db, "--explain", "c.test/mirror/p1.html",
                         "--format", "json")
    assert code == 0 and json.loads(out)["dropped"]["url"] == "https://c.test/mirror/p1.html"
    code, _, err = cli("dropped", "--db", db, "--pair", "/p1.html", "/p2.html")
    assert code == 1 and "path /p1.html matches pages on 2 hosts" in err


# --- which crawl: the latest by default -------------------------------------------------------


@pytest.fixture(scope="module")
def recrawl(demo_server: Any, tmp_path_factory: pytest.TempPathFactory) -> CrawlRun:
    """Two crawls of the demo site into one database and one drop log."""
    workdir = tmp_path_factory.mktemp("recrawl")
    for _ in range(2):
        run = run_crawl(workdir, urls=[demo_server.base_url + "/"])
        assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_latest_crawl_by_default_and_all_crawls_on_request(cli: Any, recrawl: CrawlRun) -> None:
    db = str(recrawl.db_path)
    (latest,) = recrawl.rows("SELECT MAX(id) FROM crawls")[0]
    code, out, err = cli("dropped", "--db", db, "--format", "json")
    assert code == 0 and err == f"crawl {latest} (latest); --crawl ID or --all-crawls for others\n"
    records = [json.loads(line) for line in out.splitlines()]
    assert records and {r["crawl_id"] for r in records} == {latest}
    assert len(records) == len({r["url"] for r in records})  # each URL once
    everything = table_rows(recrawl)
    assert {r["crawl_id"] for r in everything} == {latest - 1, latest}
    code, out, err = cli("dropped", "--db", db, "--all-crawls", "--format", "json")
    assert code == 0 and err == "" and len(out.splitlines()) == len(everything)
    code, out, err = cli("dropped", "--db", db, "--crawl", str(latest - 1), "--format", "json")
    assert code == 0 and err == ""
    assert {json.loads(line)["crawl_id"] for line in out.splitlines()} == {latest - 1}
    code, _, err = cli("dropped", "--db", db, "--crawl", "1", "--all-crawls")
    assert code == 2 and "exclude each other" in err


def test_log_lists_its_latest_crawl_by_default(cli: Any, recrawl: CrawlRun) -> None:
    (latest,) = recrawl.rows("SELECT MAX(id) FROM crawls")[0]
    code, out, err = cli("dropped", "--log", str(recrawl.dropped_log), "--format", "json")
    assert code == 0
    assert err == (f"crawl {latest} (latest in the log); --crawl ID or --all-crawls for others\n")
    assert sorted(json.loads(line)["url"] for line in out.splitlines()) == sorted(
        r["url"] for r in table_rows(recrawl, "WHERE crawl_id = ?", (latest,)))
    code, out, _ = cli("dropped", "--log", str(recrawl.dropped_log), "--all-crawls",
                       "--format", "json")
    assert len(out.splitlines()) == len(table_rows(recrawl))


def test_a_latest_crawl_without_drops_names_the_crawls_with_some(cli: Any,
                                                                 tmp_path: Path) -> None:
    from crawler.storage import Store

    info = build_db(tmp_path / "crawl.db")
    store = Store(f"sqlite:///{info['path']}")
    empty = store.start_crawl("web", [ORIGIN + "/"], {})
    store.finish_crawl(empty, "finished", {})
    store.close()
    code, out, err = cli("dropped", "--db", str(info["path"]))
    assert code == 0 and out == ""
    assert err == (f"crawl {empty} (latest) dropped no pages; crawl(s) {info['crawl_id']} did: "
                   "--crawl ID or --all-crawls\n")
    code, out, _ = cli("dropped", "--db", str(info["path"]), "--format", "csv")
    assert out.splitlines() == [",".join(DropRecord.field_names())]
    code, out, err = cli("dropped", "--db", str(info["path"]), "--all-crawls")
    assert code == 0 and out.splitlines()[-1].startswith("3 dropped page(s)")


# --- a listing of the drop log has no empty columns (issue 26) --------------------------------


def test_log_csv_has_the_columns_of_the_log_each_filled(cli: Any, demo_crawl: CrawlRun) -> None:
    """The drop log carries no title or canonical URL (the database does): a listing of it
    leaves them out instead of printing them empty; a listing of the database keeps them."""
    code, out, err = cli("dropped", "--log", str(demo_crawl.dropped_log), "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and list(rows[0]) == [name for name in DropRecord.field_names()
                                      if name not in ("canonical_url", "title")]
    for name in ("url", "reason", "duplicate_of", "distance", "simhash", "time", "crawl_id"):
        assert all(row[name] for row in rows), name
    code, out, _ = cli("dropped", "--log", str(demo_crawl.dropped_log), "--format", "json")
    assert {tuple(json.loads(line)) for line in out.splitlines()} == {tuple(rows[0])}
    code, out, _ = cli("dropped", "--db", str(demo_crawl.db_path), "--format", "csv")
    from_db = list(csv.DictReader(io.StringIO(out)))
    assert from_db and all(row["canonical_url"] for row in from_db)
    assert list(from_db[0]) == DropRecord.field_names()


def test_reason_canonical_lists_the_pages_demoted_for_the_page_they_name(
        cli: Any, demo_crawl: CrawlRun) -> None:
    """``--reason canonical`` (docs/reviewing.md's word for it) was refused: it is a rule of a drop,
    not a reason. A rule given as ``--reason`` lists exactly the drops of that rule, as
    ``--rule`` does (on the demo: the pages stored first and demoted for a preferred twin)."""
    db = str(demo_crawl.db_path)
    want = {u for (u,) in demo_crawl.rows("SELECT url FROM dropped WHERE rule = 'preferred'")}
    assert want  # the demo has pages stored first and demoted
    for option in (("--reason", "preferred"), ("--rule", "preferred")):
        code, out, err = cli("dropped", "--db", db, *option, "--format", "json")
        assert code == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert {r["url"] for r in records} == want and {r["rule"] for r in records} == {
            "preferred"}
    for reason in ("canonical", "override"):
        code, _, err = cli("dropped", "--db", db, "--reason", reason)
        assert code == 0 and "--reason" not in err, err
    code, _, err = cli("dropped", "--db", db, "--reason", "canonicl")
    assert code == 2 and "canonical, preferred" in err and "override" in err
