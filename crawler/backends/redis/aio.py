"""A Redis connection on the crawl's event loop: one script call awaited, the reactor not held.

redis-py's client blocks the thread that calls it until the reply comes. On the reactor thread
that stalls every download and parse of the worker for a round trip (0.1 ms on loopback, a
millisecond or more to Redis on another machine) per call. :class:`LoopRedis` sends a command on
an asyncio connection of the running loop (Scrapy's reactor is asyncio's) and awaits its reply,
parsed by hiredis (the parser redis-py itself uses): while the reply travels the reactor
serves other pages, and no thread is involved (a hand-off to a thread measured 45 µs a call and
GIL contention besides, ``docs/scale-out.md``).

It is a fast path, never the only one. It speaks plain TCP, RESP2, ``AUTH`` and ``SELECT``: a
client redis-py reaches by TLS or a Unix socket gets none (:meth:`LoopRedis.of`), and the
caller asks with redis-py as before. Every failure (refused, reset, no reply within the
client's timeout, an error reply) raises :class:`LoopRedisError`; one of the connection drops it
(the next call opens another). The caller then runs the same call through redis-py, whose retry
policy and exceptions the crawl's outage handling knows
(:class:`~crawler.backends.common.RedisRetry`).
Only calls that are safe to run twice may go this way: the first may have run and only its
reply been lost (the content index's decisions are, :mod:`crawler.backends.common`).

Calls on one connection are answered in the order they were sent (Redis serves a connection's
commands in order), so calls awaited one at a time reach Redis in the order they were made.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any, Literal

import hiredis

if TYPE_CHECKING:
    import logging

    import redis

__all__ = ["LoopConnection", "LoopRedis", "LoopRedisError", "encode_command"]


class LoopRedisError(Exception):
    """A call on the loop's connection failed: the caller asks with redis-py instead."""


def encode_command(args: tuple[Any, ...] | list[Any]) -> bytes:
    """``args`` as a RESP array of bulk strings, encoded as redis-py encodes them: bytes as
    they are, ``str`` in UTF-8, ``int`` and ``float`` by ``repr`` (no ``bool``, no None).
    hiredis' ``pack_command`` (C: 2.4 µs for a content-index question's 21 arguments, 5.5 in
    Python) packs what it takes; what it refuses (a bool, None, a bytearray, an int
    subclass) goes through :func:`encode_slowly`, which encodes or refuses it as redis-py
    would."""
    try:
        return hiredis.pack_command(args if type(args) is tuple else tuple(args))
    except TypeError:
        return encode_slowly(args)


def encode_slowly(args: tuple[Any, ...] | list[Any]) -> bytes:
    """:func:`encode_command` in Python: its specification, and its path for what hiredis
    refuses."""
    parts = [b"*%d\r\n" % len(args)]
    append = parts.append
    for arg in args:
        kind = type(arg)
        if kind is bytes:
            data = arg
        elif kind is str:
            data = arg.encode("utf-8")
        elif kind is int:
            data = b"%d" % arg
        else:
            data = _encoded(arg)
        append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _encoded(arg: Any) -> bytes:
    """One argument of another type than exactly bytes, str or int, as redis-py encodes it."""
    if isinstance(arg, bytes):
        return bytes(arg)
    if isinstance(arg, str):
        return str(arg).encode("utf-8")
    if isinstance(arg, int | float) and not isinstance(arg, bool):
        return repr(arg).encode("ascii")
    if isinstance(arg, memoryview | bytearray):
        return bytes(arg)
    raise TypeError(f"cannot send {type(arg).__name__} to Redis: {arg!r}")


