"""Every setting of dedup-crawler, with its default and a one-line comment.

Profiles (``crawler/settings/__init__.py`` embedded, ``crawler/settings/distributed.py``) import
this module and override what they change. Project defaults come from :mod:`crawler.defaults`,
so components and this file never disagree. The checkout's top-level ``settings/`` package is a
thin re-export of these modules (``SCRAPY_SETTINGS_MODULE=settings.distributed`` still works).
"""

from crawler import defaults as _d

# --- Project ----------------------------------------------------------------------------------
BOT_NAME = _d.BOT_NAME  # bot name, also in the User-Agent
SPIDER_MODULES = ["crawler.spiders"]  # where `scrapy crawl` finds spiders
NEWSPIDER_MODULE = "crawler.spiders"  # where `scrapy genspider` writes
COMMANDS_MODULE = "crawler.commands"  # crawl (checked), demo, dropped, dedupreport
USER_AGENT = f"{_d.BOT_NAME}/0.1 (+https://example.invalid/bot)"  # set your contact URL

# --- Politeness ---------------------------------------------------------------------------------
ROBOTSTXT_OBEY = True  # honour robots.txt
CONCURRENT_REQUESTS = 16  # requests in flight overall
CONCURRENT_REQUESTS_PER_DOMAIN = 4  # requests in flight per host
DOWNLOADER = "crawler.middlewares.politeness.PoliteDownloader"  # that limit held at delay 0 too
DOWNLOAD_DELAY = 0.5  # seconds between requests to one host (randomized 0.5x-1.5x)
AUTOTHROTTLE_ENABLED = False  # adapt the delay to server latency (turn on for real sites)
AUTOTHROTTLE_START_DELAY = 1.0  # initial AutoThrottle delay, seconds
AUTOTHROTTLE_MAX_DELAY = 30.0  # AutoThrottle delay ceiling, seconds
AUTOTHROTTLE_TARGET_CONCURRENCY = 2.0  # AutoThrottle target requests per host
DOWNLOAD_TIMEOUT = 30  # seconds before a request fails
DOWNLOAD_MAXSIZE = 32 * 1024 * 1024  # refuse bodies over 32 MiB
DOWNLOAD_WARNSIZE = 8 * 1024 * 1024  # warn on bodies over 8 MiB
DOWNLOAD_MAX_HEADER_BYTES = _d.DOWNLOAD_MAX_HEADER_BYTES  # refuse bigger header sections (0 = any)
DOWNLOAD_MAX_HEADER_COUNT = _d.DOWNLOAD_MAX_HEADER_COUNT  # refuse more header lines (0 = any)
LINKS_PER_PAGE_MAX = _d.LINKS_PER_PAGE_MAX  # links of one page followed, the rest counted (0 = all)
PAGE_MAX_PARSE_CHARS = _d.PAGE_MAX_PARSE_CHARS  # characters of a page parsed for links (0 = all)
RETRY_TIMES = 2  # retries after a network error or 5xx
RETRY_AFTER_MAX_SECONDS = _d.RETRY_AFTER_MAX_SECONDS  # cap of a 429/503 Retry-After pause, s
ROBOTSTXT_RETRY_BACKOFF = _d.ROBOTSTXT_RETRY_BACKOFF  # robots.txt 5xx/unreachable: retry (doubles)
ROBOTSTXT_RETRY_BACKOFF_MAX = _d.ROBOTSTXT_RETRY_BACKOFF_MAX  # ceiling of that delay, seconds
ROBOTSTXT_UNAVAILABLE_MAX_SECONDS = _d.ROBOTSTXT_UNAVAILABLE_MAX_SECONDS  # then host given up
ROBOTSTXT_CACHE_HOSTS = _d.ROBOTSTXT_CACHE_HOSTS  # robots.txt parsers kept (LRU; 0 = all hosts)
DEPTH_LIMIT = 0  # link depth limit (0 = none)
REDIRECT_MAX_TIMES = 10  # redirect chain limit
SCOPE = _d.SCOPE  # links and redirects stay on: "host" (exact, port too), "domain", "subdomains"

