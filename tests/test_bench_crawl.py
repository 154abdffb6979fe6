"""``bench.crawl``'s options: ``--variant`` (another checkout or environment of one worker, side
by side with the others) parsed, refused in one line when malformed, and placed among the
configurations the run alternates; the floor; ``--together`` (a round's crawls at once, one
CPU each, swapped each round) and the round-by-round ratio."""

from __future__ import annotations

import os
from typing import Any

import pytest

from bench.crawl import parse_args, parse_variant, scaleout_configs
from tests.conftest import ROOT


def test_a_variant_names_a_tree_and_environment() -> None:
    name, spec = parse_variant(f"before:tree={ROOT},env=PYTHONPATH=/tmp/x,env=A=b=c")
    assert name == "1 worker before"
    assert spec == {"tree": str(ROOT.resolve()), "env": {"PYTHONPATH": "/tmp/x", "A": "b=c"}}
    expected = ("1 worker hiredis", {"tree": None, "env": {"X": "1"}})
    assert parse_variant("hiredis:env=X=1") == expected


@pytest.mark.parametrize("text, says", [
    ("nolabel", "expected LABEL:"),
    (":env=X=1", "expected LABEL:"),
    ("old:tree=/nonexistent/tree", "no scrapy.cfg"),
    ("old:colour=blue", "expected tree=PATH or env=NAME=VALUE"),
    ("old:env=NOVALUE", "expected tree=PATH or env=NAME=VALUE"),
])  # fmt: skip
def test_a_malformed_variant_is_refused_in_one_line(capsys, text: str, says: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--workers", "2", "--variant", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: --variant:" in err and says in err


def test_variants_run_between_one_worker_and_the_many() -> None:
    args = parse_args(["--workers", "2", "--variant", "a:env=X=1", "--variant", "b:env=Y=2"])
    assert scaleout_configs(args) == ["local", "1 worker", "1 worker a", "1 worker b",
                                      "2 workers"]  # fmt: skip
    one = parse_args(["--workers", "1", "--variant", "a:env=X=1"])
    assert scaleout_configs(one) == ["local", "1 worker", "1 worker a"]


@pytest.mark.parametrize("argv", [["--redis-delay", "1"],
                                  ["--workers", "1", "--redis-delay", "-1"]])
def test_a_redis_delay_needs_workers_and_no_negative_delay(capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: --redis-delay" in err and "with --workers" in err


@pytest.mark.redis
def test_the_delay_proxy_holds_each_request_and_forwards_it_unchanged(redis_url) -> None:
    """``bench.delayproxy``: the real Redis behind it answers as directly, each round trip
    ``delay`` later (what ``--redis-delay`` puts between the workers and Redis)."""
    import redis

    from bench.delayproxy import delayed, round_trip_ms

    direct = round_trip_ms(redis_url, tries=20)
    with delayed(redis_url, 0.005) as url:
        assert url != redis_url and url.endswith(redis_url.rsplit("/", 1)[1])
        client = redis.Redis.from_url(url)
        try:
            key = "test:delayproxy"
            client.set(key, b"x" * 100_000)  # more than one chunk each way
            assert client.get(key) == b"x" * 100_000
            assert redis.Redis.from_url(redis_url).get(key) == b"x" * 100_000  # the same server
            client.delete(key)
        finally:
            client.close()
        proxied = round_trip_ms(url, tries=20)
    assert proxied >= 5.0 > direct


@pytest.mark.parametrize("argv", [["--floor", "--workers", "1"], ["--floor", "--site", "demo"]])
def test_the_floor_is_for_the_link_heavy_site_in_one_process(capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: --floor:" in err


def test_the_floor_fetches_what_the_crawlers_fetch_and_costs_less() -> None:
    """``--floor``: the bare spider fetches every page of the site once (the home page and
    ``/p/0`` ... as ours does, less our soft-404 probe), builds no item, and costs less CPU per
    page than our crawl of the same site; the summary gives each crawler's CPU per page above
    it."""
    from bench.crawl import build_site, crawl_once, kinds_of, summarize, table
    from crawler.sitegen.server import SiteServer

    args = parse_args(["--pages", "80", "--links", "10", "--floor", "--runs", "1"])
    assert kinds_of(args) == ("ours", "stock", "floor")
    site, _ = build_site(args)
    with SiteServer(site) as server:
        runs = [crawl_once(kind, server, None, args) for kind in ("floor", "ours")]
    floor, ours = runs
    assert floor["pages_fetched"] == 82  # + robots.txt
    assert ours["pages_fetched"] == 83  # + its soft-404 probe of the host
    assert floor["unique_pages"] == ours["unique_pages"] == 81
    assert floor["duplicate_fetches"] == 0 and floor["items"] == 0 and ours["items"] == 81
    assert 0 < floor["cpu_ms_per_page"] < ours["cpu_ms_per_page"]
    summary = summarize([*runs, {**ours, "kind": "stock"}])
    above = summary["cpu_ms_per_page_above_floor"]
    assert above["ours"] == pytest.approx(ours["cpu_ms_per_page"] - floor["cpu_ms_per_page"])
    assert "ours above it" in table("t", summary)


def test_a_variant_crawls_from_its_own_tree_beside_ours(tmp_path) -> None:
    """``--variant LABEL:tree=PATH,env=...`` in one-process mode: ``ours LABEL`` crawls the
    same site from that checkout with its environment (here a tree whose extra settings module,
    named by the environment, stops the crawl after 5 responses: it exists only there), and
    the summary and table set ours beside it; ``--no-stock`` leaves stock out."""
    from bench.crawl import build_site, crawl_once, kinds_of, summarize, table
    from crawler.sitegen.server import SiteServer

    tree = tmp_path / "before"
    (tree / "settings").mkdir(parents=True)
    for name in ("crawler", "bench"):
        (tree / name).symlink_to(ROOT / name)
    (tree / "scrapy.cfg").write_text((ROOT / "scrapy.cfg").read_text())
    for name in ("__init__.py", "base.py"):
        (tree / "settings" / name).write_text((ROOT / "settings" / name).read_text())
    (tree / "settings" / "small.py").write_text(
        "from crawler.settings import *  # noqa: F403\nCLOSESPIDER_PAGECOUNT = 5\n")
    args = parse_args(["--pages", "80", "--links", "10", "--runs", "1", "--no-stock",
                       "--variant", f"small:tree={tree},env=SCRAPY_SETTINGS_MODULE=settings.small"])
    assert kinds_of(args) == ("ours", "ours small")
    site, _ = build_site(args)
    with SiteServer(site) as server:
        runs = [crawl_once(kind, server, None, args) for kind in kinds_of(args)]
    ours, small = runs
    assert ours["kind"] == "ours" and small["kind"] == "ours small"
    assert ours["unique_pages"] == 81
    assert 5 <= small["pages_fetched"] < 40  # closed by the tree's own settings module
    summary = summarize(runs)
    assert "stock" not in summary and "ratio_ours_over_stock" not in summary
    ratio = summary["ratio_ours_over_variant"]["ours small"]
    assert ratio["cpu_ms_per_page_median"] == pytest.approx(
        ours["cpu_ms_per_page"] / small["cpu_ms_per_page"])
    text = table("t", summary)
    assert "ours/small" in text and "stock" not in text


def test_ours_over_a_variant_is_taken_round_by_round_too() -> None:
    """The paired ratio: ours over the variant within each round of the alternation (the two
    crawls minutes apart), its median beside the ratio of the medians, which a machine that
    drifts within the run moves (here the rounds disagree, and the two figures do)."""
    from bench.crawl import summarize, table

    def run(kind: str, i: int, cpu: float) -> dict[str, Any]:
        return {"kind": kind, "run": i, "cpu_ms_per_page": cpu, "pages_per_s": 100.0,
                "peak_rss_mib": 100.0, "rss_open_mib": 50.0, "pages_fetched": 10,
                "unique_pages": 10, "duplicate_fetches": 0}

    pairs = [(3.0, 4.0), (3.0, 8.0), (9.0, 9.0)]
    runs = [r for i, (a, b) in enumerate(pairs) for r in (run("ours", i, a),
                                                          run("ours before", i, b))]
    ratio = summarize(runs)["ratio_ours_over_variant"]["ours before"]
    assert ratio["cpu_ms_per_page_paired"] == [0.75, 0.375, 1.0]
    assert ratio["cpu_ms_per_page_paired_median"] == pytest.approx(0.75)
    assert ratio["cpu_ms_per_page_median"] == pytest.approx(3.0 / 8.0)
    assert "  run by run" in table("t", summarize(runs))
    as_stock = [{**r, "kind": "stock"} if r["kind"] != "ours" else r for r in runs]
    assert "run by run" not in table("t", summarize(as_stock))



@pytest.mark.parametrize(("argv", "says"), [
    (["--together", "--floor"], "--together runs 2 to 2 crawlers at once (one per CPU), got 3"),
    (["--together", "--no-stock"], "got 1 (ours)"),
    (["--together", "--workers", "1"], "--together: one-process mode"),
    (["--together", "--profile"], "--together: one-process mode"),
])  # fmt: skip
def test_together_takes_one_crawler_per_cpu(capsys, monkeypatch, argv: list[str],
                                           says: str) -> None:  # fmt: skip
    monkeypatch.setattr("bench.crawl.together_cpus", lambda: [0, 1])
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert says in err


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--together needs 2 CPUs")
def test_together_runs_a_pair_at_once_on_two_cpus_swapped_each_round(tmp_path) -> None:
    """``--together``: the two crawls of a round overlap in time, each pinned to its own CPU,
    the CPUs swapped the next round; each crawls the whole site from its own server (no
    duplicate fetch: the servers do not mix their counts), and the rounds pair up."""
    from bench.crawl import build_site, paired, together_cpus, together_round
    from crawler.sitegen.server import SiteServer

    tree = tmp_path / "same"
    tree.mkdir()
    for name in ("crawler", "bench", "settings", "scrapy.cfg"):
        (tree / name).symlink_to(ROOT / name)
    args = parse_args(["--pages", "150", "--links", "10", "--runs", "2", "--no-stock",
                       "--together", "--variant", f"same:tree={tree}"])  # fmt: skip
    site, _ = build_site(args)
    servers = [SiteServer(site).start() for _ in range(2)]
    try:
        rounds = [together_round(i, ("ours", "ours same"), servers, args) for i in range(2)]
    finally:
        for server in servers:
            server.stop()
    cpus = together_cpus()
    assert len(rounds) == 2
    for i, (ours, same) in enumerate(rounds):
        assert (ours["kind"], same["kind"]) == ("ours", "ours same")
        assert (ours["cpu"], same["cpu"]) == (cpus[i % len(cpus)], cpus[(i + 1) % len(cpus)])
        assert ours["started_at"] < same["exited_at"] and same["started_at"] < ours["exited_at"]
        for record in (ours, same):
            assert record["unique_pages"] == 151 and record["duplicate_fetches"] == 0
    runs = [{**r, "run": i} for i, pair in enumerate(rounds) for r in pair]
    ratios = paired(runs, "ours same")["cpu_ms_per_page_paired"]
    assert len(ratios) == 2 and all(0.5 < x < 2 for x in ratios)


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="Linux schedstat")
def test_the_reactor_time_splits_its_span_into_cpu_idle_and_the_rest() -> None:
    """``ReactorTime`` on a running loop: a spin of ~0.15 s reads as CPU, a 0.15 s sleep on
    the loop as idle in select, a 0.15 s blocking sleep as the rest; the parts add up to the
    span, and the selector's own method is back afterwards."""
    import asyncio
    import time

    from bench.crawl import ReactorTime

    async def run() -> tuple[dict[str, float], object, object]:
        selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        own = selector.select
        probe = ReactorTime()
        probe.start()
        assert selector.select is not own
        end = time.thread_time() + 0.15
        while time.thread_time() < end:  # bounded: 0.15 s of this thread's CPU
            pass
        await asyncio.sleep(0.15)
        time.sleep(0.15)  # blocking, off the loop and off the CPU
        parts = probe.stop()
        return parts, selector.select, own

    parts, after, own = asyncio.run(run())
    assert after == own
    assert parts["cpu_s"] >= 0.14 and parts["system_s"] <= parts["cpu_s"]
    assert 0.14 <= parts["idle_s"] < 0.4 and parts["turns"] >= 1
    assert 0.12 <= parts["rest_s"] < 0.4
    assert parts["span_s"] == pytest.approx(parts["cpu_s"] + parts["runq_s"] + parts["idle_s"]
                                            + parts["rest_s"], abs=0.002)  # fmt: skip