class _Protocol(asyncio.Protocol):
    """One connection: replies matched to the calls in the order they were sent. A call
    without a reply ``timeout`` seconds after it was sent fails the connection: one timer
    watches the oldest call waiting (armed when a call is sent with none armed; when it
    fires, it fails the connection or waits for the oldest call's own deadline), where a
    timer per call cost 1.6 µs a call and grew the loop's timer heap."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.loop = asyncio.get_running_loop()  # a connection serves the loop that made it
        self.timeout = timeout
        self.transport: asyncio.Transport | None = None
        self.reader = hiredis.Reader()
        self.waiting: deque[tuple[asyncio.Future[Any], float]] = deque()  # and when sent
        self.closed = False
        self._watch: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        try:
            while (reply := self.reader.gets()) is not False:
                future = self.waiting.popleft()[0]
                if not future.done():
                    future.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:  # garbage, or a reply nobody asked
            self.fail(LoopRedisError(f"bad reply from Redis: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail_waiting(LoopRedisError(f"connection to Redis lost: {exc or 'closed'}"))

    def send(self, payload: bytes, future: asyncio.Future[Any]) -> None:
        assert self.transport is not None
        now = self.loop.time()
        self.waiting.append((future, now))
        if self._watch is None:
            self._watch = self.loop.call_at(now + self.timeout, self._overdue)
        self.transport.write(payload)

    def _overdue(self) -> None:
        """The watch fired: fail the connection when its oldest call is past its deadline,
        else watch that call's deadline."""
        self._watch = None
        if not self.waiting or self.closed:
            return
        deadline = self.waiting[0][1] + self.timeout
        if self.loop.time() >= deadline:
            self.fail(LoopRedisError(f"no reply from Redis within {self.timeout:g}s"))
        else:
            self._watch = self.loop.call_at(deadline, self._overdue)

    def close(self) -> None:
        """Close the connection (nothing to do once its loop is closed: gone with it)."""
        self.closed = True
        self._unwatch()
        if self.transport is not None and not self.loop.is_closed():
            self.transport.close()

    def fail(self, error: Exception) -> None:
        """Drop the connection; every call still waiting fails with ``error``."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._fail_waiting(error)

    def _fail_waiting(self, error: Exception) -> None:
        self._unwatch()
        while self.waiting:
            future = self.waiting.popleft()[0]
            if not future.done():
                future.set_exception(error)

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None


class LoopRedis:
    """Commands to one Redis server on the running asyncio loop (module docstring).

    ``timeout``: seconds a reply (and the connection) may take before the call fails and the
    connection is dropped. Made with :meth:`of` from the redis-py client it stands beside.
    """

    def __init__(self, host: str, port: int, *, db: int = 0, username: str | None = None,
                 password: str | None = None, timeout: float = 30.0,
                 connect_timeout: float = 5.0) -> None:  # fmt: skip
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None
        self.calls = self.failures = 0
        self.failures_logged = False  # the caller logs the first failure once

    @classmethod
    def of(cls, client: redis.Redis) -> LoopRedis | None:
        """The loop connection to the server ``client`` talks to; None when that client
        reaches it otherwise than by plain TCP (TLS, a Unix socket, a sentinel)."""
        import redis as redis_module

        pool = client.connection_pool
        if pool.connection_class is not redis_module.Connection:
            return None
        kwargs = pool.connection_kwargs
        if int(kwargs.get("protocol") or 2) != 2:
            return None
        timeout = kwargs.get("socket_timeout") or 30.0
        return cls(kwargs.get("host") or "localhost", int(kwargs.get("port") or 6379),
                   db=int(kwargs.get("db") or 0), username=kwargs.get("username"),
                   password=kwargs.get("password"), timeout=float(timeout),
                   connect_timeout=float(kwargs.get("socket_connect_timeout") or 5.0))

    async def execute(self, *args: Any) -> Any:
        """The reply to one command (an error reply raises :class:`LoopRedisError`)."""
        return self._checked(await self._reply(args))

    async def run_script(self, script: Any, keys: list[Any], args: list[Any]) -> Any:
        """The reply of redis-py ``script`` (``register_script``) run with ``keys`` and
        ``args``: ``EVALSHA``, and on a server that does not hold the script (a new or
        restarted Redis answers ``NOSCRIPT``) ``SCRIPT LOAD`` and ``EVALSHA`` again, as
        redis-py's own ``Script`` call does. Without this the first call of each script on a
        fresh server failed over to redis-py (and logged the loop connection as failed)."""
        call = ("EVALSHA", script.sha, len(keys), *keys, *args)
        reply = await self._reply(call)
        if isinstance(reply, hiredis.ReplyError) and str(reply).startswith("NOSCRIPT"):
            self._checked(await self._reply(("SCRIPT", "LOAD", script.script)))
            reply = await self._reply(call)
        return self._checked(reply)

    async def _reply(self, args: tuple[Any, ...]) -> Any:
        """The reply to one command as read, an error reply included."""
        self.calls += 1
        try:
            protocol = self._protocol
            loop = asyncio.get_running_loop()
            if protocol is None or protocol.closed or protocol.loop is not loop:
                protocol = await self._connect()
            return await self._call(protocol, encode_command(args))
        except LoopRedisError:
            self.failures += 1
            raise

    def _checked(self, reply: Any) -> Any:
        if isinstance(reply, hiredis.ReplyError):
            self.failures += 1
            raise LoopRedisError(f"Redis answered an error: {reply}")
        return reply

    async def _call(self, protocol: _Protocol, payload: bytes) -> Any:
        """The reply to ``payload``; past the timeout the connection is dropped (a late reply
        then matches nothing) and the call fails."""
        future: asyncio.Future[Any] = protocol.loop.create_future()
        protocol.send(payload, future)
        return await future

    async def _connect(self) -> _Protocol:
        """Open the connection (one at a time: callers meanwhile wait for the same one) and
        send ``AUTH`` and ``SELECT`` first when the client has them."""
        if self._connecting is not None:
            return await asyncio.shield(self._connecting)
        self.close()  # the one before: lost, or another loop's
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            try:
                _, protocol = await asyncio.wait_for(
                    loop.create_connection(lambda: _Protocol(self.timeout), self.host,
                                           self.port),
                    self.connect_timeout)
            except (TimeoutError, OSError) as exc:
                raise LoopRedisError(f"cannot connect to Redis at {self.host}:{self.port}: "
                                     f"{exc!r}") from None
            hello: list[tuple[Any, ...]] = []
            if self.password is not None:
                hello.append(("AUTH", self.username, self.password) if self.username
                             else ("AUTH", self.password))  # fmt: skip
            if self.db:
                hello.append(("SELECT", self.db))
            for command in hello:
                reply = await self._call(protocol, encode_command(command))
                if isinstance(reply, hiredis.ReplyError):
                    protocol.fail(LoopRedisError("closed"))
                    raise LoopRedisError(f"Redis refused {command[0]}: {reply}")
            self._protocol = protocol
            self._connecting.set_result(protocol)
            return protocol
        except BaseException as exc:
            self._connecting.set_exception(exc if isinstance(exc, LoopRedisError)
                                           else LoopRedisError(repr(exc)))  # fmt: skip
            self._connecting.exception()  # retrieved: no "never retrieved" warning
            raise
        finally:
            self._connecting = None

    def close(self) -> None:
        """Drop the connection (a later call opens another)."""
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.close()


class LoopConnection:
    """The loop connection a component keeps beside its redis-py ``client``: made on first
    use, for the running loop (:meth:`get`), dropped by :meth:`close` (a later use makes
    another). The shared scheduler keeps one; the Redis components make theirs with
    :attr:`crawler.backends.common.RedisBacked._loop`."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        #: The connection; False: not made yet; None: ``client`` reaches its server otherwise
        #: than by plain TCP (:meth:`LoopRedis.of`).
        self.made: LoopRedis | Literal[False] | None = False

    def get(self) -> LoopRedis | None:
        """The connection; None without a running asyncio loop (the caller asks with
        redis-py) or for a server redis-py reaches by TLS or a Unix socket."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        if self.made is False:
            self.made = LoopRedis.of(self.client)
        return self.made

    def close(self) -> None:
        made, self.made = self.made, False
        if made:
            made.close()

    @staticmethod
    def failed(loop_redis: LoopRedis, log: logging.Logger, who: str, what: str,
               exc: Exception) -> None:  # fmt: skip
        """Say once per connection, at INFO, that a call on it failed and ``what`` goes
        through redis-py instead."""
        if not loop_redis.failures_logged:
            loop_redis.failures_logged = True
            log.info("%s: the event loop's Redis connection failed (%s); %s goes through "
                     "redis-py (and so will any other that fails)", who, exc, what)
