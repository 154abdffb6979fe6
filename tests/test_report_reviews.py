"""The report learns from reviews (crawler.report.reviews), and its words and percentages
(crawler.report.wording): one function per percentage, counts that agree with their noun.

Labels and scores are checked on plain :class:`crawler.dedup.overrides.Review` objects; the report
of a hand-made crawl database (tests.test_review.build_db) with reviews recorded by
:func:`crawler.review.actions.add_review` checks the decision list, the history, the what-if
columns, the advice and ``--format json``.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler import report
from crawler.dedup.overrides import CORRECT, WRONG, Review
from crawler.report import reviews
from crawler.report.html import render_html
from crawler.report.markup import SETTING_UNITS, human
from crawler.report.wording import percent, plural
from crawler.review import CrawlDB
from crawler.review.actions import add_review
from crawler.storage import Store
from tests.test_dedupreport import Page
from tests.test_review import ORIGIN, build_db, doc, drop

T = datetime(2026, 12, 4, 12, tzinfo=UTC)


def review(url: str, verdict: str, distance: int | None, decision: str = "dropped",
           reason: str = "near_duplicate", minute: int = 0, other: str = "") -> Review:
    return Review(url, other or url + "#kept", decision, verdict, reason, distance,
                  reviewed_at=T + timedelta(minutes=minute))


# --- wording -----------------------------------------------------------------------------------


def test_a_ratio_prints_the_same_in_totals_and_by_host(tmp_path: Path) -> None:
    """4 drops of 21 pages on one host: 19.0476%. The totals formatted the JSON value rounded
    to 4 places (0.1905, "19.1%"), the host row the ratio itself ("19.0%")."""
    store = Store(f"sqlite:///{tmp_path / 'crawl.db'}")
    cid = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3})
    kept = [doc(i, random.Random(i).getrandbits(64), crawl_id=cid) for i in range(17)]
    copies = [drop(f"{ORIGIN}/copy{i}.html", kept[i], "exact_duplicate", kept[i]["simhash"],
                   100 + i, "text", crawl_id=cid) for i in range(4)]
    store.write_batch(kept, copies)
    store.finish_crawl(cid, "finished", {})
    store.close()
    with CrawlDB.open(str(tmp_path / "crawl.db")) as db:
        data = report.build_report(db)
    assert (data["totals"]["pages"], data["totals"]["dropped"]) == (21, 4)
    page = Page.parse(render_html(data))
    (host,) = data["by_host"]
    assert page.by_id["duplicate-rate"] == "19.0%"
    assert page.row(**{"data-host": host["host"]})[5] == "19.0%"


@given(st.integers(0, 10_000), st.integers(1, 10_000))
def test_percent_of_a_ratio_is_one_text(part: int, whole: int) -> None:
    text = percent(part, whole)
    assert text == percent(part / whole) and text.endswith("%")
    assert human(part / whole, "dedup/summary/duplicate_rate") == text


def test_percent_keeps_small_ratios_readable() -> None:
    assert percent(1.4e-05) == "0.0014%" and percent(0) == "0.0%" and percent(1, 0) == "n/a"
    assert percent(0.1865) == "18.6%" and percent(3, 8) == "37.5%"


def test_settings_of_one_read_singular() -> None:
    """``SIMHASH_SHINGLE 1 words``: every unit of one reads singular, of many plural."""
    units = {name: unit for name, unit in SETTING_UNITS.items() if unit != "s"}
    assert units
    for name in units:
        one, two = human(1, name, SETTING_UNITS[name]), human(2, name, SETTING_UNITS[name])
        assert not one.endswith("s") and two.endswith("s"), (name, one, two)
    assert human(1, "SIMHASH_SHINGLE", SETTING_UNITS["SIMHASH_SHINGLE"]) == "1 word"
    assert human(3, "TRAP_MAX_QUERY_PARAMS", "query pair") == "3 query pairs"
    assert human(1, "DOWNLOAD_DELAY", "s") == "1 s"
    assert plural(1, "exact copy", "exact copies") == "1 exact copy"
    assert plural(0, "bit") == "0 bits" and plural(12_345, "page") == "12,345 pages"


def test_the_threshold_advice_counts_bits_and_bytes() -> None:
    def hist(counts: dict[int, int], k: int) -> dict[str, Any]:
        return {"threshold": k, "buckets": [{"distance": d, "kept": counts.get(d, 0),
                                             "dropped": 0} for d in range(12)]}

    assert report.advice(hist({0: 3, 2: 1}, 0)) == (
        "No page has its nearest neighbour at 1 bit: any threshold from 0 to 1 makes the same "
        "decisions on this crawl; the closest distinct pages are 2 bits apart.")
    assert "at 4..6 bits" in report.advice(hist({3: 3, 7: 1}, 3))
    assert report.advice(hist({0: 3}, 1)).startswith("No page is farther than 1 bit ")
    assert human(1, "x_bytes") == "1 byte" and human(1023, "x_bytes") == "1,023 bytes"


def test_a_report_says_1_bit_and_1_word(tmp_path: Path) -> None:
    """A crawl at k = 1 with shingles of 1 word and one drop at 1 bit: no "1 bits" anywhere."""
    store = Store(f"sqlite:///{tmp_path / 'crawl.db'}")
    cid = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 1, "SIMHASH_SHINGLE": 1})
    a = doc(0, 0xF0F0_0000_0000_0000, crawl_id=cid)
    b = doc(1, 0x0000_0000_0F0F_0F0F, crawl_id=cid)
    store.write_batch([a, b], [drop(f"{ORIGIN}/near.html", a, "near_duplicate",
                                    a["simhash"] ^ 1, 10, "text", crawl_id=cid)])
    store.finish_crawl(cid, "finished", {})
    store.close()
    with CrawlDB.open(str(tmp_path / "crawl.db")) as db:
        text = render_html(report.build_report(db))
    page = Page.parse(text)
    settings = {cells[0]: cells[1] for cells in (r["_cells"] for r in page.rows)
                if len(cells) == 2}
    assert settings["SIMHASH_SHINGLE"] == "1 word" and settings["SIMHASH_MAX_DISTANCE"] == "1 bit"
    assert "1 near duplicate: 1 at 1 bit;" in page.by_id["decision-summary"]
    for wrong in (" 1 bits", " 1 words", " 1 pages", " 1 near duplicates", "(s)", "(ies)"):
        assert wrong not in text, wrong


# --- labels and scores on plain reviews --------------------------------------------------------


def test_labels_take_exact_copies_at_0_and_leave_out_pairs_without_distance() -> None:
    found = reviews.labels([
        review("a", CORRECT, 2), review("b", WRONG, 1),
        review("c", CORRECT, None, reason="exact_duplicate"),
        review("d", WRONG, 6, decision="kept", reason=""),  # wrongly kept: a duplicate
        review("e", CORRECT, None, reason="soft_404")])
    assert sorted(found.pairs) == [(0, True), (1, False), (2, True), (6, True)]
    assert found.without_distance == 1 and found.duplicates == 3
    assert found.unscored == {"soft_404": 1}


def _score(found: reviews.Labels, threshold: int) -> dict[str, Any]:
    scored = reviews.score(found, threshold)
    assert scored is not None
    return scored


def test_scores_count_each_ratio() -> None:
    found = reviews.labels([review("a", CORRECT, 2), review("b", WRONG, 1),
                            review("c", CORRECT, 0, reason="exact_duplicate"),
                            review("d", WRONG, 6, decision="kept", reason="")])
    at = {t: _score(found, t) for t in range(8)}
    assert at[0] == {"precision": 1.0, "precision_of": [1, 1], "recall": 1 / 3,
                     "recall_of": [1, 3], "f1": 0.5}
    assert at[1]["precision_of"] == [1, 2] and at[1]["recall_of"] == [1, 3]
    assert at[3]["precision_of"] == [2, 3] and at[3]["recall_of"] == [2, 3]
    assert at[6]["precision_of"] == [3, 4] and at[6]["recall_of"] == [3, 3]
    assert at[6]["f1"] == pytest.approx(6 / 7)
    assert reviews.score(reviews.labels([]), 3) is None
    nothing_called = _score(reviews.labels([review("a", CORRECT, 5)]), 3)
    assert nothing_called["precision"] is None
    assert nothing_called["precision_of"] == [0, 0] and nothing_called["f1"] == 0.0


def _rows(found: reviews.Labels, top: int) -> list[dict[str, Any]]:
    return [{"threshold": t, "reviewed": reviews.score(found, t)} for t in range(top + 1)]


def test_advice_names_k_and_the_best_threshold() -> None:
    found = reviews.labels([review("a", CORRECT, 2), review("b", WRONG, 1),
                            review("c", CORRECT, 0, reason="exact_duplicate"),
                            review("d", WRONG, 6, decision="kept", reason=""),
                            review("e", CORRECT, None, reason="soft_404")])
    text = reviews.advice(found, _rows(found, 11), 3)
    assert text.startswith("On the 4 reviewed decisions, k=3 has precision 66.7% (2/3) and "
                           "recall 66.7% (2/3).")
    assert "k=6 would have precision 75.0% (3/4) and recall 100.0% (3/3) on what was " \
           "reviewed" in text
    assert text.endswith("1 reviewed decision without a distance (1 soft 404) left out.")
    assert "would" not in reviews.advice(found, _rows(found, 5), 3), "6 is not in the table"


def test_advice_keeps_k_when_it_is_among_the_best() -> None:
    found = reviews.labels([review("a", CORRECT, 2), review("b", WRONG, 9)])
    text = reviews.advice(found, _rows(found, 11), 3)
    assert text == ("On the 2 reviewed decisions, k=3 has precision 100.0% (1/1) and recall "
                    "100.0% (1/1).")
    # equal F1 at 2..8: the closest to k wins, below k before above
    found = reviews.labels([review("a", CORRECT, 1), review("b", WRONG, 9)])
    assert "k=1 would" in reviews.advice(found, _rows(found, 11), 0)
    assert reviews.advice(reviews.labels([]), [], 3) == ""
    only_soft = reviews.labels([review("e", CORRECT, None, reason="soft_404")])
    assert "nothing to score" in reviews.advice(only_soft, _rows(only_soft, 5), 3)


def test_decisions_without_a_distance_are_counted_by_kind() -> None:
    """A reviewed drop without a distance is a soft 404 or a page a person's rule dropped (or
    a pair whose fingerprints were not stored): the advice counts each, and calls none of
    them a soft 404 that is not one."""
    found = reviews.labels([review("a", CORRECT, 2),
                            review("b", CORRECT, None, reason="override"),
                            review("c", WRONG, None, reason="override"),
                            review("d", CORRECT, None, reason="soft_404"),
                            review("e", WRONG, None, decision="kept", reason="")])
    assert found.unscored == {"override": 2, "soft_404": 1, "other": 1}
    assert found.without_distance == 4 and found.pairs == [(2, True)]
    assert reviews.advice(found, _rows(found, 5), 3).endswith(
        "4 reviewed decisions without a distance (1 soft 404, 2 pages a person's rule "
        "dropped and 1 pair without fingerprints) left out.")
    by_person = reviews.labels([review("b", CORRECT, None, reason="override")])
    assert reviews.advice(by_person, [], 3) == (
        "No reviewed decision has a distance (1 page a person's rule dropped): nothing to "
        "score the threshold against.")
    summary = reviews.summary([], {}, found, _rows(found, 5), 3)
    assert summary["without_distance_by_kind"] == {"override": 2, "soft_404": 1, "other": 1}


# --- a crawl database with reviews -------------------------------------------------------------


@pytest.fixture
def reviewed_db(tmp_path: Path) -> dict[str, Any]:
    """build_db's crawl (k = 3; drops at 2 bits, 0 (exact) and 3 bits; kept pages p0 and p3
    12 bits apart) with three decisions reviewed through crawler.review.actions: the near drop
    twice (correct, then wrong), the exact copy correct and keeping p0 beside p3 wrong; the
    drop at 3 bits is left to check."""
    info = build_db(tmp_path / "crawl.db")
    _, exact, near = info["drops"]
    docs, db_url = info["docs"], str(info["path"])
    add_review(db_url, near["url"], CORRECT, note="first look")
    add_review(db_url, exact["url"], CORRECT)
    outcome = add_review(db_url, docs[0]["url"], WRONG, other=docs[3]["url"],
                         note="same article")
    assert outcome.review is not None and outcome.review.distance == 12
    add_review(db_url, near["url"], WRONG, note="an advert differs")
    return info


def test_reviewed_drops_leave_the_decisions_to_check(reviewed_db: dict[str, Any]) -> None:
    far = reviewed_db["drops"][0]
    with CrawlDB.open(str(reviewed_db["path"])) as db:
        data = report.build_report(db)
    dec = data["decisions"]
    assert [d["url"] for d in dec["near"]] == [far["url"]] and dec["near_count"] == 1
    assert dec["exact_groups"] == [] and dec["exact_count"] == 0 and dec["reviewed"] == 2
    page = Page.parse(render_html(data))
    assert page.by_id["decisions-reviewed"] == "2 reviewed decisions left out (see Reviews)."
    items = [a["data-url"] for t, a in page.tags if t == "li" and a.get("class") == "decision"]
    assert items == [far["url"]]


def test_reviews_section_lists_the_history_newest_first(reviewed_db: dict[str, Any]) -> None:
    near = reviewed_db["drops"][2]
    with CrawlDB.open(str(reviewed_db["path"])) as db:
        data = report.build_report(db)
    rev = data["reviews"]
    assert (rev["count"], rev["decisions"], rev["correct"], rev["wrong"]) == (4, 3, 1, 2)
    assert [r["note"] for r in rev["listed"]] == ["an advert differs", "same article", "",
                                                  "first look"]
    times = [r["reviewed_at"] for r in rev["listed"]]
    assert times == sorted(times, reverse=True) and all(times)
    assert {k: v for k, v in rev["listed"][0].items() if k != "reviewed_at"} == {
        "url": near["url"], "other": near["duplicate_of"], "decision": "dropped",
        "verdict": "wrong", "label": "distinct", "reason": "near_duplicate", "distance": 2,
        "note": "an advert differs", "crawl_id": reviewed_db["crawl_id"]}
    page = Page.parse(render_html(data))
    assert page.by_id["review-summary"] == ("4 reviews of 3 decisions: 1 correct, 2 wrong (the "
                                            "newest review of each decision).")
    verdicts = [a["data-verdict"] for t, a in page.tags if t == "tr" and "data-verdict" in a]
    assert verdicts == ["wrong", "wrong", "correct", "correct"]


def test_reviews_score_the_what_if_and_the_advice(reviewed_db: dict[str, Any]) -> None:
    """Labels: 2 bits distinct (the near drop, wrong), 0 duplicate (the exact copy), 12 bits
    duplicate (the kept pair, wrong). At k = 3 the rule calls 2 of them duplicates, 1 rightly;
    at 12 it calls all 3, 2 rightly, and finds both duplicates: the best F1."""
    with CrawlDB.open(str(reviewed_db["path"])) as db:
        data = report.build_report(db)
    rows = {r["threshold"]: r["reviewed"] for r in data["what_if"]["rows"]}
    assert rows[3]["precision_of"] == [1, 2] and rows[3]["recall_of"] == [1, 2]
    assert rows[11] == rows[3]
    assert rows[12]["precision_of"] == [2, 3] and rows[12]["recall_of"] == [2, 2]
    assert rows[0]["precision_of"] == [1, 1] and rows[0]["recall_of"] == [1, 2]
    assert data["reviews"]["labelled"] == 3 and data["reviews"]["without_distance"] == 0
    advice = data["reviews"]["advice"]
    assert advice == ("On the 3 reviewed decisions, k=3 has precision 50.0% (1/2) and recall "
                      "50.0% (1/2). k=12 would have precision 66.7% (2/3) and recall 100.0% "
                      "(2/2) on what was reviewed (the best F1 in the table).")
    page = Page.parse(render_html(data))
    assert page.by_id["review-advice"] == advice
    assert page.row(**{"data-threshold": "3", "class": "actual"})[7:] == ["50.0% (1/2)",
                                                                          "50.0% (1/2)"]
    assert page.row(**{"data-threshold": "12", "class": "changed"})[7:] == [
        "66.7% (2/3)", "100.0% (2/2)"]


def test_json_carries_the_same_review_numbers(cli: Any, reviewed_db: dict[str, Any]) -> None:
    code, out, err = cli("dedupreport", "--db", str(reviewed_db["path"]), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["decisions"]["reviewed"] == 2 and data["reviews"]["count"] == 4
    assert data["what_if"]["rows"][12]["reviewed"] == {
        "precision": 2 / 3, "precision_of": [2, 3], "recall": 1.0, "recall_of": [2, 2],
        "f1": 0.8}
    assert data["reviews"]["advice"].startswith("On the 3 reviewed decisions, k=3")


def test_a_report_without_reviews_says_so(tmp_path: Path) -> None:
    info = build_db(tmp_path / "crawl.db")
    with CrawlDB.open(str(info["path"])) as db:
        data = report.build_report(db)
    assert data["decisions"]["reviewed"] == 0 and data["reviews"]["count"] == 0
    assert all(r["reviewed"] is None for r in data["what_if"]["rows"])
    page = Page.parse(render_html(data))
    assert "review-advice" not in page.by_id and "decisions-reviewed" not in page.by_id
    assert page.by_id["review-summary"].startswith("No decision has been reviewed yet")
    headers = next(r["_cells"] for r in page.rows if r["_cells"] and r["_cells"][0] == "k")
    assert len(headers) == 7, "no score columns without a review"


def test_what_if_shows_the_rows_where_a_review_changes_the_score(tmp_path: Path) -> None:
    """Two kept pages 30 bits apart: the table runs to 30, and the rows 12..29 decide as k.
    A reviewed pair at 20 bits changes the scores at 20: that row is shown too."""
    store = Store(f"sqlite:///{tmp_path / 'crawl.db'}")
    cid = store.start_crawl("web", [], {"SIMHASH_MAX_DISTANCE": 3})
    a, b = doc(0, 0, crawl_id=cid), doc(1, (1 << 30) - 1, crawl_id=cid)
    store.write_batch([a, b], [drop(f"{ORIGIN}/near.html", a, "near_duplicate", 1, 10, "t",
                                    crawl_id=cid)])
    store.finish_crawl(cid, "finished", {})
    store.add_review(Review(a["url"], "http://site.test/other.html", "kept", CORRECT, "", 20))
    store.close()
    with CrawlDB.open(str(tmp_path / "crawl.db")) as db:
        data = report.build_report(db)
    assert data["what_if"]["first_change_above"] == 30
    page = Page.parse(render_html(data))
    shown = [int(attrs["data-threshold"]) for t, attrs in page.tags if t == "tr"
             and "data-threshold" in attrs]
    assert shown == [*range(12), 20, 30]
    assert page.row(**{"data-threshold": "20"})[7:] == ["0.0% (0/1)", "n/a (0/0)"]
    gaps = [r["_cells"] for r in page.rows if r.get("class") == "gap"]
    assert [g[0] for g in gaps] == ["12..19", "21..29"]
    assert gaps[0][7:] == ["n/a (0/0)", "n/a (0/0)"] and gaps[1][7:] == ["0.0% (0/1)",
                                                                         "n/a (0/0)"]
