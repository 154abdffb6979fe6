"""Checkout shim of :mod:`crawler.settings.distributed` (the scale-out profile).

Environment variables are read when :mod:`crawler.settings.distributed` is first imported.
"""

from crawler.settings.distributed import *  # noqa: F403
