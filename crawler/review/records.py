"""Drop records and their filters: one dropped page as the commands print it, from the
``dropped`` table or the JSON Lines drop log.

Records come out as :class:`DropRecord`: the JSON Lines fields of the drop log (``url``,
``reason``, ``duplicate_of``, ``distance``, ``simhash``/``duplicate_simhash`` as 16 hex digits,
``time`` ISO 8601 UTC, ``crawl_id``, ``rule``) plus, from the ``dropped`` table only,
``canonical_url`` and ``title`` (:data:`DB_ONLY_FIELDS`). A listing of the log leaves those two
out (:meth:`DropRecord.field_names`) rather than print them empty: the log has no title, and a
canonical URL computed again could differ from the crawl's (its ``URLNORM_*`` settings, the
query parameters it learned).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.content.simhash import to_hex
from crawler.outputs.formats import host_of
from crawler.storage import ReviewError, optional_time
from crawler.vocab import (
    CANONICAL_RULE,
    EXACT_DUPLICATE,
    NEAR_DUPLICATE,
    OVERRIDE,
    PREFERRED_RULE,
    REFRESHED_RULE,
    REPOINTED_RULE,
    SETTLED_RULE,
    SOFT_404,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

REASONS = (EXACT_DUPLICATE, NEAR_DUPLICATE)
#: Every reason a page is dropped for: the content decisions, soft 404s (crawler.urls.traps) and a
#: person's drop rule (crawler.dedup.overrides).
ALL_REASONS = (*REASONS, SOFT_404, OVERRIDE)
#: Every rule of a drop made after the page was first decided (``dropped.rule``).
RULES = (CANONICAL_RULE, PREFERRED_RULE, REFRESHED_RULE, REPOINTED_RULE, SETTLED_RULE)
#: Fields only the ``dropped`` table has: the drop log carries neither (module docstring).
DB_ONLY_FIELDS = ("canonical_url", "title")


def iso_utc(value: object) -> str | None:
    """A stored time (datetime, naive = UTC, or ISO text) as ISO 8601 UTC (``+00:00``)."""
    when = optional_time(value)
    return None if when is None else when.isoformat()


@dataclass(frozen=True)
class DropRecord:
    """One dropped page, from the ``dropped`` table or the JSON Lines log."""

    url: str
    reason: str
    duplicate_of: str
    distance: int | None
    simhash: str | None
    duplicate_simhash: str | None
    time: str | None
    crawl_id: int | None
    canonical_url: str | None = None
    title: str | None = None
    rule: str | None = None  # "canonical": stored first, dropped for the page it names
    logged: bool = field(default=False, repr=False, compare=False)  # read from the drop log

    def as_dict(self) -> dict[str, Any]:
        """The record as ``--format json`` prints it: its :meth:`field_names`."""
        return {name: getattr(self, name) for name in self.field_names((self,))}

    @classmethod
    def field_names(cls, records: Sequence[DropRecord] = ()) -> list[str]:
        """The fields of a listing of ``records`` (a CSV header): every field, but for records
        all read from the drop log, which carries no :data:`DB_ONLY_FIELDS`."""
        names = [f.name for f in fields(cls) if f.name != "logged"]
        if records and all(record.logged for record in records):
            return [name for name in names if name not in DB_ONLY_FIELDS]
        return names

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DropRecord:
        """From a ``dropped`` row (:meth:`crawler.storage.PageReader.drop_rows`)."""
        return cls(
            url=row["url"],
            reason=row["reason"],
            duplicate_of=row["duplicate_of"],
            distance=row.get("distance"),
            simhash=to_hex(row.get("simhash")),
            duplicate_simhash=to_hex(row.get("duplicate_simhash")),
            time=iso_utc(row.get("dropped_at")),
            crawl_id=row.get("crawl_id"),
            canonical_url=row.get("canonical_url"),
            title=row.get("title"),
            rule=row.get("rule"),
        )

    @classmethod
    def from_log(cls, obj: dict[str, Any]) -> DropRecord:
        """From one line of the drop log."""
        distance = obj.get("distance")
        crawl_id = obj.get("crawl_id")
        return cls(
            url=str(obj.get("url", "")),
            reason=str(obj.get("reason", "")),
            duplicate_of=str(obj.get("duplicate_of") or ""),
            distance=None if distance is None else int(distance),
            simhash=to_hex(obj.get("simhash")),
            duplicate_simhash=to_hex(obj.get("duplicate_simhash")),
            time=iso_utc(obj.get("time")),
            crawl_id=None if crawl_id is None else int(crawl_id),
            rule=obj.get("rule") or None,
            logged=True,
        )


@dataclass
class DropFilter:
    """The ``scrapy dropped`` filters; ``None`` means "any"."""

    reason: str | None = None
    host: str | None = None
    min_distance: int | None = None
    max_distance: int | None = None
    crawl_id: int | None = None
    since: datetime | None = None
    limit: int | None = None
    crawl_ids: tuple[int, ...] | None = None  # any of these (a distributed crawl's workers)
    rule: str | None = None  # RULES: a page stored first and dropped later, and why

    def matches(self, record: DropRecord) -> bool:
        """True when ``record`` passes every filter (``limit`` aside)."""
        if self.reason and record.reason != self.reason:
            return False
        if self.rule and record.rule != self.rule:
            return False
        if self.crawl_id is not None and record.crawl_id != self.crawl_id:
            return False
        if self.crawl_ids is not None and record.crawl_id not in self.crawl_ids:
            return False
        if not self._distance_ok(record.distance):
            return False
        if self.host and not host_matches(record.url, self.host):
            return False
        when = optional_time(record.time)
        return not (self.since and (when is None or when < self.since))

    def _distance_ok(self, distance: int | None) -> bool:
        if self.min_distance is None and self.max_distance is None:
            return True
        if distance is None:
            return False
        lo_ok = self.min_distance is None or distance >= self.min_distance
        return lo_ok and (self.max_distance is None or distance <= self.max_distance)

    def sql_limit(self) -> int | None:
        """The limit a query may apply itself: none when a filter is applied after it."""
        return None if self.host or self.since else self.limit


def host_matches(url: str, host: str) -> bool:
    """``host`` matches the URL's host itself or any subdomain of it (``a.example.com``)."""
    want = host.lower().strip().rstrip(".")
    if ":" in want and not want.startswith("["):
        want = want.split(":", 1)[0]
    have = host_of(url)
    return have == want or have.endswith("." + want)


