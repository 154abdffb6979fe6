"""Storage at scale: time per page of the crawl's SQLite write as the database grows to 10^6 rows.

``.venv/bin/python -m bench.storagescale [--rows 1e6] [--window 5e4] [--variants before,now]
[--results DIR] [--keep DIR] [--quick]`` from the project root; run it through ``flock
/tmp/heavy.lock`` (10^6 rows take some minutes per variant).

Synthetic pages shaped like :mod:`bench.scale`'s link-heavy crawl (8 hosts, URLs
``http://127.0.0.N:PORT/p/123456`` in a random crawl order, a title, ~1.6 KB of text, a random
content hash and SimHash: ~2.4 KB a page in the database, as the crawl's) go through what the
crawl's :class:`~crawler.pipelines.storage.StoragePipeline` does with them:
:func:`~crawler.pipelines.storage.document_row`, then ``Store.write_batch`` every
``STORAGE_BATCH_SIZE`` rows into a fresh SQLite file of a crawl started with
``Store.start_crawl`` (so ``crawl_documents`` and the set fingerprints are written too).

Each variant is the project's engine plus a few statements run on its connection at connect
(:data:`VARIANTS`: ``before`` puts back SQLite's defaults, which every crawl ran with before
the engine set its cache, temporary storage and checkpoint size; ``now`` adds nothing) or once
on the fresh schema (an index dropped). Each runs in its own child process with its own
database; the parent has them write window after window in turn, the order alternating
(:mod:`bench.sidebyside`'s rule), so every variant sees the same machine load.

Figures per window: wall and CPU µs per page of the ``write_batch`` calls only (building the
rows is not counted), the child's RSS and peak RSS (``VmHWM``), and the database with its WAL in
bytes per page.

Prints a table of the windows ending at 10^4, 10^5, 3x10^5 and 10^6 rows (those reached) and
writes ``RESULTS/storagescale.json`` with every window.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bench.scale import parse_size

RESULTS = Path(__file__).resolve().parent / "results"
HOSTS = 8
#: name -> (statements run on every new connection, statements run once on the fresh schema)
VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # SQLite's defaults: what every crawl ran with before crawler.storage.engine set them
    "before": (("PRAGMA cache_size=-2000", "PRAGMA mmap_size=0", "PRAGMA temp_store=0",
                "PRAGMA wal_autocheckpoint=1000"), ()),
    "now": ((), ()),
    "cache16": (("PRAGMA cache_size=-16384",), ()),
    "cache64": (("PRAGMA cache_size=-65536",), ()),
    "cache256": (("PRAGMA cache_size=-262144",), ()),
    "mmap1g": (("PRAGMA mmap_size=1073741824",), ()),
    "tempmem": (("PRAGMA temp_store=MEMORY",), ()),
    "ckpt10k": (("PRAGMA wal_autocheckpoint=10000",), ()),
    "cache64+tempmem": (("PRAGMA cache_size=-65536", "PRAGMA temp_store=MEMORY"), ()),
    "cache64+tempmem+ckpt10k": (("PRAGMA cache_size=-65536", "PRAGMA temp_store=MEMORY",
                                 "PRAGMA wal_autocheckpoint=10000"), ()),
    "cache64+tempmem+nohashidx": (("PRAGMA cache_size=-65536", "PRAGMA temp_store=MEMORY"),
                                  ("DROP INDEX ix_documents_content_hash",)),
    "nocanonidx": ((), ("DROP INDEX ix_documents_canonical_url",)),
    "nohashidx": ((), ("DROP INDEX ix_documents_content_hash",)),
}
#: The windows the table shows (rows written when the window ends).
MILESTONES = (10_000, 100_000, 300_000, 1_000_000)
WORDS = ("the", "station", "garden", "river", "harbour", "notes", "visitor", "season", "bright",
         "modest", "wooden", "engine", "platform", "story", "readers", "winter", "market")


# --- the pages ------------------------------------------------------------------------------------

class Pages:
    """The synthetic pages, the same in every child: page ``r`` of the crawl order."""

    def __init__(self, rows: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.order = list(range(rows))
        rng.shuffle(self.order)  # a link-heavy crawl fetches its pages in no URL order
        self.per_host = -(-rows // HOSTS)
        self.bodies = [" ".join(rng.choice(WORDS) for _ in range(65)) for _ in range(256)]
        self.links = ["\n".join(f"Page {rng.randrange(self.per_host)}" for _ in range(100))
                      for _ in range(256)]
        self.seed = seed

    def url(self, page: int) -> str:
        host, number = page % HOSTS, page // HOSTS
        return f"http://127.0.0.{host + 2}:{41000 + host}/p/{number}"

    def item(self, r: int, now: datetime) -> dict[str, Any]:
        """The item of the ``r``-th page fetched, as the spider yields it to storage."""
        rng = random.Random(self.seed * 1_000_003 + r)
        page = self.order[r]
        title = (f"Page {page // HOSTS}: notes on the {rng.choice(WORDS)} "
                 f"{rng.choice(WORDS)} and the {rng.choice(WORDS)}")
        text = f"{title}\n{rng.choice(self.bodies)}\n{rng.choice(self.links)}"
        return {"url": self.url(page), "canonical_url": self.url(page), "title": title,
                "text": text, "content_hash": f"{rng.getrandbits(128):032x}",
                "simhash": rng.getrandbits(64), "status": 200, "content_type": "text/html",
                "encoding": "utf-8", "depth": 1 + r.bit_length() // 4,
                "referer": self.url(rng.randrange(len(self.order))), "fetched_at": now}


# --- a child: one variant, one database -----------------------------------------------------------

def proc_status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_store(db: Path, variant: str) -> Any:
    """The Store on a fresh ``db`` with ``variant``'s statements in force."""
    from sqlalchemy import event

    from crawler.storage import Store

    on_connect, on_schema = VARIANTS[variant]
    store = Store(f"sqlite:///{db}")

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        for statement in on_connect:  # after the engine's own PRAGMAs (listeners run in order)
            dbapi_connection.execute(statement)

    event.listen(store.engine, "connect", pragmas)
    store.check()
    with store.engine.begin() as conn:
        for statement in on_schema:
            conn.exec_driver_sql(statement)
    return store


