r"""Canonical URL keys: the normalization policy of DESIGN.md, "URL normalization policy".

:func:`normalize_url` turns any spelling of an http(s) URL into one canonical string, the key
the fingerprinter and the dupefilter use. The request itself is still fetched as found (but for
its host: :func:`crawler.urls.linkrules.fetch_url` gives a non-ASCII or trailing-dot host its
canonical form); only the key is canonical. The steps, in order (RFC 3986 section 6, then the
project policy):

0. Clean-up as browsers do: leading/trailing spaces and C0 controls stripped, tab/CR/LF removed
   anywhere, ``\`` before the query read as ``/`` (as browsers and Scrapy's own URL escaping do
   for http(s), so the key names what is fetched). Anything but a ``str`` is refused.

   >>> normalize_url(' http://example.com/a\tb\n ')
   'http://example.com/ab'
   >>> normalize_url('http:\\\\example.com\\a\\b?c\\d')
   'http://example.com/a/b?c%5Cd'

1. Relative references are resolved against ``base`` (RFC 3986 5.2, strict: a reference with a
   scheme is absolute); an empty ``?`` is an empty query, which overrides the base's query.

   >>> normalize_url('../g?y#s', base='http://a/b/c/d;p?q')
   'http://a/b/g?y'
   >>> normalize_url('?', base='http://a/b/c/d;p?q')
   'http://a/b/c/d;p'

2. Scheme and host lower-cased; ``:80``/``:443`` dropped, an empty port dropped, leading zeros
   read as a number; an empty path becomes ``/``; dot segments removed (5.2.4, after ``%2E`` is
   decoded); repeated slashes kept.

   >>> normalize_url('HTTP://Example.COM:0080')
   'http://example.com/'
   >>> normalize_url('https://example.com:8443/a/./b/../c//d')
   'https://example.com:8443/a/c//d'

3. Percent-encoding: hex upper-cased; escapes of unreserved characters decoded (host included);
   other escapes kept (``%2F %40 %3D %2B`` in the path, ``%3A %2F`` in query values); characters
   not allowed by RFC 3986 in that component (space, ``"<>[\]^`{|}``, controls) and non-ASCII
   (as UTF-8) escaped; a ``%`` not followed by two hex digits becomes ``%25``.

   >>> normalize_url('http://example.com/%7euser/a%2fb/r\u00e9sum\u00e9|x^%')
   'http://example.com/~user/a%2Fb/r%C3%A9sum%C3%A9%7Cx%5E%25'

4. Host: percent-decoded, mapped per UTS 46 (non-transitional, as browsers: ``ß`` is kept,
   full-width dots become dots), each non-ASCII label IDNA-encoded with the ``idna`` package,
   ``xn--`` labels validated; one trailing dot removed, empty labels and hosts over 253
   characters refused. IPv6 literals compressed per RFC 5952 (IPv4-mapped ones in dotted form).
   ``www.`` and userinfo kept (userinfo gets rule 3 only).

   >>> normalize_url('http://Fa\u00df.DE\u3002/')
   'http://xn--fa-hia.de/'
   >>> normalize_url('http://[2001:0DB8:0:0:0:0:0:1]:80/')
   'http://[2001:db8::1]/'

5. Query: split on ``&`` only (``;`` is data); empty pairs (and a bare ``=``) removed; space and
   ``%20`` written ``+``, a literal ``+`` and ``%2B`` kept; a flag stays a flag and ``a=`` keeps
   its ``=``; tracking parameters removed (glob patterns matched against the lower-cased name);
   the pairs sorted by (name, value) on bytes (a flag before ``name=``), duplicates kept; an empty
   query loses its ``?``.

   >>> normalize_url('http://a/?b=2&a=x%20y&&utm_source=z&a=1;c&y&b=')
   'http://a/?a=1;c&a=x+y&b=&b=2&y'
   >>> normalize_url('http://a/p?utm_medium=x&&')
   'http://a/p'

6. The fragment is dropped, ``#!`` and ``#/`` routes included.

   >>> normalize_url('https://a.example/app#!/inbox')
   'https://a.example/app'

Anything that is not an http(s) URL raises :class:`InvalidUrl`, the only exception this module
raises (other schemes, no host, a bad port, a host IDNA refuses, IPv6 zone identifiers,
IPvFuture literals). The result is idempotent: ``normalize_url(normalize_url(u)) ==
normalize_url(u)``.

Limits (may change): IPv4 shorthand (``0x7f.1``, ``2130706433``) is left as written; a
non-ASCII label holding ``_`` or an emoji is refused (IDNA 2008 rules of the ``idna`` package,
stricter than browsers). Scrapy's ``Request`` escapes hosts with IDNA 2003, which maps the UTS 46
deviation characters (``faß.de`` is fetched as ``fass.de``): the key follows the policy, the
fetch follows Scrapy.

w3lib is the base where it agrees (its RFC 3986 character classes); its ``canonicalize_url``
is not used: it keeps default ports, decodes reserved escapes in paths, adds ``=`` to flags and
costs five times as much (measured on 10^4 typical absolute URLs: 2.0 against 11 us per URL;
relative links with a base: 3.9 us against 21 us for ``canonicalize_url(urljoin(...))``).

Two fast paths skip the general parser and give exactly what it gives (checked by property
tests against it, ``tests/test_link_fastpath.py``): already-clean absolute ASCII URLs, with or
without a base (strict resolution ignores the base), and plain path references (``/a/b``,
``b``, ``../b``: no ``%``, no ``:`` before the first ``/``, not ``//``, a plain query) against a
base whose canonical origin and directory are cached (the links of one page share a base).
Anything else takes the general path. On the link-heavy bench site's links: about 1 us
against 3.5-5 us for a relative link, 1.4 against 3.3 us for an absolute one with a base.
Hosts are cached.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import logging
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import idna
from w3lib.url import RFC3986_SUB_DELIMS, RFC3986_UNRESERVED

from crawler import config, defaults

if TYPE_CHECKING:
    from collections.abc import Callable

    from crawler.config import SettingsLike

__all__ = ["DEFAULT_POLICY", "InvalidUrl", "UrlPolicy", "normalize_url", "url_host"]

logger = logging.getLogger(__name__)


class InvalidUrl(ValueError):
    """``url`` is not an http(s) URL; ``reason`` says why in a few words."""

    def __init__(self, url: object, reason: str) -> None:
        self.url = url
        self.reason = reason
        shown = repr(url) if len(repr(url)) <= 200 else repr(url)[:200] + "..."
        super().__init__(f"not an http(s) URL ({reason}): {shown}")


class _Refused(Exception):
    """Internal: a component is invalid; normalize_url wraps it in InvalidUrl with the URL."""


# --- character classes (RFC 3986 2.2, 2.3, 3.2.1, 3.3, 3.4) ------------------------------------
_UNRESERVED = frozenset(RFC3986_UNRESERVED.decode())
_SUB_DELIMS = RFC3986_SUB_DELIMS.decode()
_SAFE = {
    "userinfo": RFC3986_UNRESERVED.decode() + _SUB_DELIMS + ":",
    "path": RFC3986_UNRESERVED.decode() + _SUB_DELIMS + ":@/",
    "query": RFC3986_UNRESERVED.decode() + _SUB_DELIMS + ":@/?",
}
# One token to rewrite: an escape, a stray %, or a character outside the component's safe set.
_TOKEN = {
    name: re.compile(r"%[0-9A-Fa-f]{2}|[^" + re.escape(safe) + "]") for name, safe in _SAFE.items()
}
# Work is needed only if a '%' or an unsafe character is present (the common case has neither).
_NEEDS_WORK = {name: re.compile(r"[^" + re.escape(safe) + "]") for name, safe in _SAFE.items()}
_ESCAPES = {}
for _byte in range(256):
    _hex = f"{_byte:02X}"
    for _variant in {_hex, _hex.lower(), _hex[0] + _hex[1].lower(), _hex[0].lower() + _hex[1]}:
        _ESCAPES["%" + _variant] = chr(_byte) if chr(_byte) in _UNRESERVED else "%" + _hex

_C0_OR_SPACE = "".join(map(chr, range(0x21)))
_TAB_CR_LF = str.maketrans("", "", "\t\r\n")
# RFC 3986 appendix B; the fragment is matched and ignored.
_SPLIT = re.compile(r"(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?", re.S)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*\Z")
_PORT = re.compile(r"[0-9]*\Z")
_ASCII_LABEL = re.compile(r"[a-z0-9\-_~!$&'()*+,;=]+\Z")
_HOST_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_HOST_ESCAPE_BYTES = re.compile(rb"%([0-9A-Fa-f]{2})")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# Already-clean absolute URLs (plain ASCII, lower-case scheme and host, no escapes) skip the
# general parser: only the cached host check, dot segments and the query rules remain.
_FAST = re.compile(
    r"(https?)://([a-z0-9.\-]+)(?::([0-9]+))?(/[A-Za-z0-9\-._~!$&'()*+,;=:@/]*)?"
    r"(?:\?([A-Za-z0-9\-._~!$&'()*+,;=:@/?]*))?(?:#.*)?\Z",
    re.S,
)


def _escape_char(char: str) -> str:
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


def _fix_token(match: re.Match[str]) -> str:
    token = match.group()
    if len(token) == 3:
        return _ESCAPES[token]
    return "%25" if token == "%" else _escape_char(token)


def _fix_query_token(match: re.Match[str]) -> str:
    token = match.group()
    if token == " " or token == "%20":
        return "+"
    return _fix_token(match)


def _pct(text: str, component: str) -> str:
    """Apply rule 3 to one component (``query`` also writes spaces as ``+``)."""
    if not _NEEDS_WORK[component].search(text):
        return text
    fix = _fix_query_token if component == "query" else _fix_token
    return _TOKEN[component].sub(fix, text)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path (``/`` first)."""
    if "." not in path:
        return path
    segments = path.split("/")
    out: list[str] = []
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")
    return "/" + "/".join(out)


