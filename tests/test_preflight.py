"""crawler.commands.preflight: the settings checks are one explicit list, and each one runs.

Every check of :func:`settings_checks` is the function its component calls when it is built;
here each is shown to refuse a bad value of a setting it owns through :func:`check_settings`
(the pre-flight check), so no component's check can be left out silently.
"""

from __future__ import annotations

import subprocess

import pytest
from scrapy.settings import Settings

from crawler.commands.preflight import check_settings, settings_checks
from crawler.config import SettingError
from crawler.extras import MissingExtraError
from tests.conftest import ROOT, crawl_command

#: check name (its class for a ``from_settings``) -> a setting it refuses (name, bad value)
BAD = {
    "ScrapySettings": ("DOWNLOAD_MAXSIZE", -1),
    "BackendSettings": ("DEDUP_BACKEND", "memcached"),
    "UrlPolicy": ("URLNORM_SORT_QUERY", "maybe"),
    "DropNotes": ("URLNORM_DEBUG", "sometimes"),
    "TrapSettings": ("TRAP_PATH_MAX_QUERY_VARIANTS", -1),
    "ScopeSettings": ("SCOPE", "planet"),
    "SpiderSettings": ("DEDUP_EARLY_SKIP", "maybe"),
    "PageBounds": ("LINKS_PER_PAGE_MAX", -1),
    "BloomSettings": ("BLOOM_ERROR_RATE", 2),
    "JobdirSettings": ("JOBDIR_SNAPSHOT_SECONDS", -1),
    "StorageSettings": ("STORAGE_BATCH_SIZE", 0),
    "DropLogOptions": ("DROPPED_LOG_RETRY_TIMES", -1),
    "WorkerSettings": ("DISTRIBUTED_PREFETCH", 0),
    "StartListSettings": ("REDIS_START_URLS_BATCH_SIZE", 0),
    "QueueSettings": ("SCHEDULER_QUEUE_KEY", "%(host)s:requests"),
    "RedisSettings": ("REDIS_RETRY_SECONDS", -1),
    "NamespaceSettings": ("DEDUP_NAMESPACE", "crawl42:web"),
    "ProgressSettings": ("DEDUP_PROGRESS_INTERVAL", -3),
    "GCSettings": ("GC_GEN0_THRESHOLD", -1),
    "DeciderSettings": ("SIMHASH_MAX_DISTANCE", 99),
    "WarcOptions": ("WARC_MAX_SIZE", -1),
    "RobotsSettings": ("ROBOTSTXT_RETRY_BACKOFF", 0),
    "RetryAfterSettings": ("RETRY_AFTER_MAX_SECONDS", "soon"),
    "HeaderLimitSettings": ("DOWNLOAD_MAX_HEADER_BYTES", -1),
}
#: More bad values, each refused with its exact message by the check that owns the setting
#: (several settings share one check since the trap settings have one home).
MESSAGES = {
    ("TRAP_MAX_PATH_DEPTH", 0): "setting TRAP_MAX_PATH_DEPTH=0 is invalid: allowed an integer >= 1",
    ("URLLENGTH_LIMIT", -1): "setting URLLENGTH_LIMIT=-1 is invalid: allowed an integer >= 0",
    ("TRAP_DUPLICATE_HOPS", 17):
        "setting TRAP_DUPLICATE_HOPS=17 is invalid: allowed an integer in [0, 16]",
    ("TRAP_FOLLOW_LINKS_OF", "x"): "setting TRAP_FOLLOW_LINKS_OF='x' is invalid: allowed one of "
                                   "'kept', 'near_duplicates', 'all'",
    ("BLOCK_PRIVATE_ADDRESSES", "sometimes"): "setting BLOCK_PRIVATE_ADDRESSES='sometimes' is "
        "invalid: allowed True, False or auto (on unless a seed is private)",
    ("REDIS_TIMEOUT_SECONDS", 0): "setting REDIS_TIMEOUT_SECONDS=0 is invalid: allowed a number "
                                  "in [0.1, 3600]",
    ("DISTRIBUTED_SEED_WAIT_SECONDS", -1): "setting DISTRIBUTED_SEED_WAIT_SECONDS=-1 is invalid: "
                                           "allowed a number in [0, 3.1536e+08]",
    ("ROBOTSTXT_CACHE_HOSTS", -1): "setting ROBOTSTXT_CACHE_HOSTS=-1 is invalid: allowed an "
                                   "integer >= 0",
    ("GC_GEN0_THRESHOLD", "lots"): "setting GC_GEN0_THRESHOLD='lots' is invalid: allowed an "
                                   "integer >= 0",
    ("GC_FREEZE", "maybe"): "setting GC_FREEZE='maybe' is invalid: allowed True or False",
}  # fmt: skip


