"""Secrets never printed (docs/security-and-limits.md, "Security"): the one masking rule, and
every output of a real crawl whose database URL carries a password in its user info and in its
query.

The shared PostgreSQL uses trust auth, so any password is accepted: the crawl below really
connects with both secrets in its URL, in a scratch schema dropped afterwards.
"""

from __future__ import annotations

import gzip
import html
import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from crawler.outputs.formats import (
    SECRET_PARAMS,
    SECRET_PARTS,
    is_masked,
    is_secret_param,
    mask_settings,
    mask_text,
    mask_url,
    unmask,
)
from tests.conftest import ROOT, CrawlRun, crawl_command, free_port, fresh_pg_schema, run_crawl
from tests.test_feeds import s3_server  # noqa: F401  (moto's S3 server, a fixture)

USER_PW = "S3cretPW1"
QUERY_PW = "QueryPW3"
SECRETS = (USER_PW, QUERY_PW)


# --- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "masked"), [
    ("postgresql+psycopg://postgres:S3cretPW1@127.0.0.1:5432/crawl",
     "postgresql+psycopg://postgres:***@127.0.0.1:5432/crawl"),
    ("postgresql://db/crawl?sslmode=require&password=QueryPW3",
     "postgresql://db/crawl?sslmode=require&password=***"),
    ("postgresql://u:a@db/c?PASSWORD=b;sslpassword=c&Api-Key=d&x_token=e#frag",
     "postgresql://u:***@db/c?PASSWORD=***;sslpassword=***&Api-Key=***&x_token=***#frag"),
    ("redis://:pw@127.0.0.1:6379/0?pass%77ord=q&db=1", "redis://:***@127.0.0.1:6379/0?pass%77ord=***&db=1"),
    ("s3://AKIA:secretkey@bucket/items.jsonl", "s3://AKIA:***@bucket/items.jsonl"),
    ("https://h/feed?X-Amz-Signature=abc&X-Amz-Credential=c&pwd=1&key=2&auth=3",
     "https://h/feed?X-Amz-Signature=***&X-Amz-Credential=***&pwd=***&key=***&auth=***"),
    ("postgresql://u:pa#ss@db/c", "postgresql://u:***@db/c"),  # what the driver reads as password
    ("postgresql://u@db/c?sslmode=require&application_name=x", None),  # nothing secret
    ("sqlite:///crawl.db", None),
    ("crawl.db", None),
    ("", None),
])
def test_mask_url_hides_userinfo_and_query_secrets(url: str, masked: str | None) -> None:
    assert mask_url(url) == (url if masked is None else masked)


def test_the_storage_engine_masks_by_the_same_rule() -> None:
    from crawler.storage.engine import mask_url as engine_mask

    url = f"postgresql+psycopg://postgres:{USER_PW}@127.0.0.1:5432/x?password={QUERY_PW}"
    assert engine_mask(url) == engine_mask(sa.make_url(url)) == mask_url(url)
    assert not any(s in engine_mask(sa.make_url(url)) for s in SECRETS)


@given(st.text(), st.text(min_size=1, alphabet=st.characters(blacklist_characters="@/?#&;")))
def test_mask_url_is_total_idempotent_and_hides_a_generated_secret(noise: str, secret: str) -> None:
    assert mask_url(mask_url(noise)) == mask_url(noise)
    mask_text(noise)  # never raises either
    secret = "Z" + secret  # never empty, never "***"
    url = f"postgresql://user:{secret}@host:5432/db?sslmode=require&Password={secret}"
    assert secret not in mask_url(url).replace("user", "").replace("host", "")


def test_secret_parameter_names() -> None:
    secret = ["password", "PASS", "passwd", "pwd", "token", "access_token", "secret",
              "client_secret", "key", "api_key", "apikey", "API-KEY", "access_key",
              "secret_key", "auth", "sslpassword", "X-Amz-Security-Token", "pass%77d"]
    plain = ["sslmode", "options", "application_name", "db", "page", "keyword", "author"]
    assert [n for n in secret if not is_secret_param(n)] == []
    assert [n for n in plain if is_secret_param(n)] == []


