"""The content index's questions and commits on the event loop's own Redis connection
(``crawler.backends.redis.aio.LoopRedis``), against real Redis servers: the replies redis-py
gives, AUTH and SELECT first, every failure raised as ``LoopRedisError`` (a refused
connection, a server that does not answer in time, an error reply), a new connection after a
lost one, and the index going on with redis-py when the loop's connection fails."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
import redis
from scrapy.settings import Settings

from crawler.backends.redis import RedisContentIndex, clear_namespace, connect
from crawler.backends.redis.aio import LoopRedis, LoopRedisError, encode_command
from crawler.vocab import PageSignature
from tests.conftest import free_port

pytestmark = pytest.mark.redis

SCRIPT = "return {ARGV[1], tonumber(ARGV[2]) + 1, {ARGV[3], false}, redis.call('GET', KEYS[1])}"


def test_a_script_call_on_the_loop_answers_what_redis_py_answers(redis_url):
    client = connect(redis_url)
    key = f"test-loop-{uuid.uuid4().hex}"
    client.set(key, b"\x00value\xff")
    script = client.register_script(SCRIPT)
    args = ["d\u00e9j\u00e0 vu", 41, b"\x00\xffbytes"]
    try:
        expected = script(keys=[key], args=args)
        loop_redis = LoopRedis.of(client)
        assert loop_redis is not None

        async def ask() -> object:
            return await loop_redis.execute("EVALSHA", script.sha, 1, key, *args)

        got = asyncio.run(ask())
    finally:
        client.delete(key)
    assert got == expected == ["d\u00e9j\u00e0 vu".encode(), 42, [b"\x00\xffbytes", None],
                               b"\x00value\xff"]  # fmt: skip
    assert loop_redis.calls == 1 and loop_redis.failures == 0


def test_commands_are_encoded_as_redis_py_encodes_them():
    assert encode_command(["SET", "k\u00e9", 3, 1.5, b"\x00"]) == (
        b"*5\r\n$3\r\nSET\r\n$3\r\nk\xc3\xa9\r\n$1\r\n3\r\n$3\r\n1.5\r\n$1\r\n\x00\r\n")
    with pytest.raises(TypeError, match="NoneType"):
        encode_command(["SET", None])
    with pytest.raises(TypeError, match="bool"):
        encode_command(["SET", True])


def test_hiredis_and_python_pack_every_argument_as_redis_py_does():
    """``encode_command`` (hiredis' packer, the Python one for what hiredis refuses) and
    ``encode_slowly`` (Python) give redis-py's bytes, for the types a script call sends and
    for those hiredis leaves to Python (an int subclass, a bytearray, a memoryview)."""
    import enum

    from redis.connection import Encoder

    from crawler.backends.redis.aio import encode_slowly

    class Level(enum.IntEnum):
        HIGH = 3

    values = ["", "k\u00e9\u4e2d", b"", b"\x00\xff" * 9, 0, -5, 10**30, 0.1, 1 / 3, 1e20,
              -0.0, float("inf"), Level.HIGH, bytearray(b"ab"), memoryview(b"cd")]
    encoder = Encoder("utf-8", "strict", False)
    for value in values:
        data = encoder.encode(value)
        want = b"*2\r\n$3\r\nSET\r\n$%d\r\n%b\r\n" % (len(data), data)
        assert encode_command(("SET", value)) == encode_slowly(["SET", value]) == want, value
    together = ["EVALSHA", "a" * 40, 1, "k", *values]
    assert encode_command(together) == encode_slowly(together)


def test_an_error_reply_fails_the_call_and_the_connection_serves_the_next(redis_url):
    loop_redis = LoopRedis.of(connect(redis_url))
    assert loop_redis is not None

    async def run() -> object:
        with pytest.raises(LoopRedisError, match="NOSCRIPT"):
            await loop_redis.execute("EVALSHA", "0" * 40, 0)
        first = loop_redis._protocol
        pong = await loop_redis.execute("PING")
        assert loop_redis._protocol is first  # an error reply leaves the connection up
        return pong

    assert asyncio.run(run()) == b"PONG"
    assert loop_redis.failures == 1 and loop_redis.calls == 2


def test_auth_and_select_go_first_and_a_wrong_password_fails(private_redis):
    url, _ = private_redis
    admin = redis.Redis.from_url(url)
    admin.config_set("requirepass", "s3cret")
    port = url.rsplit(":", 1)[1].split("/")[0]
    authed = redis.Redis.from_url(f"redis://:s3cret@127.0.0.1:{port}/3")
    authed.set("only-in-db-3", b"here")
    loop_redis = LoopRedis.of(authed)
    assert loop_redis is not None and loop_redis.db == 3

    async def get(client: LoopRedis) -> object:
        return await client.execute("GET", "only-in-db-3")

    assert asyncio.run(get(loop_redis)) == b"here"
    wrong = LoopRedis("127.0.0.1", int(port), password="wrong", db=3)
    with pytest.raises(LoopRedisError, match="AUTH"):
        asyncio.run(get(wrong))
    nothing = LoopRedis("127.0.0.1", int(port), db=3)
    with pytest.raises(LoopRedisError, match="NOAUTH"):
        asyncio.run(get(nothing))


def test_a_refused_connection_fails_at_once():
    loop_redis = LoopRedis("127.0.0.1", free_port(), timeout=5, connect_timeout=5)
    started = time.monotonic()
    with pytest.raises(LoopRedisError, match="cannot connect"):
        asyncio.run(loop_redis.execute("PING"))
    assert time.monotonic() - started < 2
    assert loop_redis.failures == 1


def test_a_server_silent_past_the_timeout_fails_the_call_and_the_next_reconnects(private_redis):
    """CLIENT PAUSE holds every client's commands on the real server for a second: the call
    fails after its timeout, its connection is dropped, and once the server answers again the
    next call opens a new connection."""
    url, _ = private_redis
    admin = redis.Redis.from_url(url)
    loop_redis = LoopRedis.of(redis.Redis.from_url(url, socket_timeout=0.3))
    assert loop_redis is not None and loop_redis.timeout == 0.3

    async def run() -> object:
        assert await loop_redis.execute("PING") == b"PONG"
        first = loop_redis._protocol
        admin.client_pause(1000, all=True)
        started = time.monotonic()
        with pytest.raises(LoopRedisError, match="no reply"):
            await loop_redis.execute("PING")
        assert 0.25 < time.monotonic() - started < 0.9
        assert first is not None and first.closed
        await asyncio.sleep(1.0)  # the pause is over
        pong = await loop_redis.execute("PING")
        assert loop_redis._protocol is not first
        return pong

    assert asyncio.run(run()) == b"PONG"


def test_the_timeout_counts_from_each_calls_own_send(private_redis):
    """One watch per connection, not a timer per call: calls answered in time keep the
    connection however long it lives (0.3 s timeout, calls for 0.9 s), and a call sent late
    gets its whole timeout: the server paused 0.45 s after a call that answered, a call
    sent then waits its own 0.3 s before failing; calls waiting together fail together."""
    url, _ = private_redis
    admin = redis.Redis.from_url(url)
    loop_redis = LoopRedis.of(redis.Redis.from_url(url, socket_timeout=0.3))
    assert loop_redis is not None

    async def run() -> tuple[int, float, list[object]]:
        answered = 0
        began = time.monotonic()
        while time.monotonic() - began < 0.9:  # bounded: 0.9 s of calls, 20 ms apart
            assert await loop_redis.execute("PING") == b"PONG"
            answered += 1
            await asyncio.sleep(0.02)
        first = loop_redis._protocol
        assert first is not None and not first.closed
        admin.client_pause(450, all=True)
        started = time.monotonic()
        both = await asyncio.gather(loop_redis.execute("PING"), loop_redis.execute("PING"),
                                    return_exceptions=True)
        return answered, time.monotonic() - started, both

    answered, waited, both = asyncio.run(run())
    assert answered >= 10
    assert 0.25 < waited < 0.45  # the calls' own timeout, not the pause's end
    assert all(isinstance(e, LoopRedisError) and "no reply" in str(e) for e in both)


def test_a_lost_connection_fails_the_waiting_call_and_the_next_reconnects(private_redis):
    url, _ = private_redis
    admin = redis.Redis.from_url(url)
    loop_redis = LoopRedis.of(redis.Redis.from_url(url))
    assert loop_redis is not None

    async def run() -> None:
        await loop_redis.execute("PING")
        admin.client_kill_filter(_type="normal", skipme=True)  # every client but admin
        with pytest.raises(LoopRedisError, match="lost"):
            await loop_redis.execute("PING")
        assert await loop_redis.execute("PING") == b"PONG"

    asyncio.run(run())
    assert loop_redis.failures == 1


def test_only_a_plain_tcp_client_gets_a_loop_connection(tmp_path):
    assert LoopRedis.of(redis.Redis(unix_socket_path=str(tmp_path / "redis.sock"))) is None
    assert LoopRedis.of(redis.Redis(ssl=True)) is None
    assert LoopRedis.of(redis.Redis(protocol=3)) is None
    plain = LoopRedis.of(redis.Redis(host="127.0.0.1", port=6390, db=2, socket_timeout=7))
    assert plain is not None and (plain.port, plain.db, plain.timeout) == (6390, 2, 7.0)


def test_the_index_goes_on_with_redis_py_when_the_loop_connection_fails(redis_url, caplog):
    """The loop's connection refused: the index decides through redis-py instead, the same
    decisions (exact copy, near copy, distinct) as asked inline; said once in the log."""
    caplog.set_level(logging.INFO, logger="crawler.backends.redis.index")
    name = f"test-{uuid.uuid4().hex[:12]}"
    settings = Settings({"REDIS_URL": redis_url, "DEDUP_NAMESPACE": name})
    index = RedisContentIndex.from_settings(settings)
    broken = LoopRedis("127.0.0.1", free_port())
    index._loop.made = broken
    pages = [PageSignature("http://a.test/1", "http://a.test/1", "c1", 0b1011 << 40),
             PageSignature("http://a.test/2", "http://a.test/2", "c1", 0b1011 << 40),
             PageSignature("http://a.test/3", "http://a.test/3", "c3", (0b1011 << 40) | 0b111),
             PageSignature("http://a.test/4", "http://a.test/4", "c4", (1 << 64) - 1)]

    async def decide() -> list[object]:
        return [await index.check_and_add_async(page) for page in pages]

    try:
        matches = asyncio.run(decide())
    finally:
        index.close()
        clear_namespace(connect(redis_url), f"dedup:{name}")
    assert matches[0] is None and matches[3] is None
    assert (matches[1].reason, matches[1].url, matches[1].distance) == (
        "exact_duplicate", "http://a.test/1", 0)
    assert (matches[2].reason, matches[2].url, matches[2].distance) == (
        "near_duplicate", "http://a.test/1", 3)
    assert broken.failures == len(pages)
    said = [r.getMessage() for r in caplog.records if "loop's Redis connection" in r.getMessage()]
    assert len(said) == 1 and "cannot connect" in said[0]


def test_the_index_asks_on_the_loop_and_answers_as_inline(redis_url):
    """The same pages through check_and_add_async (on the loop's connection) and
    check_and_add (redis-py), each on a namespace of its own: the same answers."""
    made = []

    def index() -> RedisContentIndex:
        name = f"test-{uuid.uuid4().hex[:12]}"
        made.append(name)
        return RedisContentIndex.from_settings(
            Settings({"REDIS_URL": redis_url, "DEDUP_NAMESPACE": name}))

    pages = [PageSignature(f"http://a.test/{i}", f"http://a.test/{i}", f"c{i % 5}",
                           (i * 0x9E3779B97F4A7C15) % (1 << 64) >> (i % 3)) for i in range(40)]
    inline, on_loop = index(), index()

    async def decide() -> list[object]:
        return [await on_loop.check_and_add_async(page) for page in pages]

    try:
        expected = [inline.check_and_add(page) for page in pages]
        got = asyncio.run(decide())
        loop_client = on_loop._loop.made
    finally:
        for made_index in (inline, on_loop):
            made_index.close()
        for name in made:
            clear_namespace(connect(redis_url), f"dedup:{name}")
    assert got == expected
    assert any(m is not None for m in expected) and any(m is None for m in expected)
    assert isinstance(loop_client, LoopRedis)
    assert loop_client.calls == len(pages) and loop_client.failures == 0


def test_a_script_the_server_does_not_hold_is_loaded_on_the_loop_not_failed_over(redis_url):
    """A new or restarted Redis answers EVALSHA with NOSCRIPT: the loop's connection loads the
    script and runs it, as redis-py's Script does (before, the call failed over to redis-py
    and the loop's connection was logged as failed on every crawl's first question)."""
    client = connect(redis_url)
    source = f"return {{ARGV[1], #KEYS}} -- {uuid.uuid4().hex}"  # held by no server yet
    script = client.register_script(source)
    assert client.script_exists(script.sha) == [False]
    loop_redis = LoopRedis.of(client)
    assert loop_redis is not None

    async def run() -> list[object]:
        return [await loop_redis.run_script(script, ["k1", "k2"], ["x"]) for _ in range(2)]

    try:
        got = asyncio.run(run())
        assert got == [[b"x", 2], [b"x", 2]]
        # EVALSHA (NOSCRIPT), SCRIPT LOAD, EVALSHA; then EVALSHA alone: the server holds it
        assert (loop_redis.calls, loop_redis.failures) == (4, 0)
        assert client.script_exists(script.sha) == [True]
    finally:
        loop_redis.close()


def test_the_index_asks_on_the_loop_of_a_server_that_lost_its_scripts(private_redis):
    """SCRIPT FLUSH (as a restarted Redis): the index's next question still goes on the
    loop's connection, answered right, no failure."""
    url, _ = private_redis
    name = f"test-{uuid.uuid4().hex[:12]}"
    index = RedisContentIndex.from_settings(Settings({"REDIS_URL": url, "DEDUP_NAMESPACE": name}))
    pages = [PageSignature("http://a.test/1", "http://a.test/1", "c1", 0b1011 << 40),
             PageSignature("http://a.test/2", "http://a.test/2", "c2", (0b1011 << 40) | 0b1)]

    async def decide() -> list[object]:
        first = await index.check_and_add_async(pages[0])
        connect(url).script_flush()
        return [first, await index.check_and_add_async(pages[1])]

    try:
        matches = asyncio.run(decide())
        loop_client = index._loop.made
    finally:
        index.close()
    assert matches[0] is None
    assert (matches[1].reason, matches[1].url, matches[1].distance) == (
        "near_duplicate", "http://a.test/1", 1)
    assert isinstance(loop_client, LoopRedis) and loop_client.failures == 0


@pytest.mark.parametrize("loop_works", [True, False], ids=["on the loop", "loop refused"])
def test_a_commit_goes_on_the_loop_and_lets_the_other_worker_match(
        redis_url, loop_works, caplog, monkeypatch):  # fmt: skip
    """Worker A keeps a page (pending: B's copy of it gets PENDING); A's storage commits it
    through ``commit_async``: on the loop's connection when it works (no redis-py call on the
    caller's thread), through redis-py when it is refused (said once); either way B's copy is
    then an exact duplicate of A's page, and a second commit counts nothing."""
    caplog.set_level(logging.INFO, logger="crawler.backends.redis.pending")
    name = f"test-{uuid.uuid4().hex[:12]}"
    settings = Settings({"REDIS_URL": redis_url, "DEDUP_NAMESPACE": name})
    a = RedisContentIndex.from_settings(settings, owner="A")
    b = RedisContentIndex.from_settings(settings, owner="B")
    if not loop_works:
        a._loop.made = LoopRedis("127.0.0.1", free_port())
    kept = PageSignature("http://a.test/1", "http://a.test/1", "c1", 0b1011 << 40)
    copy = PageSignature("http://b.test/1", "http://b.test/1", "c1", 0b1011 << 40)
    sent: list[object] = []  # requests redis-py writes (a script call is one)
    send = redis.connection.Connection.send_packed_command

    def counted(self: object, command: object, check_health: bool = True) -> None:
        sent.append(command)
        send(self, command, check_health)  # type: ignore[arg-type]

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counted)

    async def run() -> tuple[object, int, int]:
        assert a.check_and_add(kept) is None
        pending = b.check_and_add(copy)
        sent.clear()
        first = await a.commit_async(["http://a.test/1"])
        trips = len(sent)
        assert await a.commit_async(["http://a.test/1"]) == 0
        return pending, first, trips

    try:
        pending, first, trips = asyncio.run(run())
        after = b.check_and_add(copy)
        loop_client = a._loop.made
    finally:
        for index in (a, b):
            index.close()
        clear_namespace(connect(redis_url), f"dedup:{name}")
    assert pending is not None and pending.reason == "pending"
    assert first == 1
    assert after is not None and (after.reason, after.url) == ("exact_duplicate",
                                                             "http://a.test/1")  # fmt: skip
    said = [r.getMessage() for r in caplog.records if "loop's Redis connection" in r.getMessage()]
    assert isinstance(loop_client, LoopRedis)
    if loop_works:
        assert trips == 0 and loop_client.failures == 0 and loop_client.calls == 2
        assert said == []
    else:
        assert trips >= 1 and loop_client.failures == 2
        assert len(said) == 1 and "the commit" in said[0]
