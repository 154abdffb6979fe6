"""Visible text, fingerprint text without boilerplate, tokens and binary detection."""

from __future__ import annotations

import glob
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from selectolax.lexbor import LexborHTMLParser

from crawler.text import STOP_WORDS, extract, is_binary, normalize, tokens, visible_text

DOCS = sorted(glob.glob("/usr/share/doc/python3.11/html/**/*.html", recursive=True))


def test_drops_invisible_elements() -> None:
    html = (
        "<html><head><title>T</title><style>p{}</style><script>var x=1</script></head><body>"
        "<script>alert(1)</script><noscript>enable js</noscript><template><p>tpl</p></template>"
        "<svg><text>vector</text></svg><!-- comment --><p>shown</p></body></html>"
    )
    assert visible_text(html) == "shown"


def test_inline_joins_and_blocks_break_lines() -> None:
    html = "<p>foo<b>bar</b> baz\n   qux</p><div>next &amp; <a title='a>b'>link</a></div>x<br>y"
    assert visible_text(html) == "foobar baz qux\nnext & link\nx\ny"


def test_table_cells_and_list_items_are_blocks() -> None:
    html = "<table><tr><td>a</td><td>b</td></tr></table><ul><li>one</li><li>two</li></ul>"
    assert visible_text(html).splitlines() == ["a", "b", "one", "two"]


def test_whitespace_only_and_empty_documents() -> None:
    assert visible_text("") == ""
    assert visible_text("   ") == ""
    assert visible_text("<html><body><script>only()</script></body></html>") == ""
    assert extract("").tokens == []


def test_extract_keeps_boilerplate_regions_out_of_fingerprint_text() -> None:
    html = (
        "<html><head><title> My  Page </title></head><body>"
        "<header><p>Site banner</p></header><nav>Home About</nav>"
        "<div role='navigation'>crumbs</div><div role='banner'>logo</div>"
        "<main><article><header><h1>Article title</h1></header><p>Body text here.</p>"
        "<footer>article footnote</footer></article></main>"
        "<aside>related links</aside><div role='complementary'>ads</div>"
        "<div role='contentinfo'>contact</div><footer>copyright</footer></body></html>"
    )
    page = extract(html, "http://example.com/")
    assert page.title == "My Page"
    assert page.url == "http://example.com/"
    for word in ("Site banner", "Home About", "copyright", "related links", "crumbs", "contact"):
        assert word in page.text
        assert word not in page.fingerprint_text
    # header/footer inside an article belong to the article.
    assert page.blocks == ["Article title", "Body text here.", "article footnote"]
    assert page.tokens == ["article", "title", "body", "text", "article", "footnote"]


def test_tokens_nfkc_casefold_stopwords_and_stemming() -> None:
    assert tokens("The QUICK ﬁsh and Straße") == ["quick", "fish", "strasse"]
    assert tokens("running jumped boxes cities", stem=True) == ["runn", "jump", "boxe", "city"]
    assert tokens("2026-12-02 v3") == ["2026", "12", "02", "v3"]
    assert "the" in STOP_WORDS
    assert normalize("  A\u00a0B\tc ") == "a b c"


def test_binary_bodies() -> None:
    assert is_binary(b"%PDF-1.7\n...")
    assert is_binary(b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    assert is_binary(b"PK\x03\x04 zip")
    assert is_binary(b"\x1f\x8b\x08 gzip")
    assert is_binary(bytes(range(256)) * 8)
    assert is_binary(b"<html>" + b"\x00\x01\x02\x03" * 100)
    assert not is_binary(b"")
    assert not is_binary(b"<html><body>plain text</body></html>")
    assert not is_binary("<p>caf\u00e9 \u00fcber</p>".encode())
    assert not is_binary("<p>utf-16 text</p>".encode("utf-16"))
    assert not is_binary("<p>utf-16 text no bom</p>".encode("utf-16-le"))
    assert not is_binary(b"<p>a stray \x00 NUL in a long page</p>" + b"x" * 500)


def test_real_pages_are_text_with_tokens() -> None:
    for path in random.Random(7).sample(DOCS, min(20, len(DOCS))):
        with open(path, "rb") as handle:
            body = handle.read()
        assert not is_binary(body)
        page = extract(body.decode("utf-8"))
        assert page.title and page.tokens
        assert "\x1e" not in page.text
        for script in LexborHTMLParser(body).css("script"):
            code = " ".join(script.text().split())
            if len(code) > 20:
                assert code not in " ".join(page.text.split())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_never_raises_on_any_string(html: str) -> None:
    text = visible_text(html)
    page = extract(html)
    assert "\x1e" not in text
    assert all(line == line.strip() and line for line in page.text.splitlines())
    assert set(page.fingerprint_text.split()) <= set(page.text.split())


@given(st.binary(max_size=300))
def test_is_binary_never_raises(body: bytes) -> None:
    assert isinstance(is_binary(body), bool)


def test_huge_pages_are_read_up_to_the_cap() -> None:
    from crawler import text as text_module

    head = "<p>" + "word " * 100 + "</p>"
    html = "<html><body>" + head + "<p>" + "x" * text_module.MAX_HTML_CHARS + "</p><p>tail</p>"
    result = visible_text(html)
    assert result.startswith("word word") and not result.endswith("tail")
