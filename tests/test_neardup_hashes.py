"""crawler.content.template.block_hashes: the batched form of
crawler.content.template.block_hash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.content.template import block_hash, block_hashes

# Letters with compatibility forms, combining marks, case-fold expansions, ligatures, Hangul
# jamo that compose, full-width digits, whitespace of every kind, line breaks and surrogates.
_TRICKY = st.sampled_from(
    ["a", "Z", "\u0301", "\u0327", "e\u0301", "ß", "ﬁ", "Σ", "İ", "\u1100", "\u1161", "\u11a8",
     "\uff11", "½", "\u00a0", "\u2028", "\u3000", " ", "\t", "\n", "\r", "\x1e", "x\ud800", "Å"]
)  # fmt: skip
_blocks = st.lists(st.one_of(st.text(max_size=12), st.lists(_TRICKY, max_size=6).map("".join)))


@given(_blocks)
@settings(max_examples=500, deadline=None)
def test_block_hashes_equal_block_hash_of_each_block(blocks):
    assert block_hashes(blocks) == [block_hash(b) for b in blocks]


def test_block_hashes_on_real_blocks():
    from crawler.content.text import extract
    from crawler.sitegen import demo_site

    site = demo_site()
    checked = 0
    for page in site.pages.values():
        if page.content_type.startswith("text/html"):
            blocks = extract(page.body.decode("utf-8", "replace"), tokenize=False).blocks
            assert block_hashes(blocks) == [block_hash(b) for b in blocks]
            checked += len(blocks)
    assert checked > 100


# Lines as the spider gives them (words joined by single spaces), with characters NFKC turns
# into or next to whitespace (U+00A8 is " \u0308", U+2474 "(1)", U+00A0 and U+3000 spaces, a
# ligature, a Hangul syllable in jamo): both the one-encode path and the per-line collapse run.
_WORD_PARTS = st.sampled_from(
    ["a", "B", "\u00a8", "\u02dc", "\u2474", "\u00a0", "\u3000", "ﬁ", "\u1100\u1161", "\u0301",
     "ß", "\ud800", "x", "1"])  # fmt: skip
_word = st.lists(_WORD_PARTS, min_size=1, max_size=4).map("".join)
_lines = st.lists(st.lists(_word, max_size=5).map(" ".join), min_size=1, max_size=8)


@given(_lines)
@settings(max_examples=500, deadline=None)
def test_block_hashes_of_collapsed_lines_equal_block_hash(blocks):
    assert block_hashes(blocks) == [block_hash(b) for b in blocks]


def test_block_hashes_uncollapsed_after_nfkc():
    """A line NFKC gives a leading, doubled or trailing space is still collapsed per line."""
    # U+00A8 is " \u0308" in NFKC, U+3000 is " ", U+2474 "(1)": each line alone, first, last.
    for line in ["\u00a8a", "a \u00a8", "a\u00a8", "\u00a8", "a\u3000", "\u3000x", "a\u3000\u00a8",
                 "a\u00a0b", "\u2474 a", "a\tb", "a\u1680b", "a\x1f", "\x1fa"]:
        for blocks in ([line], ["first", line], [line, "last"], ["", line, ""]):
            assert block_hashes(blocks) == [block_hash(b) for b in blocks], blocks
    assert block_hashes(["one", "two"]) == [block_hash("one"), block_hash("two")]
