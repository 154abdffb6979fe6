"""Scale-out profile: N crawler processes share one Redis and one PostgreSQL database.

Use it with ``SCRAPY_SETTINGS_MODULE=crawler.settings.distributed scrapy crawl web -a seeds=FILE``
(``settings.distributed`` from a checkout) on every worker; it needs the ``redis`` and
``postgres`` extras. What is shared, and what each piece guarantees (docs/scale-out.md):

* the frontier: ``crawler.cluster.scheduler.SharedScheduler`` (scrapy-redis's scheduler on
  :mod:`crawler.cluster.frontier`): host-partitioned queues in Redis, each host owned by one
  worker at a time (so per-host delay, concurrency, AutoThrottle and template learning act as
  in one process), popped requests *leased* until their outcome is committed, requests stored
  as JSON (:mod:`crawler.cluster.serializer`; a pickle from a shared server runs code);
* membership: :class:`crawler.cluster.worker.ClusterWorker` renews each worker's lease
  (``DISTRIBUTED_LEASE_SECONDS``), reclaims dead workers' requests, hosts and pending index
  entries, and closes a worker as soon as the shared crawl has nothing queued or leased;
* the seen set: our ``BloomDupeFilter`` on the Redis Bloom filter (``DEDUP_BACKEND="redis"``),
  updated in the same Lua call that queues a request;
* the content index: block tables in Redis, each check-and-add one Lua script; a kept page's
  entry is pending until its worker's storage commits it (:mod:`crawler.backends.redis`);
* robots.txt: fetched once per host per crawl, shared in Redis
  (:mod:`crawler.middlewares.politeness`);
* storage: PostgreSQL (``STORAGE_URL``).

Environment variables (read when this module is imported): ``DEDUP_REDIS_URL``,
``DEDUP_STORAGE_URL``, ``DEDUP_NAMESPACE`` (the per-crawl key namespace, default ``BOT_NAME``;
every worker of one crawl must use the same one). ``-s`` overrides work too, the namespace's
included: the queue key's ``%(namespace)s`` is filled in from the ``DEDUP_NAMESPACE`` setting
(:func:`crawler.backends.common.queue_key`). The settings that decide pages are checked when a
worker joins (:mod:`crawler.cluster.joincheck`). The Lua scripts need a single Redis server
(not Redis Cluster).
"""

import os

from crawler.settings.base import *  # noqa: F403
from crawler.settings.base import BOT_NAME, DOWNLOADER_MIDDLEWARES, EXTENSIONS

# --- shared frontier (scrapy-redis scheduler, our leased queue) --------------------------------
SCHEDULER = "crawler.cluster.scheduler.SharedScheduler"  # leased, host-partitioned frontier
SCHEDULER_SERIALIZER = "crawler.cluster.serializer"  # JSON, never pickle
SCHEDULER_PERSIST = True  # keep queue and seen set when a worker stops (others still use them)
SCHEDULER_FLUSH_ON_START = False  # never wipe what other workers are doing
DEDUP_NAMESPACE = os.environ.get("DEDUP_NAMESPACE", BOT_NAME)  # per-crawl key namespace
SCHEDULER_QUEUE_KEY = "%(namespace)s:%(spider)s:requests"  # under DEDUP_NAMESPACE, env or -s

# --- shared dedup state -----------------------------------------------------------------------
DUPEFILTER_CLASS = "crawler.dupefilter.BloomDupeFilter"  # ours, on the Redis Bloom filter
DEDUP_BACKEND = "redis"  # seen set and content index in Redis
REDIS_URL = os.environ.get("DEDUP_REDIS_URL", "redis://127.0.0.1:6379/0")  # shared server
EXTENSIONS = {
    **EXTENSIONS,
    "crawler.cluster.worker.ClusterWorker": 600,  # leases, reclaim of dead workers, close
}
DOWNLOADER_MIDDLEWARES = {
    **DOWNLOADER_MIDDLEWARES,
    "crawler.middlewares.robots.StrictRobotsTxtMiddleware": None,  # the shared one subclasses it
    "crawler.middlewares.politeness.SharedRobotsTxtMiddleware": 100,  # one fetch per host per crawl
    "crawler.middlewares.sharedscope.SharedScopeMiddleware": 90,  # the crawl's seeds, shared
}

# --- shared storage ---------------------------------------------------------------------------
STORAGE_URL = os.environ.get(
    "DEDUP_STORAGE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/dedup_crawler"
)  # one PostgreSQL database for every worker (created on first use when missing)
