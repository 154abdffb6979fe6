"""Optional dependencies (pip extras) and the one-line error when a setting needs a missing one.

The default install is the embedded profile: SQLite, the local Bloom filter and the local SimHash
index, nothing else. What needs more comes with an extra of ``dedup-crawler`` (pyproject.toml):

======== ============================ =====================================================
extra    modules                      needed by
======== ============================ =====================================================
postgres ``psycopg``                  ``STORAGE_URL=postgresql://...``
redis    ``redis``, ``scrapy_redis``  ``DEDUP_BACKEND=redis``, the distributed profile
s3       ``boto3``                    ``s3://`` outputs
warc     ``warcio``, ``cdxj_indexer`` WARC output, its CDXJ indexes
bench    ``pybloom_live``, ``simhash`` ``python -m bench`` (the baselines)
======== ============================ =====================================================

Those modules are imported only where they are used, never by a crawl of the default install.
:func:`require` is called by the settings checks that run before a crawl starts
(``crawler.backends.check_extras``): a missing extra stops the crawl with one line and a
non-zero exit, such as ``error: DEDUP_BACKEND=redis needs the redis extra: pip install
'dedup-crawler[redis]'``.
"""

from __future__ import annotations

from importlib.util import find_spec

from crawler.config import SettingError

DISTRIBUTION = "dedup-crawler"
#: extra -> the top-level modules it installs that our code imports.
EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg",),
    "redis": ("redis", "scrapy_redis"),
    "s3": ("boto3",),
    "warc": ("warcio", "cdxj_indexer"),
    "bench": ("pybloom_live", "simhash"),
}


class MissingExtraError(SettingError):
    """Settings need an extra that is not installed; the message is one line naming the
    settings, the extras and the ``pip install`` command."""

    def __init__(self, reasons: list[str], extras: list[str]) -> None:
        self.reasons = reasons
        self.extras = extras
        verb = "needs" if len(reasons) == 1 else "need"
        noun = "extra" if len(extras) == 1 else "extras"
        message = (f"{_join(reasons)} {verb} the {_join(extras)} {noun}: "
                   f"{install_command(extras)}")  # fmt: skip
        ValueError.__init__(self, message)
        self.name = reasons[0].split("=", 1)[0]
        self.value = reasons[0].split("=", 1)[-1]
        self.allowed = install_command(extras)


def installed(extra: str) -> bool:
    """True when every module of ``extra`` can be imported (nothing is imported)."""
    return all(_importable(module) for module in EXTRAS[extra])


def install_command(extras: list[str]) -> str:
    return f"pip install '{DISTRIBUTION}[{','.join(extras)}]'"


def require(needs: dict[str, str]) -> None:
    """``needs`` maps what the user chose (``"DEDUP_BACKEND=redis"``) to the extra it needs;
    raises :class:`MissingExtraError` naming every choice whose extra is missing."""
    missing = {reason: extra for reason, extra in needs.items() if not installed(extra)}
    if missing:
        raise MissingExtraError(list(missing), list(dict.fromkeys(missing.values())))


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module blocked in sys.modules
        return False


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
