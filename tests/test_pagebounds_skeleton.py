"""The depth proof's C pass (``crawler/urls/_skeleton.c``) against its specification, the
regular expressions of :mod:`crawler.urls.pagebounds`: the same tokens and the same foreign
content answer on generated markup (every branch of the pattern, strings of 1-, 2- and 4-byte
characters), on hostile and real pages; the proof answers the same with either pass; the
package works without the module (the scrapyd egg leaves it out)."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.sitegen import demo_site, link_heavy_site
from crawler.urls import pagebounds
from crawler.urls._skeleton import foreign, tokens
from tests.conftest import ROOT
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


def test_the_proof_answers_the_same_on_either_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = _pages() + ["<html><body>" + p + "<div>" * 600 for p in BYPASS_PREFIXES.values()]
    with_c = [pagebounds._proof(p, pagebounds.MAX_DEPTH, pagebounds.MAX_FORMATTING)
              for p in pages]  # fmt: skip
    assert {proven for proven, _ in with_c} == {True, False}  # both answers are exercised
    monkeypatch.setattr(pagebounds, "_skeleton_tokens", pagebounds._SKELETON.findall)
    monkeypatch.setattr(pagebounds, "_foreign", pagebounds._foreign_sre)
    with_sre = [pagebounds._proof(p, pagebounds.MAX_DEPTH, pagebounds.MAX_FORMATTING)
                for p in pages]  # fmt: skip
    assert with_c == with_sre


def test_the_package_works_without_the_c_module() -> None:
    """As in the scrapyd egg: the import of the module fails, the expressions run, and a
    hostile page is still flattened."""
    code = (
        "import sys; sys.modules['crawler.urls._skeleton'] = None\n"
        "from crawler.urls import pagebounds as pb\n"
        "assert pb._skeleton_tokens == pb._SKELETON.findall\n"
        "page = '<html><body>' + '<div>' * 2000 + 'x'\n"
        "print(pb.bound_depth(page) != page, pb._shallow('<p>x</p>', 512, 16))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "True"]


@pytest.mark.parametrize("function", [tokens, foreign])
def test_the_c_pass_takes_text_only(function) -> None:
    with pytest.raises(TypeError, match="takes a str, not bytes"):
        function(b"<a>")
