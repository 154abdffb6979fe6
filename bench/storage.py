"""Storage benchmark: ``python -m bench.storage [--quick]`` from the project root.

Side by side in one run, on SQLite (a file in a temp directory) and PostgreSQL (a temp schema
in ``--pg-url``; skipped with a note when unreachable), with pages of about 2 KB of text:

* batched writes through ``Store.write_batch`` (``STORAGE_BATCH_SIZE`` rows per transaction)
  vs one ORM ``session.merge`` + commit per page (what a naive pipeline does), rows/s;
* a re-crawl: the same URLs upserted again (updates, not inserts), rows/s;
* loading the fingerprint index: ``Store.iter_fingerprints`` (streamed, raw BIGINT converted
  in bulk) vs ORM ``Document`` objects, rows/s, and the time extrapolated to 10^7 documents.

Prints a table and writes ``bench/results/storage.json``. Compare the ratios; the absolute
numbers depend on the disk and on other load.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

# The raw SQLAlchemy ORM is this benchmark's baseline (what a naive pipeline does); everything
# else goes through crawler.storage.
import sqlalchemy as sa
from sqlalchemy.orm import Session

from crawler.storage import Document, StorageError, Store
from crawler.storage.scratch import scratch_schema

RESULTS = Path(__file__).resolve().parent / "results" / "storage.json"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORDS = ("crawler", "page", "text", "index", "web", "archive", "simhash", "bloom", "filter",
         "storage", "batch", "row")


def make_rows(n: int, seed: int = 3, tag: str = "") -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(300))
        rows.append({"url": f"https://site{i % 50}.example/p/{i}", "title": f"Page {i}{tag}",
                     "text": text, "content_hash": f"{rng.getrandbits(128):032x}",
                     "simhash": rng.getrandbits(64), "status": 200,
                     "content_type": "text/html", "fetched_at": "2026-01-01T00:00:00Z"})
    return rows


def rate(n: int, fn: Callable[[], object]) -> tuple[float, float]:
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    return n / seconds, seconds


@contextmanager
def database(kind: str, pg_url: str) -> Iterator[str | None]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    with ExitStack() as stack:
        try:
            url = stack.enter_context(scratch_schema(pg_url, "bench_storage"))
        except StorageError:  # the server is unreachable: a note, not a failure
            url = None
        yield url


def write_batched(store: Store, rows: list[dict[str, Any]], batch: int) -> None:
    for i in range(0, len(rows), batch):
        store.write_batch(rows[i:i + batch], [])


def write_naive(store: Store, rows: list[dict[str, Any]]) -> None:
    with Session(store.engine) as session:
        for row in rows:
            session.merge(Document(**{**row, "url": row["url"] + "?naive",
                                      "canonical_url": row["url"]}))
            session.commit()  # one transaction per page


def load_orm(store: Store) -> int:
    with Session(store.engine) as session:
        return sum(1 for _ in session.scalars(sa.select(Document).execution_options(
            yield_per=10_000)))


def run_backend(kind: str, url: str, n: int, naive_n: int, batch: int) -> dict[str, Any]:
    rows = make_rows(n)
    with Store(url) as store:
        store.check()
        out: dict[str, Any] = {"backend": kind, "rows": n, "batch": batch}
        out["write_rows_s"], out["write_s"] = rate(n, lambda: write_batched(store, rows, batch))
        again = make_rows(n, tag=" v2")
        out["upsert_rows_s"], _ = rate(n, lambda: write_batched(store, again, batch))
        out["naive_rows_s"], _ = rate(naive_n, lambda: write_naive(store, rows[:naive_n]))
        total = n + naive_n
        out["load_rows_s"], out["load_s"] = rate(total, lambda: sum(
            1 for _ in store.iter_fingerprints()))
        out["orm_load_rows_s"], _ = rate(total, lambda: load_orm(store))
        out["load_1e7_s"] = 10**7 / out["load_rows_s"]
        assert store.count_documents() == total
    return out


def table(results: list[dict[str, Any]]) -> str:
    head = (f"{'backend':10} {'rows':>7} {'batched w/s':>12} {'naive w/s':>10} {'ratio':>6} "
            f"{'upsert w/s':>11} {'load r/s':>10} {'ORM r/s':>9} {'ratio':>6} {'10^7 load':>10}")
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r['backend']:10} {r['rows']:>7} {r['write_rows_s']:>12,.0f} "
            f"{r['naive_rows_s']:>10,.0f} {r['write_rows_s'] / r['naive_rows_s']:>5.0f}x "
            f"{r['upsert_rows_s']:>11,.0f} {r['load_rows_s']:>10,.0f} "
            f"{r['orm_load_rows_s']:>9,.0f} {r['load_rows_s'] / r['orm_load_rows_s']:>5.1f}x "
            f"{r['load_1e7_s']:>9.1f}s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storage")
    parser.add_argument("--quick", action="store_true", help="10^4 rows instead of 10^5")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--batch", type=int, default=100, help="rows per transaction (100)")
    parser.add_argument("--pg-url", default=PG_URL)
    args = parser.parse_args(argv)
    n = args.rows or (10_000 if args.quick else 100_000)
    naive_n = max(100, n // 50)
    results = []
    for kind in ("sqlite", "postgresql"):
        with database(kind, args.pg_url) as url:
            if url is None:
                print(f"{kind}: not reachable at {args.pg_url}, skipped")
                continue
            results.append(run_backend(kind, url, n, naive_n, args.batch))
    print(table(results))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
