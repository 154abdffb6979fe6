"""The settings of the content decision: :class:`DeciderSettings`, each setting read and checked
once (the decider, the pre-flight checks and the join check of a distributed crawl read them
through it)."""

from __future__ import annotations

from dataclasses import dataclass

from crawler import config, defaults
from crawler.content.simindex import settings_params
from crawler.dedup.overrides import overrides_file

__floor__ = "library"


@dataclass(frozen=True)
class DeciderSettings:
    """The settings of the content decision, each read and checked once (``SettingError``)."""

    min_tokens: int = defaults.SIMHASH_MIN_TOKENS  # SIMHASH_MIN_TOKENS
    shingle: int = defaults.SIMHASH_SHINGLE  # SIMHASH_SHINGLE
    persist: bool = defaults.SIMHASH_PERSIST  # SIMHASH_PERSIST
    prefer_canonical: bool = defaults.DEDUP_CANONICAL  # DEDUP_CANONICAL
    k: int = defaults.SIMHASH_MAX_DISTANCE  # SIMHASH_MAX_DISTANCE
    blocks: int = defaults.SIMHASH_MAX_DISTANCE + 1  # SIMHASH_BLOCKS
    overrides_file: str = ""  # DEDUP_OVERRIDES_FILE, its rules read and checked

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> DeciderSettings:
        k, blocks = settings_params(settings)
        return cls(
            min_tokens=config.get_int(settings, "SIMHASH_MIN_TOKENS",
                                      defaults.SIMHASH_MIN_TOKENS, 0),
            shingle=config.get_int(settings, "SIMHASH_SHINGLE", defaults.SIMHASH_SHINGLE, 1, 8),
            persist=config.get_bool(settings, "SIMHASH_PERSIST", defaults.SIMHASH_PERSIST),
            prefer_canonical=config.get_bool(settings, "DEDUP_CANONICAL",
                                             defaults.DEDUP_CANONICAL),
            k=k, blocks=blocks, overrides_file=overrides_file(settings),
        )  # fmt: skip
