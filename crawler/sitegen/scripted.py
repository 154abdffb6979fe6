"""A scripted web for tests and benchmarks: real HTTP on 127.0.0.1, answers scripted per path.

:class:`ScriptedWeb` runs one ``ThreadingHTTPServer`` per :class:`ScriptedSite` (``sites=N``:
N listening ports, each an ephemeral port of 127.0.0.1, so each a host of its own for a
crawler's robots.txt and scope) in daemon threads. A site answers a request with the first of:

1. ``routes[target]``, the exact target as sent (query included), then ``routes[path]`` (the
   query left out);
2. ``handler(request)``, the site's catch-all script (set with :meth:`ScriptedSite.script`);
3. a plain 404 page.

A route is an :class:`Answer` or a callable ``(Request) -> Answer``; a callable may also act
(remove a directory, sleep) before it answers. An :class:`Answer` says the status, body,
``Content-Type``, headers (a ``Retry-After``, a ``Location``: see :func:`redirect`), a delay
before the status line, a slow body (``trickle``: chunks of N bytes, S seconds apart), a body
cut short with the connection closed (``cut``), or a header flood (``flood``: one header line
sent over and over until the client hangs up, the bytes sent recorded in ``site.flooded``).
Bodies are sent as given: any bytes, any encoding, with a ``Content-Length`` of the whole body.

Every request is logged before it is answered (:class:`Request`: arrival time, port, ``Host``
name, target, the n-th time this target was asked of this site); a site also counts the TCP
connections it accepted (``connections``) and the most requests it was answering at once
(``peak_in_flight``). :meth:`ScriptedWeb.reset` clears routes, scripts, logs and counts, so one
web can serve a whole test session.

HTTP/1.1 with keep-alive; silent (no line per request); a client that hangs up mid-answer is
ignored. Not a production server: it trusts the test that scripts it. Lives in
``crawler.sitegen`` (left out of the wheel) so that ``tests/`` and ``bench/`` can both import it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, NamedTuple
from urllib.parse import urlsplit

__floor__ = "library"

logger = logging.getLogger(__name__)
HTML_TYPE = "text/html; charset=utf-8"
FLOOD_LIMIT = 1 << 30  # a header flood stops after 1 GiB even if the client keeps reading


class Request(NamedTuple):
    """One request as it arrived (``ScriptedSite.requests``)."""

    at: float  # time.monotonic() on arrival
    port: int  # the site's port
    host: str  # the Host header's name, without its port
    target: str  # path and query, as sent
    nth: int  # the n-th request of this target on this site, from 1
    agent: str  # User-Agent


@dataclass(frozen=True)
class Answer:
    """What a site sends for one request; see the module docstring."""

    status: int = 200
    body: bytes | str = b""
    content_type: str | None = HTML_TYPE  # None: no Content-Type header
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    trickle: tuple[int, float] | None = None  # (chunk bytes, seconds between chunks)
    cut: int | None = None  # send this many body bytes, then close the connection
    flood: bytes | None = None  # a header line (CRLF included) sent until the client hangs up

    @property
    def data(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body


Route = Answer | Callable[[Request], Answer]
NOT_FOUND = Answer(404, b"<html><body><p>Not found</p></body></html>")


def html(title: str, text: str, links: list[str] | tuple[str, ...] = ()) -> Answer:
    """A 200 HTML page: ``title``, a paragraph of ``text``, then a link to each of ``links``."""
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return Answer(body=f"<html><head><title>{title}</title></head><body><p>{text}</p>"
                       f"{anchors}</body></html>")  # fmt: skip


def redirect(location: str, status: int = 301) -> Answer:
    """A redirect to ``location`` (absolute or relative, sent as given)."""
    return Answer(status, content_type=None, headers={"Location": location})


class ScriptedSite:
    """One listening port of a :class:`ScriptedWeb`: its routes, its script and its log."""

    def __init__(self, host: str) -> None:
        self.routes: dict[str, Route] = {}
        self.handler: Callable[[Request], Answer] | None = None
        self.requests: list[Request] = []
        self.flooded: list[int] = []  # bytes of header flood sent, per flooded request
        self.connections = 0  # TCP connections accepted
        self.peak_in_flight = 0  # most requests being answered at once
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = _Server((host, 0), _Handler)
        self._server.site = self
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        return f"http://{self.host}:{self.port}"

    def route(self, target: str, answer: Route) -> ScriptedSite:
        """Answer ``target`` (a path, or a path and query) with ``answer``."""
        self.routes[target] = answer
        return self

    def serve(self, routes: Mapping[str, Route]) -> ScriptedSite:
        """Add every route of ``routes``."""
        self.routes.update(routes)
        return self

    def script(self, handler: Callable[[Request], Answer]) -> ScriptedSite:
        """Answer every target that has no route with ``handler(request)``."""
        self.handler = handler
        return self

    def reset(self) -> None:
        """Forget routes, script and log."""
        with self._lock:
            self.routes, self.handler = {}, None
            self.requests, self.flooded = [], []
            self.connections = self.peak_in_flight = 0

    # --- the log -------------------------------------------------------------------------------

    @property
    def hits(self) -> Counter[str]:
        """Requests per target."""
        return Counter(r.target for r in self.log())

    def log(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def times(self, target: str) -> list[float]:
        """Arrival times of the requests of ``target``, in order."""
        return [r.at for r in self.log() if r.target == target]

    def paths(self) -> set[str]:
        """Every target asked of this site."""
        return {r.target for r in self.log()}

    def asked(self, host: str) -> bool:
        """Whether any request named ``host`` in its Host header."""
        return any(r.host == host for r in self.log())

    # --- serving -------------------------------------------------------------------------------

    def arrived(self, host: str, target: str, agent: str) -> Request:
        with self._lock:
            nth = 1 + sum(1 for r in self.requests if r.target == target)
            request = Request(time.monotonic(), self.port, host, target, nth, agent)
            self.requests.append(request)
        return request

    def connected(self) -> None:
        with self._lock:
            self.connections += 1

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Counts a request as in flight (``peak_in_flight``) from arrival to the end of its
        answer."""
        with self._lock:
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def answer(self, request: Request) -> Answer:
        found = self.routes.get(request.target)
        if found is None:
            found = self.routes.get(urlsplit(request.target).path)
        if found is None:
            found = self.handler
        if found is None:
            return NOT_FOUND
        return found if isinstance(found, Answer) else found(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffered writes flushed once per answer, and TCP_NODELAY (see crawler.sitegen.server).
    wbufsize = -1
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.site.connected()

    def do_GET(self) -> None:
        site = self.server.site
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        with site.answering():
            request = site.arrived(host, self.path, self.headers.get("User-Agent", ""))
            answer = site.answer(request)
            try:
                self._send(answer)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    def _send(self, answer: Answer) -> None:
        if answer.delay:
            time.sleep(answer.delay)
        if answer.flood is not None:
            self._flood(answer.flood)
            return
        body = answer.data
        self.send_response(answer.status)
        if answer.content_type is not None:
            self.send_header("Content-Type", answer.content_type)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self._body(body, answer)

    def _body(self, body: bytes, answer: Answer) -> None:
        if answer.cut is not None:
            self.wfile.write(body[: answer.cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif answer.trickle is not None:
            size, pause = answer.trickle
            self.wfile.flush()
            for start in range(0, len(body), size):
                time.sleep(pause)
                self.wfile.write(body[start:start + size])
                self.wfile.flush()
        else:
            self.wfile.write(body)

    def _flood(self, line: bytes) -> None:
        """A status line, then ``line`` until the client stops reading; a small send buffer so
        that the bytes counted are (nearly) the bytes the client took."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
        sent = 0
        with contextlib.suppress(OSError):
            self.connection.sendall(b"HTTP/1.1 200 OK\r\n")
            while sent < FLOOD_LIMIT:
                self.connection.sendall(line)
                sent += len(line)
        with self.server.site._lock:
            self.server.site.flooded.append(sent)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the site's log says what was asked."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    site: ScriptedSite

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A crawler that times out or closes early resets connections: normal here.
        logger.debug("scripted web: error serving %s", client_address, exc_info=True)


class ScriptedWeb:
    """``sites`` scripted sites on ``host``; a context manager (or ``start()``/``stop()``)."""

    def __init__(self, sites: int = 1, host: str = "127.0.0.1") -> None:
        self.sites = [ScriptedSite(host) for _ in range(sites)]
        self._threads: list[threading.Thread] = []

    def __getitem__(self, index: int) -> ScriptedSite:
        return self.sites[index]

    def start(self) -> ScriptedWeb:
        if not self._threads:
            for site in self.sites:
                thread = threading.Thread(target=site._server.serve_forever, daemon=True,
                                          kwargs={"poll_interval": 0.1},
                                          name=f"scripted-web-{site.port}")  # fmt: skip
                thread.start()
                self._threads.append(thread)
        return self

    def stop(self) -> None:
        for site in self.sites:
            if self._threads:
                site._server.shutdown()
            site._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def reset(self) -> ScriptedWeb:
        """Every site's routes, script and log forgotten (the ports stay)."""
        for site in self.sites:
            site.reset()
        return self

    def __enter__(self) -> ScriptedWeb:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()
