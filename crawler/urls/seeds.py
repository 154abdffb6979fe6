"""Seed lists: parsing and checking, before any crawler exists.

Format of a seeds file (UTF-8, a BOM is tolerated):

* one URL per line; surrounding white space is ignored;
* blank lines and lines whose first non-blank character is ``#`` are ignored;
* a line with no scheme means ``https://`` (``example.com/docs`` → ``https://example.com/docs``);
* only ``http`` and ``https`` URLs with a host are accepted; anything else is an error, and so
  is a URL with credentials (``user:password@``: the crawl never sends them), and, for the
  ``crawl`` command, a URL longer than ``URLLENGTH_LIMIT`` (canonical or as fetched).

An error echoes at most 200 characters of a bad line, marked when cut. A line longer than
:data:`LINE_MAX_BYTES` (64 KiB) is refused without being read into memory (a 10 MB line took
1 GB of RSS before it was refused): its error names the line and the limit. Lines end at
``\n`` while reading (then at any line break, as :meth:`str.splitlines` splits), so a file
with old-Mac ``\r``-only line endings larger than 64 KiB is refused as one long line.

:func:`parse_seeds` never stops at the first bad line: it reports every invalid line with its
line number, so a user fixes the whole file in one go. The ``crawl`` command calls it before the
crawler starts and exits non-zero when it finds errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from crawler import defaults
from crawler.urls.linkrules import fetch_url
from crawler.urls.scope import has_userinfo
from crawler.urls.urlnorm import InvalidUrl, UrlPolicy, normalize_url, url_host

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HOST_PORT = re.compile(r"^[^/?#\s]+:\d+(?:[/?#]|$)")
SHOWN_MAX = 200  # characters of a bad seed line echoed in its error
#: Bytes of one seeds-file line read at most; a longer line is refused unread (a seed is one
#: URL, at most URLLENGTH_LIMIT characters: 2,083 by default).
LINE_MAX_BYTES = 64 * 1024


class SeedError(ValueError):
    """The seed list cannot be used; ``str()`` lists every problem, one per line.

    ``per_line`` problems are invalid lines ("line 4: 'ftp://x': ..."); otherwise the one
    problem is with the whole source (a missing file, no seeds at all).
    """

    def __init__(self, source: str, problems: list[str], *, per_line: bool = True) -> None:
        self.source = source
        self.problems = problems
        if per_line:
            lines = "\n".join(f"  {p}" for p in problems)
            message = f"{len(problems)} invalid seed line(s) in {source}:\n{lines}"
        else:
            message = "; ".join(problems)
            message = f"{source}: {message}" if source else message
        super().__init__(message)


@dataclass
class Seeds:
    """Valid seed URLs (as written, scheme added) and their canonical forms, in file order."""

    urls: list[str] = field(default_factory=list)
    canonical: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> set[str]:
        """The hosts the crawl stays within (IDN hosts in punycode, no port)."""
        return {url_host(url) for url in self.canonical}

    def keyed(self, policy: UrlPolicy) -> Seeds:
        """The same seeds with their canonical forms under the crawl's ``policy`` (a seed's
        key must be the key its links get, or a seed linked from its own page is fetched
        twice). The policy changes only the query, so every seed stays valid."""
        return Seeds(list(self.urls), [normalize_url(url, policy=policy) for url in self.urls])


def _with_scheme(line: str) -> str:
    # "example.com:8080/x" has a colon but no scheme: a host:port prefix is not a scheme.
    if _SCHEME.match(line) and not _HOST_PORT.match(line):
        return line
    if line.startswith("//"):
        return f"{defaults.SEED_DEFAULT_SCHEME}:{line}"
    return f"{defaults.SEED_DEFAULT_SCHEME}://{line}"


def shown(line: str) -> str:
    """``line`` as echoed in an error: quoted, at most :data:`SHOWN_MAX` characters of it (a
    20 MB line must not fill the terminal), with a marker when it was cut."""
    if len(line) <= SHOWN_MAX:
        return repr(line)
    return f"{line[:SHOWN_MAX]!r}… (cut, {len(line)} characters in all)"


def url_length(url: str, canonical: str) -> int:
    """The longer of the seed's canonical form (what the trap limit measures on links) and the
    URL its request fetches (escaped as Scrapy escapes it): either over ``URLLENGTH_LIMIT``
    would make the seed a URL the crawl itself refuses."""
    from w3lib.url import safe_url_string

    return max(len(canonical), len(safe_url_string(fetch_url(url, canonical))))


def _seed(line: str, max_length: int) -> tuple[str, str] | str:
    """``(URL, canonical URL)`` of a seed line, or what is wrong with it."""
    url = _with_scheme(line)
    try:
        canonical = normalize_url(url)
    except InvalidUrl as exc:
        return exc.reason
    if has_userinfo(canonical):
        return "credentials in a URL (user:password@) are never sent; remove them"
    if max_length and (length := url_length(url, canonical)) > max_length:
        return (f"{length} characters, over URLLENGTH_LIMIT={max_length}; shorten it or raise"
                " the limit")
    return url, canonical


@dataclass
class LongLine:
    """A seeds-file line over :data:`LINE_MAX_BYTES`: its first bytes and its size, the rest
    skipped unread."""

    head: bytes
    size: int

    def problem(self) -> str:
        shown = self.head[:SHOWN_MAX].decode("utf-8", "replace")
        return (f"{shown!r}… (cut, {self.size} bytes in all): longer than the "
                f"{LINE_MAX_BYTES} bytes a seed line may have; give one URL per line")


class _NotUtf8(ValueError):
    def __init__(self, byte: int) -> None:
        super().__init__(byte)
        self.byte = byte


def _file_lines(handle: BinaryIO) -> Iterator[str | LongLine]:
    """The lines of a seeds file, each read at most :data:`LINE_MAX_BYTES` at a time; a
    longer line is a :class:`LongLine`. Raises :class:`_NotUtf8` at the first bad byte."""
    offset = 0
    while chunk := handle.readline(LINE_MAX_BYTES + 1):
        size = len(chunk)
        if size > LINE_MAX_BYTES and not chunk.endswith(b"\n"):
            head = chunk[:SHOWN_MAX]
            while not chunk.endswith(b"\n") and (chunk := handle.readline(LINE_MAX_BYTES)):
                size += len(chunk)
            ending = len(chunk) - len(chunk.rstrip(b"\r\n")) if chunk.endswith(b"\n") else 0
            yield LongLine(head, size - ending)  # the line's own bytes, not its line break
            offset += size
            continue
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _NotUtf8(offset + exc.start) from None
        if offset == 0:
            text = text.removeprefix("\ufeff")
        offset += size
        yield from text.splitlines()


def parse_seeds(lines: Iterable[str | LongLine], source: str = "<seeds>",
                max_length: int = 0) -> Seeds:
    """Parse seed lines; raise :class:`SeedError` listing every invalid line (1-based numbers).

    ``max_length`` (``URLLENGTH_LIMIT``; 0: none) refuses a seed longer than the crawl would
    fetch, which would otherwise be dropped silently as a trap."""
    seeds = Seeds()
    problems: list[str] = []
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, LongLine):
            problems.append(f"line {number}: {raw.problem()}")
            continue
        line = raw.strip().lstrip("\ufeff").strip()
        if not line or line.startswith("#"):
            continue
        found = _seed(line, max_length)
        if isinstance(found, str):
            problems.append(f"line {number}: {shown(line)}: {found}")
            continue
        seeds.urls.append(found[0])
        seeds.canonical.append(found[1])
    if problems:
        raise SeedError(source, problems)
    if not seeds.urls:
        raise SeedError(source, ["no seed URL found (every line is blank or a comment)"],
                        per_line=False)
    return seeds


def load_seeds(path: str | Path, max_length: int = 0) -> Seeds:
    """Read and parse a seeds file; a missing or unreadable file is a :class:`SeedError` too."""
    file = Path(path)
    source = f"seeds file {file}"
    try:
        with file.open("rb") as handle:
            return parse_seeds(_file_lines(handle), source=str(file), max_length=max_length)
    except FileNotFoundError:
        problem = "file not found; give -a seeds=PATH to an existing seed list"
        raise SeedError(source, [problem], per_line=False) from None
    except _NotUtf8 as exc:
        problem = f"not UTF-8 text (byte {exc.byte}): save it as UTF-8"
        raise SeedError(source, [problem], per_line=False) from None
    except OSError as exc:
        raise SeedError(source, [f"cannot read: {exc.strerror}"], per_line=False) from None


def seeds_from_args(seeds: str | None = None, urls: str | None = None,
                    max_length: int = 0) -> Seeds:
    """The seeds of ``-a seeds=FILE`` and/or ``-a urls=U1,U2`` (both may be given), each at
    most ``max_length`` characters long (0: any)."""
    if not seeds and not urls:
        raise SeedError("", ["no seeds given: use -a seeds=FILE or -a urls=URL1,URL2"],
                        per_line=False)
    result = Seeds()
    if seeds:
        loaded = load_seeds(seeds, max_length)
        result.urls += loaded.urls
        result.canonical += loaded.canonical
    if urls:
        parsed = parse_seeds(urls.split(","), source="-a urls", max_length=max_length)
        result.urls += parsed.urls
        result.canonical += parsed.canonical
    return result
