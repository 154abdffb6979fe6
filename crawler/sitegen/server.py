"""Serve a generated :class:`~crawler.sitegen.Site` over real HTTP on 127.0.0.1.

``SiteServer(site)`` is a context manager (or ``start()``/``stop()``) running a
``ThreadingHTTPServer`` in a daemon thread on an ephemeral port. The base URL is
``http://localhost:PORT`` (the host name a crawler sees, so upper-case and zero-padded-port
spellings of it also reach this server). Each request target is resolved with
:meth:`Site.lookup` — the exact target first, then as a web server would (escapes, dot segments,
tracking parameters, query order) — and answered with the page's status, type and headers, the
``{base}``/``{port}`` placeholders filled in; anything else is a 404. ``hostname`` names the
base URL's host instead of ``localhost`` (serve sites on 127.0.0.2, 127.0.0.3, ... to make a web
of hosts); ``requests`` records when each request arrived, its target and User-Agent, and
``exchanges`` what each was answered (:class:`Exchange`: method, status, headers, body SHA-1). GET
and HEAD; HTTP/1.1 with keep-alive. ``hits`` counts raw request targets (as sent, query order
kept), so a test can see what a crawler fetched and how often. Silent: no per-request log lines;
a client that hangs up mid-response is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, NamedTuple

from crawler.sitegen import Site
from crawler.urls.urlnorm import normalize_url

logger = logging.getLogger(__name__)
NOT_FOUND = (
    b"<!DOCTYPE html>\n<html><head><title>Not found</title></head><body>Not found</body></html>\n"
)


class Exchange(NamedTuple):
    """One answered request as it went on the wire (``SiteServer.exchanges``)."""

    method: str
    host: str  # the Host header as sent
    target: str
    status: int
    headers: dict[str, str]  # Content-Type and the page's own headers (filled in), not the Date
    sha1: str  # hex SHA-1 of the body sent (of b"" for HEAD)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffered writes (flushed once per response by the base class) and TCP_NODELAY: headers and
    # body written separately would meet Nagle + delayed ACK and add ~40 ms to every response.
    wbufsize = -1
    server: _Server

    def setup(self) -> None:
        # stamp arrivals promptly even when crawlers keep the cores busy (allowed for root)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        owner = self.server.owner
        owner.record(self.path, self.headers.get("User-Agent", ""))
        found = owner.site.lookup(self.path)
        if found is None:
            status, ctype, headers, body = 404, "text/html; charset=utf-8", {}, NOT_FOUND
        else:
            page = found[1]
            status, ctype, headers = page.status, page.content_type, page.headers
            body = owner.site.render(page, owner.base_url)
        base = owner.base_url
        headers = {name: owner.site.expand(value, base) for name, value in headers.items()}
        sent = body if send_body else b""
        owner.answered(Exchange(self.command, self.headers.get("Host", ""), self.path, status,
                                {"Content-Type": ctype, **headers}, hashlib.sha1(sent).hexdigest()))
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if send_body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Per-request lines would swamp test output; the hit counter says what was fetched."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: SiteServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Disconnects and resets are normal for a crawler that times out or closes early.
        logger.debug("site server: error serving %s", client_address, exc_info=True)


class SiteServer:
    """A generated site on ``host:port`` (0 = ephemeral); see the module docstring."""

    def __init__(
        self, site: Site, host: str = "127.0.0.1", port: int = 0, hostname: str = "localhost"
    ) -> None:
        self.site = site
        self.host = host
        self.hostname = hostname  # the host name of base_url (a loopback address for a web)
        # (time.monotonic(), target, User-Agent) of every request, in arrival order
        self.requests: list[tuple[float, str, str]] = []
        self.requested_port = port
        self.hits: Counter[str] = Counter()
        self.exchanges: list[Exchange] = []  # in the order they were answered
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port; still readable after ``stop()``."""
        if self._port is None:
            raise RuntimeError("SiteServer is not started: call start() or use it as a context")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.hostname}:{self.port}"

    def url(self, path: str = "/") -> str:
        """Absolute URL of a site path (placeholders in ``path`` filled in too)."""
        path = self.site.expand(path, self.base_url)
        return path if "://" in path else self.base_url + path

    def record(self, target: str, agent: str = "") -> None:
        with self._lock:
            self.hits[target] += 1
            self.requests.append((time.monotonic(), target, agent))

    def answered(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def reset_hits(self) -> None:
        with self._lock:
            self.hits.clear()
            self.requests.clear()
            self.exchanges.clear()

    def canonical_hits(self) -> Counter[str]:
        """Hits per site page (raw targets mapped with ``Site.canonical_of``; 404s left out)."""
        counts: Counter[str] = Counter()
        with self._lock:
            items = list(self.hits.items())
        for target, n in items:
            key = self.site.canonical_of(target)
            if key is not None:
                counts[key] += n
        return counts

    def start(self) -> SiteServer:
        if self._httpd is not None:
            return self
        httpd = _Server((self.host, self.requested_port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
            name=f"site-server-{self.port}", daemon=True,
        )  # fmt: skip
        self._thread.start()
        logger.debug("serving site %r at %s", self.site.name, self.base_url)
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> SiteServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()


# --- a web of sites on loopback hosts ---------------------------------------------------------


@contextmanager
def serve_web(sites: Sequence[Site]) -> Iterator[list[SiteServer]]:
    """A web: each site on its own host, the loopback addresses 127.0.0.2, 127.0.0.3, ...
    (each a host name of its own for a crawler: its own download slot, its own owner in the
    distributed frontier)."""
    with ExitStack() as stack:
        servers = []
        for i, site in enumerate(sites):
            address = f"127.0.0.{i + 2}"
            servers.append(stack.enter_context(SiteServer(site, host=address, hostname=address)))
        yield servers


def item_pages(server: SiteServer) -> set[str]:
    """The site paths whose fetch gives a page item (an HTML body, status 200)."""
    site = server.site
    pages = set()
    for path in site.canonical_pages - site.disallowed - site.non_html - site.mislabelled:
        found = site.lookup(path)
        if found is not None and found[1].status == 200:
            pages.add(path)
    return pages


def web_duplicate_groups(servers: Sequence[SiteServer]) -> list[set[str]]:
    """Groups of canonical URLs with the same content across the web: each site's mirrors and
    copies with their original, joined across hosts where one site mirrors another."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    by_site: dict[str, list[SiteServer]] = {}
    for server in servers:
        site = server.site  # twins: the same generated bodies (before the base URL is filled)
        key = repr([site.pages[p].body for p in sorted(site.pages)[:30]])
        by_site.setdefault(key, []).append(server)
        for members in server.site.duplicate_groups().values():
            urls = [normalize_url(server.base_url + p) for p in members]
            for url in urls[1:]:
                union(urls[0], url)
    for twins in by_site.values():
        for path in item_pages(twins[0]):
            urls = [normalize_url(s.base_url + path) for s in twins]
            for url in urls[1:]:
                union(urls[0], url)
    groups: dict[str, set[str]] = {}
    for url in parent:
        groups.setdefault(find(url), set()).add(url)
    return [g for g in groups.values() if len(g) > 1]
