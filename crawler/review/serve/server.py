""":class:`ReviewServer`: the local web server of ``scrapy dedupreport --serve``.

A :class:`http.server.ThreadingHTTPServer` on 127.0.0.1 only, reading one crawl database
through a :class:`crawler.review.CrawlDB` (one, behind a lock: the handlers run in threads)
and writing it through :mod:`crawler.review.actions`.

======================  ===================================================================
``GET /``               the drop list (:func:`crawler.review.serve.pages.list_page`)
``GET /pair``           ``?url=U[&other=O]``: one decision side by side
``GET /api/drops``      the list's rows, filtered, sorted and paged (:mod:`.listing`)
``GET /api/history``    ``?url=U&other=O``: the overrides and reviews of a pair
``POST /api/review``    ``{url, other, verdict, note}``: :func:`~crawler.review.actions.add_review`
``POST /api/override``  ``{action, target, other, note}``, or ``{remove: true, target, other}``
======================  ===================================================================

It writes the database, so it defends itself against other sites in the same browser: a
request whose ``Host`` is not ``127.0.0.1:PORT`` or ``localhost:PORT`` is refused (DNS
rebinding), a POST needs the server's random token in ``X-Review-Token`` (the pages embed it;
another origin cannot read it) and a JSON body (``Content-Type: application/json``, which a
form on another site cannot send), and every page has a strict Content-Security-Policy: its
own inline CSS and script by a per-response nonce, ``fetch`` to itself, nothing else. Errors
answer ``{"error": "one line"}`` with a 4xx status.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from crawler.dedup.overrides import Override, OverrideError, Overrides, read_file
from crawler.review import actions
from crawler.review.crawldb import CrawlDB
from crawler.review.serve import pages
from crawler.review.serve.decisions import (
    FIELDS,
    act,
    outcome_json,
    pair_explanation,
)
from crawler.review.serve.listing import (
    Drops,
    Marks,
    QueryError,
    parse_query,
    review_json,
    select,
)
from crawler.storage import ReviewError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from crawler.review.selection import Selection

HOST = "127.0.0.1"
MAX_BODY = 64 * 1024  # bytes of a POST body
TOKEN_HEADER = "X-Review-Token"
CSP = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
       "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")


class RequestError(Exception):
    """A request refused: the HTTP status and a one-line message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReviewServer(ThreadingHTTPServer):
    """The review of the crawls ``selection`` picked in ``db_url``, on 127.0.0.1:``port``
    (0: any free port; :attr:`url` says which); ``overrides_file``: the rules file
    (``DEDUP_OVERRIDES_FILE``) whose rules the rows and pairs show beside the database's (named
    ``FILE:LINE``) and the buttons' overrides are written to (and removed from) as well; a bad
    line of it is a :class:`ReviewError` here; ``drop_log``: the ``DROPPED_LOG`` the moves of
    an override are appended to (None: the one the latest crawl recorded), when that file
    exists."""

    daemon_threads = True

    def __init__(self, db_url: str, selection: Selection, port: int = 0,
                 known: Iterable[str | None] = (), overrides_file: str | None = None,
                 drop_log: str | None = None) -> None:
        self.db_url, self.known, self.overrides_file = db_url, list(known), overrides_file
        self.drop_log = drop_log
        self.selection = selection
        self.token = secrets.token_urlsafe(32)
        self.lock = threading.Lock()
        self.db = CrawlDB.open(db_url, self.known)
        self.drops = Drops(list(selection.crawl_ids))
        try:
            self.rules()  # a bad rules file is said once, before serving
        except OverrideError as exc:
            self.db.close()
            raise ReviewError(str(exc)) from None
        try:
            super().__init__((HOST, port), ReviewHandler)
        except OSError as exc:
            self.db.close()
            raise ReviewError(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}") from None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def allowed_hosts(self) -> set[str]:
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def rules(self) -> list[Override]:
        """The override rules a crawl obeys: the database's, oldest first, then the rules
        file's in file order (a file line replaces a database rule of its target)."""
        return self.db.overrides() + (read_file(self.overrides_file)
                                      if self.overrides_file else [])

    def reopen(self) -> None:
        """Open the database again after a write (a first override creates its tables)."""
        self.db.close()
        self.db = CrawlDB.open(self.db_url, self.known)

    def server_close(self) -> None:
        super().server_close()
        self.db.close()


