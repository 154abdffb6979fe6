"""Fingerprints: bit-identical to simhash.Simhash on the same features and hash, real pages."""

from __future__ import annotations

import glob
import random

import pytest
import simhash as simhash_pkg
from hypothesis import given
from hypothesis import strategies as st

from crawler.content.simhash import (
    content_hash,
    feature_hash,
    features,
    fingerprint,
    hamming,
    simhash,
    to_hex,
    to_signed,
    to_unsigned,
)
from crawler.content.text import extract, tokens
from tests.conftest import python_without

DOCS = sorted(glob.glob("/usr/share/doc/python3.11/html/**/*.html", recursive=True))


def _reference(weighted: dict[str, int]) -> int:
    return simhash_pkg.Simhash(list(weighted.items()), hashfunc=feature_hash).value


def _demo_pages() -> list[str]:
    try:
        from crawler.sitegen import demo_site
    except ImportError:
        return []
    site = demo_site()
    pages = site.pages.values() if isinstance(site.pages, dict) else site.pages
    out = []
    for page in pages:
        body = getattr(page, "body", page)
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        if isinstance(body, str):
            out.append(body)
    return out


def _real_pages() -> list[str]:
    pages = _demo_pages()
    # A fixed sample keeps the test fast; the bench covers every page.
    for path in random.Random(4).sample(DOCS, min(80, len(DOCS))):
        with open(path, encoding="utf-8") as handle:
            pages.append(handle.read())
    return pages


def test_bit_identical_to_simhash_package_on_real_pages() -> None:
    pages = _real_pages()
    if not pages:
        pytest.skip("neither python3.11-doc nor crawler.sitegen is available")
    compared = 0
    for html in pages:
        toks = extract(html).tokens
        for shingle in (1, 2, 3):
            weighted = features(toks, shingle)
            if weighted:
                assert fingerprint(weighted) == _reference(weighted)
                compared += 1
    assert compared >= len(pages)


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.integers(1, 255), min_size=1))
def test_bit_identical_on_arbitrary_features(weighted: dict[str, int]) -> None:
    assert fingerprint(weighted) == _reference(weighted)


def test_pairs_and_mapping_agree() -> None:
    weighted = {"alpha": 3, "beta": 1, "line\nbreak": 2}
    assert fingerprint(weighted) == fingerprint(list(weighted.items())) == _reference(weighted)


def test_weights_are_log_scaled_and_never_overflow_the_package() -> None:
    weighted = features(["word"] * 10_000 + ["other"])
    assert weighted == {"word": 14, "other": 1}
    assert fingerprint(weighted) == _reference(weighted)
    assert simhash(["word"] * 10_000) == feature_hash(b"word")


def test_shingles() -> None:
    assert features(["a", "b", "c"], 2) == {"a b": 1, "b c": 1}
    assert features(["a"], 3) == {"a": 1}
    assert features([], 2) == {}
    with pytest.raises(ValueError, match="shingle"):
        features(["a"], 0)


def test_empty_page_fingerprint_is_zero() -> None:
    assert simhash([]) == 0
    assert fingerprint({}) == 0


def test_near_texts_are_near_and_distinct_texts_far() -> None:
    base = " ".join(f"topic{i} word{i % 37} idea{i % 11}" for i in range(300))
    edited = base.replace("topic5 ", "changed ")
    other = " ".join(f"else{i} thing{i % 29}" for i in range(300))
    a, b, c = (simhash(tokens(t)) for t in (base, edited, other))
    assert hamming(a, b) <= 3
    assert hamming(a, c) > 10


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_hamming_and_signed_round_trip(a: int, b: int) -> None:
    assert hamming(a, b) == bin(a ^ b).count("1") == hamming(to_signed(a), to_signed(b))
    assert -(2**63) <= to_signed(a) < 2**63
    assert to_unsigned(to_signed(a)) == a
    assert to_hex(a) is not None and len(to_hex(a) or "") == 16
    assert int(to_hex(a) or "", 16) == a


def test_content_hash_normalizes_case_width_and_whitespace() -> None:
    assert content_hash("Hello   World\n") == content_hash("hello world")
    assert content_hash("\uff21\uff22\uff23") == content_hash("abc")
    assert content_hash("hello world") != content_hash("hello worlds")
    assert len(content_hash("")) == 32


