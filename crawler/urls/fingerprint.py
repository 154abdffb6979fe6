"""Request fingerprints over the canonical URL (``REQUEST_FINGERPRINTER_CLASS``).

Every component that asks Scrapy for a fingerprint (the dupefilter, the HTTP cache, media
pipelines) gets the same key, so two spellings of one URL are one request everywhere.

The fingerprint is ``xxh3_128(method + b" " + canonical_url + b"\\n" + body)``, 16 bytes:

* **input**: the method (upper case), the canonical URL from
:func:`crawler.urls.urlnorm.normalize_url`
  and the body; headers and ``meta`` are ignored, as Scrapy's default does. The separators are
  unambiguous: a method holds no space and a canonical URL no newline.
* **why xxh3_128**: 128 bits make an accidental collision negligible (about 1.5e-21 at 10^9
  URLs, far below the Bloom filter's configured false-positive rate), and it costs ~0.1 us
  against ~0.5 us for ``blake2b(digest_size=16)`` and ~1 us for Scrapy's SHA-1 over JSON,
  which matters on the per-request path. It is not collision resistant against an adversary:
  a site could craft two URLs of its own with one fingerprint, losing one of its own pages.
* **may change**: the layout is not persisted by this module, but the JOBDIR state and the
  stored ``fingerprints`` column are keyed on it; a change needs a version bump there.

The canonical URL comes from ``request.meta[CANONICAL_URL]`` (:mod:`crawler.meta`) when the
spider or :class:`crawler.middlewares.links.UrlNormalizationMiddleware` has set it, except on a
redirected request (``meta["redirect_urls"]``): Scrapy copies ``meta`` to the redirect target,
so the stored value describes the previous URL and is recomputed. A URL that ``normalize_url``
refuses is fingerprinted as written; the fingerprinter never raises for a URL.
"""

from __future__ import annotations

__floor__ = "component"

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import xxhash

from crawler.meta import CANONICAL_URL
from crawler.urls.urlnorm import DEFAULT_POLICY, InvalidUrl, UrlPolicy, normalize_url

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.utils.request import RequestFingerprinterProtocol

__all__ = ["CanonicalRequestFingerprinter", "canonical_url_of", "chain_fingerprints",
           "fingerprint_url"]

logger = logging.getLogger(__name__)

_hash = xxhash.xxh3_128_digest


def fingerprint_url(canonical_url: str, method: str = "GET", body: bytes = b"") -> bytes:
    """The 16-byte fingerprint of a request for ``canonical_url`` (not normalized again).

    ``fingerprint_url(normalize_url(u))`` equals the fingerprinter's answer for a GET
    ``Request(u)`` with no body, so the spider can test a link without building a Request.
    """
    head = f"{method.upper()} {canonical_url}\n".encode("utf-8", "surrogatepass")
    return _hash(head + body if body else head)


def canonical_url_of(request: Request, policy: UrlPolicy | None = None) -> str | None:
    """The canonical URL of ``request``: its trusted ``meta[CANONICAL_URL]`` or a fresh
    :func:`normalize_url`; ``None`` when the URL is not a valid http(s) URL."""
    meta = request.meta
    canonical = meta.get(CANONICAL_URL)
    if canonical and not meta.get("redirect_urls"):
        return str(canonical)
    try:
        return normalize_url(request.url, policy=policy or DEFAULT_POLICY)
    except InvalidUrl:
        return None


class CanonicalRequestFingerprinter:
    """Scrapy request fingerprinter keyed on method + canonical URL + body (see module doc).

    Fingerprints are cached per request object (weakly, like Scrapy's own), so the dupefilter,
    the cache and the spider pay for one computation.
    """

    def __init__(self, policy: UrlPolicy | None = None) -> None:
        self.policy = policy or DEFAULT_POLICY
        self._cache: WeakKeyDictionary[Request, bytes] = WeakKeyDictionary()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CanonicalRequestFingerprinter:
        return cls(UrlPolicy.from_settings(crawler.settings))

    def fingerprint(self, request: Request) -> bytes:
        cached = self._cache.get(request)
        if cached is not None:
            return cached
        canonical = canonical_url_of(request, self.policy)
        if canonical is None:
            # Not an http(s) URL (the middleware drops those before scheduling); keying it on
            # the URL as written keeps distinct strings distinct without raising.
            canonical = request.url
        value = fingerprint_url(canonical, request.method, request.body)
        self._cache[request] = value
        return value


def chain_fingerprints(request: Request, redirect_urls: Iterable[str] = (),
                       fingerprinter: RequestFingerprinterProtocol | None = None,
                       policy: UrlPolicy | None = None) -> list[str]:
    """Hex fingerprints of ``request`` (by ``fingerprinter``, default ours with ``policy``) and
    of every URL it was redirected from (``response.meta["redirect_urls"]``): the requests that
    led to one page, which the dupefilter's journal marks finished together."""
    prints = [(fingerprinter or CanonicalRequestFingerprinter(policy)).fingerprint(request).hex()]
    for url in redirect_urls:
        try:
            canonical = normalize_url(url, policy=policy)
        except InvalidUrl:
            canonical = url
        prints.append(fingerprint_url(canonical).hex())
    return prints
