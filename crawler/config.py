"""Reading a setting, checked: the typed helpers every component reads its settings with.

Each helper raises :class:`SettingError` naming the setting, the bad value and the allowed
range. A component reads (and so checks) its own settings when it is built; the ``crawl``
command runs the same checks before the crawler exists, from the one explicit list of
:func:`crawler.commands.preflight.settings_checks`, so a bad value stops the crawl with one line
and a non-zero exit instead of a traceback from inside Scrapy.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

#: Scrapy's own numeric settings users mistype, with their lowest value; the crawl would
#: otherwise store nothing (``DOWNLOAD_MAXSIZE=-1``) or die with a traceback (``=abc``).
SCRAPY_INTS = {
    "DOWNLOAD_MAXSIZE": 0, "DOWNLOAD_WARNSIZE": 0, "CLOSESPIDER_ITEMCOUNT": 0,
    "CLOSESPIDER_PAGECOUNT": 0, "CLOSESPIDER_ERRORCOUNT": 0, "CONCURRENT_REQUESTS": 1,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "RETRY_TIMES": 0, "DEPTH_LIMIT": 0,
    "REDIRECT_MAX_TIMES": 0,
}  # fmt: skip
#: Scrapy's float settings, each >= 0; True: 0 itself is refused (a timeout of 0 s).
SCRAPY_FLOATS = {"CLOSESPIDER_TIMEOUT": False, "CLOSESPIDER_TIMEOUT_NO_ITEM": False,
                 "DOWNLOAD_DELAY": False, "DOWNLOAD_TIMEOUT": True}
SHOWN_MAX = 200  # characters of a bad value echoed in an error


class SettingsLike(Protocol):
    def get(self, name: str, default: Any = None) -> Any: ...


class SettingError(ValueError):
    """A setting has a value the crawler cannot use."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        shown = repr(value)
        if len(shown) > SHOWN_MAX:
            shown = f"{shown[:SHOWN_MAX]}… (cut, {len(shown)} characters in all)"
        super().__init__(f"setting {name}={shown} is invalid: allowed {allowed}")


def _raw(settings: SettingsLike, name: str, default: Any) -> Any:
    value = settings.get(name, default)
    return default if value is None else value


def get_int(
    settings: SettingsLike, name: str, default: int, lo: int | None = None, hi: int | None = None
) -> int:
    """Read an integer setting and check ``lo <= value <= hi`` (either bound optional)."""
    raw = _raw(settings, name, default)
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
        value = int(str(raw).replace("_", "")) if isinstance(raw, str) else int(raw)
    except (TypeError, ValueError):
        raise SettingError(name, raw, _range_text(lo, hi, "an integer")) from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise SettingError(name, raw, _range_text(lo, hi, "an integer"))
    return value


def get_float(
    settings: SettingsLike,
    name: str,
    default: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    open_interval: bool = False,
) -> float:
    """Read a float setting; with ``open_interval`` the bounds themselves are refused."""
    raw = _raw(settings, name, default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SettingError(name, raw, _range_text(lo, hi, "a number", open_interval)) from None
    bad_lo = lo is not None and (value <= lo if open_interval else value < lo)
    bad_hi = hi is not None and (value >= hi if open_interval else value > hi)
    if bad_lo or bad_hi or value != value:  # NaN is never in range
        raise SettingError(name, raw, _range_text(lo, hi, "a number", open_interval))
    return value


def get_bool(settings: SettingsLike, name: str, default: bool) -> bool:
    raw = _raw(settings, name, default)
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise SettingError(name, raw, "True or False")


def get_choice(settings: SettingsLike, name: str, default: str, choices: Iterable[str]) -> str:
    raw = _raw(settings, name, default)
    options = tuple(choices)
    value = str(raw).strip().lower()
    if value not in options:
        raise SettingError(name, raw, "one of " + ", ".join(repr(c) for c in options))
    return value


def get_list(settings: SettingsLike, name: str, default: Iterable[str]) -> list[str]:
    """A list setting given as a list/tuple or a comma-separated string."""
    raw = _raw(settings, name, list(default))
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    try:
        return [str(part).strip() for part in raw if str(part).strip()]
    except TypeError:
        raise SettingError(name, raw, "a list of strings or a comma-separated string") from None


def _range_text(lo: object, hi: object, kind: str, open_interval: bool = False) -> str:
    lo, hi = (f"{b:g}" if isinstance(b, float) else b for b in (lo, hi))  # 0.0 -> 0
    if lo is not None and hi is not None:
        brackets = ("(", ")") if open_interval else ("[", "]")
        return f"{kind} in {brackets[0]}{lo}, {hi}{brackets[1]}"
    if lo is not None:
        return f"{kind} {'>' if open_interval else '>='} {lo}"
    if hi is not None:
        return f"{kind} {'<' if open_interval else '<='} {hi}"
    return kind


@dataclass(frozen=True)
class ScrapySettings:
    """Scrapy's own settings the crawl checks as its own: those of :data:`SCRAPY_INTS` and
    :data:`SCRAPY_FLOATS` (name -> value) in range, and ``STATS_FILE`` ("" when unset)
    writable (:func:`check_file_path`). Scrapy reads them itself; this is the check."""

    ints: Mapping[str, int]
    floats: Mapping[str, float]
    stats_file: str = ""

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> ScrapySettings:
        """Read and check them (:class:`SettingError` naming the first bad one)."""
        ints = {name: get_int(settings, name, lo, lo=lo) for name, lo in SCRAPY_INTS.items()}
        floats = {name: get_float(settings, name, 1.0, lo=0.0, open_interval=strict)
                  for name, strict in SCRAPY_FLOATS.items()}
        path = settings.get("STATS_FILE")
        if path:
            check_file_path("STATS_FILE", str(path))
        return cls(ints, floats, str(path or ""))


def check_file_path(name: str, path: str) -> None:
    """Setting ``name`` is a file this process can write: not a directory, FIFO or socket,
    in an existing directory it may write to (SettingError naming what to do)."""
    allowed = "a file path in an existing, writable directory (not a directory, FIFO or socket)"
    try:
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError:
        raise SettingError(name, path, allowed) from None
    if mode is not None and not stat.S_ISREG(mode):
        raise SettingError(name, path, allowed)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent if mode is None else path, os.W_OK):
        raise SettingError(name, path, allowed)


def check_dir_path(name: str, path: str) -> None:
    """Setting ``name`` is a directory this process can create or write: the path itself, or
    its nearest existing ancestor, is a writable directory (SettingError otherwise)."""
    allowed = "a directory this process can create or write to"
    existing = Path(os.path.abspath(path))
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # a dangling link: mkdir would fail
            raise SettingError(name, path, allowed)
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise SettingError(name, path, allowed)