def _numpy_fingerprint(weighted: dict[str, int]) -> int:
    """:func:`fingerprint` by its numpy path (what runs where the C vote is not built)."""
    from crawler.content import simhash as module

    saved = module._majority, module._pure_left
    module._majority, module._pure_left = None, 0
    try:
        return fingerprint(weighted)
    finally:
        module._majority, module._pure_left = saved


def test_the_fingerprint_votes_in_c_here() -> None:
    """Built by the install (setup.py); a silent fall back would cost the numpy path."""
    from crawler.content import _majority
    from crawler.content import simhash as module

    assert module._majority is _majority.majority


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.integers(0, 2**20), max_size=80))
def test_the_c_pure_and_numpy_fingerprints_are_one(weighted: dict[str, int]) -> None:
    """The C vote, the pure-Python one (a small page while numpy is not loaded) and numpy's:
    the same bits (weights 0 and past 255 too, which the simhash package does not take)."""
    from crawler.content import simhash as module

    pure = module._fingerprint_pure(weighted, len(weighted)) if weighted else 0
    assert pure == fingerprint(weighted) == _numpy_fingerprint(weighted)


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**40)), max_size=300))
def test_the_c_vote_is_the_majority_of_each_bit(pairs: list[tuple[int, int]]) -> None:
    """Bit by bit, from the definition: the hashes with the bit set weigh more than half."""
    from crawler.content._majority import majority

    hashes, weights = [h for h, _ in pairs], [w for _, w in pairs]
    half = sum(weights) // 2
    expected = sum(1 << j for j in range(64)
                   if sum(w for h, w in pairs if h >> j & 1) > half)  # fmt: skip
    assert majority(hashes, weights) == expected


def test_the_c_vote_refuses_what_the_fingerprint_never_gives_it() -> None:
    from crawler.content._majority import majority

    with pytest.raises(ValueError, match="as many weights as hashes"):
        majority([1, 2], [1])
    with pytest.raises(ValueError, match="weights >= 0"):
        majority([1], [-1])
    with pytest.raises(ValueError, match="totalling below 2\\*\\*62"):
        majority([1, 2], [2**61, 2**61])
    with pytest.raises(OverflowError):
        majority([2**64], [1])
    with pytest.raises(TypeError):
        majority([1], 5)  # type: ignore[arg-type]
    assert majority([], []) == 0


def test_the_c_vote_never_loads_numpy() -> None:
    """In a fresh interpreter with the C vote: many pages of any size, numpy never loaded."""
    import subprocess
    import sys
    import textwrap

    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        from crawler.content import simhash
        pages = [{f"w{i}": 1 + i % 3 for i in range(n)} for n in (10, 1000, 5000)] * 5
        print(len({simhash.fingerprint(p) for p in pages}), "numpy" in sys.modules)
    """)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == ["3", "False"]


def test_numpy_is_loaded_after_the_first_pages_or_by_a_very_large_one() -> None:
    """Without the C vote (the scrapyd egg), in a fresh interpreter: the first PURE_PAGES
    fingerprints of pages of usual size (here 1,000 features) leave numpy unloaded, the next
    one loads it, and from then on every page takes the numpy path (same bits); a page past
    PURE_FEATURES_MAX loads it at once."""
    import textwrap

    out = python_without("crawler.content._majority", textwrap.dedent("""
        import sys
        from crawler.content import simhash
        assert simhash._majority is None and simhash.PURE_PAGES > 1
        page = {f"w{i}": 1 + i % 3 for i in range(1000)}
        first = [simhash.fingerprint(page) for _ in range(simhash.PURE_PAGES)]
        loaded = ["numpy" in sys.modules]
        first.append(simhash.fingerprint(page))
        loaded.append("numpy" in sys.modules)
        print(loaded == [False, True], simhash._np is not None, len(set(first)) == 1)
        simhash._np, simhash._pure_left = None, simhash.PURE_PAGES
        del sys.modules["numpy"]  # as in a fresh process for the second check
        simhash.fingerprint({f"w{i}": 1 for i in range(simhash.PURE_FEATURES_MAX + 1)})
        print(simhash._np is not None, simhash._pure_left == simhash.PURE_PAGES)
    """))
    assert out == ["True"] * 5
