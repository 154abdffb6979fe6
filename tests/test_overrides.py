"""A person's word over the dedup rule (issue 26, items 1 and 2): the rules
(:mod:`crawler.dedup.overrides`), the settle step obeying them (:mod:`crawler.dedup.settle`),
``scrapy dropped --keep/--drop/--distinct/--unset/--review`` applying them at once on a real crawl
database, and real crawls of the order web (:mod:`crawler.sitegen.orderweb`) in two fetch
orders obeying them, from the database and from a rules file."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cluster import cluster_on, stored_canonical
from crawler.dedup.overrides import (
    CORRECT,
    DUPLICATE,
    NOT_DUPLICATE,
    WRONG,
    Override,
    OverrideError,
    Overrides,
    Review,
    make_override,
    read_file,
    write_rule,
)
from crawler.dedup.settle import Neighbours, SettlePage, components, decide_group, plan
from crawler.sitegen.orderweb import OrderWeb, order_web
from crawler.sitegen.server import SiteServer, serve_web
from crawler.storage import Store
from crawler.vocab import NEAR_DUPLICATE
from tests.conftest import ROOT, CrawlRun, run_crawl
from tests.test_order_free import ORDERS, agents_seen, check_replay, members

A = "http://a.test"
BASE = 0xF0F0_1234_5678_9ABC


def flip(fp: int, bits: int, start: int = 0) -> int:
    for bit in range(start, start + bits):
        fp ^= 1 << bit
    return fp


def page(url: str, fp: int | None, kept: bool = True, **kw: object) -> SettlePage:
    return SettlePage(url, url, f"h{url}", fp, kept=kept, **kw)  # type: ignore[arg-type]


# --- the rules ----------------------------------------------------------------------------------


def test_the_most_specific_rule_names_a_page_and_a_newer_rule_replaces_its_target() -> None:
    rules = Overrides([
        make_override("keep", "host:Example.com"),
        make_override("drop", "https://example.com/print/*"),
        make_override("keep", "https://example.com/print/keep-me"),
        make_override("drop", "https://EXAMPLE.com/a/../b"),
        make_override("keep", "https://example.com/b"),  # the same target, later: replaces
        make_override("distinct", "https://x.test/2", "https://x.test/1"),
    ])  # fmt: skip
    assert len(list(rules)) == len(rules) == 5
    action = {u: (rules.page(u).action if rules.page(u) else None) for u in (
        "https://example.com/print/x/y", "https://example.com/print/keep-me",
        "https://example.com/b", "https://docs.example.com/z", "https://example.org/")}
    assert action == {"https://example.com/print/x/y": "drop",
                      "https://example.com/print/keep-me": "keep",
                      "https://example.com/b": "keep", "https://docs.example.com/z": "keep",
                      "https://example.org/": None}
    assert rules.distinct("https://x.test/1", "https://x.test/2")
    assert rules.distinct("https://x.test/2", "https://x.test/1")
    assert not rules.distinct("https://x.test/1", "https://x.test/3")


def test_a_host_rule_with_a_port_names_that_port_only() -> None:
    rules = Overrides([make_override("keep", "host:localhost:8080"),
                       make_override("drop", "host:example.com")])
    assert rules.kept("http://localhost:8080/x")
    assert rules.page("http://localhost:9090/x") is None
    assert rules.dropped("http://www.example.com:8443/a")  # without a port: any port


def test_a_rule_url_is_made_canonical_as_the_crawl_makes_its_urls() -> None:
    """With URLNORM_SORT_QUERY off the crawl keys ?b=1&a=2 as written: a rule made with the
    default policy (query sorted) never matched it."""
    from crawler.urls.urlnorm import UrlPolicy, normalize_url

    policy = UrlPolicy.from_settings({"URLNORM_SORT_QUERY": False})
    key = normalize_url("https://x.test/a?b=1&a=2", policy=policy)
    rule = make_override("keep", "https://x.test/a?b=1&a=2", policy=policy)
    assert Overrides([rule]).kept(key)
    assert not Overrides([make_override("keep", "https://x.test/a?b=1&a=2")]).kept(key)


@pytest.mark.parametrize(("args", "words"), [
    (("keep", ""), "needs a URL"),
    (("keep", "host:"), "host:NAME"),
    (("keep", "host:a/b"), "host:NAME"),
    (("keep", "nope*"), "a pattern is a URL"),
    (("maybe", "https://a.test/"), "keep, drop or distinct"),
    (("distinct", "https://a.test/x"), "two URLs"),
    (("distinct", "https://a.test/x", "https://A.test/x"), "the same page"),
    (("distinct", "https://a.test/*", "https://a.test/x"), "not patterns"),
    (("keep", "https://a.test/x", "https://a.test/y"), "one target"),
])  # fmt: skip
def test_a_bad_rule_is_refused_in_one_line(args: tuple[str, ...], words: str) -> None:
    with pytest.raises(OverrideError) as err:
        make_override(*args)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_rules_file_keeps_comments_replaces_a_target_and_names_a_bad_line(tmp_path) -> None:
    path = tmp_path / "overrides.txt"
    path.write_text("# reviewed by hand\nkeep https://a.test/x # first word\n\n"
                    "distinct https://a.test/1 https://a.test/2\n")
    write_rule(path, make_override("drop", "https://a.test/x", note="changed my mind"))
    write_rule(path, make_override("keep", "host:b.test"))
    write_rule(path, None, remove=make_override("distinct", "https://a.test/2",
                                                "https://a.test/1"))
    text = path.read_text()
    assert text.startswith("# reviewed by hand\n") and "first word" not in text
    rules = read_file(path)
    assert [(r.action, r.target, r.note, r.source.rsplit(":", 1)[1]) for r in rules] == [
        ("drop", "https://a.test/x", "changed my mind", "3"), ("keep", "host:b.test", "", "4")]
    path.write_text("keep https://a.test/x\nkeep\n")
    with pytest.raises(OverrideError, match=rf"{path}:2: a rule is"):
        read_file(path)
    assert read_file(tmp_path / "missing.txt") == []


def test_a_review_labels_the_pair() -> None:
    def label(decision: str, verdict: str) -> str:
        return Review("u", "o", decision, verdict).label

    assert label("dropped", CORRECT) == DUPLICATE
    assert label("dropped", WRONG) == NOT_DUPLICATE
    assert label("kept", CORRECT) == NOT_DUPLICATE
    assert label("kept", WRONG) == DUPLICATE


# --- the settle step obeys them ----------------------------------------------------------------


def _outcome(pages: list[SettlePage], k: int, rules: Overrides) -> dict[str, str | None]:
    """Each page's kept page (None: kept; a page a drop rule names takes no part), as the
    settle step decides every group (a stored page alone is in none: kept)."""
    near = Neighbours(pages, k, rules.distinct)
    out: dict[str, str | None] = {p.url: None for p in pages if p.override != "drop"}
    for group in components(near):
        for i, v in decide_group(near, group, frozenset()).items():
            out[pages[i].url] = None if v.duplicate_of is None else pages[v.duplicate_of].url
    return out


@pytest.mark.parametrize("k", [1, 3])
def test_a_keep_rule_keeps_a_near_duplicate_at_1_to_k_bits_whatever_the_order(k: int) -> None:
    pages = [page(A + "/", BASE)]
    pages += [page(f"{A}/near{d}", flip(BASE, d)) for d in range(1, k + 1)]
    pages.append(page(A + "/far", flip(BASE, k + 1, start=40)))
    rules = Overrides([make_override("keep", f"{A}/near{k}")])
    ruled = [SettlePage(p.canonical, p.url, p.content_hash, p.simhash,
                        override="keep" if rules.kept(p.canonical) else "") for p in pages]
    for order in (ruled, ruled[::-1], random.Random(k).sample(ruled, len(ruled))):
        out = _outcome(list(order), k, rules)
        assert out[f"{A}/near{k}"] is None  # kept by the rule
        assert out[A + "/"] is None and out[A + "/far"] is None  # k+1 bits: distinct anyway
        assert all(out[f"{A}/near{d}"] == A + "/" for d in range(1, k))


def test_a_distinct_rule_parts_a_pair_but_not_a_third_page() -> None:
    pages = [page(A + "/a", BASE), page(A + "/bb", flip(BASE, 2)), page(A + "/ccc", flip(BASE, 1))]
    rules = Overrides([make_override("distinct", A + "/a", A + "/bb")])
    out = _outcome(pages, 3, rules)
    assert out == {A + "/a": None, A + "/bb": None, A + "/ccc": A + "/a"}
    assert _outcome(pages, 3, Overrides())[A + "/bb"] == A + "/a"  # without the rule


def test_a_drop_rule_moves_a_stored_page_out_and_its_duplicate_is_stored_again() -> None:
    pages = [page(A + "/orig", BASE, override="drop"),
             page(A + "/copy-a", flip(BASE, 2), kept=False, duplicate_of=A + "/orig",
                  reason=NEAR_DUPLICATE, distance=2)]
    moves = plan(pages, 3, frozenset(), start=[])  # nothing changed but the rule
    assert moves.exclude == [0] and moves.promote == [1] and not moves.demote


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 63), st.sampled_from(
    ["", "", "keep", "drop"])), min_size=2, max_size=20), st.randoms(use_true_random=False))
def test_property_with_rules_the_kept_set_is_a_function_of_the_set_of_pages(
        spec: list[tuple[int, int, str]], rnd: random.Random) -> None:
    centres = [0x0F0F_F0F0_1234_5678 * (c + 1) & (2**64 - 1) for c in range(4)]
    pages = [page(f"{A}/{'p' * (n % 3 + 1)}{n}", centres[c] ^ (1 << b), override=rule)
             for n, (c, b, rule) in enumerate(spec)]
    rules = Overrides([make_override("distinct", pages[0].url, pages[1].url)])
    first = _outcome(pages, 3, rules)
    shuffled = pages[:]
    rnd.shuffle(shuffled)
    assert _outcome(shuffled, 3, rules) == first
    for p in pages:
        if p.override == "keep":
            assert first[p.url] is None
        if p.override == "drop":
            assert p.url not in first and p.url not in first.values()


# --- scrapy dropped on a real crawl, and the crawls that follow --------------------------------


@pytest.fixture(scope="module")
def web() -> OrderWeb:
    return order_web()


@pytest.fixture(scope="module")
def servers(web: OrderWeb) -> Iterator[dict[str, SiteServer]]:
    with serve_web([web.a, web.b, web.c]) as (a, b, c):
        yield {"a": a, "b": b, "c": c}


def dropped_cli(db: Path, *args: str, extra: tuple[str, ...] = ()
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scrapy", "dropped", "--db", str(db), *args,
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)


def crawl(order: str, workdir: Path, servers: dict[str, SiteServer],
          **settings: object) -> tuple[CrawlRun, set[tuple[str, str]]]:
    seeds, order_settings, priority_seed = ORDERS[order]
    run = run_crawl(workdir, urls=[servers[s].url("/") for s in seeds],
                    settings={"ROBOTSTXT_OBEY": False, **order_settings, **settings},
                    env={"ORDER_PRIORITY_SEED": priority_seed} if priority_seed else None)
    assert run.returncode == 0, run.stderr[-3000:]
    stored = members({c for (c,) in run.rows("SELECT canonical_url FROM documents")}, servers)
    return run, stored


def slugs(web: OrderWeb) -> tuple[str, str, str]:
    """An article mirrored on its own site (kept by a rule), another (parted from its mirror
    by a rule), and one copied byte for byte on b (its original dropped by a rule)."""
    mirrored = sorted(p.split("/")[-1] for s, p in web.grouped() if p.startswith("/mirror/"))
    copied = sorted(p.split("/")[-1] for s, p in web.grouped() if s == "b" and
                    p.startswith("/c/"))
    assert len(mirrored) >= 2 and copied
    return mirrored[0], mirrored[1], copied[0]


def expected(web: OrderWeb, keep: str, apart: str, gone: str,
             stored: set[tuple[str, str]]) -> None:
    """The order web's ground truth, with the three rules applied."""
    assert ("a", f"/mirror/{keep}") in stored and ("a", f"/a/{keep}") in stored
    assert ("a", f"/mirror/{apart}") in stored and ("a", f"/a/{apart}") in stored
    assert ("a", f"/a/{gone}") not in stored
    assert web.singles <= stored
    for group in web.groups:
        members_ = group - {("a", f"/a/{gone}")}
        if ("a", f"/a/{keep}") in group or ("a", f"/a/{apart}") in group:
            assert len(members_ & stored) == 2, sorted(members_ & stored)
        else:
            assert len(members_ & stored) == 1, sorted(members_ & stored)


