"""Deterministic generated web sites for tests, the demo and the benchmarks.

Three generators, each returning a :class:`~crawler.sitegen.site.Site` (pages keyed by request
target, plus ground truth; see :mod:`crawler.sitegen.site`):

- :func:`demo_site` — a ~190-page local newspaper with every kind of duplicate (``scrapy demo``);
- :func:`template_site` — short distinct pages inside one huge shared template (main-text tests);
- :func:`link_heavy_site` — thousands of pages with ~100 links each, no duplicate content (bench).

:class:`~crawler.sitegen.server.SiteServer` serves a site on 127.0.0.1;
:class:`~crawler.sitegen.scripted.ScriptedWeb` is the scripted hostile web of the tests and
benchmarks (each path's answer scripted: status, headers, body, delays, cut connections).
"""

from __future__ import annotations

from crawler.sitegen.demo import demo_site
from crawler.sitegen.linkheavy import link_heavy_site
from crawler.sitegen.site import HTML, Page, Site, remove_dot_segments, server_key
from crawler.sitegen.template import template_site

__all__ = [
    "HTML",
    "Page",
    "Site",
    "demo_site",
    "link_heavy_site",
    "remove_dot_segments",
    "server_key",
    "template_site",
]