def _key(check) -> str:
    owner = getattr(check, "__self__", None)
    return owner.__name__ if isinstance(owner, type) else check.__name__


def test_each_check_in_the_list_refuses_a_bad_value_of_its_own() -> None:
    checks = [_key(c) for c in settings_checks()]
    assert checks and set(checks) <= set(BAD)  # a new check needs a case here
    assert len(checks) == len(set(checks))
    for key in checks:
        name, value = BAD[key]
        with pytest.raises(SettingError) as info:
            check_settings(Settings({name: value}))
        assert info.value.name == name, key
        with pytest.raises(SettingError) as alone:
            next(c for c in settings_checks() if _key(c) == key)(Settings({name: value}))
        assert str(alone.value) == str(info.value), key  # the check's own message, unchanged


@pytest.mark.parametrize(("setting", "message"), MESSAGES.items())
def test_bad_values_keep_their_exact_message(setting, message) -> None:
    with pytest.raises(SettingError) as info:
        check_settings(Settings(dict([setting])))
    assert str(info.value) == message


def test_every_check_is_the_from_settings_of_a_frozen_dataclass() -> None:
    """One shape: ``<Thing>Settings.from_settings`` bound to its class, returning that frozen
    dataclass (fields by name, never unpacked by position), accepting the default settings."""
    import dataclasses
    import inspect

    from crawler import defaults

    checks = settings_checks()
    default = Settings({n: getattr(defaults, n) for n in dir(defaults) if n.isupper()})
    for check in checks:
        owner = getattr(check, "__self__", None)
        assert inspect.ismethod(check) and isinstance(owner, type), check
        assert check.__name__ == "from_settings", check
        assert dataclasses.is_dataclass(owner) and owner.__dataclass_params__.frozen, owner
        made = check(default)
        assert type(made) is owner, owner
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, dataclasses.fields(owner)[0].name, None)


def test_the_extras_check_is_in_the_list(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "redis", None)  # as if the redis extra were not installed
    with pytest.raises(MissingExtraError, match="redis"):
        check_settings(Settings({"DEDUP_BACKEND": "redis"}))


def test_good_settings_pass() -> None:
    from crawler.settings import base

    check_settings(Settings({n: getattr(base, n) for n in dir(base) if n.isupper()}))


# --- misspelled settings, Scrapy's included (issue 26) ----------------------------------------


def test_a_typo_of_any_known_setting_is_refused_naming_the_setting_meant() -> None:
    from crawler.commands.preflight import UnknownSettingError, check_unknown_settings

    cases = {"DOWNLOAD_DELY": "DOWNLOAD_DELAY", "CONCURRENT_REQUEST": "CONCURRENT_REQUESTS",
             "ROBOTSTXT_OBAY": "ROBOTSTXT_OBEY", "download_delay": "DOWNLOAD_DELAY",
             "REDIS_START_URL_KEY": "REDIS_START_URLS_KEY"}
    for name, meant in cases.items():
        with pytest.raises(UnknownSettingError) as info:
            check_unknown_settings({name: "2"})
        assert str(info.value) == f"unknown setting {name}='2': did you mean {meant}?"


def test_a_mistyped_secret_is_not_echoed() -> None:
    from crawler.commands.preflight import UnknownSettingError, check_unknown_settings

    with pytest.raises(UnknownSettingError) as info:
        check_unknown_settings({"AWS_SECRET_ACESS_KEY": "hunter2"})
    assert str(info.value) == ("unknown setting AWS_SECRET_ACESS_KEY='***': "
                               "did you mean AWS_SECRET_ACCESS_KEY?")