def test_the_manual_lists_the_secret_names_the_code_masks() -> None:
    """docs/security-and-limits.md names exactly the parameters :func:`mask_url` treats as
    secrets: the whole names, then the parts a name may contain."""
    page = " ".join((ROOT / "docs" / "security-and-limits.md").read_text().split())
    names, _, parts = page.split("is one of ", 1)[1].split(". Masked:", 1)[0].partition(
        ", or contains ")
    listed = set(re.findall(r"`([a-z_]+)(?:\(s\))?`", names))
    listed |= {n + "s" for n in re.findall(r"`([a-z_]+)\(s\)`", names)}
    assert listed == SECRET_PARAMS
    assert re.findall(r"`([a-z_]+)`", parts) == list(SECRET_PARTS)


def test_mask_text_and_mask_settings() -> None:
    line = f"cannot reach 'redis://:{USER_PW}@h:1/0' (or postgresql://u:{USER_PW}@h/db)"
    assert USER_PW not in mask_text(line) and "redis://:***@h:1/0" in mask_text(line)
    settings = {"STORAGE_URL": f"sqlite:///c.db?password={QUERY_PW}",
                "FEEDS": {f"s3://K:{USER_PW}@b/k.jsonl": {"format": "jsonlines"}},
                "AWS_SECRET_ACCESS_KEY": USER_PW, "DEDUP_AUTH_TOKEN": "", "SIMHASH_K": 3,
                "URLNORM_STRIP_PARAMS": ["utm_*", "token"], "SIMHASH_MIN_TOKENS": 20,
                "GITHUB_TOKEN": USER_PW}
    shown = json.dumps(mask_settings(settings))
    assert not any(s in shown for s in SECRETS)
    assert mask_settings(settings)["SIMHASH_K"] == 3
    assert mask_settings(settings)["URLNORM_STRIP_PARAMS"] == ["utm_*", "token"]
    assert mask_settings(settings)["DEDUP_AUTH_TOKEN"] == ""  # unset stays unset
    # a whole word of the name makes a secret: a count of tokens is not one (it was "***")
    assert mask_settings(settings)["SIMHASH_MIN_TOKENS"] == 20
    assert mask_settings(settings)["GITHUB_TOKEN"] == "***"


def test_a_masked_url_is_resolved_only_from_a_url_masking_to_it() -> None:
    real = f"postgresql://u:{USER_PW}@db/crawl?password={QUERY_PW}"
    masked = mask_url(real)
    assert is_masked(masked) and not is_masked(real) and not is_masked("sqlite:///***.db")
    other_server = real.replace("@db/", "@evil/")
    assert unmask(masked, [None, "", other_server, real]) == real
    assert unmask(masked, [other_server]) is None


# --- a real crawl -----------------------------------------------------------------------------


def _scrapy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(crawl_command(list(args)), cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})


def _assert_no_secret(where: str, text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where} prints {leaked}: {text[:3000]}"


@pytest.fixture(scope="module")
def secret_db(pg_url: str) -> Any:
    with fresh_pg_schema(pg_url, "test_secrets", password=USER_PW) as url:
        yield f"{url}&password={QUERY_PW}"  # the schema URL has a query (options=...) already