@pytest.mark.slow
def test_rules_in_a_file_are_obeyed_by_crawls_in_two_fetch_orders(web, servers, tmp_path) -> None:
    keep, apart, gone = slugs(web)
    a = servers["a"]
    rules = tmp_path / "overrides.txt"
    rules.write_text(f"keep {a.url('/mirror/' + keep)}  # wrongly dropped\n"
                     f"distinct {a.url('/a/' + apart)} {a.url('/mirror/' + apart)}\n"
                     f"drop {a.url('/a/')}{gone[:-2]}*\n")
    outcomes = []
    for order in ("seeds-a-b-c", "random-priorities-2"):
        run, stored = crawl(order, tmp_path / order, servers, DEDUP_OVERRIDES_FILE=rules)
        expected(web, keep, apart, gone, stored)
        check_replay(run)
        assert run.stats["dedup/override/rules"] == 3
        assert run.stats.get("dedup/override/kept", 0) + run.stats.get(
            "dedup/override/distinct", 0) >= 1
        assert run.stats["dedup/override"] == 1  # the original a drop rule names
        reason = run.rows("SELECT reason, duplicate_of FROM dropped WHERE url = ?",
                          (a.url("/a/" + gone),))
        assert reason == [("override", None)]
        outcomes.append(stored)
    unnamed = dropped_cli(run.db_path, "--explain", "/a/" + gone)
    assert unnamed.returncode == 0, unnamed.stderr
    assert "dropped by a person's rule" in unnamed.stdout and "--overrides" in unnamed.stdout
    named = dropped_cli(run.db_path, "--explain", "/a/" + gone, "--file", str(rules))
    assert f"dropped by override, {rules}:3: drop " in named.stdout
    apart_ = dropped_cli(run.db_path, "--explain", "/mirror/" + apart, "--file", str(rules))
    assert apart_.returncode == 0, apart_.stderr
    assert "stored (crawl " in apart_.stdout and "kept apart by override" in apart_.stdout
    assert outcomes[0] == outcomes[1]


