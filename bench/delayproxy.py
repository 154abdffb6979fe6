"""A TCP proxy that holds each request chunk a fixed time: a server one round trip further away.

``python -m bench.delayproxy --to HOST:PORT --delay SECONDS [--port N]`` listens on 127.0.0.1
and forwards every connection to ``HOST:PORT``, each chunk the client sends held ``delay``
seconds (order kept), the replies passed on at once: every request-reply exchange takes
``delay`` longer, as with a server on another machine. ``bench.crawl --redis-delay MS`` puts
the distributed workers' Redis behind one (:func:`delayed`), so round trips cost what they do
between machines instead of loopback's ~0.1 ms (``tc netem`` needs a kernel module this
machine's lacks). The event loop's timers wake at millisecond granularity, so a delay under 1 ms
costs up to about 1 ms more (measure it: :func:`round_trip_ms`).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit, urlunsplit

from bench.ownservers import free_port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if data is None:
                writer.close()
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            await queue.put((time.monotonic() + delay, data))
    finally:
        await queue.put((0.0, None))
        await sender


async def _serve(port: int, host: str, target_port: int, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(host, target_port)
        await asyncio.gather(_pipe(client_r, server_w, delay), _pipe(server_r, client_w, 0.0),
                             return_exceptions=True)  # fmt: skip

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


@contextmanager
def delayed(url: str, delay: float) -> Iterator[str]:
    """``url`` (``scheme://host:port/...``) behind a proxy holding each request ``delay``
    seconds, in a process of its own; yields the URL to use instead."""
    parts = urlsplit(url)
    port = free_port()
    target = f"{parts.hostname}:{parts.port}"
    proc = subprocess.Popen([sys.executable, "-m", "bench.delayproxy", "--port", str(port),
                             "--to", target, "--delay", str(delay)])  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"bench.delayproxy did not start on port {port}") from None
                time.sleep(0.05)
        netloc = f"{parts.username}@" if parts.username else ""
        yield urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{port}"))
    finally:
        proc.terminate()
        proc.wait(10)


def round_trip_ms(url: str, tries: int = 200) -> float:
    """Median milliseconds of a Redis PING at ``url``."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        times = []
        for _ in range(tries):
            start = time.perf_counter()
            client.ping()
            times.append(time.perf_counter() - start)
    finally:
        client.close()
    return sorted(times)[len(times) // 2] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.delayproxy",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--to", required=True, metavar="HOST:PORT")
    parser.add_argument("--delay", type=float, required=True, metavar="SECONDS")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    args = parser.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    if not host or not port.isdigit() or args.delay < 0:
        parser.error(f"--to {args.to!r} --delay {args.delay}: expected HOST:PORT, delay >= 0")
    with suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port or free_port(), host, int(port), args.delay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
