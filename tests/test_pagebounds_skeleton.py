"""The depth proof in C (``crawler/urls/_skeleton.c``) against its specification, the
regular expressions of :mod:`crawler.urls.pagebounds`: the same tokens and the same foreign
content answer on generated markup (every branch of the pattern, strings of 1-, 2- and 4-byte
characters), on hostile and real pages; the whole proof (:func:`_skeleton.proof`) answers as
``_proof_by_expressions`` does, names included, on generated tag soups at many bounds, on the
back references' prefix matches, for every name the proof lists, on hostile and real pages;
the package works without the module (the scrapyd egg leaves it out)."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.sitegen import demo_site, link_heavy_site
from crawler.urls import pagebounds
from crawler.urls._skeleton import foreign, proof, tokens
from tests.conftest import python_without
from tests.test_text import BYPASS_PREFIXES, HOSTILE

# Pieces that reach every branch of the pattern: clean and unclean comments, end tags, names
# with every name character, attributes quoted, unquoted and broken, "<" and ">" in values,
# processing instructions, foreign content in any case, and characters of each string width.
_PIECES = st.sampled_from([
    *"<>/=\"'!-? \t\n\r\f`", "<!--", "-->", "--!>", "<!-->", "<!--->", "</", "/>", "<?", "<!",
    "a", "div", "A:b.c_d-1", "href", "=x", '="v"', "='v'", '"<"', "'>'", "svg", "<SvG", "math",
    "<mAtH", "é", "ā", "😀", "<a href=x>", "<br/>", "<p class='a b'>", "<a", "<p", "</p", "b>",
])  # fmt: skip
#: Each character the pattern reads as whitespace, in each place it may stand in a tag.
_SPACES = [f"<a{c}b>" for c in "\t\n\f\r /"] + [f"<a b{c}={c}c{c}>" for c in "\t\n\f\r "] + [
    f"</a{c}>" for c in "\t\n\f\r \v"]  # fmt: skip
_MARKUP = st.lists(_PIECES, max_size=60).map("".join)


def _pages() -> list[str]:
    """Generated pages of every kind the project crawls, the hostile ones, and the real
    manuals when Debian's packages are installed."""
    out = []
    for site in (demo_site(), link_heavy_site(50, 40)):
        for page in list(site.pages.values())[:60]:
            body = site.render(page, "http://127.0.0.1:8000")
            out.append(body.decode() if isinstance(body, bytes) else body)
    out += list(HOSTILE.values())
    out += [Path(p).read_text(encoding="utf-8", errors="replace")
            for p in sorted(glob.glob("/usr/share/doc/python3.11/html/library/*.html"))[:60]]
    return out


def test_the_proof_runs_on_the_c_pass_here() -> None:
    """Built by the install (setup.py); a silent fall back to sre would cost 5x the pass."""
    assert pagebounds._skeleton_tokens is tokens
    assert pagebounds._foreign is foreign
    assert pagebounds._proof is proof


@given(_MARKUP)
@settings(max_examples=3000, deadline=None)
def test_the_c_pass_reads_generated_markup_as_the_expressions_do(markup: str) -> None:
    assert tokens(markup) == pagebounds._SKELETON.findall(markup)
    assert foreign(markup) == (pagebounds._FOREIGN.search(markup) is not None)


@pytest.mark.parametrize("markup", [
    "", "<", "<<", "<!", "<!--", "<!-->", "<!--->", "<!-- a -- b --!>", "<!-- < -->", "<a",
    "<a>", "</a >", "< a>", "<a b=>", "<a b = 'c' d>", "<a b=c`>", '<a b="c>', "<a/b/>", "<?x>",
    "</>", "<A:b1.-_ x>", "<svg", "x<MATH", "<mat", "<\U0001F600>", "<é>", "<ā b>", *_SPACES,
])  # fmt: skip
def test_the_c_pass_reads_each_branch_as_the_expressions_do(markup: str) -> None:
    assert tokens(markup) == pagebounds._SKELETON.findall(markup)
    assert foreign(markup) == (pagebounds._FOREIGN.search(markup) is not None)


def test_the_c_pass_reads_real_and_hostile_pages_as_the_expressions_do() -> None:
    pages = _pages()
    assert len(pages) > 100
    for page in pages:
        assert tokens(page) == pagebounds._SKELETON.findall(page)
        assert foreign(page) == (pagebounds._FOREIGN.search(page) is not None)


#: Bounds the proof is asked at: the crawl's, and small ones that reach its early give-up
#: (room for fewer levels of struck pairs than the page strikes) and the formatting cap.
_BOUNDS = [(pagebounds.MAX_DEPTH, pagebounds.MAX_FORMATTING), (40, 4), (20, 3), (12, 2),
           (6, 1), (3, 0), (0, 0)]  # fmt: skip


def _spec(markup: str, max_depth: int, max_formatting: int) -> object:
    return pagebounds._proof_by_expressions(markup, max_depth, max_formatting)


def test_the_proof_answers_the_same_in_c_and_by_the_expressions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pages = _pages() + ["<html><body>" + p + "<div>" * 600 for p in BYPASS_PREFIXES.values()]
    in_c = [proof(p, depth, formatting) for p in pages for depth, formatting in _BOUNDS]
    assert {proven for proven, _ in in_c} == {True, False}  # both answers are exercised
    assert any(names for _, names in in_c) and None in {names for _, names in in_c}
    assert in_c == [_spec(p, depth, formatting) for p in pages for depth, formatting in _BOUNDS]
    monkeypatch.setattr(pagebounds, "_skeleton_tokens", pagebounds._SKELETON.findall)
    monkeypatch.setattr(pagebounds, "_foreign", pagebounds._foreign_sre)
    assert in_c == [_spec(p, depth, formatting) for p in pages for depth, formatting in _BOUNDS]


