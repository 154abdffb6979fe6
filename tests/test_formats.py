"""crawler.outputs.formats: the helpers every floor writes values with (written once, used
everywhere)."""

from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta, timezone

import pytest

from crawler.outputs import formats
from crawler.outputs.formats import host_of, jsonable, mask_url, utc_iso


def test_the_examples_in_the_docstrings_hold() -> None:
    for module in (formats,):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql+psycopg://crawler:s3cret@db:5432/crawl", "postgresql+psycopg://crawler:***@db:5432/crawl"),
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("s3://KEY:SECRET/with/slash@bucket/path", "s3://KEY:***@bucket/path"),
        ("s3://KEY:p%2Fw@bucket/path?x=1", "s3://KEY:***@bucket/path?x=1"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("sqlite:///crawl.db", "sqlite:///crawl.db"),
        ("http://user@host/a?b=c:d@e", "http://user@host/a?b=c:d@e"),
        ("not a url", "not a url"),
    ],
)  # fmt: skip
def test_mask_url_hides_the_password_and_nothing_else(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_host_of_any_url() -> None:
    assert host_of("HTTP://User:pw@Example.COM:8080/x") == "example.com"
    assert host_of("http://[2001:DB8::1]:80/") == "2001:db8::1"
    assert host_of("http://[bad") == "" and host_of(None) == "" and host_of("/path") == ""


def test_utc_iso_writes_utc_with_a_z() -> None:
    paris = timezone(timedelta(hours=1))
    assert utc_iso(datetime(2026, 1, 2, 4, 4, 5, tzinfo=paris)) == "2026-01-02T03:04:05Z"
    assert utc_iso(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"  # naive: UTC
    now = datetime.now(UTC)
    assert abs(datetime.fromisoformat(utc_iso().replace("Z", "+00:00")) - now).total_seconds() < 5


def test_jsonable_gives_plain_json_data() -> None:
    value = {1: (datetime(2026, 1, 1, tzinfo=UTC), float("nan")), "s": {3}, "o": object}
    got = jsonable(value)
    assert got["1"] == ["2026-01-01T00:00:00+00:00", "nan"]
    assert got["s"] == [3] and got["o"].startswith("<class")


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:pa#ss@host/db", "postgresql://u:***@host/db"),
        ("postgresql://u:pa?ss@host/db?sslmode=require", "postgresql://u:***@host/db?sslmode=require"),
        ("redis://:p#w@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("s3://KEY:se?c#ret@bucket/x", "s3://KEY:***@bucket/x"),
    ],
)  # fmt: skip
def test_a_password_holding_a_query_or_fragment_character_is_hidden(url, masked) -> None:
    """SQLAlchemy and redis-py read ``pa#ss`` as the password: it must not be printed."""
    from crawler.storage import mask_url as storage_mask

    assert mask_url(url) == masked
    assert storage_mask(url) == masked