def write_window(store: Any, pages: Pages, crawl_id: int, start: int, stop: int,
                 batch: int) -> tuple[float, float]:
    """Write pages ``start..stop`` as the pipeline does; wall and CPU seconds of the writes."""
    from crawler.pipelines.storage import document_row

    wall = cpu = 0.0
    for lo in range(start, stop, batch):
        now = datetime.now(UTC)
        rows = [document_row(pages.item(r, now), crawl_id)
                for r in range(lo, min(stop, lo + batch))]
        t0, c0 = time.perf_counter(), time.process_time()
        store.write_batch(rows, [])
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return wall, cpu


def child(variant: str, db: Path, rows: int, batch: int) -> int:
    """Serve the parent: each ``start stop`` line read is a window written, a JSON line back."""
    pages = Pages(rows)
    store = open_store(db, variant)
    crawl_id = store.start_crawl("web", [pages.url(0)], {})
    for line in sys.stdin:
        start, stop = (int(x) for x in line.split())
        wall, cpu = write_window(store, pages, crawl_id, start, stop, batch)
        size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
        print(json.dumps({"rows": stop, "wall_s": wall, "cpu_s": cpu,
                          "rss_mib": proc_status_mib("VmRSS"), "hwm_mib": proc_status_mib("VmHWM"),
                          "db_bytes": size}), flush=True)  # fmt: skip
    store.close()
    return 0


# --- the parent -----------------------------------------------------------------------------------