# --- Security -----------------------------------------------------------------------------------
TELNETCONSOLE_ENABLED = False  # the telnet console runs code: off
REMOTE_CONTROL_ENABLED = False  # Scrapy 2.19 RemoteControl runs code: off
DOWNLOAD_HANDLERS = {  # http(s) only; delay counted on the wire, headers bounded
    "http": "crawler.middlewares.headerlimit.HeaderLimitDownloadHandler",
    "https": "crawler.middlewares.headerlimit.HeaderLimitDownloadHandler",
    "file": None, "data": None, "s3": None, "ftp": None,
}  # fmt: skip
BLOCK_PRIVATE_ADDRESSES = _d.BLOCK_PRIVATE_ADDRESSES  # refuse private/loopback targets (None: auto)

# --- Output -------------------------------------------------------------------------------------
FEED_EXPORT_ENCODING = "utf-8"  # feeds in UTF-8, not \u escapes
LOG_LEVEL = "INFO"  # Scrapy log level
LOG_FORMATTER = "crawler.logformatter.DedupLogFormatter"  # one short line per dropped page
STATS_CLASS = "crawler.extensions.stats.DedupStatsCollector"  # stock stats, no per-call detour
STATS_FILE = ""  # if set, the final stats are written there as JSON (atomically)
FEED_EXPORT_HTML = _d.FEED_EXPORT_HTML  # feeds carry the raw html too (crawler.items.EXPORT_FIELDS)
WARC_OUTPUT = _d.WARC_OUTPUT  # WARC files: a directory (ends with /) or a path prefix; "" = off
WARC_MAX_SIZE = _d.WARC_MAX_SIZE  # bytes after which a WARC file is closed, the next opened
WARC_NEAR_DUPLICATES = _d.WARC_NEAR_DUPLICATES  # near duplicate: "response"+metadata or "metadata"
WARC_RECORD_MAX_BYTES = _d.WARC_RECORD_MAX_BYTES  # payload cap (WARC-Truncated); 0 = none
WARC_CDXJ = _d.WARC_CDXJ  # a CDXJ index beside each closed WARC file
WARC_WACZ = _d.WARC_WACZ  # one WACZ package of the crawl's WARC files at the end

# --- URL dedup ----------------------------------------------------------------------------------
# Request fingerprints over method + canonical URL + body, shared by every component:
REQUEST_FINGERPRINTER_CLASS = "crawler.urls.fingerprint.CanonicalRequestFingerprinter"
DUPEFILTER_CLASS = "crawler.dupefilter.BloomDupeFilter"  # Bloom-filter seen set
SCHEDULER = "crawler.scheduler.ResumingScheduler"  # Scrapy's; JOBDIR resumes from the dedup journal
SCHEDULER_DISK_QUEUE = "crawler.requestqueue.PickleLifoDiskQueue"  # Scrapy's, no spider scan
# breadth-first order (DEPTH_PRIORITY = 1): crawler.requestqueue.PickleFifoDiskQueue, which is
# scrapy.squeues.PickleFifoDiskQueue without its scan of the spider for every request queued
DUPEFILTER_DEBUG = False  # log every filtered request, not only the first
DEDUP_EARLY_SKIP = _d.DEDUP_EARLY_SKIP  # skip already-seen links before building a Request
DEDUP_CANONICAL = _d.DEDUP_CANONICAL  # of two duplicates, store the one named canonical
DEDUP_SETTLE = _d.DEDUP_SETTLE  # re-decide changed duplicate groups at the end of a crawl
URLNORM_STRIP_PARAMS = list(_d.URLNORM_STRIP_PARAMS)  # tracking parameters removed (globs)
URLNORM_SORT_QUERY = _d.URLNORM_SORT_QUERY  # sort query pairs in the canonical key
URLNORM_DEBUG = _d.URLNORM_DEBUG  # log every dropped link / trap, not only the first of each kind
URLLENGTH_LIMIT = _d.URLLENGTH_LIMIT  # longer URLs are dropped (trap guard)
TRAP_MAX_SEGMENT_REPEAT = _d.TRAP_MAX_SEGMENT_REPEAT  # same path segment repeated more: trap
TRAP_MAX_PATH_DEPTH = _d.TRAP_MAX_PATH_DEPTH  # more path segments: trap
TRAP_MAX_QUERY_PARAMS = _d.TRAP_MAX_QUERY_PARAMS  # more query pairs: trap
TRAP_FOLLOW_LINKS_OF = _d.TRAP_FOLLOW_LINKS_OF  # "kept" pages only, also "near_duplicates", "all"
TRAP_DUPLICATE_HOPS = _d.TRAP_DUPLICATE_HOPS  # duplicates in a row whose links are followed
TRAP_LEARN_PARAMS_AFTER = _d.TRAP_LEARN_PARAMS_AFTER  # learn a no-op query parameter (0 = off)
TRAP_HOST_MAX_PAGES = _d.TRAP_HOST_MAX_PAGES  # requests scheduled per host (0 = no budget)
TRAP_PATH_MAX_QUERY_VARIANTS = _d.TRAP_PATH_MAX_QUERY_VARIANTS  # per path, query alone changing
TRAP_SOFT404_PROBE = _d.TRAP_SOFT404_PROBE  # probe one random path per host for soft 404s
BLOOM_CAPACITY = _d.BLOOM_CAPACITY  # URLs the filter is sized for (n)
BLOOM_ERROR_RATE = _d.BLOOM_ERROR_RATE  # false "seen" rate at capacity (p), in (0, 1)
BLOOM_ON_FULL = _d.BLOOM_ON_FULL  # past capacity: "grow" (add a layer) or "stop" the crawl
BLOOM_VERIFY = _d.BLOOM_VERIFY  # confirm every "seen" against an exact on-disk set
JOBDIR_SNAPSHOT_RECORDS = _d.JOBDIR_SNAPSHOT_RECORDS  # journal records between snapshots
JOBDIR_SNAPSHOT_SECONDS = _d.JOBDIR_SNAPSHOT_SECONDS  # seconds between filter snapshots

