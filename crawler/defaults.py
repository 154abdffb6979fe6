"""Every default of dedup-crawler, in one place.

``settings/base.py`` exposes these as Scrapy settings and the components read the same
constants when a setting is absent, so a default is never written twice. Names are part of the
public contract (see docs/settings.md); values may change between minor versions.
"""

from __future__ import annotations

BOT_NAME = "dedup-crawler"

# --- URL normalization (crawler.urls.urlnorm) -----------------------------------------------------
#: Query parameters removed from every URL before it is keyed; glob patterns, matched exactly
#: against the lower-cased parameter name.
URLNORM_STRIP_PARAMS: tuple[str, ...] = (
    "utm_*",
    "gclid",
    "dclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "msclkid",
    "yclid",
    "twclid",
    "igshid",
    "mc_cid",
    "mc_eid",
    "_hsenc",
    "_hsmi",
    "mkt_tok",
)
URLNORM_SORT_QUERY = True
URLNORM_DEBUG = False  # log every dropped link at DEBUG, not only the first of each kind

# --- Spider-trap guards (crawler.middlewares) --------------------------------------------------
URLLENGTH_LIMIT = 2083
TRAP_MAX_SEGMENT_REPEAT = 3  # the same path segment at most this many times
TRAP_MAX_PATH_DEPTH = 16  # path segments
TRAP_MAX_QUERY_PARAMS = 16  # query pairs
TRAP_FOLLOW_LINKS_OF = "kept"  # links always followed of: kept | near_duplicates | all
TRAP_FOLLOW_LINKS_CHOICES = ("kept", "near_duplicates", "all")
#: The links of a duplicate are still followed while the path to it holds at most this many
#: duplicates in a row (crawler.urls.traps): a distinct page linked only from a duplicate is
#: fetched.
TRAP_DUPLICATE_HOPS = 1
TRAP_LEARN_PARAMS_AFTER = 3  # duplicates differing only in a parameter before it is ignored
TRAP_HOST_MAX_PAGES = 1_000_000  # requests scheduled per host (0 = no budget)
TRAP_PATH_MAX_QUERY_VARIANTS = 1_000  # requests per path with only the query changing
TRAP_SOFT404_PROBE = True  # fetch one never-linked path per host; pages like it: soft_404

# --- Bloom filter "seen" set (crawler.backends.bloom, crawler.dupefilter) -------------------------
BLOOM_CAPACITY = 10_000_000
BLOOM_ERROR_RATE = 0.001
BLOOM_ON_FULL = "grow"  # "grow" | "stop"
BLOOM_ON_FULL_CHOICES = ("grow", "stop")
BLOOM_VERIFY = False
JOBDIR_SNAPSHOT_RECORDS = 50_000  # journal records between two snapshots of the filter
JOBDIR_SNAPSHOT_SECONDS = 60.0  # seconds between two snapshots of the filter

# --- SimHash near-duplicate detection (crawler.content.simhash, crawler.content.simindex) ---------
SIMHASH_MAX_DISTANCE = 3
SIMHASH_MAX_DISTANCE_RANGE = (0, 16)
SIMHASH_BLOCKS: int | None = None  # None means SIMHASH_MAX_DISTANCE + 1
SIMHASH_MIN_TOKENS = 20
SIMHASH_PERSIST = True
SIMHASH_SHINGLE = 1  # word n-gram size of the features (1 = words)

# --- Storage (crawler.storage, crawler.pipelines.storage) --------------------------------------
STORAGE_URL = "sqlite:///crawl.db"
STORAGE_BATCH_SIZE = 500  # rows per write transaction (docs/storage-and-outputs.md: why 500)
STORAGE_BATCH_SECONDS = 2.0
STORAGE_RETRY_TIMES = 5  # retries of a failed batch write before the crawl stops
STORAGE_RETRY_BACKOFF = 1.0  # seconds before the first retry; doubles each time, capped at 30
DROPPED_LOG = "dropped.jsonl"
DROPPED_LOG_RETRY_TIMES = 5  # retries of a failed drop log write before the crawl stops
DROPPED_LOG_RETRY_BACKOFF = 1.0  # seconds before the first retry; doubles each time, capped at 30
DROPPED_TEXT_MAX_CHARS = 20_000  # text kept per dropped page (for `scrapy dropped --explain`)
DEDUP_OVERRIDES_FILE = ""  # keep/drop/distinct rules (crawler.dedup.overrides); "" none
DEDUP_PROGRESS_INTERVAL = 30.0  # s between progress lines (crawler.extensions.progress); 0 = off
GC_FREEZE = True  # start-up's objects left out of the garbage collector (crawler.extensions.gctune)
GC_GEN0_THRESHOLD = 10_000  # allocations between young collections (Python's 700; 0 = Python's)

