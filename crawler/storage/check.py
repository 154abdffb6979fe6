"""The storage settings, checked before a crawl: without connecting
(:meth:`StorageSettings.from_settings`, in :func:`crawler.commands.preflight.settings_checks`)
and by connecting and migrating (:func:`check_storage`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from crawler import config, defaults
from crawler.config import SettingsLike
from crawler.storage.engine import StorageError, mask_url, parse_url
from crawler.storage.store import Store


def check_storage(settings: SettingsLike) -> None:
    """Connect to ``STORAGE_URL`` and migrate, before a crawl starts.

    Raises :class:`StorageError` with a one-line message (URL masked, what to check).
    """
    store = Store.from_settings(settings)
    try:
        store.check()
    finally:
        store.close()


def write_options(settings: SettingsLike) -> dict[str, Any]:
    """The storage pipeline's batching and retry settings, checked: the keyword arguments of
    :class:`crawler.pipelines.storage.StoragePipeline`."""
    return {
        "batch_size": config.get_int(settings, "STORAGE_BATCH_SIZE",
                                     defaults.STORAGE_BATCH_SIZE, lo=1),
        "batch_seconds": config.get_float(settings, "STORAGE_BATCH_SECONDS",
                                          defaults.STORAGE_BATCH_SECONDS, lo=0,
                                          open_interval=True),
        "dropped_text_max_chars": config.get_int(settings, "DROPPED_TEXT_MAX_CHARS",
                                                 defaults.DROPPED_TEXT_MAX_CHARS, lo=0),
        "retry_times": config.get_int(settings, "STORAGE_RETRY_TIMES",
                                      defaults.STORAGE_RETRY_TIMES, lo=0, hi=100),
        "retry_backoff": config.get_float(settings, "STORAGE_RETRY_BACKOFF",
                                          defaults.STORAGE_RETRY_BACKOFF, lo=0),
    }  # fmt: skip


class SettleOptions(NamedTuple):
    """How the settle step runs at the end of a crawl (:meth:`Store.settle`)."""

    k: int  # SIMHASH_MAX_DISTANCE
    persist: bool  # SIMHASH_PERSIST: the groups span every crawl of the database
    prefer_canonical: bool  # DEDUP_CANONICAL
    rules_file: str = ""  # DEDUP_OVERRIDES_FILE: a person's rules, with the database's


def settle_options(settings: SettingsLike) -> SettleOptions | None:
    """``DEDUP_SETTLE`` and what the settle step reads of the dedup settings, checked; None
    when it is off."""
    from crawler.content.simindex import settings_params

    if not config.get_bool(settings, "DEDUP_SETTLE", defaults.DEDUP_SETTLE):
        return None
    return SettleOptions(
        settings_params(settings)[0],
        config.get_bool(settings, "SIMHASH_PERSIST", defaults.SIMHASH_PERSIST),
        config.get_bool(settings, "DEDUP_CANONICAL", defaults.DEDUP_CANONICAL),
        str(settings.get("DEDUP_OVERRIDES_FILE") or defaults.DEDUP_OVERRIDES_FILE).strip(),
    )


@dataclass(frozen=True)
class StorageSettings:
    """The storage settings, checked without connecting (:func:`check_storage` connects): the
    pipeline's batching and retries (:func:`write_options`), the settle step (``settle``:
    :func:`settle_options`, None when off) and ``STORAGE_URL`` (``url``, a URL SQLAlchemy
    parses)."""

    url: str
    batch_size: int
    batch_seconds: float
    dropped_text_max_chars: int
    retry_times: int
    retry_backoff: float
    settle: SettleOptions | None

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> StorageSettings:
        """Read and check them (:class:`~crawler.config.SettingError`)."""
        write = write_options(settings)
        settle = settle_options(settings)
        return cls(url=_checked_url(settings), settle=settle, **write)


def _checked_url(settings: SettingsLike) -> str:
    """``STORAGE_URL``, refused (masked) when SQLAlchemy cannot parse it."""
    url = str(settings.get("STORAGE_URL") or defaults.STORAGE_URL)
    try:
        parse_url(url)
    except StorageError:
        raise config.SettingError(
            "STORAGE_URL", mask_url(url),
            "a SQLAlchemy URL such as sqlite:///crawl.db or postgresql+psycopg://user@host/db",
        ) from None
    return url


