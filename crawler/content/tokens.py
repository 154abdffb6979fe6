"""Tokens of a page's text: language-aware words and bigrams, and the blocks that carry a page.

Tokens (:func:`tokens`, :func:`block_tokens`) are taken of the NFKC-normalized, case-folded
text (full-width Latin and digits become ASCII, half-width katakana full-width):

* **Scripts written without spaces** -- Han (CJK unified ideographs, extension A and the
  supplementary-plane extensions, compatibility ideographs, the marks ``々 〆 〻`` and the
  ideographic zero U+3007), Hiragana, Katakana (with the prolonged sound mark ``ー``, without
  the middle dot ``・``), and the letters and signs of Thai, Lao, Khmer and Myanmar: each
  maximal run of them becomes its overlapping character bigrams (``東京都`` -> ``東京``,
  ``京都``); a run of one character is one token. Bigrams are of code points (a Thai vowel or
  tone mark is a character of its own) and run across Han and kana: no word boundary is
  guessed. Variation selectors inside a run are dropped.
* **Every other script**: words. A word starts with a letter, digit or underscore (``\\w``)
  and goes on over letters, digits, underscores and combining marks (categories Mn, Mc, Me),
  so Devanagari, Bengali, Tamil or vocalized Arabic words keep their vowel signs instead of
  being cut at each one. Digits are words (Thai, Lao, Khmer, Myanmar ones too); punctuation,
  symbols, emoji, variation selectors and the marks for symbols (U+20D0..U+20FF, an emoji
  keycap) separate words. Latin words and numbers in a Japanese sentence stay whole:
  ``Debian 12 を`` gives ``debian``, ``12``, ``を``. Hangul is word-based (Korean uses
  spaces); Tibetan words are its syllables (the tsheg separates). Text that holds none of the
  characters above once folded (English, most European languages) gives exactly the words of
  ``\\w+``; folding can make a mark (``İ`` becomes ``i`` and U+0307, one word now).
* **Stop words for English only**: :data:`STOP_WORDS` are removed when the text is English
  (:func:`is_english`): at least :data:`ENGLISH_MIN_SHARE` (5%) of all its tokens, and at
  least :data:`ENGLISH_MIN_MARKERS` (2), are :data:`ENGLISH_MARKERS`, the stop words that are
  not also common words of other Latin-script languages (``the``, ``and``, ``with`` count;
  ``a``, ``in``, ``is``, ``of`` do not). :func:`block_tokens` decides once for all the blocks
  of a page, so one short block cannot flip the page; :func:`tokens` decides on its text.
  Measured on real pages (share of markers among all tokens): English documentation and
  manual pages median 20%, 5th percentile 7-9%; German, French, Spanish, Dutch, Italian,
  Portuguese, Swedish, Danish and Polish manual pages median 0%, 95th percentile under 2%.
  Limits: a text of a few words (a title, a caption), an index of names or a table of
  contents may not be recognized as English and then keeps its stop words; a non-English page
  quoting much English is taken for English and loses its English function words.
* Optional light English suffix stemming (``stem=True``, whatever the language).

The exact token rules may change between minor versions (fingerprints stored by an older
version then differ; before these rules every script was split with ``\\w+`` and English stop
words were removed from every page).

The exact token rules may change between minor versions (fingerprints stored by an older
version then differ).
"""

from __future__ import annotations

import operator
import re
import unicodedata
from functools import cache, lru_cache
from itertools import chain
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "ENGLISH_MARKERS",
    "ENGLISH_MIN_MARKERS",
    "ENGLISH_MIN_SHARE",
    "SHORT_BLOCK_TOKENS",
    "STOP_WORDS",
    "block_tokens",
    "is_english",
    "main_tokens",
    "tokens",
]


def _wordlist(text: str) -> list[str]:
    return text.split()


_WORD_RE = re.compile(r"\w+")

#: Blocks shorter than this (in tokens) are "short" (see :func:`main_tokens`).
SHORT_BLOCK_TOKENS = 12

