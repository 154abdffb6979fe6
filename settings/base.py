"""Checkout shim of :mod:`crawler.settings.base` (every setting, with its default)."""

from crawler.settings.base import *  # noqa: F403
