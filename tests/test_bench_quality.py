"""bench.quality's page sets and pipeline evaluation (bench/corpora.py, bench/mirrors.py,
bench/pipeline_eval.py), on generated demo pages always and on Debian's manual pages when
installed."""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import replace
from typing import Any

import pytest
from selectolax.lexbor import LexborHTMLParser

from bench import corpora, debian_docs, quality
from bench.chrome import cjk_chrome
from bench.mirrors import ADVERTS, MirrorStyle, plant
from bench.pages import PageSet, SetPage
from bench.pipeline_eval import Evaluation, _item, evaluate
from bench.scores import score
from crawler import defaults
from crawler.content.simhash import features, fingerprint, hamming
from crawler.content.text import block_tokens, extract, main_tokens
from crawler.exceptions import DuplicatePage
from crawler.sitegen import demo_site

DEMO = "http://demo.test:8000"
DEMO_STYLE = MirrorStyle("en", "The Riverside Chronicle", "Chronicle Mirror")
STAMP = re.compile(r"(Last updated|最終更新日時|最后更新)")


def installed(source: str) -> bool:
    try:
        debian_docs.doc_paths(source)
    except debian_docs.MissingSource:
        return False
    return True


def demo_originals(n: int = 12) -> list[SetPage]:
    """Distinct article pages of the generated demo site."""
    site = demo_site()
    paths = sorted(p for p in site.main_text if p in site.distinct_pages)[:n]
    return [SetPage(DEMO + p, site.render(site.pages[p], DEMO).decode()) for p in paths]


def demo_paragraphs() -> list[tuple[str, list[str]]]:
    """``(title, paragraphs)`` of the demo site's articles: the short set's source without
    Debian's manual pages."""
    site = demo_site()
    texts = [site.main_text[p].split("\n") for p in sorted(site.main_text)]
    return [(lines[0], [line for line in lines[2:] if len(line.split()) >= 8]) for lines in texts]


def simhash_of(html: str) -> int | None:
    """The page's fingerprint as the pipeline takes it on a host without a template."""
    per_block = block_tokens(extract(html, tokenize=False).blocks)
    toks = main_tokens(per_block, defaults.SIMHASH_MIN_TOKENS)
    if len(toks) < defaults.SIMHASH_MIN_TOKENS:
        return None
    return fingerprint(features(toks, defaults.SIMHASH_SHINGLE))


def mirrored(pages: list[SetPage]) -> list[tuple[SetPage, SetPage]]:
    by_url = {p.url: p for p in pages}
    return [(by_url[p.group], p) for p in pages if p.kind == "mirror" and p.group]


def short_source() -> list[tuple[str, list[str]]]:
    if installed("python") or installed("postgres"):
        return corpora._doc_paragraphs()
    return demo_paragraphs()


def cjk_originals(n: int) -> list[SetPage]:
    sections = debian_docs.reference_sections("ja")[:n]
    chrome = cjk_chrome("ja", "Debian 活用ノート", [s.title for s in sections[:8]])
    return [SetPage(f"http://jp.test/{s.chapter}/{s.slug}.html", chrome.page(s.title, s.html))
            for s in sections]  # fmt: skip


# --- mirrors ------------------------------------------------------------------------------------
def check_mirrors(pages: list[SetPage], lang: str, old_name: str, new_name: str) -> list[int]:
    """Assert each mirror's advert, timestamp and site name; return the SimHash distances."""
    pairs = mirrored(pages)
    assert pairs
    distances = []
    for original, mirror in pairs:
        text = extract(mirror.html, tokenize=False).text
        assert any(ad in text for ad in ADVERTS[lang]), mirror.url
        assert STAMP.search(text) and not STAMP.search(extract(original.html).text)
        assert new_name in mirror.html and old_name not in mirror.html
        assert mirror.url != original.url and mirror.group == original.url
        a, b = simhash_of(original.html), simhash_of(mirror.html)
        assert a is not None and b is not None
        distances.append(hamming(a, b))
    return distances


