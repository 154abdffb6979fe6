"""Scale-out profile: N crawler processes share one Redis and one PostgreSQL database.

Use it with ``SCRAPY_SETTINGS_MODULE=settings.distributed scrapy crawl web -a seeds=FILE`` on
every worker. What is shared:

* the frontier: the scrapy-redis scheduler (``crawler.backends.scheduler.SharedScheduler``,
  which only drops a deprecated stats argument) and its priority queue (a sorted set), requests
  stored as JSON (:mod:`crawler.backends.serializer`; scrapy-redis pickles by default and a
  pickle from a shared server runs code);
* the seen set: our ``BloomDupeFilter`` on the Redis Bloom filter (``DEDUP_BACKEND="redis"``),
  keyed by our canonical request fingerprinter (scrapy-redis's own dupefilter ignores
  ``REQUEST_FINGERPRINTER_CLASS`` and records no ``dupefilter/filtered``); scrapy-redis builds it
  with ``from_spider``;
* the content index: block tables in Redis, each check-and-add one Lua script
  (:mod:`crawler.backends.redis`);
* storage: PostgreSQL (``STORAGE_URL``).

Environment variables (read when this module is imported): ``DEDUP_REDIS_URL``,
``DEDUP_STORAGE_URL``, ``DEDUP_NAMESPACE`` (the per-crawl key namespace, default ``BOT_NAME``;
every worker of one crawl must use the same one). ``-s`` overrides work for the settings our
components read, but the scrapy-redis queue key is computed here, so change the namespace by
the environment variable.

Limits of scrapy-redis 0.9.1 to know:

* requests are popped destructively: a worker killed mid-request loses what it had popped
  (its seen-set entries stay, so those URLs are not fetched again); JOBDIR does not apply;
* a plain spider closes as soon as it is idle, even while another worker will push more: the
  ``SharedIdle`` extension (:mod:`crawler.backends.sharedidle`) keeps each worker open while the
  queue has requests or another worker is busy, and ``DISTRIBUTED_IDLE_SECONDS`` after that;
* every worker runs the spider's ``start()``; the shared seen set drops the repeated seeds;
* politeness is per worker: ``DOWNLOAD_DELAY`` and ``CONCURRENT_REQUESTS_PER_DOMAIN`` apply in
  each process, so N workers reach one host up to N times as often (divide them by N);
* each worker fetches its own robots.txt;
* the scripts need a single Redis server (not Redis Cluster).
"""

import os

from settings.base import *  # noqa: F403
from settings.base import BOT_NAME, EXTENSIONS, REDIS_KEY_PREFIX

# --- shared frontier (scrapy-redis) -----------------------------------------------------------
SCHEDULER = "crawler.backends.scheduler.SharedScheduler"  # scrapy-redis's, shared by every worker
SCHEDULER_QUEUE_CLASS = "scrapy_redis.queue.PriorityQueue"  # sorted set by priority
SCHEDULER_SERIALIZER = "crawler.backends.serializer"  # JSON, never pickle
SCHEDULER_PERSIST = True  # keep queue and seen set when a worker stops (others still use them)
SCHEDULER_FLUSH_ON_START = False  # never wipe what other workers are doing
SCHEDULER_IDLE_BEFORE_CLOSE = 0  # the priority queue cannot block; never block the reactor
DEDUP_NAMESPACE = os.environ.get("DEDUP_NAMESPACE", BOT_NAME)  # per-crawl key namespace
SCHEDULER_QUEUE_KEY = f"{REDIS_KEY_PREFIX}:{DEDUP_NAMESPACE}:%(spider)s:requests"

# --- shared dedup state -----------------------------------------------------------------------
DUPEFILTER_CLASS = "crawler.dupefilter.BloomDupeFilter"  # ours, on the Redis Bloom filter
DEDUP_BACKEND = "redis"  # seen set and content index in Redis
REDIS_URL = os.environ.get("DEDUP_REDIS_URL", "redis://127.0.0.1:6379/0")  # shared server
EXTENSIONS = {
    **EXTENSIONS,
    "crawler.backends.sharedidle.SharedIdle": 600,  # stay open while the shared crawl has work
}
DISTRIBUTED_IDLE_SECONDS = 5.0  # idle this long with an empty queue and no busy worker: close

# --- shared storage ---------------------------------------------------------------------------
STORAGE_URL = os.environ.get(
    "DEDUP_STORAGE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)  # one PostgreSQL database for every worker
