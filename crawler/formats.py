"""How values are written for people and files, once: URLs with their password hidden, the
host of a URL, times in ISO 8601 UTC and any value as plain JSON data. No Scrapy, no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit


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
