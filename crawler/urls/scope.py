"""The crawl's scope: which hosts its links and redirects may reach, and which addresses never.

One :class:`Scope` per crawl, built from the seeds' canonical URLs, answers for links
(:meth:`crawler.urls.linkrules.LinkRules.judge_canonical`) and for every request and redirect
(:class:`crawler.middlewares.scope.ScopeMiddleware`), so the two never disagree.

``SCOPE`` (default ``host``):

``host``
    the seeds' exact hosts;
``domain``
    every host under a seed's registered domain (the public suffix list, private section
    included, as browsers decide what a site is: ``a.blogspot.com`` and ``b.blogspot.com``
    are two domains; a name under no listed suffix, ``localhost`` or ``intranet.lan``, takes
    the list's default rule ``*``: its last two labels);
``subdomains``
    the seeds' hosts and their subdomains (``example.com`` takes ``a.example.com``, not
    ``example.org``; Scrapy's ``allowed_domains`` rule).

The port is part of the scope under every rule: ``http`` on 80 and ``https`` on 443 are one
site, any other port is another (``127.0.0.1:8080`` does not reach ``127.0.0.1:6379``). IP
literals are their own domain, with no subdomains. A seed that redirects to the ``www.`` host
of its own host, or from ``www.`` to the apex, brings that exact host (and port) into scope:
:meth:`Scope.adopt`. URLs with credentials (``user:pw@``) are never followed
(:func:`has_userinfo`).

The public suffix list is the snapshot bundled with ``tldextract`` (installed with Scrapy),
read without the network and without a cache directory: what counts as a registered domain
changes only when ``tldextract`` is upgraded.

Private addresses (``BLOCK_PRIVATE_ADDRESSES``): :func:`is_private_address` is true for every
address that is not globally reachable (private, loopback, link-local, unspecified, shared,
documentation and reserved ranges; site-local IPv6; IPv6 forms that carry a private IPv4
address: mapped, compatible, NAT64, 6to4, Teredo); :class:`ScopeSettings`
reads the setting (None: decided from the seeds, :func:`guard_default`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from crawler import config, defaults

if TYPE_CHECKING:
    from tldextract import TLDExtract

    from crawler.config import SettingsLike

SCOPE_CHOICES = ("host", "domain", "subdomains")
_DEFAULT_PORTS = ("", "80", "443")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
#: (host, port): the unit of scope; port "" for a scheme's default port.
SiteKey = tuple[str, str]
#: Sites whose verdict ``Scope.contains`` remembers (domain and subdomains rules) before it
#: forgets them all; about 200 bytes each.
VERDICTS_SIZE = 65536


def _netloc(canonical: str) -> str:
    start = canonical.find("//") + 2
    end = canonical.find("/", start)
    return canonical[start:end] if end >= 0 else canonical[start:]


def site_key(canonical: str) -> SiteKey:
    """``(host, port)`` of a canonical URL; the port is "" for 80 and 443 (the defaults).

    >>> site_key("https://user@example.com:8443/x")
    ('example.com', '8443')
    >>> site_key("http://[::1]:80/")
    ('::1', '')
    """
    netloc = _netloc(canonical)
    netloc = netloc[netloc.rfind("@") + 1 :]
    if netloc.startswith("["):
        close = netloc.find("]")
        host, port = netloc[1:close], netloc[close + 2 :]
    else:
        host, _, port = netloc.partition(":")
    return host, "" if port in _DEFAULT_PORTS else port


def has_userinfo(canonical: str) -> bool:
    """Whether a canonical URL carries credentials (``user[:password]@`` before the host)."""
    return "@" in _netloc(canonical)


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``host`` spells (IPv6 without brackets), or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, or None.

    IPv4-mapped ``::ffff:a.b.c.d`` and IPv4-compatible ``::a.b.c.d`` (RFC 4291 2.5.5; ``::`` and
    ``::1`` read as 0.0.0.0 and 0.0.0.1), NAT64 ``64:ff9b::a.b.c.d`` (RFC 6052, the well-known
    /96), 6to4 ``2002:AABB:CCDD::/48`` (RFC 3056) and the Teredo client (RFC 4380, the last 32
    bits inverted). Not read: ISATAP interface ids and NAT64 network-specific prefixes (their
    position of the IPv4 bits is a local choice).

    >>> embedded_ipv4(ipaddress.IPv6Address("64:ff9b::a9fe:a9fe"))
    IPv4Address('169.254.169.254')
    """
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _IPV4_COMPATIBLE or ip in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    return ip.teredo[1] if ip.teredo is not None else None


