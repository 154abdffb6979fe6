"""``scrapy demo``: crawl the built-in demo site and say what the dedup did.

Starts :func:`crawler.sitegen.demo_site` on 127.0.0.1 (ephemeral port), runs
``scrapy crawl web -a urls=http://localhost:PORT/`` in a subprocess from the project root with the
project's own settings — only ``DOWNLOAD_DELAY=0`` and AutoThrottle off, as a local site needs —
plus any ``-s NAME=VALUE`` given to ``scrapy demo``, and writes into ``--out`` (default ``demo/``):

* ``crawl.db`` — the SQLite crawl database (``STORAGE_URL``);
* ``dropped.jsonl`` — the drop log (``DROPPED_LOG``);
* ``stats.json`` — the final Scrapy stats (``STATS_FILE``);
* ``crawl.log`` — the crawl's log (``LOG_FILE``).

``scrapy demo --serve`` crawls nothing: it serves the demo site on 127.0.0.1 (``--port``, else
an ephemeral one) until Ctrl-C, writes its root URL to ``--out``/``seeds.txt`` and prints the
commands to crawl it with the distributed profile from other terminals (seedless workers that
wait, then the ``redis-cli lpush`` that starts them; or the seeds file). Ctrl-C stops it with
one line, exit 0.

It runs from a checkout only: the site generator (``crawler/sitegen``) is not in the wheel, and
without it the command prints one line and exits 2.

Those four files are deleted first unless ``--keep`` is given (then the crawl adds to them and
the Bloom/SimHash state of earlier runs applies as ``SIMHASH_PERSIST`` says). Then it prints the
summary (pages fetched, stored, duplicate URLs filtered, pages dropped by reason, next to what the
site really contains) and the commands to review the result. Exit status: the crawl's own (0 on
success).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.commands.console import with_safe_output

if TYPE_CHECKING:
    import argparse

    from crawler.sitegen import Site
    from crawler.sitegen.server import SiteServer

OUTPUTS = (
    "crawl.db", "crawl.db-wal", "crawl.db-shm", "dropped.jsonl", "stats.json", "crawl.log",
    "site.json",
)  # fmt: skip
LOCAL_SITE_SETTINGS = {"DOWNLOAD_DELAY": "0", "AUTOTHROTTLE_ENABLED": "False"}
CRAWL_TIMEOUT = 600  # seconds; the demo crawl takes a few
NO_SITEGEN = ("scrapy demo needs a checkout of dedup-crawler: its demo site generator "
              "(crawler/sitegen) is not part of the installed package")


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--out DIR] [--keep] [--seed N] [--port N] [--serve]"

    def short_desc(self) -> str:
        return "Crawl the built-in demo site (duplicates included) and summarize the dedup"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        group = parser.add_argument_group("Demo")
        group.add_argument("--out", default="demo", help="output directory (default: demo)")
        group.add_argument("--keep", action="store_true", help="keep earlier results in --out")
        group.add_argument("--seed", type=int, default=0, help="demo site seed (default: 0)")
        group.add_argument("--port", type=int, default=None,
                           help="serve the site on this port (default: ephemeral; with --keep "
                           "the port of the previous run, so its URLs stay the same)")  # fmt: skip
        group.add_argument("--serve", action="store_true",
                           help="only serve the site until Ctrl-C, with the commands to crawl "
                           "it with the distributed profile from other terminals")  # fmt: skip

    @with_safe_output
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError(f"scrapy demo takes no arguments, got {' '.join(args)!r}")
        # Imported here: Scrapy imports every project command for every `scrapy` invocation.
        try:
            from crawler.sitegen import demo_site
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("crawler.sitegen"):
                raise
            print(f"error: {NO_SITEGEN}", file=sys.stderr)
            self.exitcode = 2
            return

        out = Path(opts.out).resolve()
        if opts.serve:
            self.exitcode = serve(demo_site(opts.seed), out, opts)
            return
        try:
            prepare_output(out, keep=opts.keep)
        except OSError as exc:
            raise UsageError(
                f"--out {opts.out}: cannot use it as the demo directory ({exc})"
            ) from None
        site = demo_site(opts.seed)
        with start_server(site, out, opts) as server:
            print(f"Demo site: {len(site.canonical_pages)} pages at {server.base_url}/")
            print(f"Crawling it into {display(out)}/ (log: {display(out / 'crawl.log')}) ...")
            sys.stdout.flush()
            code = run_crawl(server.base_url + "/", out, list(opts.set or []))
            fetched = sum(server.hits.values())
        if code != 0:
            print(f"The crawl failed (exit {code}); see {display(out / 'crawl.log')}.")
            self.exitcode = code
            return
        # Without stats.json the database and the drop log still tell most of the story.
        print(summary(site, read_json(out / "stats.json") or {}, out, fetched))


def start_server(site: Site, out: Path, opts: argparse.Namespace) -> SiteServer:
    """Serve the site; with ``--keep``, on the previous run's port when it is free."""
    import json

    from crawler.sitegen.server import SiteServer

    port = opts.port
    if port is None and opts.keep:
        port = (read_json(out / "site.json") or {}).get("port")
    try:
        server = SiteServer(site, port=int(port or 0)).start()
    except OSError as exc:
        if opts.port is not None:
            raise UsageError(
                f"--port {opts.port}: cannot serve the demo site there ({exc})"
            ) from None
        print(f"Port {port} of the previous run is busy: this run's URLs differ from it.")
        server = SiteServer(site).start()
    (out / "site.json").write_text(json.dumps({"port": server.port, "seed": opts.seed}) + "\n")
    return server