def windows(rows: int, window: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each window: every milestone reached ends one, then every ``window``."""
    ends = sorted({*range(window, rows + 1, window), rows,
                   *(m for m in MILESTONES if m <= rows)})
    return list(zip([0, *ends[:-1]], ends, strict=True))


def spawn(variant: str, db: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bench.storagescale", "--child", variant, "--db", str(db),
           "--rows", str(args.rows), "--batch", str(args.batch)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parent.parent)


def ask(proc: subprocess.Popen[str], start: int, stop: int) -> dict[str, Any]:
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    stdin.write(f"{start} {stop}\n")
    stdin.flush()
    line = stdout.readline()
    if not line:
        raise SystemExit(f"a child stopped (exit {proc.wait()}): see its error above")
    figures: dict[str, Any] = json.loads(line)
    size = stop - start
    figures.update(start=start, wall_us=figures["wall_s"] / size * 1e6,
                   cpu_us=figures["cpu_s"] / size * 1e6, bytes_per_page=figures["db_bytes"] / stop)
    return figures


def run(args: argparse.Namespace, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    for variant in args.variants:
        (tmp / variant).mkdir(parents=True, exist_ok=True)
    procs = {v: spawn(v, tmp / v / "crawl.db", args) for v in args.variants}
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in args.variants}
    try:
        for i, (start, stop) in enumerate(windows(args.rows, args.window)):
            for variant in args.variants[:: 1 if i % 2 else -1]:
                results[variant].append(ask(procs[variant], start, stop))
            print(progress(results, stop), flush=True)
    finally:
        for proc in procs.values():
            close(proc)
    return results


def close(proc: subprocess.Popen[str]) -> None:
    stdin: IO[str] | None = proc.stdin
    if stdin is not None:
        stdin.close()
    proc.wait()


def progress(results: dict[str, list[dict[str, Any]]], stop: int) -> str:
    cells = (f"{v} {r[-1]['wall_us']:.0f}/{r[-1]['cpu_us']:.0f} µs" for v, r in results.items())
    return f"{stop:>9,} rows: " + ", ".join(cells) + " (wall/CPU per page)"


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    """Wall / CPU µs per page of the windows ending at each milestone, then RSS at the end."""
    first = next(iter(results.values()))
    shown = [w["rows"] for w in first if w["rows"] in MILESTONES] or [first[-1]["rows"]]
    head = f"{'variant':<26}" + "".join(f"{'@' + format(n, ','):>16}" for n in shown)
    lines = [head + f"{'RSS / peak MiB':>16}{'B/page':>8}"]
    for variant, rows in results.items():
        by_end = {w["rows"]: w for w in rows}
        cells = [pair(by_end[n]["wall_us"], by_end[n]["cpu_us"]) for n in shown]
        last = rows[-1]
        memory = pair(last["rss_mib"], last["hwm_mib"])
        lines.append(f"{variant:<26}" + "".join(f"{c:>16}" for c in cells)
                     + f"{memory:>16}{last['bytes_per_page']:>8.0f}")
    return "\n".join(lines) + "\n(µs per page of the window ending there: wall / CPU)"


def pair(a: float, b: float) -> str:
    return f"{a:.0f} / {b:.0f}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from crawler import defaults

    parser = argparse.ArgumentParser(prog="python -m bench.storagescale",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=parse_size, default=1_000_000, help="pages written (1e6)")
    parser.add_argument("--window", type=parse_size, default=50_000, help="rows a window (5e4)")
    parser.add_argument("--batch", type=int, default=defaults.STORAGE_BATCH_SIZE,
                        help=f"rows a transaction ({defaults.STORAGE_BATCH_SIZE}: the crawl's)")
    parser.add_argument("--variants", default="before,now",
                        help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--keep", type=Path, help="keep the databases in this directory")
    parser.add_argument("--quick", action="store_true", help="10^5 rows, windows of 10^4")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.window = 100_000, 10_000
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    if min(args.rows, args.window, args.batch) < 1:
        parser.error("--rows, --window and --batch must be >= 1")
    return args


def workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="storagescale-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args.child, args.db, args.rows, args.batch)
    started = time.time()
    for tmp in workdir(args.keep):
        results = run(args, tmp)
    print(table(results))
    out = args.results / "storagescale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": args.rows, "batch": args.batch, "variants": VARIANTS,
                               "seconds": time.time() - started, "windows": results},
                              indent=2) + "\n")  # fmt: skip
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
