"""The scripted web of the hostile tests (:mod:`crawler.sitegen.scripted`), on real sockets."""

from __future__ import annotations

import http.client
import socket
import time

import pytest

from crawler.sitegen.scripted import Answer, Request, ScriptedSite, ScriptedWeb, html, redirect


def get(site: ScriptedSite, target: str, host: str | None = None,
        ) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=10)
    try:
        conn.request("GET", target, headers={"Host": host} if host else {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_routes_answer_exact_targets_then_paths_then_the_script(scripted) -> None:
    site = scripted[0]
    site.serve({"/a?x=1": Answer(body="exact"), "/a": Answer(201, "by path")})
    site.script(lambda request: Answer(202, f"script {request.target} #{request.nth}"))
    assert get(site, "/a?x=1")[::2] == (200, b"exact")
    assert get(site, "/a?x=2")[::2] == (201, b"by path")
    assert get(site, "/b")[::2] == (202, b"script /b #1")
    assert get(site, "/b")[::2] == (202, b"script /b #2")
    assert site.hits == {"/a?x=1": 1, "/a?x=2": 1, "/b": 2}


def test_an_unscripted_target_is_a_404_and_reset_forgets_everything(scripted) -> None:
    site = scripted[1]
    site.route("/", html("Home", "text", ["/x"]))
    status, headers, body = get(site, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert b'<a href="/x">/x</a>' in body and headers["Content-Length"] == str(len(body))
    assert get(site, "/nothing")[0] == 404
    scripted.reset()
    assert get(site, "/")[0] == 404 and site.hits == {"/": 1}


def test_headers_redirects_and_hostile_bytes_are_sent_as_given(scripted) -> None:
    site = scripted[0]
    raw = "Привет".encode("utf-16-be") + b"\x00\xff\x1b]52;c;x\x07"
    site.serve({"/busy": Answer(429, "slow down", headers={"Retry-After": "2"}),
                "/r": redirect("/there"), "/raw": Answer(body=raw, content_type="text/html"),
                "/robots.txt": Answer(body="User-agent: *\nDisallow: /p\n",
                                      content_type="text/plain")})  # fmt: skip
    status, headers, _ = get(site, "/busy")
    assert status == 429 and headers["Retry-After"] == "2"
    status, headers, body = get(site, "/r")
    assert status == 301 and headers["Location"] == "/there" and body == b""
    assert "Content-Type" not in headers
    _, headers, body = get(site, "/raw")
    assert body == raw and headers["Content-Type"] == "text/html"
    assert headers["Content-Length"] == str(len(raw))
    assert get(site, "/robots.txt")[2].startswith(b"User-agent: *")


def test_the_log_records_host_port_time_and_count(scripted) -> None:
    site = scripted[2]
    before = time.monotonic()
    get(site, "/", host="a.localhost:1234")
    get(site, "/", host="b.localhost")
    first, second = site.log()
    assert isinstance(first, Request) and first.port == site.port
    assert (first.host, first.nth, second.host, second.nth) == (
        "a.localhost", 1, "b.localhost", 2)
    assert before <= first.at <= second.at == site.times("/")[1]
    assert site.asked("a.localhost") and not site.asked("c.localhost")
    assert site.paths() == {"/"}


def test_a_delay_and_a_slow_body_take_their_time(scripted) -> None:
    site = scripted[0]
    site.serve({"/late": Answer(body="x", delay=0.3),
                "/slow": Answer(body=b"y" * 40, trickle=(10, 0.1))})
    started = time.monotonic()
    assert get(site, "/late")[2] == b"x"
    assert 0.3 <= time.monotonic() - started < 3
    started = time.monotonic()
    assert get(site, "/slow")[2] == b"y" * 40  # four chunks, 0.1 s apart
    assert 0.4 <= time.monotonic() - started < 3


def test_a_cut_body_closes_the_connection_short(scripted) -> None:
    scripted[0].route("/cut", Answer(body=b"z" * 100, cut=30))
    with pytest.raises(http.client.IncompleteRead) as raised:
        get(scripted[0], "/cut")
    assert raised.value.partial == b"z" * 30


def test_a_header_flood_goes_on_until_the_client_hangs_up(scripted) -> None:
    site = scripted[0]
    line = b"X-Filler: " + b"v" * 100 + b"\r\n"
    site.route("/endless", Answer(flood=line))
    with socket.create_connection(("127.0.0.1", site.port), timeout=10) as sock:
        sock.sendall(b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while len(received) < 200_000:
            received += sock.recv(65536)
    assert received.startswith(b"HTTP/1.1 200 OK\r\nX-Filler: v")
    deadline = time.monotonic() + 10
    while not site.flooded and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 200_000 <= site.flooded[0] < 200_000 + 4 * 1024 * 1024


def test_a_web_of_its_own_is_a_context_manager_with_distinct_ports() -> None:
    with ScriptedWeb(sites=2) as web:
        web[0].route("/", Answer(body="zero"))
        web[1].route("/", Answer(body="one"))
        assert web[0].port != web[1].port
        assert (get(web[0], "/")[2], get(web[1], "/")[2]) == (b"zero", b"one")
        assert web[1].url == f"http://127.0.0.1:{web[1].port}"
    with socket.socket() as sock, pytest.raises(OSError):
        sock.settimeout(2)
        sock.connect(("127.0.0.1", web[0].port))  # stopped: the port refuses
