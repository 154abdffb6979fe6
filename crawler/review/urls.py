"""Any printed spelling of a URL, back to the URL stored: what ``scrapy dropped --explain``
accepts (a path on any host, a URL without its scheme or trailing slash, the canonical form)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crawler.storage import ReviewError

if TYPE_CHECKING:
    from crawler.review.crawldb import CrawlDB


def resolve_url(db: CrawlDB, spelling: str, dropped: bool = False) -> str:
    """The stored URL that ``spelling`` names; ``spelling`` itself when nothing matches.

    Accepts a whole URL (as stored, or in canonical form: :meth:`CrawlDB.dropped_row` also
    looks the canonical form up), a URL without its scheme, either with or without a trailing
    slash, and a path with its query, matched on every host. A dropped page is preferred when
    ``dropped``; :class:`ReviewError` when the spelling matches pages on several hosts.
    """
    text = spelling.strip()
    if text.startswith("/"):
        found = path_matches(db, text, dropped)
    else:
        variants = url_variants(text)
        found = [u for u in variants if dropped and db.dropped_row(u) is not None]
        found = found or [u for u in variants if db.document(u) is not None]
    origins = sorted({origin_of(u) for u in found})
    if len(origins) > 1:
        what = "path" if text.startswith("/") else "URL"
        raise ReviewError(f"{what} {text} matches pages on {len(origins)} hosts: "
                          f"{', '.join(origins)}; pass the whole URL")
    return found[0] if found else text


def toggle_slash(path: str) -> str:
    """``path`` (query kept) with a trailing slash added or removed; ``/`` stays ``/``."""
    head, sep, query = path.partition("?")
    if head in ("", "/"):
        return path
    head = head[:-1] if head.endswith("/") else head + "/"
    return head + sep + query


def url_variants(text: str) -> list[str]:
    """``text`` as given, with the other trailing slash, and with each scheme if it has none."""
    out = []
    for base in [text] if "://" in text else ["http://" + text, "https://" + text]:
        origin = origin_of(base)
        rest = base[len(origin):]
        out += [base, origin + toggle_slash(rest)] if rest.startswith("/") else [base]
    return list(dict.fromkeys(out))


def path_matches(db: CrawlDB, path: str, dropped: bool) -> list[str]:
    """Stored URLs, on any host, whose path and query are ``path`` (else up to a trailing slash).

    Dropped pages are looked up first when ``dropped``, else kept ones.
    """
    tables = ["dropped", "documents"] if dropped else ["documents", "dropped"]
    for spelling in dict.fromkeys([path, toggle_slash(path)]):
        for table in tables:
            # LIKE ignores case in SQLite: compare again here
            urls = sorted({url for url in db.urls_ending_with(table, spelling)
                           if path_of(url) == spelling})
            if urls:
                return urls
    return []


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` exactly as spelled in ``url`` ('' for a relative one)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "/" in scheme:
        return ""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return scheme + sep + rest[:end]


def path_of(url: str) -> str:
    """The path and query of ``url`` as printed by the table (``/`` for an empty path)."""
    origin = origin_of(url)
    rest = url[len(origin):] if origin else url
    return rest if rest.startswith("/") else "/" + rest