def both_styles(originals: list[SetPage], style: MirrorStyle, seed: int, lang: str, old: str,
                new: str) -> None:
    """Mirrors really differ from their originals (advert and timestamp in the text). Marked
    up as ad slots, with a timestamp line, most fingerprint within k of their original (ad slots
    and numeric blocks are left out; the renamed site name remains); a plain unique advert
    moves most by 1 bit or more."""
    marked = plant(originals, style, random.Random(seed), corpora.MIRROR, fraction=1.0,
                   copies=0)  # fmt: skip
    distances = check_mirrors(marked, lang, old, new)
    assert sum(d <= defaults.SIMHASH_MAX_DISTANCE for d in distances) > len(distances) // 2, (
        distances)
    plain = plant(originals, replace(style, unique_ads=True), random.Random(seed),
                  corpora.MIRROR, fraction=1.0, copies=0)  # fmt: skip
    distances = check_mirrors(plain, lang, old, new)
    assert sum(d > 0 for d in distances) > len(distances) // 2, distances


def test_demo_mirrors_really_differ() -> None:
    both_styles(demo_originals(), DEMO_STYLE, 1, "en", "The Riverside Chronicle",
                "Chronicle Mirror")


def test_short_mirrors_really_differ() -> None:
    _, originals = corpora.short_pages(short_source(), random.Random(2), 24)
    style = MirrorStyle("en", corpora.SHORT_SITE[1], corpora.SHORT_SITE[2])
    both_styles(originals, style, 3, "en", corpora.SHORT_SITE[1], corpora.SHORT_SITE[2])


@pytest.mark.skipif(not installed("ja"), reason="apt-get install debian-reference-ja")
def test_japanese_mirrors_really_differ() -> None:
    style = MirrorStyle("ja", "Debian 活用ノート", "ミラー")
    both_styles(cjk_originals(20), style, 4, "ja", "Debian 活用ノート", "ミラー")


def test_plant_is_seeded_and_sized() -> None:
    originals = demo_originals(20)
    first = plant(originals, DEMO_STYLE, random.Random(5), "http://m.test", copies=2)
    again = plant(originals, DEMO_STYLE, random.Random(5), "http://m.test", copies=2)
    assert first == again
    kinds = [p.kind for p in first]
    assert kinds.count("mirror") == 8 and kinds.count("copy") == 2 and kinds.count("page") == 20
    copies = [p for p in first if p.kind == "copy"]
    assert all(c.html == next(p.html for p in first if p.url == c.group) for c in copies)


# --- the short set ------------------------------------------------------------------------------
def content_text(html: str) -> str:
    node = LexborHTMLParser(html).css_first("div.content")
    assert node is not None
    return node.text(separator=" ")


def content_words(html: str) -> int:
    return len(content_text(html).split())


def test_short_pages_hold_100_to_400_words_in_a_large_chrome() -> None:
    chrome, originals = corpora.short_pages(short_source(), random.Random(6), 40)
    assert len(originals) == 40
    assert chrome.words() >= 1000
    style = MirrorStyle("en", corpora.SHORT_SITE[1], corpora.SHORT_SITE[2])
    pages = plant(originals, style, random.Random(7), corpora.MIRROR, fraction=0.45)
    for page in pages:
        assert 100 <= content_words(page.html) <= 400, page.url
    texts = [content_text(p.html) for p in originals]
    assert len(set(texts)) == len(texts)  # distinct short notes, one chrome
    assert sum(p.group is None for p in pages) >= len(originals) // 3


# --- the evaluation -----------------------------------------------------------------------------
def tiny_set() -> tuple[list[SetPage], list[int]]:
    """Four originals; a byte copy (caught), a "mirror" that is another article (missed), a
    distinct page repeating an original (a wrong drop), a planted mirror (either)."""
    a, b, c, d, e = demo_originals(5)
    a, b, d = (replace(p, group=p.url) for p in (a, b, d))
    copy = SetPage(DEMO + "/copies/a", a.html, a.url, "copy")
    fake = SetPage("http://mirror.test:8001/b", e.html, b.url, "mirror")
    repeat = SetPage(DEMO + "/repeat", c.html)
    real = plant([d], DEMO_STYLE, random.Random(8), "http://mirror.test:8001", fraction=1.0)[-1]
    return [a, b, c, d, copy, fake, repeat, real], list(range(8))