# --- host (rule 4) ------------------------------------------------------------------------------
def _ipv6(literal: str) -> str:
    if "%" in literal:
        raise _Refused("IPv6 zone identifiers are not supported")
    try:
        address = ipaddress.IPv6Address(literal)
    except ValueError:
        raise _Refused("bad IPv6 address") from None
    mapped = address.ipv4_mapped
    # RFC 5952 section 5: IPv4-mapped addresses keep the dotted quad.
    return f"[::ffff:{mapped}]" if mapped is not None else f"[{address.compressed}]"


def _decode_host_escapes(host: str) -> str:
    if _HOST_ESCAPE.sub("", host).count("%"):
        raise _Refused("stray '%' in host")
    raw = _HOST_ESCAPE_BYTES.sub(
        lambda m: bytes((int(m.group(1), 16),)), host.encode("utf-8", "surrogatepass")
    )
    try:
        return raw.decode("utf-8")
    except UnicodeError:
        raise _Refused("host escapes are not UTF-8") from None


def _label(label: str) -> str:
    if not label:
        raise _Refused("empty label in host")
    try:
        if not label.isascii():
            return idna.alabel(label).decode("ascii")
        if label.startswith("xn--"):
            idna.ulabel(label)
    except (UnicodeError, ValueError) as exc:
        raise _Refused(f"host label {label!r} refused by IDNA: {exc}") from None
    if not _ASCII_LABEL.match(label):
        raise _Refused(f"forbidden character in host label {label!r}")
    return label


