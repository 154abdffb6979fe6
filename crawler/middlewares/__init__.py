"""Downloader and spider middlewares and download handlers: the link filter and canonical key
(``links``), scope on redirects (``scope``, ``sharedscope``), robots.txt as RFC 9309 reads it
(``robots``), politeness on the wire (``politeness``), ``Retry-After`` (``retryafter``), held
requests (``hold``), header bounds (``headerlimit``) and wide encodings (``encoding``).
"""

__floor__ = "component"