def test_evaluation_counts_caught_missed_and_wrong() -> None:
    pages, order = tiny_set()
    result = evaluate(PageSet("tiny", pages, "hand-made", order), seed=0)
    evaluation = Evaluation(pages)  # the same pages through another fresh pipeline, by hand
    for page in pages[:-1]:
        evaluation.check(page)
    try:
        asyncio.run(evaluation.pipe.process_item(_item(pages[-1])))
        real_caught = False
    except DuplicatePage as exc:
        real_caught = exc.drop.duplicate_of == pages[3].url
    assert result["copies"] == {"caught": 1, "planted": 1}
    assert result["mirrors"] == {"caught": int(real_caught), "planted": 2}
    assert result["wrong_drops"] == 1
    # /repeat and the article it repeats are one wrong pair: the longer URL is the one dropped
    # (crawler.dedup.preference), whichever came first
    assert result["wrong"][0]["url"] == pages[2].url
    assert result["wrong"][0]["duplicate_of"] == DEMO + "/repeat"
    assert result["precision"] == pytest.approx((1 + real_caught) / (2 + real_caught))
    assert pages[1].url in result["kept_twice_groups"]
    assert result["groups"] == 3 and result["groups_collapsed"] == 1 + real_caught
    assert result["missed"]["causes"].get("far", 0) >= 1


def test_score_counts_a_mirror_met_first() -> None:
    """The original dropped as its mirror's duplicate is a catch, not a wrong drop."""
    pages, _ = tiny_set()
    order = [7, 0, 1, 2, 3, 4, 5, 6]  # the planted mirror first
    evaluation = Evaluation(pages)
    outcomes = [evaluation.check(pages[i]) for i in order]
    result = score(outcomes)
    original = next(o for o in outcomes if o.url == pages[3].url)
    if not original.kept:
        assert original.duplicate_of == pages[7].url
        assert result["mirrors"]["caught"] == 1
    else:
        assert result["missed"]["original_after_mirror"] == 1


# --- set builders -------------------------------------------------------------------------------
def test_missing_package_skips_the_set(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    root, pattern, package = debian_docs.SOURCES["ja"]
    monkeypatch.setitem(debian_docs.SOURCES, "ja", (root / "absent", pattern, package))
    with pytest.raises(debian_docs.MissingSource, match="apt-get install debian-reference-ja"):
        corpora.build("japanese", quick=True, seed=1)
    results = quality.run_sets(["japanese"], quick=True, seed=1)
    assert "apt-get install debian-reference-ja" in results["japanese"]["skipped"]
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "skipped" in out


def test_syndicated_set_leaves_redirect_stubs_out() -> None:
    page_set = corpora.build("syndicated", quick=True, seed=1)
    assert not any("/old/" in p.url for p in page_set.pages)
    assert sum(p.kind == "mirror" for p in page_set.pages) > 50


@pytest.mark.skipif(not (installed("python") and installed("postgres")),
                    reason="apt-get install python3.11-doc postgresql-doc-15")  # fmt: skip
def test_shared_host_keeps_the_english_order() -> None:
    english = corpora.build("english", quick=True, seed=3)
    shared = corpora.build("shared-host", quick=True, seed=3)
    urls = [english.pages[i].url for i in english.fetch_order(3)]
    known = set(urls)
    assert [u for u in (shared.pages[i].url for i in shared.fetch_order(3)) if u in known] == urls
    extra = [p.url for p in shared.pages if p.url not in known]
    assert {re.sub(r"/[^/]*$", "", u.split("/", 3)[2]) for u in extra} == {
        "mirror.test:8002", "mirror.test:8003"}  # fmt: skip


def test_unique_adverts_never_repeat() -> None:
    style = replace(DEMO_STYLE, unique_ads=True)
    pages = plant(demo_originals(20), style, random.Random(9), "http://m.test", fraction=1.0)
    ads = [re.search(r"<p>Advertisement: [^<]*#\d{6}</p>", p.html)
           for p in pages if p.kind == "mirror"]  # fmt: skip
    texts = [m.group(0) for m in ads if m]
    assert len(texts) == 20 and len(set(texts)) == 20  # plain paragraphs, each its own
    assert not any('class="sponsored"' in p.html for p in pages)  # nothing marks them


def test_the_digests_name_the_modules_that_decide() -> None:
    """bench.quality's results are comparable at equal digests of the deciding modules; a path
    the tree lost makes it die when it writes them (found by the review after the move)."""
    from bench.quality import code_digests

    digests = code_digests()
    assert len(digests) >= 9 and "dedup/decider.py" in digests
    assert all(len(d) == 12 for d in digests.values())