class ReviewHandler(BaseHTTPRequestHandler):
    """One request (module docstring); the routes are :meth:`do_GET` and :meth:`do_POST`."""

    server: ReviewServer
    server_version = "dedup-review"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the one line saying where the review is served."""

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The base class's own refusals (a bad request line, an unsupported method) as JSON."""
        self.close_connection = True
        status = HTTPStatus(code)
        self._json({"error": message or status.phrase}, status)

    def do_GET(self) -> None:
        self._answer(self._get)

    def do_POST(self) -> None:
        self._answer(self._post)

    def _answer(self, route: Callable[[SplitResult], None]) -> None:
        try:
            self._check_host()
            route(urlsplit(self.path))
        except RequestError as exc:
            self._json({"error": str(exc)}, exc.status)
        except (ReviewError, QueryError, ValueError) as exc:  # OverrideError is a ValueError
            self._json({"error": _one_line(exc)}, HTTPStatus.BAD_REQUEST)
        except Exception as exc:  # a bug: one line to the page, never a traceback
            self._json({"error": f"internal error: {type(exc).__name__}: {_one_line(exc)}"},
                       HTTPStatus.INTERNAL_SERVER_ERROR)

    def _check_host(self) -> None:
        host = (self.headers.get("Host") or "").lower()
        if host not in self.server.allowed_hosts():
            raise RequestError(HTTPStatus.FORBIDDEN,
                               f"this server answers to {self.server.url} only "
                               "(Host header refused)")

    # --- GET ------------------------------------------------------------------------------

    def _get(self, target: SplitResult) -> None:
        params = parse_qs(target.query)
        routes = {"/": self._list, "/pair": self._pair, "/api/drops": self._drops,
                  "/api/history": self._history}
        if target.path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "text/plain")
        elif target.path in routes:
            routes[target.path](params)
        else:
            raise RequestError(HTTPStatus.NOT_FOUND, f"no page {target.path}")

    def _list(self, _params: dict[str, list[str]]) -> None:
        nonce = secrets.token_urlsafe(16)
        self._html(pages.list_page(self.server.selection.label, self.server.db.masked_url,
                                   nonce, self.server.token), nonce)

    def _pair(self, params: dict[str, list[str]]) -> None:
        url, other = _param(params, "url", required=True), _param(params, "other")
        with self.server.lock:
            explanation, other = pair_explanation(self.server.db, url, other)
        nonce = secrets.token_urlsafe(16)
        self._html(pages.pair_page(explanation, url, other, nonce, self.server.token), nonce)

    def _drops(self, params: dict[str, list[str]]) -> None:
        query = parse_query(params)
        with self.server.lock:
            self.server.drops.refresh(self.server.db)
            data = select(self.server.drops.rows, query, self._marks())
        self._json(data)

    def _history(self, params: dict[str, list[str]]) -> None:
        url, other = _param(params, "url", required=True), _param(params, "other")
        with self.server.lock:
            rules = self._marks().rules_of(url, other)
            reviews = self.server.db.reviews(url)  # those naming url as either page
        pair = {(url, other), (other, url)}
        self._json({"reviews": [review_json(r) for r in reviews if (r.url, r.other) in pair],
                    "overrides": [{"describe": r.describe(), "action": r.action,
                                   "target": r.target, "other": r.other, "note": r.note,
                                   "source": r.source or "database"} for r in rules]})

    def _marks(self) -> Marks:
        return Marks(self.server.db.latest_reviews(), Overrides(self.server.rules()))

    # --- POST -----------------------------------------------------------------------------

    def _post(self, target: SplitResult) -> None:
        if target.path not in ("/api/review", "/api/override"):
            raise RequestError(HTTPStatus.NOT_FOUND, f"no action {target.path}")
        self._check_token()
        body = self._body()
        fields = {name: _field(body, name) for name in FIELDS}
        server = self.server
        with server.lock:
            outcome = act(target.path, fields, body.get("remove") is True, server.db_url,
                          server.known, server.overrides_file)
            server.reopen()
            if outcome.records:  # pages moved: the list is read again at its next request
                server.drops.invalidate()
            problem = actions.log_moves(server.drop_log or outcome.drop_log, outcome.records)
        answer = outcome_json(outcome)
        if problem:
            answer["message"] += f"; {problem}"
        self._json(answer)

    def _check_token(self) -> None:
        given = self.headers.get(TOKEN_HEADER) or ""
        if not hmac.compare_digest(given.encode(), self.server.token.encode()):
            raise RequestError(HTTPStatus.FORBIDDEN,
                               f"missing or wrong {TOKEN_HEADER}: act from the review page")
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise RequestError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                               "send the action as JSON (Content-Type: application/json)")

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            raise RequestError(HTTPStatus.BAD_REQUEST,
                               f"a JSON body of 1 to {MAX_BODY} bytes is needed")
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            raise RequestError(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        return body

    # --- answers --------------------------------------------------------------------------

    def _html(self, text: str, nonce: str) -> None:
        self._send(HTTPStatus.OK, text.encode(), "text/html; charset=utf-8",
                   {"Content-Security-Policy": CSP.format(nonce=nonce)})

    def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        body = json.dumps(data, ensure_ascii=False).encode()
        self._send(status, body, "application/json; charset=utf-8",
                   {"Content-Security-Policy": "default-src 'none'"})

    def _send(self, status: HTTPStatus, body: bytes, kind: str,
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": kind, "Content-Length": str(len(body)),
                            "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                            "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                            **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def _one_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _param(params: dict[str, list[str]], name: str, required: bool = False) -> str:
    value = (params.get(name) or [""])[-1].strip()
    if required and not value:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"the {name} parameter is needed")
    return value


def _field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RequestError(HTTPStatus.BAD_REQUEST, f"{name} must be a string")
    return value