#: Built-in English stop words (function words that carry no topic).
STOP_WORDS = frozenset(
    _wordlist(
        """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    also may might must shall us via per etc"""
    )
)
#: Stop words that are also common words of other Latin-script languages, so no evidence of
#: English. Most were found on Debian's translated manual pages (Dutch "in is of over", Italian
#: "per i a", Portuguese "a do no as", Danish "at i for over", Polish "i do to by on", Swedish
#: "i under", German "in an am so was"); the rest are known homographs (German "will also her",
#: Spanish "me he has once", Polish "my we", Dutch "had", Swedish "just", Hungarian "most").
_SHARED_STOP_WORDS = frozenset(
    _wordlist(
        """a i in is of to do no so an am as at on by me my he we for per via etc all over under
    was will also had has her once just most"""
    )
)
#: English function words that other Latin-script languages hardly use: the evidence of English.
ENGLISH_MARKERS = STOP_WORDS - _SHARED_STOP_WORDS
#: A text is English when at least this share of its tokens are :data:`ENGLISH_MARKERS`...
ENGLISH_MIN_SHARE = 0.05
#: ... and at least this many.
ENGLISH_MIN_MARKERS = 2

# Scripts written without spaces between words (see the module docstring): a run becomes bigrams.
_BIGRAM_RANGES = (
    (0x0E01, 0x0E3A), (0x0E40, 0x0E4E),  # Thai letters, vowels, tone marks (not digits, ฿, ๏ ๚ ๛)
    (0x0E81, 0x0ECF), (0x0EDC, 0x0EDF),  # Lao (not digits)
    (0x1000, 0x103F), (0x1050, 0x108F), (0x109A, 0x109D),  # Myanmar (not digits, punctuation)
    (0xA9E0, 0xA9EF), (0xA9FA, 0xA9FE), (0xAA60, 0xAA7F),  # Myanmar extended A and B
    (0x1780, 0x17D3), (0x17D7, 0x17D7), (0x17DC, 0x17DD),  # Khmer letters, signs (no digits)
    (0x3005, 0x3007), (0x303B, 0x303C),  # 々 〆, ideographic zero, 〻, masu mark
    (0x3041, 0x309F),  # Hiragana, with its combining voiced marks and iteration marks
    (0x30A1, 0x30FA), (0x30FC, 0x30FF), (0x31F0, 0x31FF),  # Katakana with ー, not the dot ・
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),  # CJK ext. A, unified, compatibility
    (0x1B000, 0x1B16F),  # Kana supplement and extensions
    (0x20000, 0x323AF),  # CJK extensions B to H and the compatibility supplement
)  # fmt: skip
# Where combining marks are looked for (Unicode 14 has none elsewhere; new scripts go to the
# supplementary plane): the BMP's at import, the supplementary plane's (historic and minority
# scripts, a rare sight) when a page first holds one of its characters.
_BMP_MARK_SPANS = ((0x0300, 0x20D0), (0x2100, 0x2E00), (0x3000, 0x3100), (0xA000, 0xAC00),
                   (0xFB00, 0xFE00), (0xFE10, 0xFE30))  # fmt: skip
_SMP_SCRIPTS = (0x10000, 0x1EFFF)