# --- Politeness (crawler.middlewares.robots, crawler.middlewares.retryafter) -------------------
ROBOTSTXT_RETRY_BACKOFF = 5.0  # seconds before an unavailable robots.txt is fetched again; doubles
ROBOTSTXT_RETRY_BACKOFF_MAX = 60.0  # ceiling of that doubling delay, seconds
ROBOTSTXT_UNAVAILABLE_MAX_SECONDS = 600.0  # robots.txt unavailable this long: the host is given up
ROBOTSTXT_CACHE_HOSTS = 10_000  # robots.txt parsers kept, least recently used go (0 = every host)
RETRY_AFTER_MAX_SECONDS = 120.0  # a Retry-After (429, 503) pauses its host at most this long

# --- Backends ---------------------------------------------------------------------------------
DEDUP_BACKEND = "local"  # "local" | "redis"
DEDUP_BACKEND_CHOICES = ("local", "redis")
REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_KEY_PREFIX = "dedup"
REDIS_RETRY_SECONDS = 30.0  # a failed Redis call is retried this long before redis_error
REDIS_TIMEOUT_SECONDS = 10.0  # a Redis reply slower than this is a failed call (retried)
DEDUP_NAMESPACE: str | None = None  # Redis key namespace of one crawl; None means BOT_NAME
DISTRIBUTED_LEASE_SECONDS = 5.0  # a worker silent this long is dead: others reclaim its work
DISTRIBUTED_HEARTBEAT_SECONDS = 1.0  # a worker renews its lease this often (at most lease/3)
DISTRIBUTED_PREFETCH = 8  # leased requests a worker takes per Redis call
DISTRIBUTED_FINISHED_TTL_SECONDS = 604800.0  # a finished crawl's Redis keys expire (0 = never)
#: The start list of a seedless distributed worker (crawler.cluster.startlist); None:
#: scrapy-redis's "%(name)s:start_urls", with "%(namespace)s:" in front outside the default
#: namespace.
REDIS_START_URLS_KEY: str | None = None
REDIS_START_URLS_BATCH_SIZE = 16  # start-list entries taken per idle poll
DISTRIBUTED_SEED_WAIT_SECONDS = 0.0  # a seedless worker waits this long for a first seed (0 = ever)

# --- Seeds and scope (crawler.urls.seeds, crawler.spiders.web) ------------------------------------
SEED_DEFAULT_SCHEME = "https"
SCOPE = "host"  # links and redirects: "host" (exact, port included), "domain" or "subdomains"
#: Refuse links and redirects to private/loopback/link-local addresses; None: on unless a
#: seed is itself on such an address (crawler.urls.scope).
BLOCK_PRIVATE_ADDRESSES: bool | None = None
DEDUP_EARLY_SKIP = True  # skip already-seen links before a Request is built
#: Of two duplicates, store the one the other names canonical (<link rel="canonical">, Link
#: header), whatever the fetch order; off: the first fetched stays.
DEDUP_CANONICAL = True
#: At the end of a crawl, re-decide the duplicate groups that changed by the preference order
#: (crawler.dedup.settle), so the stored set depends only on the pages fetched, not on their order.
DEDUP_SETTLE = True
LINKS_PER_PAGE_MAX = 10_000  # links of one page judged and followed (0 = no cap)
PAGE_MAX_PARSE_CHARS = 2_000_000  # characters of a page's markup parsed for links (0 = all)
#: A response's header section (status line and header lines) is refused past this many bytes
#: (Chrome's own limit) or header lines (crawler.middlewares.headerlimit); 0 = no bound.
DOWNLOAD_MAX_HEADER_BYTES = 256 * 1024
DOWNLOAD_MAX_HEADER_COUNT = 500

# --- WARC output (crawler.outputs.warc) -----------------------------------------------------------
WARC_OUTPUT = ""  # a directory (ends with "/" or exists) or a path prefix; empty: no WARC files
WARC_MAX_SIZE = 1_000_000_000  # bytes after which a WARC file is closed and the next one opened
WARC_NEAR_DUPLICATES = "response"  # "response" | "metadata": what a near duplicate leaves
WARC_NEAR_DUPLICATES_CHOICES = ("response", "metadata")
WARC_RECORD_MAX_BYTES = 0  # a payload longer is cut to it (WARC-Truncated: length); 0 = no cap
WARC_CDXJ = True  # a CDXJ index (NAME.cdxj) beside each closed WARC file
WARC_WACZ = False  # package the crawl's WARC files, index and page list as one WACZ at the end

# --- Feed exports (crawler.outputs.feeds, crawler.items) ------------------------------------------
FEED_EXPORT_HTML = False  # feeds carry the raw html too (off: the schema of crawler.items)