def test_an_unknown_name_far_from_every_known_one_is_returned_not_refused() -> None:
    from crawler.commands.preflight import check_unknown_settings

    names = {"MYADDON_FOO": 1, "BENCH_STATS_FILE": "s.json", "SPLASH_URL": "http://x/",
             "DOWNLOAD_DELAY": 1}  # fmt: skip
    assert check_unknown_settings(names) == ["BENCH_STATS_FILE", "MYADDON_FOO", "SPLASH_URL"]


def test_nothing_the_project_or_scrapy_sets_is_unknown(monkeypatch) -> None:
    """Both profiles as a crawl reads them (the ``SCRAPY_*`` variables scrapyd sets included),
    with each command's own settings and the spiders' ``custom_settings``."""
    import importlib

    from scrapy.spiderloader import get_spider_loader
    from scrapy.utils.project import get_project_settings

    from crawler.commands import crawl, parse
    from crawler.commands.preflight import check_unknown_settings

    monkeypatch.setenv("SCRAPY_PROJECT", "dedup_crawler")  # as scrapyd runs a job
    for profile in ("crawler.settings", "crawler.settings.distributed"):
        monkeypatch.setenv("SCRAPY_SETTINGS_MODULE", profile)
        settings = get_project_settings()
        for command in (crawl.Command, parse.Command):
            settings.setdict(command.default_settings, priority="command")
        assert {"PROJECT", "SETTINGS_MODULE", "SIMHASH_MAX_DISTANCE"} <= set(settings)
        assert check_unknown_settings(settings) == [], profile
        module = importlib.import_module(profile)
        assert check_unknown_settings({n: getattr(module, n) for n in dir(module)
                                       if n.isupper()}) == []
    loader = get_spider_loader(settings)
    spiders = [loader.load(name) for name in loader.list()]
    assert spiders
    for spider in spiders:
        assert check_unknown_settings(spider.custom_settings or {}) == []


def _crawl(tmp_path, *settings: str, url: str = "http://127.0.0.1:1/"
           ) -> subprocess.CompletedProcess[str]:
    args = ["crawl", "web", "-a", f"urls={url}", "-s", "LOG_LEVEL=INFO",
            "-s", f"STORAGE_URL=sqlite:///{tmp_path / 'c.db'}"]
    for setting in settings:
        args += ["-s", setting]
    return subprocess.run(crawl_command(args), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize(("given", "meant"), [("DOWNLOAD_DELY", "DOWNLOAD_DELAY"),
                                              ("CONCURRENT_REQUEST", "CONCURRENT_REQUESTS"),
                                              ("SIMHASH_MAX_DISTANC", "SIMHASH_MAX_DISTANCE")])
def test_crawl_stops_on_a_typo_of_any_setting_before_anything_starts(tmp_path, given, meant):
    result = _crawl(tmp_path, f"{given}=2")
    assert result.returncode == 2
    assert result.stderr == f"error: unknown setting {given}='2': did you mean {meant}?\n"
    assert not (tmp_path / "c.db").exists()


@pytest.mark.slow
def test_crawl_warns_about_an_unknown_setting_that_is_no_typo_and_runs(tmp_path, demo_server):
    result = _crawl(tmp_path, "MYADDON_FOO=1", "BENCH_STATS_FILE=s.json",
                    "CLOSESPIDER_PAGECOUNT=3", url=demo_server.base_url + "/")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    warned = [line for line in result.stderr.splitlines()
              if "[crawler.commands.preflight] WARNING" in line]
    assert [line.split("WARNING: ")[1] for line in warned] == [
        f"Setting {name} is not one Scrapy, scrapy-redis or dedup-crawler reads, nor a typo of "
        "one: left to the add-on that reads it" for name in ("BENCH_STATS_FILE", "MYADDON_FOO")]
    assert "Spider closed (closespider_pagecount)" in result.stderr
