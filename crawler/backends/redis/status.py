"""A distributed crawl as Redis sees it, read-only: what ``scrapy crawlstatus`` prints and what
the last worker to close logs.

Keys read (their writers: :mod:`crawler.cluster.worker`, :mod:`crawler.cluster.frontier`,
:mod:`crawler.backends.redis.seen`, :mod:`crawler.cluster.stats`):

* ``{base}:meta`` hash: ``started`` (ms), ``crawl`` (the crawl id), ``finished`` (ms, when set),
  ``queue`` (the frontier key, when it lies outside ``{base}:``);
* ``{base}:workers`` sorted set: member id -> expiry (ms on the Redis server's clock);
* ``{base}:workers:stats`` hash: member id -> compact JSON of that worker's live numbers
  (:data:`WORKER_FIELDS`), written at each of its membership renewals and once at its close
  (``closed``: its finish reason). Nothing removes a record: a dead worker keeps its last one;
* ``{F}:meta`` (``queued``, ``leased``) of the frontier ``F`` (``SCHEDULER_QUEUE_KEY``);
* ``{base}:bloom`` hash: ``count`` (URLs in the shared seen set), the layers and their config.

A worker is *live* while its membership has not expired, *dead* once it has (or once it was
reclaimed: gone from the membership without a closing record), *left* when it closed and
removed itself (``closed`` says why). The crawl is *running* while a member is live,
*finished* when none is and nothing is queued or leased, *stopped* when none is and work is
left (start a worker of the namespace to resume it).

:func:`crawl_status` is one pipelined round trip; :func:`namespaces` scans the server once
(``SCAN``, never ``KEYS``), summing ``MEMORY USAGE`` over at most ``max_keys`` keys (beyond
that the figure is a lower bound, flagged ``memory_complete: false``). The JSON fields may grow.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.backends.common import glob_escape, server_ms, text
from crawler.backends.redis.keys import SHARD_BITS

if TYPE_CHECKING:
    import redis

#: The fields of a worker's record in ``{base}:workers:stats`` (besides ``closed``).
WORKER_FIELDS = ("pages", "stored", "dropped", "rate", "hosts", "started", "updated")
MAX_KEYS = 100_000  # keys whose MEMORY USAGE ``namespaces`` sums, at most
MEMORY_BATCH = 500


#: A worker out of the membership whose record is younger than this is closing (it leaves the
#: membership, then writes its closing record), not dead: a reclaimed worker's last record is
#: at least a lease old (``DISTRIBUTED_LEASE_SECONDS``, 5 s by default).
LEAVING_MS = 3000


def stats_key(base: str) -> str:
    return f"{base}:workers:stats"


def summary_key(base: str) -> str:
    """Set (NX) by the worker that logs the crawl's final summary; deleted when one joins."""
    return f"{base}:workers:summary"


def redis_ms(client: redis.Redis) -> int:
    return server_ms(client.time())


@dataclass
class WorkerView:
    """One worker of a crawl: its membership state and last published numbers."""

    id: str
    state: str  # live | dead | left
    pages: int = 0
    stored: int = 0
    dropped: int = 0
    rate: float = 0.0
    hosts: int = 0
    started: int | None = None  # ms, the worker's clock
    updated: int | None = None  # ms, the Redis clock (None: never published)
    closed: str | None = None  # finish reason, once it closed


@dataclass
class CrawlView:
    """A namespace's crawl (module docstring): state, frontier, seen set, workers."""

    namespace: str
    crawl: str | None
    started: int | None  # ms
    finished: int | None  # ms, the meta field a closing worker sets when the crawl is done
    state: str  # running | finished | stopped
    queued: int
    leased: int
    urls_seen: int
    now: int  # ms, the Redis clock when read
    workers: list[WorkerView] = field(default_factory=list)

    @property
    def live(self) -> int:
        return sum(1 for w in self.workers if w.state == "live")

    def totals(self) -> dict[str, Any]:
        """Sums over every worker (a dead worker counts with its last published numbers);
        ``pages_per_second`` over the live ones."""
        return {
            "workers": len(self.workers), "live_workers": self.live,
            "pages": sum(w.pages for w in self.workers),
            "stored": sum(w.stored for w in self.workers),
            "dropped": sum(w.dropped for w in self.workers),
            "pages_per_second": round(sum(w.rate for w in self.workers if w.state == "live"), 2),
        }  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["live_workers"] = self.live
        data["totals"] = self.totals()
        return data


