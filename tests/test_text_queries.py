"""Text extraction skips the tree queries a page's markup shows cannot match
(:class:`crawler.content.text._Markup`, :func:`crawler.urls.pagebounds.bound_depth_named`):
the tree, text, blocks and title are those of the full queries, on real and hostile markup."""

from __future__ import annotations

import glob
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.content import text as _text
from crawler.urls.pagebounds import bound_depth_named

DOCS = sorted(glob.glob("/usr/share/doc/python3.11/html/**/*.html", recursive=True))
PG_DOCS = sorted(glob.glob("/usr/share/doc/postgresql-doc-15/html/*.html"))
MANY_TAGS = "<p>x</p>" * 200  # enough "<" for the proof to run (and read the names)


def _with_every_query(html: str) -> tuple[str, str, bool]:
    """``(title, tree, boilerplate removed)`` as extraction made them before: every query."""
    tree = _text._parse(html)
    title = _text._title(tree)
    _text._prepare(tree)
    removed = _text._remove_boilerplate(tree)
    return title, tree.html or "", removed


def _with_queries_skipped(html: str) -> tuple[str, str, bool]:
    tree, markup = _text._parse_named(html)
    title = _text._title(tree, markup)
    _text._prepare(tree, markup)
    removed = _text._remove_boilerplate(tree, markup)
    return title, tree.html or "", removed


def test_a_page_with_a_doctype_has_its_start_tags_named() -> None:
    html = "<!DOCTYPE html><html><head><TITLE>t</TITLE></head><body>" + MANY_TAGS + "<A HREF=x>"
    markup, names = bound_depth_named(html)
    assert markup is html
    assert names == {"html", "head", "title", "body", "p", "a"}


def test_a_start_tag_the_proof_cannot_read_leaves_the_names_unknown() -> None:
    # <span a='<'> is no clean token: any element may hide behind it.
    assert bound_depth_named(MANY_TAGS + "<span a='<'>x</span>")[1] is None
    assert bound_depth_named(MANY_TAGS + "<!-- <b> --><!x>")[1] is None  # two unread tokens
    assert bound_depth_named("x<b>" * 10)[1] is None  # too short for the proof: unknown
    assert "img" in (bound_depth_named(MANY_TAGS + "<image src=x>")[1] or ())  # as parsed


def test_queries_for_absent_elements_and_attributes_are_skipped() -> None:
    html = "<!DOCTYPE html><title>t</title><body>" + MANY_TAGS + "<a href=x>link</a> beside"
    _, markup = _text._parse_named(html)
    assert not markup.may_hold(frozenset({"nav", "aside", "header", "footer"}))
    assert not markup.may_have("class", "id", "role")  # "beside" holds "id", no "id="
    assert _text._inline_css((markup.names or frozenset()) & _text._INLINE) == "a"
    assert markup.may_have("class") is False
    for attribute in ('<p class=ad>', '<p a="x"ID = ad>', "<p/role=search>", "<p\tCLASS='x'>"):
        _, found = _text._parse_named(html + attribute)
        assert found.may_have("class", "id", "role"), attribute
    _, non_ascii = _text._parse_named(html + "é<p Class=ad>")  # searched case-blind
    assert non_ascii.may_have("class")


_PIECE = st.sampled_from([
    "<b>", "</b>", "<i>", "</i>", "<a href=x>", "</a>", "<span class='ad'>", "</span>", "<img>",
    "<image>", "<wbr>", "<p>", "</p>", "<div id=ad>", "</div>", "<table><td>", "<svg><a>",
    "<math><mi>", "<script>", "</script>", "x", " ", "é", "<nav>", "</nav>", "<header>",
    "<footer>", "<aside>", "<article>", "<div role=navigation>", "<!DOCTYPE html>", "<!-- c -->",
    "<!-- <b> -->", "<title>t</title>", "<TITLE>T", "<A HREF=x>", "<SPAN>", "<![CDATA[x]]>",
    "<?x>", "</ >", "<x a='<'>", "<b\0>", "<DIV CLASS=AD>", "<div\nrole = search>",
    "<noscript>n</noscript>", "<template><b>t</b></template>", "<iframe>f</iframe>", "<HEAD>",
    "<body>", "<style>s</style>", "<label>l</label>", "<p/class=ad>", '<p a="x"id=ad>',
    "<p data-class=ad>", "<p xclass=ad>", "class=ad", "<p>" * 60,
])  # fmt: skip


@given(st.lists(_PIECE, min_size=1, max_size=80).map("".join))
@settings(max_examples=400, deadline=None)
def test_skipped_queries_leave_the_tree_of_every_query(markup: str) -> None:
    assert _with_queries_skipped(markup) == _with_every_query(markup)
    doctyped = "<!DOCTYPE html>" + markup + MANY_TAGS  # long enough for the names to be read
    assert _with_queries_skipped(doctyped) == _with_every_query(doctyped)


def test_real_pages_make_the_tree_of_every_query() -> None:
    from crawler.sitegen import demo_site, link_heavy_site

    pages = [Path(p).read_text(encoding="utf-8", errors="replace")
             for p in DOCS[::25] + PG_DOCS[::25]]  # fmt: skip
    site = link_heavy_site(pages=20, links_per_page=100)
    pages += [site.render(page, "http://h").decode() for page in site.pages.values()]
    demo = demo_site()
    pages += [demo.render(page, "http://h").decode("utf-8", "replace")
              for page in list(demo.pages.values())[:60]]  # fmt: skip
    named = 0
    for html in pages:
        assert _with_queries_skipped(html) == _with_every_query(html), html[:80]
        named += _text._parse_named(html)[1].names is not None
    assert named > len(pages) // 2  # the names are read on most real pages