def is_private_address(address: str) -> bool:
    """True for an address that is not globally reachable (an unparsable one included).

    An IPv6 address is private when it is not global itself, when it is site-local
    (``fec0::/10``, deprecated but still routed inside some networks) or NAT64 local-use
    (``64:ff9b:1::/48``, RFC 8215), or when the IPv4 address it carries
    (:func:`embedded_ipv4`) is private: ``64:ff9b::a9fe:a9fe`` reaches 169.254.169.254 through
    a NAT64 gateway. ``64:ff9b::808:808`` (8.8.8.8) stays public.
    """
    ip = ip_literal(address)
    if ip is None:
        return True
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local or ip in _NAT64_LOCAL_USE:
            return True
        ipv4 = embedded_ipv4(ip)
        if ipv4 is not None:
            if _not_global(ipv4):
                return True
            if ip.ipv4_mapped is not None or ip in _IPV4_COMPATIBLE:
                return False  # only the IPv4 address is reached (the /96 itself is "private")
    return _not_global(ip)


def _not_global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not ip.is_global or ip.is_multicast


def is_loopback_name(host: str) -> bool:
    """``localhost`` and ``*.localhost``: loopback by RFC 6761 6.3, without asking DNS."""
    return host == "localhost" or host.endswith(".localhost")


@lru_cache(maxsize=1)
def _extractor() -> TLDExtract:
    """Imported when first needed (``SCOPE=domain``). No suffix list URL and no cache
    directory: the snapshot bundled with tldextract, no network, nothing written."""
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None,
                                 include_psl_private_domains=True)  # fmt: skip


@lru_cache(maxsize=8192)
def registered_domain(host: str) -> str:
    """The registered domain of ``host`` (see the module doc); an IP literal is its own.

    >>> registered_domain("a.b.example.co.uk"), registered_domain("www.site.localhost")
    ('example.co.uk', 'site.localhost')
    """
    if ip_literal(host) is not None:
        return host
    extracted = _extractor()(host)
    top = str(extracted.top_domain_under_public_suffix)
    if top:
        return top
    if extracted.suffix:  # the host is itself a public suffix
        return host
    return ".".join(host.split(".")[-2:])


def www_pair(source: str, target: str) -> bool:
    """Whether ``target`` is the ``www.`` host of ``source`` or ``source``'s apex."""
    return target == "www." + source or source == "www." + target