@lru_cache(maxsize=16384)
def _host(host: str) -> str:
    """Canonical host of an authority's host part; raises _Refused (never cached)."""
    if host.startswith("["):
        if not host.endswith("]"):
            raise _Refused("unterminated IPv6 literal")
        if host[1:2] in ("v", "V"):
            raise _Refused("IPvFuture literals are not supported")
        return _ipv6(host[1:-1])
    if "%" in host:
        host = _decode_host_escapes(host)
    if host.isascii():
        host = host.lower()
    else:
        # A raw non-ASCII host (e.g. a full-width "%" that maps to "%") is mapped once;
        # the labels below refuse anything left that is not a valid character.
        try:
            host = idna.uts46_remap(host, std3_rules=False)
        except (UnicodeError, ValueError) as exc:
            raise _Refused(f"host refused by UTS 46 mapping: {exc}") from None
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise _Refused("no host")
    canonical = ".".join(_label(label) for label in host.split("."))
    if len(canonical) > 253:  # RFC 1035; also bounds what the cache holds
        raise _Refused("host longer than 253 characters")
    return canonical


def _port(port: str | None, scheme: str) -> str:
    if not port:
        return ""
    if not _PORT.match(port):
        raise _Refused(f"bad port {port!r}")
    value = int(port)
    if value > 65535:
        raise _Refused(f"port {port} out of range 0-65535")
    text = str(value)
    return "" if text == _DEFAULT_PORTS[scheme] else ":" + text


