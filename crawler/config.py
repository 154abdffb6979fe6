"""Setting validation shared by every component.

Each component reads its settings through the typed helpers below, which raise
:class:`SettingError` naming the setting, the bad value and the allowed range. The ``crawl`` and
``demo`` commands call :func:`validate_settings` before the crawler starts, so a bad value stops
the crawl with one line and a non-zero exit instead of a traceback from inside Scrapy.

Validators register themselves with :func:`register`; a module that owns settings calls it at
import time and ``validate_settings`` imports those modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol


class SettingsLike(Protocol):
    def get(self, name: str, default: Any = None) -> Any: ...


class SettingError(ValueError):
    """A setting has a value the crawler cannot use."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"setting {name}={value!r} is invalid: allowed {allowed}")


class UnknownSettingError(SettingError):
    """A setting with one of the project's prefixes that no component reads (a typo)."""

    def __init__(self, name: str, value: object, suggestions: list[str]) -> None:
        super().__init__(name, value, "")
        hint = (f"did you mean {' or '.join(suggestions)}?" if suggestions
                else "no setting of dedup-crawler has this name (README, \"Settings\")")
        self.args = (f"unknown setting {name}={value!r}: {hint}",)

    def __str__(self) -> str:
        return str(self.args[0])


#: Prefixes of the project's own settings: an unknown name with one of them is a typo.
PROJECT_PREFIXES = ("SIMHASH_", "BLOOM_", "DEDUP_", "URLNORM_", "STORAGE_", "TRAP_", "DROPPED_",
                    "WARC_", "JOBDIR_SNAPSHOT_", "DISTRIBUTED_")


def known_setting_names() -> set[str]:
    """Every setting name the crawler knows: Scrapy's defaults, the project's defaults
    (:mod:`crawler.defaults`) and the names its settings profiles define."""
    from scrapy.settings import default_settings

    from crawler import defaults

    names = {n for n in dir(default_settings) if n.isupper()}
    names |= {n for n in dir(defaults) if n.isupper()}
    for module in ("crawler.settings.base", "crawler.settings.distributed"):
        names |= {n for n in dir(importlib.import_module(module)) if n.isupper()}
    return names


def check_unknown_settings(settings: Any) -> None:
    """Refuse a setting that starts with one of :data:`PROJECT_PREFIXES` and that no component
    reads (``-s SIMHASH_MAX_DISTANC=2`` would otherwise crawl with the default k), naming the
    closest known names. ``settings`` is Scrapy's settings object (or any mapping)."""
    import difflib

    known = known_setting_names()
    for name in sorted(str(n) for n in settings):
        if name in known or not name.upper().startswith(PROJECT_PREFIXES):
            continue
        candidates = sorted(n for n in known if n.startswith(PROJECT_PREFIXES)
                            and not n.endswith(("_CHOICES", "_RANGE")))
        close = difflib.get_close_matches(name.upper(), candidates, n=2, cutoff=0.75)
        raise UnknownSettingError(name, settings.get(name), close)


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


# --- registry ----------------------------------------------------------------------------------

Validator = Callable[[SettingsLike], object]
_VALIDATORS: list[Validator] = []

#: Modules whose import registers their validators; imported lazily by validate_settings.
VALIDATED_MODULES = (
    "crawler.urlnorm",
    "crawler.bloom",
    "crawler.jobstate",
    "crawler.simindex",
    "crawler.storage",
    "crawler.middlewares.links",
    "crawler.backends",
    "crawler.backends.cluster",
    "crawler.progress",
    "crawler.pipelines.neardup",
    "crawler.warc",
)


def register(validator: Validator) -> Validator:
    """Register ``validator(settings)``, which raises SettingError on a bad value."""
    if validator not in _VALIDATORS:
        _VALIDATORS.append(validator)
    return validator


def validate_settings(settings: SettingsLike) -> None:
    """Run every registered validator; raises the first :class:`SettingError`."""
    for module in VALIDATED_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    for validator in list(_VALIDATORS):
        validator(settings)