@pytest.fixture(scope="module")
def secret_crawl(secret_db: str, demo_server: Any,
                 tmp_path_factory: pytest.TempPathFactory) -> CrawlRun:
    workdir = tmp_path_factory.mktemp("secrets")
    feed = workdir / "pages.jsonl"
    run = run_crawl(workdir, urls=[demo_server.base_url + "/"],
                    settings={"STORAGE_URL": secret_db, "WARC_OUTPUT": f"{workdir}/warc/",
                              # Scrapy logs a feed's URI as given; a file URI's query is
                              # not part of the file name
                              "FEEDS": json.dumps({f"{feed.as_uri()}?token={QUERY_PW}":
                                                   {"format": "jsonlines"}})})
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def test_the_crawl_prints_and_stores_no_secret(secret_crawl: CrawlRun, secret_db: str) -> None:
    assert "Storing pages in postgresql+psycopg://postgres:***@" in secret_crawl.stderr
    assert "pages.jsonl?token=***" in secret_crawl.stderr  # "Stored jsonlines feed ... in: "
    _assert_no_secret("the crawl log", secret_crawl.stdout + secret_crawl.stderr)
    _assert_no_secret("the stats file", secret_crawl.stats_path.read_text())
    _assert_no_secret("the drop log", secret_crawl.dropped_log.read_text())
    warcs = sorted((secret_crawl.workdir / "warc").glob("*.warc.gz"))
    assert warcs, "the crawl wrote WARC files"
    warc_text = "".join(gzip.decompress(p.read_bytes()).decode("utf-8", "replace") for p in warcs)
    assert "dedup-settings" in warc_text and "postgres:***@" in warc_text  # warcinfo record
    _assert_no_secret("the WARC files", warc_text)
    feed = (secret_crawl.workdir / "pages.jsonl").read_text()
    assert feed.count("\n") >= 5, "the feed holds the kept pages"
    _assert_no_secret("the feed", feed)
    engine = sa.create_engine(secret_db)
    with engine.connect() as conn:
        stored = [row[0] for row in conn.execute(sa.text("SELECT settings FROM crawls"))]
        assert conn.execute(sa.text("SELECT count(*) FROM dropped")).scalar_one() > 0
    engine.dispose()
    stored = [json.loads(s) if isinstance(s, str) else s for s in stored]  # JSON on PostgreSQL
    assert stored and all(s["STORAGE_URL"].startswith("postgresql") for s in stored)
    _assert_no_secret("crawls.settings", json.dumps(stored))


