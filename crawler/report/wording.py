"""Numbers in words for every part of a report: :func:`percent`, :func:`plural` and
:func:`bits`.

Both the numbers (advice sentences) and the page (:mod:`crawler.report.markup`) use them, so a
ratio prints the same wherever it appears and a count agrees with its noun ("1 bit", "2 bits").
A percentage is formatted once, from the ratio itself: never from a value already rounded for
JSON (``round(x, 4)`` then one decimal rounds twice: 4/21 reads 19.1% instead of 19.0%).
"""

from __future__ import annotations

SMALL = 0.001  # ratios below 0.1% keep two significant digits instead of one decimal


def percent(part: float, whole: float = 1) -> str:
    """``part / whole`` as a percentage for people; ``n/a`` when ``whole`` is 0.

    >>> percent(4, 21), percent(1, 2), percent(1.4e-05), percent(0)
    ('19.0%', '50.0%', '0.0014%', '0.0%')
    """
    if not whole:
        return "n/a"
    ratio = part / whole
    if ratio and abs(ratio) < SMALL:
        return f"{ratio * 100:.2g}%"
    return f"{ratio:.1%}"


def plural(count: float, noun: str, nouns: str = "") -> str:
    """``count`` and its noun (:func:`noun_for`).

    >>> plural(1, "bit"), plural(3, "bit"), plural(2, "copy", "copies"), plural(1234, "page")
    ('1 bit', '3 bits', '2 copies', '1,234 pages')
    """
    number = f"{count:,}" if isinstance(count, int) else f"{count:g}"
    return f"{number} {noun_for(count, noun, nouns)}"


def noun_for(count: float, noun: str, nouns: str = "") -> str:
    """``noun`` for exactly 1, else ``nouns`` (default ``noun + 's'``): 0 bits, 1 bit, 1.5 bits."""
    return noun if count == 1 else nouns or noun + "s"


def bits(distance: int | None) -> str:
    """A distance in bits ("1 bit", "3 bits"); ``? bits`` when not known."""
    return "? bits" if distance is None else plural(distance, "bit")