def _split_authority(authority: str) -> tuple[str | None, str, str | None]:
    """(userinfo, host, port) of an authority; the last '@' ends the userinfo, as browsers do."""
    at = authority.rfind("@")
    userinfo = authority[:at] if at >= 0 else None
    hostport = authority[at + 1 :]
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise _Refused("unterminated IPv6 literal")
        rest = hostport[end + 1 :]
        if rest and not rest.startswith(":"):
            raise _Refused("junk after IPv6 literal")
        return userinfo, hostport[: end + 1], rest[1:] if rest else None
    colon = hostport.rfind(":")
    if colon < 0:
        return userinfo, hostport, None
    return userinfo, hostport[:colon], hostport[colon + 1 :]


# --- policy and query (rules 4 and 5) ----------------------------------------------------------
def _check_glob(pattern: str) -> None:
    """Refuse a glob fnmatch would silently read literally (an unclosed '[') or that can never
    match a parameter name."""
    allowed = "glob patterns (* ? [seq] [!seq]) with every '[' closed (write [[] for a literal '[')"
    if not pattern or any(char in pattern for char in "&=#"):
        raise config.SettingError("URLNORM_STRIP_PARAMS", pattern, allowed + ", no & = #")
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            j += pattern[j : j + 1] == "!"
            j += pattern[j : j + 1] == "]"
            j = pattern.find("]", j)
            if j < 0:
                raise config.SettingError("URLNORM_STRIP_PARAMS", pattern, allowed)
            i = j
        i += 1


@dataclass(frozen=True)
class UrlPolicy:
    """What varies in the canonical key: the stripped parameters and whether pairs are sorted.

    ``strip_params`` are glob patterns (:mod:`fnmatch` syntax) matched against the whole
    lower-cased parameter name; they are compiled once into one regular expression.
    """

    strip_params: tuple[str, ...] = defaults.URLNORM_STRIP_PARAMS
    sort_query: bool = defaults.URLNORM_SORT_QUERY
    _strip: Callable[[str], object] | None = field(
        init=False, repr=False, compare=False, default=None
    )

    def __post_init__(self) -> None:
        patterns = tuple(str(p).strip().lower() for p in self.strip_params)
        for pattern in patterns:
            _check_glob(pattern)
        object.__setattr__(self, "strip_params", patterns)
        if patterns:
            regex = "|".join(fnmatch.translate(p) for p in patterns)
            object.__setattr__(self, "_strip", re.compile(regex).match)

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> UrlPolicy:
        """Read ``URLNORM_STRIP_PARAMS`` and ``URLNORM_SORT_QUERY``; SettingError if invalid."""
        return cls(
            strip_params=tuple(
                config.get_list(settings, "URLNORM_STRIP_PARAMS", defaults.URLNORM_STRIP_PARAMS)
            ),
            sort_query=config.get_bool(settings, "URLNORM_SORT_QUERY", defaults.URLNORM_SORT_QUERY),
        )

    def strips(self, name: str) -> bool:
        """True if the parameter ``name`` (as written in the canonical URL) is removed."""
        return self._strip is not None and self._strip(name.lower()) is not None