# --- Content dedup ------------------------------------------------------------------------------
SIMHASH_MAX_DISTANCE = _d.SIMHASH_MAX_DISTANCE  # k: within k bits is a near duplicate (0..16)
SIMHASH_BLOCKS = _d.SIMHASH_BLOCKS  # block tables (None = k + 1)
SIMHASH_MIN_TOKENS = _d.SIMHASH_MIN_TOKENS  # shorter pages: exact-copy check only
SIMHASH_PERSIST = _d.SIMHASH_PERSIST  # load stored fingerprints at start (dedup across crawls)
SIMHASH_SHINGLE = _d.SIMHASH_SHINGLE  # word n-gram size of the features

# --- Storage ------------------------------------------------------------------------------------
STORAGE_URL = _d.STORAGE_URL  # SQLAlchemy URL of the crawl database
STORAGE_BATCH_SIZE = _d.STORAGE_BATCH_SIZE  # rows per write transaction
STORAGE_BATCH_SECONDS = _d.STORAGE_BATCH_SECONDS  # a partial batch is written after this long
STORAGE_RETRY_TIMES = _d.STORAGE_RETRY_TIMES  # write retries before closing (storage_error)
STORAGE_RETRY_BACKOFF = _d.STORAGE_RETRY_BACKOFF  # first retry delay, seconds (doubles, max 30)
DROPPED_LOG = _d.DROPPED_LOG  # JSON Lines log of every dropped page
DROPPED_LOG_RETRY_TIMES = _d.DROPPED_LOG_RETRY_TIMES  # write retries before droplog_error
DROPPED_LOG_RETRY_BACKOFF = _d.DROPPED_LOG_RETRY_BACKOFF  # first retry delay, s (doubles, max 30)
DROPPED_TEXT_MAX_CHARS = _d.DROPPED_TEXT_MAX_CHARS  # characters of text stored per dropped page
DEDUP_OVERRIDES_FILE = _d.DEDUP_OVERRIDES_FILE  # keep/drop/distinct rules beside the database's
DEDUP_PROGRESS_INTERVAL = _d.DEDUP_PROGRESS_INTERVAL  # seconds between progress lines (0 = off)
GC_FREEZE = _d.GC_FREEZE  # objects alive after start-up left out of the garbage collector
GC_GEN0_THRESHOLD = _d.GC_GEN0_THRESHOLD  # allocations between young collections (0 = Python's)