def serve(site: Site, out: Path, opts: argparse.Namespace) -> int:
    """``--serve``: the site until Ctrl-C, the distributed crawl's commands printed."""
    import time

    from crawler.sitegen.server import SiteServer

    try:
        out.mkdir(parents=True, exist_ok=True)
        server = SiteServer(site, port=int(opts.port or 0)).start()
    except OSError as exc:
        raise UsageError(f"--serve: cannot serve the demo site ({exc}); try another --port "
                         "or --out") from None
    try:
        seeds = out / "seeds.txt"
        seeds.write_text(server.base_url + "/\n", encoding="utf-8")
        try:  # a Ctrl-C while the banner is still being written stops as cleanly
            print(serve_banner(site, server.base_url, seeds), flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print(f"Stopped serving the demo site ({sum(server.hits.values())} requests "
                  "answered).", flush=True)
    finally:
        server.stop()
    return 0


def serve_banner(site: Site, base_url: str, seeds: Path) -> str:
    """What ``--serve`` prints: the site's URL and the commands of a distributed crawl of it."""
    import uuid

    from crawler.cluster.startlist import redis_cli

    namespace = f"demo-{uuid.uuid4().hex[:6]}"  # a finished namespace is not crawled again
    redis = redis_cli(os.environ.get("DEDUP_REDIS_URL", "redis://127.0.0.1:6379/0"))
    local = " ".join(f"-s {name}={value}" for name, value in LOCAL_SITE_SETTINGS.items())
    return "\n".join([
        f"Demo site: {len(site.canonical_pages)} pages at {base_url}/ (seeds file: "
        f"{display(seeds)})",
        f"Crawl it in one process:  scrapy crawl web -a seeds={display(seeds)} {local}",
        "or with the distributed profile (docs/scale-out.md; Redis and PostgreSQL "
        "running), in two or more other terminals:",
        f"  export SCRAPY_SETTINGS_MODULE=crawler.settings.distributed DEDUP_NAMESPACE={namespace}",
        f"  scrapy crawl web {local}    # each worker waits for seeds",
        f"then, from any terminal:  {redis} lpush {namespace}:web:start_urls {base_url}/",
        f"(or start every worker with -a seeds={display(seeds)} instead)",
        "Serving until Ctrl-C.",
    ])


def prepare_output(out: Path, keep: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if not keep:
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)


def crawl_args(base_url: str, out: Path, extra: list[str] | None = None) -> list[str]:
    """The ``scrapy crawl web`` command line; ``extra`` (``NAME=VALUE``, from ``-s``) wins."""
    settings = {
        **LOCAL_SITE_SETTINGS,
        "STORAGE_URL": f"sqlite:///{out / 'crawl.db'}",
        "DROPPED_LOG": str(out / "dropped.jsonl"),
        "STATS_FILE": str(out / "stats.json"),
        "LOG_FILE": str(out / "crawl.log"),
    }
    args = [sys.executable, "-m", "scrapy", "crawl", "web", "-a", f"urls={base_url}"]
    for name, value in settings.items():
        args += ["-s", f"{name}={value}"]
    for item in extra or []:
        args += ["-s", item]
    return args


def run_crawl(base_url: str, out: Path, extra: list[str] | None = None) -> int:
    """Run the crawl from the project root; its log goes to a file, its messages to our stderr
    (through it, so they are escaped like all the demo prints)."""
    import subprocess

    from scrapy.utils.conf import closest_scrapy_cfg

    root = Path(closest_scrapy_cfg()).parent
    try:
        proc = subprocess.run(crawl_args(base_url, out, extra), cwd=root, env=dict(os.environ),
                              timeout=CRAWL_TIMEOUT, check=False, stderr=subprocess.PIPE,
                              text=True, errors="replace")  # fmt: skip
    except subprocess.TimeoutExpired:
        print(f"The crawl did not finish in {CRAWL_TIMEOUT} s.", file=sys.stderr)
        return 1
    sys.stderr.write(proc.stderr)
    return proc.returncode


def read_json(path: Path) -> dict[str, Any] | None:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def count_documents(db: Path) -> int | None:
    """Rows of ``documents`` in the crawl database, or ``None`` if there is none to read.

    Opened read-write (``mode=rw``: never creates the file) and closed before returning: the
    database is in WAL mode, and SQLite removes ``crawl.db-wal`` and ``crawl.db-shm`` when the
    last connection closes, unless that connection is read-only (``mode=ro`` left both behind).
    """
    import sqlite3
    from contextlib import closing

    if not db.exists():
        return None
    try:
        with closing(sqlite3.connect(db.as_uri() + "?mode=rw", uri=True)) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
    except sqlite3.Error:
        return None


def drops_by_reason(log: Path, crawl_id: object = None) -> dict[str, int]:
    """Count the dropped pages per reason as the drop log replays (each page's last line: a
    repointed drop counts once, a page stored again not at all), of one crawl if ``crawl_id``
    is given. Unreadable lines are skipped."""
    import json

    from crawler.outputs.droplog import replay_drop_log

    if not log.exists():
        return {}
    records = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "url" in record:
            records.append(record)
    counts: dict[str, int] = {}
    for (crawl, _), record in replay_drop_log(records).items():
        if crawl_id is None or crawl == crawl_id:
            reason = str(record.get("reason", "?"))
            counts[reason] = counts.get(reason, 0) + 1
    return counts


def display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _stat(stats: dict[str, Any], *names: str) -> int:
    return sum(int(stats.get(name) or 0) for name in names)


def _family(stats: dict[str, Any], word: str) -> int:
    """Total of the stats whose key has the segment ``word``, counting each family once.

    ``urlnorm/trap`` and ``urlnorm/trap/segment_repeat`` are one count, not two: only keys with
    no shorter matching key as a prefix are added up.
    """
    keys = [k for k in stats if word in k.split("/")]
    top = [k for k in keys if not any(k != o and k.startswith(o + "/") for o in keys)]
    return sum(int(stats[k] or 0) for k in top)


def also(stats: dict[str, Any]) -> str:
    """The other things the crawl skipped, as far as its stats count them (zeros left out)."""
    parts = [
        ("robots.txt", _stat(stats, "robotstxt/forbidden")),
        ("trap links", _family(stats, "trap")),
        ("off-site links", _stat(stats, "offsite/filtered", "dedup/links_offsite")),
        ("non-http links", _stat(stats, "dedup/links_not_http")),
        ("404s", _stat(stats, "downloader/response_status_count/404")),
    ]
    return ", ".join(f"{name} {count}" for name, count in parts if count) or "nothing else"


def stored_note(site: Site, stats: dict[str, Any], stored: object, in_db: int | None) -> str:
    """What the "pages stored" count holds: the distinct pages, plus binary bodies.

    A binary body served as text/html is stored by design (flagged, without text, never
    fingerprinted), so it is one row more than the site's distinct pages: say so.
    """
    note = f"the site has {len(site.distinct_pages)} distinct pages"
    binary = _stat(stats, "dedup/binary")
    if binary:
        bodies = "body" if binary == 1 else "bodies"
        note += f", plus {binary} binary {bodies} served as text/html, stored without text"
    if in_db not in (None, stored):
        note += f"; the database holds {in_db}"
    return note


def summary(site: Site, stats: dict[str, Any], out: Path, requests: int) -> str:
    """The text printed after the crawl: what happened next to what the site contains."""
    db = out / "crawl.db"
    in_db = count_documents(db)
    from crawler.extensions.progress import SUMMARY_PREFIX

    # the progress summary's count: storage's rows less pages moved to dropped later
    stored = stats.get(SUMMARY_PREFIX + "pages_stored", stats.get("storage/documents", in_db))
    swapped = _stat(stats, "dedup/canonical/swapped") + _stat(stats, "dedup/preferred/swapped")
    drops = drops_by_reason(out / "dropped.jsonl", stats.get("dedup/crawl_id")) or {
        r: _stat(stats, f"dedup/{r}") for r in ("exact_duplicate", "near_duplicate")
    }
    filtered = _stat(stats, "dupefilter/filtered")
    skipped = _stat(stats, "dedup/links_skipped_seen")
    rows = [
        ("pages fetched", _stat(stats, "downloader/response_count") or requests,
         "HTTP responses, robots.txt and 404s included"),
        ("pages stored", "?" if stored is None else stored,
         stored_note(site, stats, stored, in_db)),
        ("duplicate URLs filtered", filtered + skipped,
         f"dupefilter {filtered} + skipped before a request {skipped}"),
        ("dropped as exact_duplicate", drops.get("exact_duplicate", 0),
         f"the site has {len(site.exact_duplicates)} byte-identical copies"),
        ("dropped as near_duplicate", drops.get("near_duplicate", 0),
         f"the site has {len(site.near_duplicates)} advert/date mirrors"),
        ("preferred copies kept", swapped,
         "twins fetched first, moved to dropped when the copy preferred to them came"),
    ]  # fmt: skip
    lines = [f"Demo crawl finished ({stats.get('finish_reason', '?')})", ""]
    lines += [f"  {name:<28}{value!s:>6}   ({note})" for name, value, note in rows]
    lines.append(f"  {'also skipped':<28}{also(stats)}")
    lines += [
        "",
        f"Results in {display(out)}/: crawl.db, dropped.jsonl, stats.json, crawl.log",
        "Review them:",
        f"  scrapy dropped --db {display(db)}",
        f"  scrapy dedupreport --db {display(db)} -o {display(out / 'report.html')}",
    ]
    return "\n".join(lines)