def crawl_status(client: redis.Redis, base: str, queue_key: str) -> CrawlView | None:
    """The crawl of namespace ``base`` (frontier ``queue_key``), or None when Redis holds no
    crawl there (no ``{base}:meta``). One pipelined round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(f"{base}:meta")
    pipe.zrange(f"{base}:workers", 0, -1, withscores=True)
    pipe.hgetall(stats_key(base))
    pipe.hmget(f"{queue_key}:meta", ["queued", "leased"])
    pipe.hget(f"{base}:bloom", "count")
    clock, meta, members, records, counts, seen = pipe.execute()
    if not meta:
        return None
    now = server_ms(clock)
    meta = {text(k): text(v) for k, v in meta.items()}
    if meta.get("queue", queue_key) != queue_key:  # a queue outside {base}: (lifecycle)
        counts = client.hmget(f"{meta['queue']}:meta", ["queued", "leased"])
    workers = _workers(now, members, records)
    queued, leased = (int(v or 0) for v in counts)
    live = any(w.state == "live" for w in workers)
    state = "running" if live else "finished" if not queued and not leased else "stopped"
    return CrawlView(
        namespace=base, crawl=meta.get("crawl"), started=_int(meta.get("started")),
        finished=_int(meta.get("finished")), state=state, queued=queued, leased=leased,
        urls_seen=int(seen or 0), now=now, workers=workers,
    )  # fmt: skip


def _workers(now: int, members: list[tuple[Any, float]],
             records: dict[Any, Any]) -> list[WorkerView]:  # fmt: skip
    expiry = {text(m): int(score) for m, score in members}
    published = {text(k): _record(v) for k, v in records.items()}
    views = []
    for worker in sorted(set(expiry) | set(published)):
        rec = published.get(worker, {})
        if worker in expiry:
            state = "live" if expiry[worker] >= now else "dead"
        elif rec.get("closed") or now - (_int(rec.get("updated")) or 0) < LEAVING_MS:
            state = "left"  # closed, or closing: out of the membership, its last record due
        else:
            state = "dead"  # out of the membership long since, no closing record: reclaimed
        views.append(WorkerView(
            worker, state, pages=int(rec.get("pages", 0)), stored=int(rec.get("stored", 0)),
            dropped=int(rec.get("dropped", 0)), rate=float(rec.get("rate", 0.0)),
            hosts=int(rec.get("hosts", 0)), started=_int(rec.get("started")),
            updated=_int(rec.get("updated")), closed=rec.get("closed") or None,
        ))  # fmt: skip
    return views


def _record(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(float(value))
    except ValueError:
        return None


# --- every crawl of a server ----------------------------------------------------------------------
def namespaces(client: redis.Redis, prefix: str, spider: str = "web",
               max_keys: int = MAX_KEYS) -> list[dict[str, Any]]:  # fmt: skip
    """Every namespace under ``prefix`` that has a ``{base}:meta`` hash of a crawl, with its
    :func:`crawl_status` figures, its key count and approximate memory (module docstring).
    The frontier of each is the ``{base}:<name>:requests`` found by the scan (else
    ``{base}:{spider}:requests``)."""
    metas: list[str] = []
    queues: dict[str, str] = {}
    sampled: list[str] = []
    for raw in client.scan_iter(match=f"{glob_escape(prefix)}:*", count=1000):
        key = text(raw)
        if key.endswith(":requests:meta"):
            queues.setdefault(key.rsplit(":", 3)[0], key[: -len(":meta")])
        elif key.endswith(":meta"):
            metas.append(key)
        if len(sampled) < max_keys:
            sampled.append(key)
    bases = [k[: -len(":meta")] for k in metas if client.hexists(k, "started")]
    memory, keys = _memory(client, bases, sampled)
    out = []
    for base in sorted(bases):
        view = crawl_status(client, base, queues.get(base, f"{base}:{spider}:requests"))
        if view is None:  # deleted since the scan
            continue
        out.append({
            "namespace": base[len(prefix) + 1:], "base": base, "crawl": view.crawl,
            "started": view.started, "state": view.state, "queued": view.queued,
            "leased": view.leased,
            "live_workers": view.live, "workers": len(view.workers), "keys": keys[base],
            "memory_bytes": memory[base], "memory_complete": len(sampled) < max_keys,
        })  # fmt: skip
    return out


def _memory(client: redis.Redis, bases: list[str],
            keys: list[str]) -> tuple[dict[str, int], dict[str, int]]:  # fmt: skip
    """``MEMORY USAGE`` summed per namespace over ``keys``; each key counts for the longest
    base it lies under (a namespace ``a:b`` is not counted in ``a``)."""
    longest = sorted(bases, key=len, reverse=True)
    memory, count = dict.fromkeys(bases, 0), dict.fromkeys(bases, 0)
    owned = [(key, next((b for b in longest if key.startswith(b + ":")), None)) for key in keys]
    owned = [(key, base) for key, base in owned if base is not None]
    for start in range(0, len(owned), MEMORY_BATCH):
        batch = owned[start : start + MEMORY_BATCH]
        pipe = client.pipeline(transaction=False)
        for key, _ in batch:
            pipe.memory_usage(key)
        for (_, base), used in zip(batch, pipe.execute(), strict=True):
            if used is not None:  # deleted since the scan
                memory[base] += int(used)  # type: ignore[index]
                count[base] += 1  # type: ignore[index]
    return memory, count


# --- the shared seen set --------------------------------------------------------------------------
def bloom_figures(client: redis.Redis, base: str) -> dict[str, Any] | None:
    """``urls``, ``capacity`` and ``fill_ratio`` (set bits over every layer, ``BITCOUNT``) of
    the shared Bloom filter of namespace ``base``; None when it has none."""
    key = f"{base}:bloom"
    raw = {text(k): text(v) for k, v in client.hgetall(key).items()}
    if "active" not in raw:
        return None
    config = _record(raw.get("config", "{}"))
    shard_bits = int(config.get("shard_bits") or SHARD_BITS)
    total = set_bits = 0
    for layer in range(int(raw["active"])):
        m = int(raw[f"m{layer}"])
        total += m
        for shard in range((m + shard_bits - 1) // shard_bits):
            set_bits += int(client.bitcount(f"{key}:{layer}:{shard}"))
    return {"urls": int(raw.get("count", 0)),
            "capacity": int(config.get("capacity") or raw.get("c0") or 0),
            "fill_ratio": round(set_bits / total, 6) if total else 0.0}  # fmt: skip


# --- text -----------------------------------------------------------------------------------------
def format_workers(view: CrawlView) -> list[str]:
    """One line per worker, under a header (the same table in crawlstatus and the summary)."""
    width = max([len("worker"), *(len(w.id) for w in view.workers)])
    lines = [f"  {'worker':<{width}}  {'state':<12} {'pages':>7} {'stored':>7} {'dropped':>7} "
             f"{'pages/s':>7} {'hosts':>5}  updated"]  # fmt: skip
    for w in view.workers:
        state = f"{w.state} ({w.closed})" if w.state == "left" and w.closed else w.state
        ago = f"{max(view.now - w.updated, 0) / 1000:.1f} s ago" if w.updated else "never"
        lines.append(f"  {w.id:<{width}}  {state:<12} {w.pages:>7} {w.stored:>7} {w.dropped:>7} "
                     f"{w.rate:>7.1f} {w.hosts:>5}  {ago}")  # fmt: skip
    return lines


def format_summary(view: CrawlView) -> str:
    """The final block the last worker logs: ``Crawl <id> finished: ...`` and the workers."""
    t = view.totals()
    dead = sum(1 for w in view.workers if w.state == "dead")
    elapsed = (view.now - view.started) / 1000 if view.started else 0.0
    rate = t["pages"] / elapsed if elapsed > 0 else 0.0
    plural = "" if t["workers"] == 1 else "s"
    head = (f"Crawl {view.crawl or view.namespace} finished: {t['workers']} worker{plural}"
            f"{f' ({dead} dead)' if dead else ''}, {t['pages']} pages fetched, {t['stored']} "
            f"stored, {t['dropped']} dropped, {view.urls_seen} URLs seen, {view.queued} queued, "
            f"{view.leased} leased, {elapsed:.1f} s ({rate:.1f} pages/s)")  # fmt: skip
    return "\n".join([head, *format_workers(view)])