def apply_filter(records: Iterable[DropRecord], flt: DropFilter) -> list[DropRecord]:
    """Filter records already sorted newest first, stopping at ``flt.limit``."""
    out: list[DropRecord] = []
    for record in records:
        if flt.limit is not None and len(out) >= flt.limit:
            break
        if flt.matches(record):
            out.append(record)
    return out


# --- the JSON Lines log ----------------------------------------------------------------------


def read_log(path: str | Path, flt: DropFilter | None = None) -> list[DropRecord]:
    """Records of a drop log as it replays (each URL's last line: its final state, as the
    ``dropped`` table holds it; pages stored again left out), newest first, filtered; a torn
    last line is skipped.

    Raises :class:`ReviewError` for a missing file or a bad line that is not the last one.
    """
    path = Path(path)
    if not path.is_file():
        raise ReviewError(f"drop log {path} does not exist; pass the DROPPED_LOG file of a crawl")
    from crawler.outputs.droplog import replay_drop_log

    records = [DropRecord.from_log(obj) for obj in replay_drop_log(_log_objects(path)).values()]
    records.sort(key=lambda r: optional_time(r.time) or datetime.min.replace(tzinfo=UTC),
                 reverse=True)
    return apply_filter(records, flt or DropFilter())


def _log_objects(path: Path) -> Iterator[dict[str, Any]]:
    from crawler.outputs.droplog import read_drop_log  # tolerant of a torn last line

    try:
        yield from read_drop_log(path)
    except ValueError as exc:  # DropLogError names the file and the line
        raise ReviewError(f"damaged drop log: {exc}") from None
    except OSError as exc:
        raise ReviewError(f"cannot read drop log {path}: {exc.strerror or exc}") from None
