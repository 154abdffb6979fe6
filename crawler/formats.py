"""How values are written for people and files, once: URLs with their password hidden, the
host of a URL, times in ISO 8601 UTC, any value as plain JSON data, text made safe for a
terminal (:func:`terminal_safe`) and a CSV cell a spreadsheet will not run (:func:`csv_cell`).
No Scrapy, no database.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

#: What a terminal may act on: C0 controls but tab and newline (ESC among them), DEL and C1.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A CSV cell starting so is a formula to a spreadsheet (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def mask_url(url: str) -> str:
    """``url`` with the password of its user info replaced by ``***`` (any scheme: a database,
    Redis or S3 URL); a URL without a password is returned unchanged, and nothing raises.

    >>> mask_url("postgresql://crawler:s3cret@db:5432/crawl")
    'postgresql://crawler:***@db:5432/crawl'
    >>> mask_url("redis://:pw@127.0.0.1:6379/0")
    'redis://:***@127.0.0.1:6379/0'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    # The user info ends at the last "@" before the query when the part before the query
    # has one (``user@host/p?q=a@b``); else at the last "@" of all: a secret may hold an
    # unescaped "/", "?" or "#" (database drivers read ``u:pa#ss@host`` so), and hiding too
    # much beats printing a secret.
    end = min((i for i in (rest.find(c) for c in "?#") if i >= 0), default=len(rest))
    if "@" not in rest[:end]:
        end = len(rest)
    userinfo, at, tail = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}://{user}:***@{tail}{rest[end:]}"


def host_of(url: str | None) -> str:
    """The lower-case host name of any URL, without port or IPv6 brackets ('' when none).

    >>> host_of("HTTP://User@Example.COM:8080/x")
    'example.com'
    """
    try:
        return (urlsplit(url or "").hostname or "").lower()
    except ValueError:
        return ""


def utc_iso(moment: datetime | None = None) -> str:
    """``moment`` (default: now) as ISO 8601 UTC with a ``Z``; a naive value is taken as UTC.

    >>> utc_iso(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    '2026-01-02T03:04:05Z'
    """
    moment = moment or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (datetimes as ISO 8601, NaN and unknown types as text)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _escaped(match: re.Match[str]) -> str:
    char = ord(match.group())
    return f"\\x{char:02x}" if char < 0x20 else f"\\u{char:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal could act on written as an escape: C0 controls
    (but tab and newline) as ``\\x1b``, DEL and C1 (U+0080..U+009F) as ``\\u009b``.

    Crawled text is hostile: an ESC or CSI sequence printed raw can clear the screen, retitle
    the window or write the clipboard (OSC 52). The ``\\u`` form of DEL and C1 is also a JSON
    escape, and JSON already escapes C0, so JSON passed through here stays valid and decodes
    to the original text. A literal backslash is left alone (``\\x1b`` typed by the page
    reads the same: the escape is for safety, not round trips).

    >>> terminal_safe("a\\x1b]52;c;eA==\\x07b\\x9b2J\\tc")
    'a\\\\x1b]52;c;eA==\\\\x07b\\\\u009b2J\\tc'
    """
    return _CONTROL.sub(_escaped, text)


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting with ``=``, ``+``, ``-``,
    ``@``, tab or CR gets a leading ``'`` (OWASP); numbers stay numbers (a real ``-3`` is
    data, and only text comes from a crawled page), and None stays empty.

    >>> [csv_cell(v) for v in ("=cmd|' /C calc'!A0", "-3", -3, "/a", None)]
    ["'=cmd|' /C calc'!A0", "'-3", -3, '/a', None]
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
