"""Feed exports of the stored documents: what a feed holds, its schema, and a pre-flight check.

The package owns everything a feed (``-o``, ``FEEDS``, ``scrapy export``) gets:

* :mod:`crawler.outputs.feeds.stored`: ``StoredFeedExporter`` replaces Scrapy's feed exporter
  (``EXTENSIONS``): with storage on, a crawl's feeds receive exactly the pages it stored, as
  they are once the crawl is over (demotions and the settle step included), read from storage
  at ``spider_closed``; without storage, items as Scrapy exports them;
* :mod:`crawler.outputs.feeds.rows`: a stored page as a feed item (``fingerprint_text`` computed
from
  the stored texts), shared by that exporter and ``scrapy export``;
* here, the two things Scrapy leaves to the user:

  - the **schema**: :data:`crawler.items.EXPORT_FIELDS` (no internal fields, the SimHash as 16
    hex digits through the item's field serializer); ``html`` is added when
    ``FEED_EXPORT_HTML`` is on (:func:`apply_export_fields`, called by the ``crawl`` command
    before the crawler exists);
  - the **pre-flight check**: Scrapy logs ``Disabled feed storage scheme: s3`` (boto3
    missing), an unknown format or a batch URI without ``%(batch_id)d`` as an ERROR and crawls
    on, so the crawl "succeeds" with no feed. :func:`check_feeds` refuses such a configuration
    before anything starts (exit 2), and :func:`check_feed_servers` checks that an S3 bucket
    answers (exit 1), as the ``crawl`` command does for the database.
"""

from __future__ import annotations

__floor__ = "component"

import logging
import os
import re
from pathlib import Path, PureWindowsPath
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

from crawler.items import EXPORT_FIELDS
from crawler.outputs.formats import mask_text, mask_url

#: Seconds the bucket check waits for the S3 endpoint (connect and read).
S3_CHECK_TIMEOUT = 10.0
#: The logger of Scrapy's feed exporter, which names each feed by its URI as given.
FEED_EXPORT_LOGGER = "scrapy.extensions.feedexport"


class FeedError(ValueError):
    """A configured feed cannot work. ``exit_code`` is 2 for the configuration, 1 for a server."""

    def __init__(self, uri: str, problem: str, exit_code: int = 2) -> None:
        self.uri = uri
        self.exit_code = exit_code
        super().__init__(f"feed {mask_url(uri)}: {problem}")


class MaskedFeedLog(logging.Filter):
    """Masks every URL in the feed exporter's messages (``Stored jsonlines feed (3 items) in:
    s3://KEY:SECRET@bucket/...``, ``Error storing ...``) by
    :func:`crawler.outputs.formats.mask_text`;
    the traceback of a failed store is left as the storage library wrote it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "://" in message:
            record.msg, record.args = mask_text(message), ()
        return True


def mask_feed_log() -> None:
    """Attach :class:`MaskedFeedLog` to Scrapy's feed exporter logger (once per process)."""
    feed_logger = logging.getLogger(FEED_EXPORT_LOGGER)
    if not any(isinstance(f, MaskedFeedLog) for f in feed_logger.filters):
        feed_logger.addFilter(MaskedFeedLog())


def export_fields(settings: Any) -> list[str]:
    """The default feed fields: :data:`EXPORT_FIELDS`, plus ``html`` with ``FEED_EXPORT_HTML``."""
    from crawler.config import get_bool

    fields = list(EXPORT_FIELDS)
    if get_bool(settings, "FEED_EXPORT_HTML", False):
        fields.append("html")
    return fields


def apply_export_fields(settings: Any) -> None:
    """Set ``FEED_EXPORT_FIELDS`` to the schema unless the user chose the fields themselves.

    ``settings`` is Scrapy's mutable settings object, before the crawler is built. A value set
    at the project's default priority (``settings/base.py`` leaves it unset) is replaced; one
    given on the command line or in a project's own settings is kept.
    """
    if settings.get("FEED_EXPORT_FIELDS") is None:
        settings.set("FEED_EXPORT_FIELDS", export_fields(settings), priority="project")


def _feeds(settings: Any) -> dict[str, dict[str, Any]]:
    raw = settings.getdict("FEEDS") if hasattr(settings, "getdict") else settings.get("FEEDS")
    return {str(uri): dict(options or {}) for uri, options in (raw or {}).items()}


def _scheme(uri: str) -> str:
    if PureWindowsPath(uri).drive:
        return "file"
    return urlparse(uri).scheme or "file"


def _storage_class(settings: Any, uri: str) -> Any:
    from scrapy.utils.misc import load_object

    storages = settings.getwithbase("FEED_STORAGES")
    scheme = _scheme(uri)
    path = storages.get(scheme)
    if not path:
        supported = ", ".join(sorted(s for s, cls in storages.items() if cls))
        raise FeedError(uri, f"unknown storage scheme {scheme!r}; supported: {supported}")
    return load_object(path)