class Scope:
    """The hosts (and ports) a crawl may reach; see the module doc.

    ``contains`` runs for every link: a set lookup for ``host``, one cached registered-domain
    lookup for ``domain``, one lookup per label for ``subdomains``. ``listeners`` are called
    when a host is adopted (the spider empties its link memo: verdicts may change).
    """

    def __init__(self, seeds: Iterable[str] = (), rule: str = defaults.SCOPE) -> None:
        if rule not in SCOPE_CHOICES:
            raise ValueError(f"unknown scope rule {rule!r}: one of {', '.join(SCOPE_CHOICES)}")
        self.rule = rule
        self.seed_keys = frozenset(site_key(url) for url in seeds)
        self.keys: set[SiteKey] = set(self.seed_keys)
        self.roots = {self._root(key) for key in self.seed_keys}
        self.listeners: list[Callable[[], object]] = []
        self._verdicts: dict[SiteKey, bool] = {}  # domain/subdomains: site -> inside

    @classmethod
    def from_settings(cls, settings: SettingsLike, seeds: Iterable[str] = ()) -> Scope:
        """The scope of ``seeds`` (canonical URLs) under ``SCOPE``; SettingError if bad."""
        return cls(seeds, ScopeSettings.from_settings(settings).rule)

    def _root(self, key: SiteKey) -> SiteKey:
        host, port = key
        return (registered_domain(host), port) if self.rule == "domain" else key

    def contains(self, canonical: str) -> bool:
        """Whether the canonical URL is within the scope (credentials are not looked at)."""
        key = site_key(canonical)
        if key in self.keys or self.rule == "host":
            return key in self.keys
        inside = self._verdicts.get(key)
        if inside is None:
            if len(self._verdicts) >= VERDICTS_SIZE:
                self._verdicts.clear()
            inside = self._verdicts[key] = self._under_root(key)
        return inside

    def _under_root(self, key: SiteKey) -> bool:
        if self.rule == "domain":
            return self._root(key) in self.roots
        host, port = key
        if ip_literal(host) is not None:
            return False
        labels = host.split(".")
        return any((".".join(labels[i:]), port) in self.roots for i in range(1, len(labels)))

    def adopt(self, source: str, target: str) -> bool:
        """Bring ``target``'s exact host into scope if ``source`` (in scope) redirects to its
        ``www.`` host or apex on the same port; True if it is (or already was) in scope."""
        (source_host, source_port), key = site_key(source), site_key(target)
        if source_port != key[1] or key[0] == source_host:
            return self.contains(target)
        if not (www_pair(source_host, key[0]) and (source_host, source_port) in self.keys):
            return False
        if key not in self.keys:
            self.keys.add(key)
            for listener in self.listeners:
                listener()
        return True

    def add_seeds(self, seeds: Iterable[str]) -> int:
        """Widen the scope by more seeds' canonical URLs (a distributed crawl's seeds arriving
        from Redis, :mod:`crawler.cluster.startlist`); how many sites were new. Listeners
        are called when any was."""
        new = {site_key(url) for url in seeds} - self.seed_keys
        if not new:
            return 0
        self.seed_keys = self.seed_keys | new
        self.keys |= new
        self.roots |= {self._root(key) for key in new}
        self._verdicts.clear()
        for listener in self.listeners:
            listener()
        return len(new)

    def describe(self) -> str:
        """One line for the log: the rule and the seed sites."""
        sites = sorted(f"{host}:{port}" if port else host for host, port in self.seed_keys)
        shown = ", ".join(sites[:5]) + (f" and {len(sites) - 5} more" if len(sites) > 5 else "")
        return f"SCOPE={self.rule} around {shown or 'no seed'}"


@dataclass(frozen=True)
class ScopeSettings:
    """``SCOPE`` (``rule``, one of :data:`SCOPE_CHOICES`) and ``BLOCK_PRIVATE_ADDRESSES``
    (``block_private``: True, False, or None when unset or "auto": from the seeds,
    :func:`guard_default`)."""

    rule: str = defaults.SCOPE
    block_private: bool | None = None

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> ScopeSettings:
        """Read and check both (SettingError)."""
        rule = config.get_choice(settings, "SCOPE", defaults.SCOPE, SCOPE_CHOICES)
        return cls(rule, _private_guard(settings))


def _private_guard(settings: SettingsLike) -> bool | None:
    raw = settings.get("BLOCK_PRIVATE_ADDRESSES", defaults.BLOCK_PRIVATE_ADDRESSES)
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "auto", "none")):
        return None
    try:
        return config.get_bool(settings, "BLOCK_PRIVATE_ADDRESSES", False)
    except config.SettingError:
        raise config.SettingError("BLOCK_PRIVATE_ADDRESSES", raw,
                                  "True, False or auto (on unless a seed is private)") from None


def guard_default(seed_addresses: Iterable[str]) -> bool:
    """The guard's default: on unless a seed host is (or resolves to) a private address."""
    return not any(is_private_address(address) for address in seed_addresses)
