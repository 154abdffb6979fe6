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