DEFAULT_POLICY = UrlPolicy()


def _query(query: str, policy: UrlPolicy) -> str:
    strip = policy._strip
    pairs: list[tuple[str, str, str]] = []
    for piece in query.split("&"):
        if not piece or piece == "=":
            continue
        name, eq, value = piece.partition("=")
        name = _pct(name, "query")
        if strip is not None and strip(name.lower()) is not None:
            continue
        # The sort key ends with eq so that a flag ("y") sorts before "y=" deterministically.
        pairs.append((name, _pct(value, "query") if value else value, eq))
    if policy.sort_query and len(pairs) > 1:
        pairs.sort()
    return "&".join([name + eq + value for name, value, eq in pairs])


# --- parsing, resolution, assembly ---------------------------------------------------------------
_Parts = tuple[str | None, str | None, str, str | None]  # scheme, authority, path, query


def _split(url: str) -> _Parts:
    url = url.strip(_C0_OR_SPACE)
    if "\t" in url or "\r" in url or "\n" in url:
        url = url.translate(_TAB_CR_LF)
    if "\\" in url:
        head, mark, tail = url.partition("?")
        url = head.replace("\\", "/") + mark + tail
    match = _SPLIT.match(url)
    assert match is not None  # every group is optional: the pattern matches any string
    scheme, authority, path, query = match.groups()
    if scheme is not None and not _SCHEME.match(scheme):
        # Not a scheme (RFC 3986 3.1): the whole text is a relative path, as browsers read it.
        path, mark, query = url.partition("#")[0].partition("?")
        return None, None, path, query if mark else None
    return scheme, authority, path, query


def _merge(base: _Parts, path: str) -> str:
    if base[1] is not None and not base[2]:
        return "/" + path
    return base[2][: base[2].rfind("/") + 1] + path


def _resolve(ref: _Parts, base: _Parts) -> _Parts:
    """RFC 3986 5.2.2, strict (a reference with a scheme is taken as absolute)."""
    scheme, authority, path, query = ref
    if scheme is not None:
        return ref
    if base[0] is None:
        raise _Refused("the base URL is not absolute")
    if authority is not None:
        return base[0], authority, path, query
    if not path:
        return base[0], base[1], base[2], query if query is not None else base[3]
    if not path.startswith("/"):
        path = _merge(base, path)
    return base[0], base[1], path, query


def _assemble(parts: _Parts, policy: UrlPolicy) -> str:
    scheme, authority, path, query = parts
    if scheme is None:
        raise _Refused("no scheme (a relative URL needs a base)")
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise _Refused(f"scheme {scheme!r} is not http or https")
    if not authority:
        raise _Refused("no host")
    userinfo, host, port = _split_authority(authority)
    netloc = _host(host) + _port(port, scheme)
    if userinfo is not None:
        netloc = _pct(userinfo, "userinfo") + "@" + netloc
    path = _remove_dot_segments(_pct(path, "path")) if path else "/"
    query = _query(query, policy) if query else ""
    return f"{scheme}://{netloc}{path}?{query}" if query else f"{scheme}://{netloc}{path}"


# A reference the base-relative fast path takes: a non-empty path of plain characters (no '%',
# no ':' before the first '/', so never a scheme; not '//', so never an authority), an optional
# plain query and any fragment. Space, tab and backslash can only be in the fragment, where the
# general clean-up (step 0) changes nothing that is kept.
_PLAIN_CHARS = r"A-Za-z0-9\-._~!$&'()*+,;=@"
_PLAIN_REF = re.compile(
    rf"(?!//)(?=[{_PLAIN_CHARS}/])([{_PLAIN_CHARS}]*(?:/[{_PLAIN_CHARS}:/]*)?)"
    r"(?:\?([A-Za-z0-9\-._~!$&'()*+,;=:@/?]*))?(?:#.*)?\Z",
    re.S,
)