@pytest.fixture(scope="module")
def reports(secret_crawl: CrawlRun, secret_db: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for fmt in ("html", "json"):
        path = secret_crawl.workdir / f"report.{fmt}"
        proc = _scrapy("dedupreport", "--db", secret_db, "-o", str(path), "--format", fmt)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _assert_no_secret(f"dedupreport --format {fmt} (its terminal output)",
                          proc.stdout + proc.stderr)
        out[fmt] = path.read_text()
    return out


def _commands(report: dict[str, Any]) -> list[str]:
    dec = report["decisions"]
    listed = dec["near"] + [c for g in dec["exact_groups"] for c in g["copies"]]
    return [d["command"] for d in listed] + [m["command"] for m in report["near_misses"]["listed"]]


def test_the_report_names_the_database_without_its_secrets(reports: dict[str, str]) -> None:
    _assert_no_secret("the HTML report", reports["html"])
    _assert_no_secret("the JSON report", reports["json"])
    data = json.loads(reports["json"])
    assert data["database"].startswith("postgresql+psycopg://postgres:***@127.0.0.1")
    assert "password=***" in data["database"]
    commands = _commands(data)
    assert commands and all("--db 'postgresql+psycopg://postgres:***@" in c for c in commands)
    assert commands[0] in html.unescape(reports["html"])  # the HTML shows the same commands
    assert data["decisions"]["db_masked"] is True and 'id="masked-db"' in reports["html"]


def test_a_command_copied_from_the_report_works(reports: dict[str, str],
                                                secret_db: str) -> None:
    command = _commands(json.loads(reports["json"]))[0]
    argv = shlex.split(command)
    assert argv[:2] == ["scrapy", "dropped"] and "--explain" in argv
    url = argv[argv.index("--explain") + 1]
    # where the crawl's settings are (the real URL in STORAGE_URL), the command runs as printed
    for how in ({"DEDUP_STORAGE_URL": secret_db}, None):
        args = argv[1:] if how else [*argv[1:], "-s", f"STORAGE_URL={secret_db}"]
        proc = _scrapy(*args, env=how)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert url in proc.stdout and "Distance:" in proc.stdout
        _assert_no_secret("scrapy dropped --explain", proc.stdout + proc.stderr)
    # elsewhere: one line saying where the real URL goes, never a traceback, never a guess
    other = secret_db.replace(USER_PW, "other").replace("/test?", "/postgres?")
    proc = _scrapy(*argv[1:], env={"DEDUP_STORAGE_URL": other})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "hides its password (***)" in proc.stderr and "DEDUP_STORAGE_URL" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_review_commands_print_no_secret(secret_crawl: CrawlRun, secret_db: str) -> None:
    masked = mask_url(secret_db)
    runs = {
        "dropped": _scrapy("dropped", "--db", secret_db, "--format", "json"),
        "dropped (masked --db)": _scrapy("dropped", "--db", masked,
                                         env={"DEDUP_STORAGE_URL": secret_db}),
        "crawldiff": _scrapy("crawldiff", "latest", "latest", "--db", secret_db),
        "crawldiff --json": _scrapy("crawldiff", "latest", "latest", "--db", masked, "--json",
                                    env={"DEDUP_STORAGE_URL": secret_db}),
    }
    for name, proc in runs.items():
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
        _assert_no_secret(f"scrapy {name}", proc.stdout + proc.stderr)
    assert "postgres:***@" in runs["crawldiff"].stdout  # the database named, masked


def test_errors_about_a_database_print_no_secret(tmp_path: Path, pg_url: str) -> None:
    port = free_port()
    dead = (f"postgresql+psycopg://postgres:{USER_PW}@127.0.0.1:{port}/test"
            f"?connect_timeout=2&password={QUERY_PW}")
    crawl = run_crawl(tmp_path / "run", urls=["http://127.0.0.1:9/"],
                      settings={"STORAGE_URL": dead})
    assert crawl.returncode == 1, crawl.stderr[-3000:]
    assert "postgres:***@127.0.0.1" in crawl.stderr and "password=***" in crawl.stderr
    _assert_no_secret("the pre-flight error", crawl.stdout + crawl.stderr)
    redis = run_crawl(tmp_path / "redis", urls=["http://127.0.0.1:9/"],
                      settings={"DEDUP_BACKEND": "redis",
                                "REDIS_URL": f"redis://:{USER_PW}@127.0.0.1:{port}/0"
                                             f"?password={QUERY_PW}&socket_timeout=2"})
    assert redis.returncode != 0 and "redis://:***@127.0.0.1" in redis.stderr, redis.stderr
    _assert_no_secret("the Redis pre-flight error", redis.stdout + redis.stderr)
    for args in (["dropped", "--db", dead], ["crawldiff", "1", "2", "--db", dead],
                 ["settle", "--db", dead], ["dedupreport", "--db", dead, "-o", "-"],
                 ["dropped", "--db", dead.replace("postgresql+psycopg", "nosuch")]):
        proc = _scrapy(*args)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        _assert_no_secret(f"scrapy {args[0]} on a dead server", proc.stdout + proc.stderr)


def test_an_s3_feed_with_keys_in_its_uri_is_logged_masked(crawl: Any, demo_server: Any,
                                                           s3_server: str) -> None:  # noqa: F811
    from tests.test_feeds import _s3

    _s3(s3_server).create_bucket(Bucket="pages")
    uri = f"s3://AKIATEST:{USER_PW}@pages/demo.jsonl?X-Amz-Security-Token={QUERY_PW}"
    run = crawl(urls=[demo_server.base_url + "/"],
                settings={"AWS_ENDPOINT_URL": s3_server, "AWS_REGION_NAME": "us-east-1",
                          "FEEDS": json.dumps({uri: {"format": "jsonlines"}})})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "feed (" in run.stderr and "in: s3://AKIATEST:***@pages/demo.jsonl" in run.stderr
    _assert_no_secret("a crawl exporting to S3", run.stdout + run.stderr)
    body = _s3(s3_server).get_object(Bucket="pages", Key="demo.jsonl")["Body"].read()
    assert body.count(b"\n") >= 5  # the keys in the URI were used
