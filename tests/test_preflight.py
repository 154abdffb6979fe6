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

#: check name -> a setting it refuses (name, bad value)
BAD = {
    "check_scrapy_settings": ("DOWNLOAD_MAXSIZE", -1),
    "backend_name": ("DEDUP_BACKEND", "memcached"),
    "from_settings": ("URLNORM_SORT_QUERY", "maybe"),
    "validate@crawler.urls.linkrules": ("TRAP_MAX_PATH_DEPTH", 0),
    "validate@crawler.urls.traps": ("TRAP_PATH_MAX_QUERY_VARIANTS", -1),
    "scope_setting": ("SCOPE", "planet"),
    "private_guard_setting": ("BLOCK_PRIVATE_ADDRESSES", "sometimes"),
    "spider_settings": ("DEDUP_EARLY_SKIP", "maybe"),
    "validate@crawler.urls.pagebounds": ("LINKS_PER_PAGE_MAX", -1),
    "read_settings": ("BLOOM_ERROR_RATE", 2),
    "check_jobdir": ("JOBDIR_SNAPSHOT_SECONDS", -1),
    "settings_params": ("SIMHASH_MAX_DISTANCE", 99),
    "validate@crawler.storage.check": ("STORAGE_BATCH_SIZE", 0),
    "droplog_settings": ("DROPPED_LOG_RETRY_TIMES", -1),
    "validate@crawler.cluster.worker": ("DISTRIBUTED_PREFETCH", 0),
    "validate@crawler.cluster.joincheck": ("SCHEDULER_QUEUE_KEY", "%(host)s:requests"),
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
