"""Column types and the values they convert: 64-bit fingerprints and UTC times.

Fingerprints are unsigned 64-bit ints in Python and a *signed* BIGINT in the database (SQLite
refuses integers >= 2**63); :class:`Fingerprint64` converts both ways, so callers never see the
signed form. Timestamps are stored in UTC and read back timezone-aware (:class:`UTCDateTime`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

U64 = 1 << 64
I63 = 1 << 63


def to_signed64(value: int) -> int:
    """The signed BIGINT form of an unsigned 64-bit fingerprint (``2**63`` -> ``-2**63``)."""
    if not 0 <= value < U64:
        raise ValueError(f"fingerprint {value!r} is not an unsigned 64-bit integer")
    return value - U64 if value >= I63 else value


def to_unsigned64(value: int) -> int:
    """The unsigned fingerprint stored as a signed BIGINT (inverse of :func:`to_signed64`)."""
    if not -I63 <= value < I63:
        raise ValueError(f"stored fingerprint {value!r} is not a signed 64-bit integer")
    return value & (U64 - 1)


def parse_time(value: datetime | str) -> datetime:
    """A UTC datetime from a datetime (naive means UTC) or an ISO 8601 string (``Z`` accepted,
    a date alone means midnight); :class:`ValueError` for text that is not ISO 8601."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def optional_time(value: object) -> datetime | None:
    """:func:`parse_time` of any stored time (datetime or text); None for None or ``""``."""
    if value is None or value == "":
        return None
    return parse_time(value if isinstance(value, datetime) else str(value))


def utcnow() -> datetime:
    return datetime.now(UTC)


class Fingerprint64(sa.types.TypeDecorator[int]):
    """Unsigned 64-bit int in Python, signed BIGINT in the database."""

    impl = sa.BigInteger
    cache_ok = True

    def process_bind_param(self, value: int | None, dialect: sa.Dialect) -> int | None:
        return None if value is None else to_signed64(int(value))

    def process_result_value(self, value: int | None, dialect: sa.Dialect) -> int | None:
        return None if value is None else to_unsigned64(int(value))


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp stored in UTC and read back timezone-aware (SQLite keeps no zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | str | None, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        value = parse_time(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