#: Tag soups: the names the proof treats apart (void, void in foreign content, formatting,
#: table, plaintext), names one of which is another's prefix (``p``/``pre``: the pattern's
#: back references are not anchored), upper case, comments, doctypes, unread tags, text.
_SOUP_NAMES = ["a", "b", "p", "pre", "div", "table", "br", "img", "image", "plaintext", "svg",
               "math", "i", "u", "td", "span", "em", "li", "x", "xy", "A", "DIV", "Pre"]
_OTHER_PIECES = ["<!-- c -->", "<!doctype html>", "<?x>", "<!x>", "a < b", "<br/>", "<", "</ >",
                 "<a href='x'>", "<!-- <p> -->"]  # fmt: skip
_SOUP = st.lists(st.one_of(
    st.sampled_from(_SOUP_NAMES).map("<{}>".format),
    st.sampled_from(_SOUP_NAMES).map("</{}>".format),
    st.sampled_from(_OTHER_PIECES),
), max_size=80).map("".join)


@given(_SOUP, st.sampled_from(_BOUNDS))
@settings(max_examples=4000, deadline=None)
def test_the_proof_reads_generated_tag_soups_as_the_expressions_do(
    markup: str, bounds: tuple[int, int],
) -> None:
    assert proof(markup, *bounds) == _spec(markup, *bounds)


@given(st.integers(1, 200), st.integers(0, 5), st.sampled_from(_BOUNDS))
@settings(max_examples=500, deadline=None)
def test_the_proof_reads_deep_pages_as_the_expressions_do(
    depth: int, pairs: int, bounds: tuple[int, int],
) -> None:
    """Nested elements holding struck pairs: the passes, and the give-up when they cannot
    fit, are the expressions' (a deep page strikes one level a pass)."""
    inner = "<p>x</p>" * pairs
    markup = "<html><body>" + "<div>" * depth + inner + "</div>" * depth
    assert proof(markup, *bounds) == _spec(markup, *bounds)
    unclosed = "<html><body>" + ("<div>" + inner) * depth
    assert proof(unclosed, *bounds) == _spec(unclosed, *bounds)


@pytest.mark.parametrize("markup", [
    "", "x", "<!-- only -->", "<br>", "<plaintext>", "<!doctype html>", "<!doctype html><p>",
    "<p></pre>", "<pre></p>", "<div><p></pre></div>", "<a><b><i></in></b></a>",
    "<x><xy></x></xy>", "<a><b></b><b></b></a>", "<a><b><i></i><i></i></b></a>",
    "<a><b><i><u></u></i></b></a>", "<table><tr><td>x</td></tr></table>", "<p><p><p>",
    "<p>" + "<b></b>" * 30, "<svg><br><img></svg>", "<image><p>", "<IMAGE>", "<p><!x>",
    "<?x><p>", "<p></p", "<b><b><b><b><b>", "<B>" * 20, "<div>" * 700,
])  # fmt: skip
def test_the_proof_reads_each_case_as_the_expressions_do(markup: str) -> None:
    for bounds in _BOUNDS:
        assert proof(markup, *bounds) == _spec(markup, *bounds), bounds


@pytest.mark.parametrize("name", sorted(
    pagebounds._VOID | pagebounds._BREAKOUT_VOID | pagebounds._FORMATTING
    | {"table", "plaintext", "div", "span", "tbody", "svg", "math"}))  # fmt: skip
def test_the_c_proof_lists_each_name_as_the_expressions_do(name: str) -> None:
    """Its own copy of the void, formatting and table names: a page whose answer turns on
    each one's class, in HTML and in foreign content."""
    assert pagebounds._IMPLIED == 3 and pagebounds._LEVELS == 3  # the C's constants
    for prefix in ("<html><body>", "<html><body><svg>"):
        for start in (f"<{name}>", f"<{name.upper()}>"):
            for count in (4, 5, 8):
                markup = prefix + start * count
                for bounds in [(8, 4), (12, 8), (6, 0), *_BOUNDS]:
                    assert proof(markup, *bounds) == _spec(markup, *bounds), (markup, bounds)


def test_the_package_works_without_the_c_module() -> None:
    """As in the scrapyd egg: the import of the module fails, the expressions run, and a
    hostile page is still flattened."""
    assert python_without("crawler.urls._skeleton", (
        "from crawler.urls import pagebounds as pb\n"
        "assert pb._skeleton_tokens == pb._SKELETON.findall\n"
        "assert pb._proof is pb._proof_by_expressions\n"
        "page = '<html><body>' + '<div>' * 2000 + 'x'\n"
        "print(pb.bound_depth(page) != page, pb._shallow('<p>x</p>', 512, 16))\n"
    )) == ["True", "True"]


@pytest.mark.parametrize("function", [tokens, foreign, lambda m: proof(m, 512, 16)])
def test_the_c_pass_takes_text_only(function) -> None:
    with pytest.raises(TypeError, match="takes a str, not bytes"):
        function(b"<a>")


def test_the_c_proof_takes_its_three_arguments() -> None:
    with pytest.raises(TypeError, match="takes 3 arguments"):
        proof("<a>", 512)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        proof("<a>", "512", 16)  # type: ignore[arg-type]
