"""Rows as the database takes them: text made storable, columns checked, settings recorded.

Text columns cannot hold NUL characters on PostgreSQL and unpaired surrogates on any driver:
both are removed or replaced on write; bounded columns (``content_type``...) are cut to fit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crawler import defaults
from crawler.config import SettingsLike
from crawler.outputs.formats import jsonable, mask_settings
from crawler.storage.engine import mask_url
from crawler.storage.tables import MAX_LENGTHS, TEXT_COLUMNS

#: Settings recorded in ``crawls.settings``: every name with one of these prefixes, or listed.
DEDUP_SETTING_PREFIXES = ("URLNORM_", "BLOOM_", "SIMHASH_", "TRAP_", "STORAGE_BATCH_", "DEDUP_")
DEDUP_SETTING_NAMES = ("URLLENGTH_LIMIT", "DROPPED_TEXT_MAX_CHARS", "DEPTH_LIMIT", "DROPPED_LOG")


def clean_text(value: Any) -> Any:
    """``value`` safe for any text column: NUL removed, unpaired surrogates replaced."""
    if not isinstance(value, str):
        return value
    if "\x00" in value:
        value = value.replace("\x00", "")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def dedup_settings(settings: SettingsLike) -> dict[str, Any]:
    """The settings that shape dedup decisions, as recorded in ``crawls.settings``, with every
    secret masked (:func:`crawler.outputs.formats.mask_settings`)."""
    names = [str(name) for name in settings]  # type: ignore[attr-defined]
    picked = {
        name: settings.get(name)
        for name in sorted(names)
        if name.startswith(DEDUP_SETTING_PREFIXES) or name in DEDUP_SETTING_NAMES
    }
    picked["STORAGE_URL"] = mask_url(str(settings.get("STORAGE_URL", defaults.STORAGE_URL)))
    log = settings.get("DROPPED_LOG", defaults.DROPPED_LOG)  # where a later rule's moves go
    picked["DROPPED_LOG"] = os.path.abspath(str(log)) if log else ""
    return jsonable(mask_settings(picked))  # never store a secret: the report prints these


def build_row(row: Mapping[str, Any], columns: tuple[str, ...], kind: str) -> dict[str, Any]:
    """``row`` as written to a ``kind`` table of ``columns``: every column present (missing
    ones None), text cleaned and cut to fit; :class:`ValueError` for an unknown column or a
    row without a ``url``."""
    unknown = set(row) - set(columns) - {"id"}
    if unknown:
        raise ValueError(f"unknown {kind} column(s): {', '.join(sorted(unknown))}")
    if not row.get("url"):
        raise ValueError(f"{kind} row without a url: {dict(row)!r:.200}")
    values = {c: row.get(c) for c in columns}
    for name in TEXT_COLUMNS.intersection(values):
        value = clean_text(values[name])
        limit = MAX_LENGTHS.get(name)
        values[name] = value[:limit] if limit and isinstance(value, str) else value
    return values


def chunked(items: Sequence[Any], size: int = 500) -> Iterator[Sequence[Any]]:
    """``items`` in slices of ``size`` (bounds the parameters of one ``IN`` list)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def like_escape(text: str) -> str:
    """``text`` as a literal in a ``LIKE`` pattern with ``ESCAPE '\\'``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
