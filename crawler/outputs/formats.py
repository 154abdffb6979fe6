"""How values are written for people and files, once: URLs with their secrets hidden (THE one
masking rule, :func:`mask_url`, for every server, database and feed URL printed or stored), the
host of a URL, times in ISO 8601 UTC, any value as plain JSON data, text made safe for a
terminal (:func:`terminal_safe`), a CSV cell a spreadsheet will not run (:func:`csv_cell`) and
a CSV line that keeps every character of its cells (:func:`csv_line`). No Scrapy, no database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

#: What a terminal may act on: C0 controls but tab and newline (ESC among them), DEL and C1.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A CSV cell starting so is a formula to a spreadsheet (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


#: Query parameters whose value is a secret, compared lower-case with ``-`` read as ``_``
#: (docs/security-and-limits.md, "Security"): these names exactly, and any name containing one of
#: :data:`SECRET_PARTS`.
SECRET_PARAMS = frozenset({
    "pass", "pwd", "passwd", "password", "passphrase", "sslpassword", "key", "api_key",
    "apikey", "access_key", "secret_key", "private_key", "auth", "authorization",
    "credential", "credentials", "sig", "signature", "x_amz_signature", "x_amz_credential",
})
SECRET_PARTS = ("password", "passwd", "secret", "token", "api_key", "apikey")
#: Words of a setting name (split at ``_``) that make its value a secret whatever it looks like
#: (``AWS_SECRET_ACCESS_KEY``, ``GITHUB_TOKEN``); whole words only (``SIMHASH_MIN_TOKENS`` is a
#: count, not a secret).
SECRET_SETTING_PARTS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "CREDENTIALS")
#: What a hidden secret reads as.
MASK = "***"
#: A URL in running text: a scheme, ``://`` and everything up to white space or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def mask_url(url: str) -> str:
    """``url`` with every secret replaced by ``***``: the password of its user info and the
    value of each query parameter named as a secret (:data:`SECRET_PARAMS`,
    :data:`SECRET_PARTS`; the query may be split by ``&`` or ``;``). Any scheme: a database,
    Redis, S3 or feed URL. A URL without a secret is returned unchanged, masking twice gives
    the same text, and nothing raises (a value that is not a string is masked as its text).

    Limits: a secret in the path or in a parameter with another name is not recognised; a
    user name is kept (it names the account, and user-only URLs are common).

    >>> mask_url("postgresql://crawler:s3cret@db:5432/crawl")
    'postgresql://crawler:***@db:5432/crawl'
    >>> mask_url("redis://:pw@127.0.0.1:6379/0")
    'redis://:***@127.0.0.1:6379/0'
    >>> mask_url("postgresql://db/crawl?sslmode=require&PassWord=x;api-key=y#f")
    'postgresql://db/crawl?sslmode=require&PassWord=***;api-key=***#f'
    """
    if not isinstance(url, str):
        url = str(url)
    return _mask_query(_mask_userinfo(url))


def _mask_userinfo(url: str) -> str:
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
    return f"{scheme}://{user}:{MASK}@{tail}{rest[end:]}"


def _mask_query(url: str) -> str:
    head, sep, rest = url.partition("?")
    if not sep:
        return url
    query, hash_, fragment = rest.partition("#")
    parts = re.split(r"([&;])", query)
    for i in range(0, len(parts), 2):
        name, eq, _ = parts[i].partition("=")
        if eq and is_secret_param(name):
            parts[i] = f"{name}={MASK}"
    return f"{head}?{''.join(parts)}{hash_}{fragment}"


def is_secret_param(name: str) -> bool:
    """Whether a query parameter ``name`` (as written, percent-escapes allowed) holds a secret.

    >>> [is_secret_param(n) for n in ("Password", "sslmode", "X-Amz-Security-Token", "pass%77d")]
    [True, False, True, True]
    """
    norm = unquote(name).strip().lower().replace("-", "_")
    return norm in SECRET_PARAMS or any(part in norm for part in SECRET_PARTS)


def is_masked(url: str) -> bool:
    """Whether ``url`` is a masked URL: ``***`` stands where :func:`mask_url` hides a secret
    (a ``***`` elsewhere, as in a file name, does not count).

    >>> [is_masked(u) for u in ("postgresql://u:***@h/db", "sqlite:///***.db", "sqlite:///a")]
    [True, False, False]
    """
    probe = url.replace(MASK, "x")
    return MASK in url and mask_url(probe) != probe


def unmask(url: str, candidates: Iterable[str | None]) -> str | None:
    """The first of ``candidates`` that :func:`mask_url` masks to ``url`` (the real URL a
    masked one stands for), or None: a secret is only ever taken from a URL that names the
    same scheme, user, server, database and parameters."""
    for candidate in candidates:
        if candidate and mask_url(candidate.strip()) == url:
            return candidate.strip()
    return None


def mask_text(text: str) -> str:
    """``text`` with every URL in it masked by :func:`mask_url` (an error message that quotes
    a driver's or a library's words may carry the URL it was given).

    >>> mask_text("cannot reach 'redis://:pw@h:6379/0?token=t' (refused)")
    "cannot reach 'redis://:***@h:6379/0?token=***' (refused)"
    """
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group()), text)


def mask_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` as they may be printed or stored: the value of a name with a word of
    :data:`SECRET_SETTING_PARTS` replaced by ``***`` (when set), every text that holds a URL
    masked (:func:`mask_text`), in lists and dicts too (``FEEDS`` keys are URLs)."""
    return {str(name): (MASK if _secret_setting(str(name), value) else _masked_value(value))
            for name, value in settings.items()}


def _secret_setting(name: str, value: Any) -> bool:
    words = name.upper().split("_")
    return value not in (None, "") and any(p in words for p in SECRET_SETTING_PARTS)


def _masked_value(value: Any) -> Any:
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, Mapping):
        return {(mask_text(k) if isinstance(k, str) else k): _masked_value(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked_value(v) for v in value]
    return value


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


#: A CSV cell holding one of these is quoted: the separator, the quote, and every control
#: character (line breaks, tab, ESC, NUL, DEL, C1), so a reader never splits or trims it.
_CSV_QUOTED = re.compile('[,"\x00-\x1f\x7f-\x9f]')


def csv_line(values: Iterable[Any]) -> str:
    """One CSV record (RFC 4180, ``\\n`` ended) of ``values``, the data kept as it is: a cell
    with a comma, a quote or any control character is quoted (quotes doubled), the control
    characters inside written unchanged (escaping is for a terminal only:
    :func:`terminal_safe`); None is an empty cell, numbers are written bare. Python's
    :mod:`csv` reader gives the cells back as text.

    >>> csv_line(["a", 3, None, 'say "hi" now', "esc\\x1b[2J", "x,y"])
    'a,3,,"say ""hi"" now","esc\\x1b[2J","x,y"\\n'
    """
    cells = []
    for value in values:
        text = "" if value is None else str(value)
        if _CSV_QUOTED.search(text):
            text = '"' + text.replace('"', '""') + '"'
        cells.append(text)
    return ",".join(cells) + "\n"