# --- Backends -----------------------------------------------------------------------------------
DEDUP_BACKEND = _d.DEDUP_BACKEND  # "local" (in process) or "redis" (shared)
REDIS_URL = _d.REDIS_URL  # Redis server of the distributed profile
REDIS_KEY_PREFIX = _d.REDIS_KEY_PREFIX  # prefix of every key we write in Redis
REDIS_RETRY_SECONDS = _d.REDIS_RETRY_SECONDS  # retry failed Redis calls this long (0 = never)
REDIS_TIMEOUT_SECONDS = _d.REDIS_TIMEOUT_SECONDS  # slower Redis replies count as failures
DEDUP_NAMESPACE = _d.DEDUP_NAMESPACE  # Redis namespace of one crawl (None = BOT_NAME)
DISTRIBUTED_LEASE_SECONDS = _d.DISTRIBUTED_LEASE_SECONDS  # silent this long: a worker is dead
DISTRIBUTED_HEARTBEAT_SECONDS = _d.DISTRIBUTED_HEARTBEAT_SECONDS  # lease renewed this often
DISTRIBUTED_PREFETCH = _d.DISTRIBUTED_PREFETCH  # leased requests taken per Redis call
DISTRIBUTED_FINISHED_TTL_SECONDS = _d.DISTRIBUTED_FINISHED_TTL_SECONDS  # finished: keys expire
REDIS_START_URLS_KEY = _d.REDIS_START_URLS_KEY  # seedless workers lpush here (None: web:start_urls)
REDIS_START_URLS_BATCH_SIZE = _d.REDIS_START_URLS_BATCH_SIZE  # start-list entries per poll
DISTRIBUTED_SEED_WAIT_SECONDS = _d.DISTRIBUTED_SEED_WAIT_SECONDS  # no seed so long: close (0: wait)

ITEM_PIPELINES = {
    "crawler.pipelines.neardup.NearDuplicatePipeline": 300,  # drops exact and near duplicates
    "crawler.pipelines.storage.StoragePipeline": 800,  # stores kept pages and drop records
}
SPIDER_MIDDLEWARES = {
    "crawler.middlewares.links.UrlNormalizationMiddleware": 550,  # link filter, traps, canon key
    "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,  # ours checks the canonical URL
}
DOWNLOADER_MIDDLEWARES: dict[str, int | None] = {
    # Scrapy's offsite rule, skipped while the spider has no allowed_domains (the web spider's
    # scope is ScopeMiddleware's): Scrapy's parses every URL twice to let it through
    "scrapy.downloadermiddlewares.offsite.OffsiteMiddleware": None,
    "crawler.middlewares.scope.OffsiteMiddleware": 50,
    # raw response for the WARC (above HttpCompression 590 and HttpCache 900: sees it first)
    "crawler.outputs.warc.RawCaptureMiddleware": 950,
    # SCOPE for redirects, BLOCK_PRIVATE_ADDRESSES (above Redirect 600: sees a 3xx first)
    "crawler.middlewares.scope.ScopeMiddleware": 650,
    # robots.txt 5xx/unreachable: host held, disallow all until it answers; 4xx: allow all
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "crawler.middlewares.robots.StrictRobotsTxtMiddleware": 100,
    # Retry-After on 429/503: host paused, retried after it (process_response before Retry 550)
    "crawler.middlewares.retryafter.RetryAfterMiddleware": 560,
    # UTF-16/32 without BOM or charset decoded as such (after HttpCompression 590 unpacks it)
    "crawler.middlewares.encoding.WideEncodingMiddleware": 580,
}
EXTENSIONS = {
    # feeds (-o, FEEDS) get the crawl's stored pages once storage is final (Scrapy's replaced)
    "scrapy.extensions.feedexport.FeedExporter": None,
    "crawler.outputs.feeds.stored.StoredFeedExporter": 0,
    # the Dedup progress line replaces Scrapy's "Crawled N pages (at N pages/min)"
    "scrapy.extensions.logstats.LogStats": None,
    "crawler.extensions.progress.DedupProgress": 500,  # progress line + summary (before StatsFile)
    "crawler.outputs.warc.WarcWriter": 800,  # WARC records once storage commits a page's fate
    "crawler.extensions.statsfile.StatsFile": 900,  # STATS_FILE writer
    "crawler.extensions.gctune.GCTuning": 950,  # GC_FREEZE, GC_GEN0_THRESHOLD
}