@lru_cache(maxsize=1024)
def _base_parts(base: str) -> tuple[str, str] | None:
    """``(canonical origin, directory)`` of a base URL for :func:`_fast_ref`, or None when the
    base is refused (the general path then raises the reason).

    Computed by the general path's own steps, once per base (a page's links share one): the
    origin is what :func:`_assemble` writes before the path, the directory is the base path up
    to its last ``/`` (RFC 3986 5.2.3 merge) with rule 3 applied. Rule 3 works token by token
    and the directory ends with ``/``, so escaping it apart from the reference is exact.
    """
    scheme, authority, path, _ = _split(base)
    try:
        origin = _assemble((scheme, authority, "/", None), DEFAULT_POLICY)[:-1]
    except _Refused:
        return None
    directory = path[: path.rfind("/") + 1] if path else "/"
    return origin, _pct(directory, "path")


def _fast_ref(url: str, base: str, policy: UrlPolicy) -> str | None:
    """The canonical form of a plain path reference (:data:`_PLAIN_REF`) against ``base``,
    exactly as the general path writes it; None when ``url`` or ``base`` is not plain enough.

    Such a reference reads only the base's origin and directory (5.2.2), needs no escaping, and
    has dot segments only where ``/.`` occurs in the merged path.
    """
    match = _PLAIN_REF.match(url)
    if match is None:
        return None
    parts = _base_parts(base)
    if parts is None:
        return None
    origin, directory = parts
    path, query = match.groups()
    if path[0] != "/":
        path = directory + path
    if "/." in path:
        path = _remove_dot_segments(path)
    query = _query(query, policy) if query else ""
    return f"{origin}{path}?{query}" if query else origin + path


def _fast(match: re.Match[str], policy: UrlPolicy) -> str:
    scheme, host, port, path, query = match.groups()
    netloc = _host(host) + _port(port, scheme)
    if not path:
        path = "/"
    elif "/." in path:
        path = _remove_dot_segments(path)
    query = _query(query, policy) if query else ""
    return f"{scheme}://{netloc}{path}?{query}" if query else f"{scheme}://{netloc}{path}"


def _general(url: str, base: str | None, policy: UrlPolicy) -> str:
    """The general path: any reference, split, resolved and assembled step by step (raises
    _Refused); the fast paths must give what it gives."""
    if base is None:
        return _assemble(_split(url), policy)
    return _assemble(_resolve(_split(url), _split(base)), policy)


def normalize_url(url: str, base: str | None = None, policy: UrlPolicy | None = None) -> str:
    """The canonical form of ``url`` (resolved against ``base`` if given); see the module doc.

    Raises :class:`InvalidUrl` (and nothing else) when the result would not be an http(s) URL.
    """
    policy = policy or DEFAULT_POLICY
    try:
        if not isinstance(url, str) or (base is not None and not isinstance(base, str)):
            raise _Refused("not a string")
        # An absolute URL ignores the base (strict resolution), so _FAST serves both calls.
        match = _FAST.match(url)
        if match is not None:
            return _fast(match, policy)
        if base is None:
            return _assemble(_split(url), policy)
        return _fast_ref(url, base, policy) or _general(url, base, policy)
    except _Refused as exc:
        raise InvalidUrl(url, str(exc)) from None
    except InvalidUrl:
        raise
    except Exception as exc:  # a bug here must not crash a crawl; the reason names it
        logger.warning("normalize_url failed on %r: %r", url, exc)
        raise InvalidUrl(url, f"internal error: {exc!r}") from exc


def url_host(canonical_url: str) -> str:
    """Host of a URL returned by :func:`normalize_url`, without port or IPv6 brackets.

    For scope checks ("same host as the seed"); other input gives an unspecified answer.

    >>> url_host("http://user@[2001:db8::1]:8080/x")
    '2001:db8::1'
    >>> url_host("https://xn--bcher-kva.example:8443/")
    'xn--bcher-kva.example'
    """
    start = canonical_url.find("//") + 2
    end = canonical_url.find("/", start)
    netloc = canonical_url[start : end if end >= 0 else None]
    netloc = netloc[netloc.rfind("@") + 1 :]
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")]
    colon = netloc.find(":")
    return netloc if colon < 0 else netloc[:colon]
