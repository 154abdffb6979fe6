"""The page and site model shared by the generators, and server-style target resolution.

A :class:`Site` holds the pages to serve, keyed by request target (path plus query), and the
ground truth that tests assert against. Generators (:mod:`crawler.sitegen.demo`, ``template``,
``linkheavy``) take a ``seed``; the same seed gives byte-identical pages (no set iteration, no
``hash()``), so a crawl of the same site is reproducible.

Bodies may hold two placeholders that :meth:`Site.render` (and so the server) fills in: ``{base}``
becomes the base URL (``http://localhost:PORT``) and ``{port}`` the port. They let a page spell an
absolute link several ways (``http://LOCALHOST:{port}/a``, ``http://localhost:0{port}/a``) without
knowing the port when the site is generated.

A request target is resolved the way a real web server would (:meth:`Site.lookup`): exact key
first, then with unreserved percent-escapes decoded, dot segments removed, tracking parameters
ignored and query pairs sorted. So every alias spelling of a page is served, and
:meth:`Site.canonical_of` tells which page a raw request target reached (benchmarks count
duplicate fetches with it).

The ground truth fields (paths are site keys such as ``/articles/x`` or ``/section/y/?page=2``):

- ``canonical_pages``: every distinct URL of an HTML page a polite crawler fetches (200, in
  scope, allowed by robots.txt, within the trap guards): originals, mirrors, copies, trap pages.
- ``aliases``: link spelling as written in a page (placeholders unfilled; each resolves against
  the site root) → canonical path.
- ``near_duplicates``: mirror path → original path (differs only in an advert or a date).
- ``exact_duplicates``: copy path → original path (byte-identical body).
- ``distinct_pages``: ``canonical_pages`` minus mirrors and copies: the pages that must be kept.
  A crawl may meet a mirror before its original; then it keeps the mirror and drops the
  original, so assert per group (:meth:`Site.duplicate_groups`), not on the exact path.
- ``non_html``, ``mislabelled`` (binary body sent as text/html), ``broken`` (linked, 404),
  ``redirects`` (path → target path), ``disallowed`` (robots.txt), ``offsite`` (links to other
  hosts, never followed), ``trap_pages`` / ``trap_root`` (the spider trap), ``main_text`` (the
  text of the main content block of an article page).
"""

from __future__ import annotations

import fnmatch
import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from crawler import defaults

HTML = "text/html; charset=utf-8"
_TEXTUAL = ("text/", "application/json", "application/xml")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


@dataclass
class Page:
    """One response: body bytes (text may hold ``{base}``/``{port}``), type, status, headers."""

    body: bytes
    content_type: str = HTML
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def templated(self) -> bool:
        """True when the body is text whose placeholders are filled in when served."""
        return self.content_type.startswith(_TEXTUAL) and b"{" in self.body


@dataclass
class Site:
    """A generated site: pages keyed by request target, plus ground truth (module docstring)."""

    name: str
    pages: Mapping[str, Page]
    start_path: str = "/"
    canonical_pages: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)
    near_duplicates: dict[str, str] = field(default_factory=dict)
    exact_duplicates: dict[str, str] = field(default_factory=dict)
    distinct_pages: set[str] = field(default_factory=set)
    non_html: set[str] = field(default_factory=set)
    mislabelled: set[str] = field(default_factory=set)
    broken: set[str] = field(default_factory=set)
    redirects: dict[str, str] = field(default_factory=dict)
    disallowed: set[str] = field(default_factory=set)
    offsite: set[str] = field(default_factory=set)
    trap_pages: set[str] = field(default_factory=set)
    trap_root: str | None = None
    main_text: dict[str, str] = field(default_factory=dict)
    fallback: Callable[[str], Page | None] | None = None

    def lookup(self, target: str) -> tuple[str, Page] | None:
        """Resolve a raw request target as a web server would; ``None`` means 404."""
        page = self.pages.get(target)
        if page is not None:
            return target, page
        key = server_key(target)
        page = self.pages.get(key)
        if page is None and self.fallback is not None:
            page = self.fallback(key)
        return (key, page) if page is not None else None

    def canonical_of(self, target: str) -> str | None:
        """The site key a raw request target reaches, or ``None`` if it is a 404."""
        found = self.lookup(target)
        return found[0] if found else None

    def render(self, page: Page, base_url: str) -> bytes:
        """The body as served from ``base_url`` (``http://localhost:PORT``)."""
        if not page.templated:
            return page.body
        port = base_url.rsplit(":", 1)[-1].strip("/")
        return page.body.replace(b"{base}", base_url.encode()).replace(b"{port}", port.encode())

    def expand(self, href: str, base_url: str) -> str:
        """A link spelling with its placeholders filled in."""
        port = base_url.rsplit(":", 1)[-1].strip("/")
        return href.replace("{base}", base_url).replace("{port}", port)

    def duplicate_groups(self) -> dict[str, set[str]]:
        """Original path → the original and all its mirrors and copies."""
        groups: dict[str, set[str]] = {}
        for dup, orig in [*self.near_duplicates.items(), *self.exact_duplicates.items()]:
            groups.setdefault(orig, {orig}).add(dup)
        return groups


def is_tracking_param(name: str) -> bool:
    """True for the tracking parameter names a server ignores (``URLNORM_STRIP_PARAMS``)."""
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, pat) for pat in defaults.URLNORM_STRIP_PARAMS)


def server_key(target: str) -> str:
    """The page a server would answer for ``target``: escapes, dots, trackers, query order.

    >>> server_key("/a/../%7eb/?utm_source=x&z=1&a=2#f")
    '/~b/?a=2&z=1'
    """
    target = target.split("#", 1)[0]
    path, _, query = target.partition("?")
    path = _ESCAPE.sub(_unescape_unreserved, path)
    path = remove_dot_segments(path or "/")
    pairs = [p for p in query.split("&") if p and not is_tracking_param(p.split("=", 1)[0])]
    pairs.sort()
    return path + ("?" + "&".join(pairs) if pairs else "")


def _unescape_unreserved(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path: ``/a/./b/../c`` → ``/a/c``."""
    segments = path.split("/")[1:]
    out: list[str] = []
    for seg in segments:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    trailing = bool(segments) and segments[-1] in (".", "..")
    return "/" + "/".join(out) + ("/" if trailing and out else "")


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def page(text: str, content_type: str = HTML, status: int = 200, **headers: str) -> Page:
    """A text page encoded as UTF-8."""
    return Page(text.encode("utf-8"), content_type, status, dict(headers))


def slugify(title: str, limit: int = 60) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug[:limit].rstrip("-")
