"""Checkout shim: the embedded profile lives in :mod:`crawler.settings` (installed with the
package); this top-level package only keeps ``SCRAPY_SETTINGS_MODULE=settings...`` working from
the project root. It is not part of the wheel."""

from crawler.settings import *  # noqa: F403
