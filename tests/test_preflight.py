"""crawler.preflight: the settings checks are one explicit list, and each one runs.

Every check of :func:`settings_checks` is the function its component calls when it is built;
here each is shown to refuse a bad value of a setting it owns through :func:`check_settings`
(the pre-flight check), so no component's check can be left out silently.
"""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from crawler.config import SettingError
from crawler.extras import MissingExtraError
from crawler.preflight import check_settings, settings_checks

#: check name -> a setting it refuses (name, bad value)
BAD = {
    "check_scrapy_settings": ("DOWNLOAD_MAXSIZE", -1),
    "backend_name": ("DEDUP_BACKEND", "memcached"),
    "from_settings": ("URLNORM_SORT_QUERY", "maybe"),
    "validate@crawler.linkrules": ("TRAP_MAX_PATH_DEPTH", 0),
    "validate@crawler.traps": ("TRAP_PATH_MAX_QUERY_VARIANTS", -1),
    "scope_setting": ("SCOPE", "planet"),
    "private_guard_setting": ("BLOCK_PRIVATE_ADDRESSES", "sometimes"),
    "spider_settings": ("DEDUP_EARLY_SKIP", "maybe"),
    "validate@crawler.pagebounds": ("LINKS_PER_PAGE_MAX", -1),
    "read_settings": ("BLOOM_ERROR_RATE", 2),
    "check_jobdir": ("JOBDIR_SNAPSHOT_SECONDS", -1),
    "settings_params": ("SIMHASH_MAX_DISTANCE", 99),
    "validate@crawler.storage.check": ("STORAGE_BATCH_SIZE", 0),
    "droplog_settings": ("DROPPED_LOG_RETRY_TIMES", -1),
    "validate@crawler.backends.cluster": ("DISTRIBUTED_PREFETCH", 0),
    "validate@crawler.backends.joincheck": ("SCHEDULER_QUEUE_KEY", "%(host)s:requests"),
    "retry_settings": ("REDIS_RETRY_SECONDS", -1),
    "namespace_setting": ("DEDUP_NAMESPACE", "crawl42:web"),
    "interval_setting": ("DEDUP_PROGRESS_INTERVAL", -3),
    "validate@crawler.pipelines.neardup": ("SIMHASH_SHINGLE", 9),
    "warc_options": ("WARC_MAX_SIZE", -1),
    "validate@crawler.middlewares.robots": ("ROBOTSTXT_RETRY_BACKOFF", 0),
    "validate@crawler.middlewares.retryafter": ("RETRY_AFTER_MAX_SECONDS", "soon"),
    "validate@crawler.middlewares.headerlimit": ("DOWNLOAD_MAX_HEADER_BYTES", -1),
}


def _key(check) -> str:
    name = check.__name__
    return f"{name}@{check.__module__}" if name == "validate" else name


def test_each_check_in_the_list_refuses_a_bad_value_of_its_own() -> None:
    checks = [_key(c) for c in settings_checks() if c.__name__ != "check_extras"]
    assert checks and sorted(checks) == sorted(BAD)  # a new check needs a case here
    for key in checks:
        name, value = BAD[key]
        with pytest.raises(SettingError) as info:
            check_settings(Settings({name: value}))
        assert info.value.name == name, key


def test_the_extras_check_is_in_the_list(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "redis", None)  # as if the redis extra were not installed
    with pytest.raises(MissingExtraError, match="redis"):
        check_settings(Settings({"DEDUP_BACKEND": "redis"}))


def test_good_settings_pass() -> None:
    from crawler.settings import base

    check_settings(Settings({n: getattr(base, n) for n in dir(base) if n.isupper()}))
