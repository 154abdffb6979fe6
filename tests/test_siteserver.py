"""SiteServer over real HTTP: status codes, placeholders, hits, HEAD, concurrency, disconnects."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from crawler.sitegen import Page, Site, demo_site
from crawler.sitegen.server import SiteServer


def small_site() -> Site:
    pages = {
        "/": Page(b'<a href="{base}/a">a</a> <a href="http://LOCALHOST:{port}/b">b</a>'),
        "/a": Page(b"page a"),
        "/list?page=2": Page(b"second"),
        "/blob": Page(b"{base} stays \x00", "application/octet-stream"),
        "/moved": Page(b"", status=301, headers={"Location": "{base}/a"}),
    }
    return Site(name="small", pages=pages)


@pytest.fixture
def server():
    with SiteServer(small_site()) as srv:
        yield srv


def get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_serves_pages_and_404(server):
    status, headers, body = get(server.base_url + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert f'href="{server.base_url}/a"'.encode() in body
    assert f"http://LOCALHOST:{server.port}/b".encode() in body
    assert get(server.url("/a"))[2] == b"page a"
    assert get(server.url("/nowhere"))[0] == 404
    assert get(server.url("/blob"))[2] == b"{base} stays \x00"  # binary bodies untouched


def test_resolves_like_a_web_server(server):
    assert get(server.url("/list?page=2&utm_source=x"))[2] == b"second"
    assert get(server.url("/x/../%61"))[2] == b"page a"
    assert get(f"http://LOCALHOST:0{server.port}/a")[2] == b"page a"
    assert get(server.url("/list?page=3"))[0] == 404


def test_redirect_location_filled_in(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/moved")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 301 and resp.getheader("Location") == server.base_url + "/a"
    conn.close()


def test_hits_count_raw_targets(server):
    for target in ("/a", "/a", "/list?utm_source=x&page=2", "/nowhere"):
        get(server.url(target))
    assert server.hits["/a"] == 2
    assert server.hits["/list?utm_source=x&page=2"] == 1  # query order as sent
    assert server.hits["/nowhere"] == 1
    assert server.canonical_hits() == {"/a": 2, "/list?page=2": 1}
    server.reset_hits()
    assert not server.hits


def test_head_and_keep_alive(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("HEAD", "/a")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Length") == "6"
    assert resp.read() == b""
    for _ in range(3):  # same connection: HTTP/1.1 keep-alive
        conn.request("GET", "/a")
        assert conn.getresponse().read() == b"page a"
    conn.close()
    assert server.hits["/a"] == 4


def test_concurrent_requests():
    site = demo_site()
    paths = sorted(site.canonical_pages)[:40]
    with SiteServer(site) as srv, ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda p: get(srv.url(p))[0], paths * 4))
        assert results == [200] * len(paths) * 4
        assert sum(srv.hits.values()) == len(paths) * 4


def test_survives_client_disconnects(server):
    for _ in range(5):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"GET /a HTTP/1.1\r\nHost: localhost\r\n\r\n")
        sock.close()
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        raw.sendall(b"GET /a HTT")  # half a request line, then hang up
        raw.close()
    assert get(server.url("/a"))[2] == b"page a"


def test_start_stop_lifecycle():
    srv = SiteServer(small_site())
    with pytest.raises(RuntimeError, match="not started"):
        _ = srv.port
    srv.start()
    assert srv.start() is srv  # idempotent
    port = srv.port
    assert get(srv.url("/a"))[0] == 200
    srv.stop()
    srv.stop()
    assert srv.port == port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