def check_feeds(settings: Any) -> None:
    """Every feed in ``FEEDS`` (``-o``/``-O`` included) can be written: a known storage scheme
    whose library is installed, a well-formed URI, a known format, a batch placeholder when
    batches are on, loadable post-processing plugins and, for a local file, a writable folder.
    Raises :class:`FeedError` (exit 2) for the first feed that cannot work."""
    from scrapy.exceptions import NotConfigured
    from scrapy.utils.misc import build_from_crawler, load_object

    exporters = settings.getwithbase("FEED_EXPORTERS")
    default_batch = settings.getint("FEED_EXPORT_BATCH_ITEM_COUNT", 0)
    for uri, options in _feeds(settings).items():
        fmt = options.get("format")
        if not fmt:
            raise FeedError(uri, "no format: set FEEDS[uri]['format'] (json, jsonlines, csv, xml)")
        if fmt not in exporters:
            known = ", ".join(sorted(exporters))
            raise FeedError(uri, f"unknown format {fmt!r}; known: {known}")
        batch = options.get("batch_item_count", default_batch)
        if batch and not re.search(r"%\(batch_time\)s|%\(batch_id\)", uri):
            raise FeedError(uri, "batches are on (batch_item_count) but the URI has no "
                                 "%(batch_id)d or %(batch_time)s: each batch would overwrite "
                                 "the last")
        for plugin in options.get("postprocessing") or ():
            try:
                load_object(plugin)
            except (ImportError, AttributeError, ValueError) as exc:
                raise FeedError(uri, f"post-processing plugin {plugin!r} cannot be loaded: "
                                     f"{exc}") from None
        scheme = _scheme(uri)
        if scheme == "s3":
            _check_s3_uri(uri)
        cls = _storage_class(settings, uri)
        try:
            # Storages read only ``crawler.settings`` when built; no crawler exists yet.
            stand_in: Any = SimpleNamespace(settings=settings)
            build_from_crawler(cls, stand_in, _sample(uri), feed_options=options)
        except NotConfigured as exc:
            extra = " (pip install 'dedup-crawler[s3]')" if scheme == "s3" else ""
            raise FeedError(uri, f"storage {scheme!r} unavailable: {exc}{extra}") from None
        except Exception as exc:  # a storage refusing its URI: say which and why, one line
            from crawler.storage import first_line

            raise FeedError(uri, f"storage {scheme!r} refuses the URI: {first_line(exc)}") from None
        if scheme == "file":
            _check_folder(uri)


def _sample(uri: str) -> str:
    """The URI with its ``%(name)s`` placeholders filled, as Scrapy fills them at open time."""
    return re.sub(r"%\((\w+)\)[-+ #0-9.]*[sdifx]", "x", uri)


def _check_s3_uri(uri: str) -> None:
    parsed = urlparse(uri)
    if not parsed.hostname:
        raise FeedError(uri, "no bucket: write s3://BUCKET/KEY")
    if not parsed.path.strip("/"):
        raise FeedError(uri, "no object key: write s3://BUCKET/KEY (for example "
                             "s3://bucket/pages/%(batch_id)05d.jsonl.gz)")


def _check_folder(uri: str) -> None:
    """The feed's folder exists and is writable, or can be created (Scrapy creates it)."""
    from w3lib.url import file_uri_to_path

    path = Path(file_uri_to_path(uri) if uri.startswith("file:") else _sample(uri))
    if path.is_dir():
        raise FeedError(uri, f"{path} is a folder: name a file")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise FeedError(uri, f"{folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FeedError(uri, f"folder {folder} is not writable")


def check_feed_servers(settings: Any) -> None:
    """Each S3 feed's bucket answers with the configured endpoint and credentials (one
    ``HeadBucket`` call, :data:`S3_CHECK_TIMEOUT` seconds). Raises :class:`FeedError` (exit 1)."""
    for uri in _feeds(settings):
        if _scheme(uri) != "s3" or "%(" in (urlparse(uri).hostname or ""):
            continue
        _head_bucket(settings, uri)


def _head_bucket(settings: Any, uri: str) -> None:
    import boto3.session
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    parsed = urlparse(uri)
    client = boto3.session.Session().client(
        "s3",
        aws_access_key_id=parsed.username or settings.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=parsed.password or settings.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=settings.get("AWS_SESSION_TOKEN"),
        endpoint_url=settings.get("AWS_ENDPOINT_URL") or None,
        region_name=settings.get("AWS_REGION_NAME") or None,
        config=Config(connect_timeout=S3_CHECK_TIMEOUT, read_timeout=S3_CHECK_TIMEOUT,
                      retries={"max_attempts": 2}),
    )
    bucket = parsed.hostname or ""
    endpoint = settings.get("AWS_ENDPOINT_URL") or "AWS"
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        problem = {"404": "does not exist", "NoSuchBucket": "does not exist",
                   "403": "is not accessible with these credentials"}.get(code, f"answers {code}")
        raise FeedError(uri, f"bucket {bucket!r} at {endpoint} {problem}", exit_code=1) from None
    except BotoCoreError as exc:
        raise FeedError(uri, f"cannot reach bucket {bucket!r} at {endpoint}: {exc} (check "
                             "AWS_ENDPOINT_URL and the AWS_* credentials)", exit_code=1) from None