def _char_class(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(f"{chr(a)}-{chr(b)}" if b > a else chr(a) for a, b in ranges)


# Compiling a class costs a Python loop over its code points (about 1.5 ms for the CJK ranges):
# each big class is compiled once. A line is cut into bigram runs and the text between them,
# where words are found; the text between holds no bigram character, so plain \w serves.
_BIGRAM_RUN_RE = re.compile(f"([{_char_class(_BIGRAM_RANGES)}]+)")


def _mark_ranges(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Code-point ranges of the combining marks (Mn, Mc, Me) in ``spans`` that go on a word.

    Leaves out the marks of the bigram scripts, variation selectors and the marks for symbols
    (U+20D0..U+20FF), which ``spans`` must not cover. The BMP takes about 3 ms.
    """
    category, bigram = unicodedata.category, _BIGRAM_RUN_RE.match
    ranges: list[tuple[int, int]] = []
    for low, high in spans:
        for code in range(low, high):
            if category(chr(code)) not in ("Mn", "Mc", "Me") or bigram(chr(code)):
                continue
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return ranges


_BMP_MARKS = _char_class(_mark_ranges(_BMP_MARK_SPANS))
_WORD_MARKS_RE = re.compile(f"\\w+(?:[{_BMP_MARKS}]+\\w*)*")
# A page without these (nor bigram runs) tokenizes as ``\w+``: the fast path.
_MARK_OR_SMP_RE = re.compile(f"[{_BMP_MARKS}{_char_class([_SMP_SCRIPTS])}]")
_SMP_RE = re.compile(f"[{_char_class([_SMP_SCRIPTS])}]")
# Nothing below U+0300 is special: removed (at C speed) before looking for special characters.
_BELOW_MARKS_RE = re.compile("[\x00-\u02ff]+")
# Variation selectors choose a glyph: no part of a word, and removed before bigrams (so that an
# ideographic variation sequence does not split a run).
_VARIATION_RE = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")


@cache
def _smp_word_marks_re() -> re.Pattern[str]:
    """:data:`_WORD_MARKS_RE` with the marks of the supplementary plane too (built when needed).

    Those hundred ranges are only tried for supplementary-plane characters: a class is a bitmap
    in the BMP but a list of ranges tried in turn beyond it.
    """
    smp = _char_class(_mark_ranges([(_SMP_SCRIPTS[0], _SMP_SCRIPTS[1] + 1)]))
    mark = f"(?:[{_BMP_MARKS}]|(?=[\\U00010000-\\U0010ffff])[{smp}])"
    return re.compile(f"\\w+(?:{mark}+\\w*)*")


def main_tokens(per_block: list[list[str]], min_tokens: int) -> list[str]:
    """Tokens of the blocks that carry the page (the blocks a mirror's changes miss).

    1. *Numeric* blocks, at least half of whose tokens are numbers (a timestamp, a view
       counter, a price line: ``Last updated 2024-12-04 08:11:28``), are left out when the
       other blocks hold at least ``min_tokens`` tokens.
    2. Blocks of fewer than :data:`SHORT_BLOCK_TOKENS` words (datelines, bylines, text
       adverts, captions, per-page "latest headlines" widgets; a bigram of Chinese or Japanese
       counts half a word) are left out when the long blocks hold at least ``min_tokens``
       tokens and at least a third of the tokens, so a changed date or advert does not move a
       short page's fingerprint while list-like pages keep every block.
    """
    wordy = [toks for toks in per_block if not _numeric(toks)]
    if len(wordy) < len(per_block) and sum(map(len, wordy)) >= min_tokens:
        per_block = wordy
    long_blocks = [toks for toks in per_block if _block_words(toks) >= SHORT_BLOCK_TOKENS]
    long_count = sum(map(len, long_blocks))
    total = sum(map(len, per_block))
    chosen = long_blocks if long_count >= min_tokens and 3 * long_count >= total else per_block
    return [t for toks in chosen for t in toks]


def _numeric(toks: list[str]) -> bool:
    """At least half of the tokens are numbers (ASCII digits after NFKC)."""
    return bool(toks) and 2 * sum(t.isdigit() for t in toks) >= len(toks)


def _block_words(toks: list[str]) -> float:
    """A block's length in words: a character bigram (or single character) of a script
    without spaces counts half a word (a Chinese or Japanese word is about two characters,
    and a run of n characters gives n - 1 bigrams)."""
    if len(toks) < SHORT_BLOCK_TOKENS or all(map(str.isascii, toks)):
        return len(toks)  # the common case, decided without looking at every token
    chars = sum(1 for t in toks if len(t) <= 2 and _BIGRAM_RUN_RE.fullmatch(t))
    return len(toks) - chars / 2


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _split(line: str, words_re: re.Pattern[str]) -> list[str]:
    """Tokens of a folded line that holds bigram-script characters or marks (stop words kept)."""
    out: list[str] = []
    parts = _BIGRAM_RUN_RE.split(line)  # text, run, text, run, ..., text
    for i, part in enumerate(parts):
        if not i % 2:
            out.extend(words_re.findall(part))
        elif len(part) < 3:
            out.append(part)
        else:
            out.extend(map(operator.add, part, part[1:]))
    return out


def _words(page: str, lines: list[str]) -> list[list[str]]:
    """Tokens of each folded line, stop words kept; ``page`` is the lines joined by newlines."""
    special = "" if page.isascii() else _BELOW_MARKS_RE.sub("", page)
    if not special or not (_BIGRAM_RUN_RE.search(special) or _MARK_OR_SMP_RE.search(special)):
        findall = _WORD_RE.findall
        return [findall(line) for line in lines]
    if _VARIATION_RE.search(special) is not None:
        lines = [_VARIATION_RE.sub("", line) for line in lines]
    words_re = _smp_word_marks_re() if _SMP_RE.search(special) else _WORD_MARKS_RE
    return [_split(line, words_re) for line in lines]


def _english(words: list[list[str]]) -> bool:
    need = max(ENGLISH_MIN_MARKERS, ENGLISH_MIN_SHARE * sum(map(len, words)))
    found = 0
    is_marker = ENGLISH_MARKERS.__contains__
    # English pages have enough markers within about their first third: count 16 lines at a
    # time and stop there.
    for start in range(0, len(words), 16):
        found += sum(map(is_marker, chain.from_iterable(words[start : start + 16])))
        if found >= need:
            return True
    return False


def _finish(words: list[list[str]], stem: bool) -> list[list[str]]:
    if _english(words):
        stop = STOP_WORDS
        words = [[w for w in line if w not in stop] for line in words]
    return [[_stem(w) for w in line] for line in words] if stem else words


def is_english(text: str) -> bool:
    """Whether :func:`tokens` takes ``text`` for English and removes its stop words.

    True when at least :data:`ENGLISH_MIN_SHARE` of the tokens of ``text`` (stop words, numbers
    and bigrams included), and at least :data:`ENGLISH_MIN_MARKERS`, are
    :data:`ENGLISH_MARKERS`. ``is_english("\\n".join(blocks))`` is the decision
    :func:`block_tokens` takes for a page.

    >>> is_english("The cat sat on the mat and purred")
    True
    >>> is_english("Die Katze saß in der Sonne und schlief")
    False
    """
    folded = _fold(text)
    return _english(_words(folded, [folded]))


def tokens(text: str, *, stem: bool = False) -> list[str]:
    """Tokens of ``text`` (see the module docstring), stop words removed if it is English."""
    folded = _fold(text)
    return _finish(_words(folded, [folded]), stem)[0]


def block_tokens(blocks: list[str], *, stem: bool = False) -> list[list[str]]:
    """Tokens of each block of a page: :func:`tokens` rules, one English decision for the page.

    Normalizes the whole page in one call (faster than block by block).
    """
    if not blocks:
        return []
    page = _fold("\n".join(blocks))
    lines = page.split("\n")
    if len(lines) != len(blocks):  # a block holds a line break, or NFKC made or ate one
        lines = [_fold(b) for b in blocks]
        page = "\n".join(lines)
    return _finish(_words(page, lines), stem)


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A light English suffix stripper (plurals, -ing, -ed, -ly); keeps 3+ letters."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, repl in (("sses", "ss"), ("ies", "y"), ("ing", ""), ("edly", ""), ("ed", ""),
                         ("ly", ""), ("es", "e"), ("s", "")):  # fmt: skip
        if word.endswith(suffix) and not word.endswith(("ss", "us", "is")):
            stem = word[: -len(suffix)] + repl
            return stem if len(stem) >= 3 else word
    return word