@pytest.mark.slow
def test_a_wrong_drop_overruled_at_once_and_kept_by_the_next_crawl(web, servers,
                                                                   tmp_path) -> None:
    """The worked session: a crawl drops a mirror; the person marks the drop wrong and keeps
    the page: it is stored at once (from its drop row), --explain says so, and the next crawl
    into the database, in another fetch order, keeps it."""
    keep, _, _ = slugs(web)
    a = servers["a"]
    mirror = a.url("/mirror/" + keep)
    run, stored = crawl("seeds-a-b-c", tmp_path / "first", servers)
    assert ("a", f"/mirror/{keep}") not in stored
    reviewed = dropped_cli(run.db_path, "--review", mirror, "wrong", "--note", "another edition")
    assert reviewed.returncode == 0, reviewed.stderr
    assert "wrong; to store it: scrapy dropped --keep" in reviewed.stdout
    with sqlite3.connect(run.db_path) as conn:  # as if the crawl were still running
        conn.execute("UPDATE crawls SET settled_at = NULL")
    here = ROOT / "dropped.jsonl"  # a log of the current directory: another crawl's
    size = here.stat().st_size if here.exists() else None
    kept = dropped_cli(run.db_path, "--keep", mirror)
    assert kept.returncode == 0, kept.stderr
    assert f"appended to the drop log {run.dropped_log}" in kept.stderr  # the crawl's own
    assert (here.stat().st_size if here.exists() else None) == size
    assert run.rows("SELECT count(*) FROM crawls WHERE settled_at IS NOT NULL") == [(0,)]
    assert f"stored again: {mirror}" in kept.stdout
    assert run.rows("SELECT text IS NOT NULL FROM documents WHERE url = ?", (mirror,)) == [(1,)]
    assert not run.rows("SELECT 1 FROM dropped WHERE url = ?", (mirror,))
    check_replay(run)  # the move is in the drop log too
    explained = dropped_cli(run.db_path, "--explain", "/mirror/" + keep)
    assert explained.returncode == 0, explained.stderr
    assert "kept by override, 20" in explained.stdout and "reviewed " in explained.stdout
    again = run_crawl(run.workdir, urls=[servers[s].url("/") for s in ("c", "b", "a")],
                      settings={"ROBOTSTXT_OBEY": False, "CONCURRENT_REQUESTS": 2,
                                "SPIDER_MIDDLEWARES": json.dumps(
                                    {"tests.orderhelpers.RandomPriority": 950})},
                      env={"ORDER_PRIORITY_SEED": "5"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stats["dedup/override/kept"] >= 1
    latest = again.rows("SELECT max(id) FROM crawls")[0][0]
    assert again.rows("SELECT crawl_id FROM documents WHERE url = ?", (mirror,)) == [(latest,)]
    listed = dropped_cli(run.db_path, "--overrides", "--format", "json")
    assert [json.loads(line)["action"] for line in listed.stdout.splitlines()] == ["keep"]


@pytest.mark.slow
def test_a_distinct_rule_is_applied_at_once_and_a_review_names_its_other_page(
        web, servers, tmp_path) -> None:
    _, apart, _ = slugs(web)
    a = servers["a"]
    original, mirror = a.url("/a/" + apart), a.url("/mirror/" + apart)
    run, _ = crawl("seeds-a-b-c", tmp_path / "one", servers)
    assert run.rows("SELECT duplicate_of FROM dropped WHERE url = ?", (mirror,)) == [
        (original,)]
    (distance,) = run.rows("SELECT distance FROM dropped WHERE url = ?", (mirror,))[0]
    parted = dropped_cli(run.db_path, "--distinct", "/mirror/" + apart, "/a/" + apart)
    assert parted.returncode == 0, parted.stderr
    assert f"stored again: {mirror}" in parted.stdout
    stored = {u for (u,) in run.rows("SELECT url FROM documents")}
    assert {original, mirror} <= stored
    reviewed = dropped_cli(run.db_path, "--review", mirror, "correct", "--other", original)
    assert reviewed.returncode == 0, reviewed.stderr
    assert run.rows("SELECT decision, other, distance FROM reviews") == [
        ("kept", original, distance)]


@pytest.mark.slow
def test_unset_gives_the_decision_back_to_the_rule(web, servers, tmp_path) -> None:
    _, _, gone = slugs(web)
    a, b = servers["a"], servers["b"]
    original, copy = a.url("/a/" + gone), b.url("/c/" + gone)
    run, _ = crawl("seeds-a-b-c", tmp_path / "one", servers)
    with sqlite3.connect(run.db_path) as conn:  # a long page: longer than any text limit
        conn.execute("UPDATE documents SET text = text || replace(hex(zeroblob(15000)), '00', "
                     "'ab') WHERE url = ?", (original,))
    documents = "SELECT url, text, content_hash, simhash FROM documents ORDER BY url"
    before = run.rows(documents)
    stored = {u for u, *_ in before}
    assert original in stored and copy not in stored
    rules = tmp_path / "rules.txt"
    dropped = dropped_cli(run.db_path, "--drop", original, "--file", str(rules))
    assert dropped.returncode == 0, dropped.stderr
    assert f"stored again: {copy}" in dropped.stdout and original in dropped.stdout
    assert run.rows("SELECT reason FROM dropped WHERE url = ?", (original,)) == [("override",)]
    assert f"drop {original}" in rules.read_text()
    for fmt in ("table", "csv", "json"):  # a drop with no kept page lists like any other
        listed = dropped_cli(run.db_path, "--format", fmt)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        assert original in listed.stdout
    assert "(none: a person's drop rule)" in dropped_cli(run.db_path).stdout
    review = dropped_cli(run.db_path, "--review", original, "wrong")
    assert review.returncode == 1 and f"--unset {original}" in review.stderr
    unset = dropped_cli(run.db_path, "--unset", original, "--file", str(rules))
    assert unset.returncode == 0, unset.stderr
    assert run.rows(documents) == before  # every page back, its text whole
    assert "drop" not in rules.read_text().split("\n", 1)[1]
    check_replay(run)


@pytest.mark.parametrize(("args", "words"), [
    (("--keep", "host:"), "host:NAME"),
    (("--distinct", "https://a.test/x", "https://a.test/x"), "the same page"),
    (("--review", "/nowhere", "maybe"), "use correct or wrong"),
    (("--review", "https://a.test/nowhere", "wrong"), "neither stored nor dropped"),
    (("--keep", "https://a.test/x", "--drop", "https://a.test/y"), "exclude each other"),
    (("--note", "x"), "go with --keep"),
    (("--unset", "https://a.test/never-ruled"), "no override names"),
    (("--unset", "https://a.test/never-ruled", "--file", "/nonexistent/rules.txt"),
     "no override names"),
    (("--keep", "https://a.test/x", "--file", "/proc/no-such-dir/rules.txt"), "overrides file"),
    (("--review", "/nowhere", "wrong", "--other", "https://a.test/nowhere"), "neither stored"),
    (("--overrides", "-s", "DROPPED_LGO=/tmp/x"), "did you mean DROPPED_LOG"),
])  # fmt: skip
def test_a_bad_action_is_one_line_and_changes_nothing(demo_crawl, tmp_path, args, words) -> None:
    db = tmp_path / "crawl.db"
    db.write_bytes(demo_crawl.db_path.read_bytes())

    def state() -> tuple[list[tuple], ...]:
        with sqlite3.connect(db) as conn:
            return tuple(conn.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()
                         for t in ("documents", "dropped"))

    before = state()
    result = dropped_cli(db, *args)
    assert result.returncode in (1, 2)  # 2: a usage error, after Scrapy's usage line
    assert words in result.stderr.strip().splitlines()[-1] and "Traceback" not in result.stderr
    assert result.returncode == 2 or len(result.stderr.strip().splitlines()) == 1
    with sqlite3.connect(db) as conn:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        for table in ("overrides", "reviews"):
            assert table not in tables or not conn.execute(
                f"SELECT count(*) FROM {table}").fetchone()[0]
    assert state() == before  # no page moved


def test_a_bad_rules_file_stops_the_crawl_before_it_starts(tmp_path) -> None:
    rules = tmp_path / "overrides.txt"
    rules.write_text("keep https://a.test/x\nkeep host:a/b\n")
    run = run_crawl(tmp_path / "run", urls=["http://127.0.0.1:9/"],
                    settings={"DEDUP_OVERRIDES_FILE": rules})
    assert run.returncode != 0
    assert f"{rules}:2" in run.stderr and "Traceback" not in run.stderr
    assert not run.db_path.exists()


def test_override_is_a_rule_value() -> None:
    rule = make_override("keep", "https://A.test/x/../y", note="  two   words ")
    assert rule == Override("keep", "https://a.test/y", "", "two words")
    assert rule.line() == "keep https://a.test/y # two words"


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_the_workers_of_a_distributed_crawl_obey_the_rules_of_their_database(
        web, servers, tmp_path, redis_url, pg_url) -> None:
    keep, apart, gone = slugs(web)
    a = servers["a"]
    for server in servers.values():
        server.reset_hits()  # the user agents seen are this crawl's workers'
    with cluster_on(list(servers.values()), tmp_path / "cluster", redis_url, pg_url) as cluster:
        with Store(cluster.storage_url) as store:  # recorded before the workers start
            for rule in (make_override("keep", a.url("/mirror/" + keep)),
                         make_override("distinct", a.url("/a/" + apart),
                                       a.url("/mirror/" + apart)),
                         make_override("drop", a.url("/a/" + gone))):
                store.add_override(rule)
        for _ in range(2):
            cluster.start(TRAP_FOLLOW_LINKS_OF="kept", ROBOTSTXT_OBEY=False, DOWNLOAD_DELAY=0.1)
        cluster.wait()
        for worker in cluster.workers:
            assert worker.proc.returncode == 0, worker.log[-3000:]
        assert {"worker-0", "worker-1"} <= agents_seen(servers)  # every worker worked
        stored = members(stored_canonical(cluster.storage_url), servers)
    expected(web, keep, apart, gone, stored)


@pytest.mark.slow
def test_a_page_stored_again_without_its_whole_text_says_so(web, servers, tmp_path) -> None:
    keep, _, _ = slugs(web)
    mirror = servers["a"].url("/mirror/" + keep)
    run, _ = crawl("seeds-a-b-c", tmp_path / "bare", servers, DROPPED_TEXT_MAX_CHARS=0)
    kept = dropped_cli(run.db_path, "--keep", mirror)
    assert kept.returncode == 0, kept.stderr
    assert f"stored again: {mirror}" in kept.stdout
    assert "1 of them without a text" in kept.stdout
    run, _ = crawl("seeds-a-b-c", tmp_path / "cut", servers, DROPPED_TEXT_MAX_CHARS=100)
    kept = dropped_cli(run.db_path, "--keep", mirror)
    assert kept.returncode == 0, kept.stderr
    assert "1 of them with the first 100 characters of their text only" in kept.stdout
    again = dropped_cli(run.db_path, "--keep", mirror)
    assert "(already recorded" in again.stdout


def test_a_drop_rule_moves_a_stored_binary_page_out_at_once(demo_crawl, tmp_path) -> None:
    """A page without a text fingerprint (the demo's PDF-like export) is in no duplicate
    group: the settle step read only fingerprinted pages, so a drop rule never reached it."""
    db = tmp_path / "crawl.db"
    db.write_bytes(demo_crawl.db_path.read_bytes())
    with sqlite3.connect(db) as conn:
        binary = [u for (u,) in conn.execute(
            "SELECT url FROM documents WHERE content_hash IS NULL")]
    assert binary
    # the copy records the shared demo crawl's drop log: its moves must not go there
    result = dropped_cli(db, "--drop", binary[0],
                         extra=("-s", f"DROPPED_LOG={tmp_path / 'dropped.jsonl'}"))
    assert result.returncode == 0, result.stderr
    assert f"moved to dropped: {binary[0]}" in result.stdout
    with sqlite3.connect(db) as conn:
        assert not conn.execute("SELECT 1 FROM documents WHERE url = ?", binary[:1]).fetchall()
        assert conn.execute("SELECT reason FROM dropped WHERE url = ?", binary[:1]
                            ).fetchall() == [("override",)]
