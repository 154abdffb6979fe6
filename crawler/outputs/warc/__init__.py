"""WARC output: every page whose fate is known, archived as received (``WARC_OUTPUT``).

Three pieces, wired by ``crawler/settings/base.py`` through the two factories below
(:class:`RawCaptureMiddleware`, :class:`WarcWriter`), which import warcio only when
``WARC_OUTPUT`` is set: warcio is the ``warc`` extra, and a default install lists both
components without having it:

* :class:`crawler.outputs.warc.capture.RawCaptureMiddleware` (downloader middleware, order
  950: its ``process_response`` runs before ``HttpCompressionMiddleware``'s, 590) keeps the
  status, headers and body of a 2xx response as the download handler returned them;
* :class:`crawler.outputs.warc.extension.WarcWriter` (extension) holds each capture until
  storage has committed the page's fate (``batch_committed``), then writes its records;
* :mod:`crawler.outputs.warc.records` builds the records with warcio and
  :mod:`crawler.outputs.warc.files` writes them, one gzip member per record, into rotating
  files.

This module reads the settings: :meth:`WarcOptions.from_settings` (no I/O, in
:func:`crawler.commands.preflight.settings_checks`) and :func:`check_warc` (creates the
directory and writes a probe file: call it before the crawl starts, as ``check_storage``).
"""

from __future__ import annotations

__floor__ = "component"

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawler import config, defaults

__all__ = ["RawCaptureMiddleware", "WarcOptions", "WarcWriter", "check_warc"]


@dataclass(frozen=True)
class WarcOptions:
    """``directory`` and ``prefix`` of the files, ``max_size`` in bytes, ``near_duplicates``
    (``"response"`` or ``"metadata"``), ``record_max_bytes`` (payload cap, 0: none), ``cdxj``
    (an index beside each file), ``wacz`` (a package at the end). ``enabled`` is False when
    ``WARC_OUTPUT`` is empty."""

    output: str
    directory: Path
    prefix: str
    max_size: int
    near_duplicates: str
    record_max_bytes: int = defaults.WARC_RECORD_MAX_BYTES
    cdxj: bool = defaults.WARC_CDXJ
    wacz: bool = defaults.WARC_WACZ

    @property
    def enabled(self) -> bool:
        return bool(self.output)

    @classmethod
    def from_settings(cls, settings: config.SettingsLike) -> WarcOptions:
        """The WARC settings, checked without writing to the disk (:class:`config.SettingError`;
        an existing regular file named as the output is refused: it would be a prefix)."""
        output = str(settings.get("WARC_OUTPUT") or defaults.WARC_OUTPUT).strip()
        max_size = config.get_int(settings, "WARC_MAX_SIZE", defaults.WARC_MAX_SIZE, lo=1)
        near = config.get_choice(settings, "WARC_NEAR_DUPLICATES", defaults.WARC_NEAR_DUPLICATES,
                                 defaults.WARC_NEAR_DUPLICATES_CHOICES)  # fmt: skip
        record_max = config.get_int(settings, "WARC_RECORD_MAX_BYTES",
                                    defaults.WARC_RECORD_MAX_BYTES, lo=0)  # fmt: skip
        cdxj = config.get_bool(settings, "WARC_CDXJ", defaults.WARC_CDXJ)
        wacz = config.get_bool(settings, "WARC_WACZ", defaults.WARC_WACZ)
        if wacz and not output:
            raise config.SettingError("WARC_WACZ", "True", "WARC_OUTPUT set as well (the "
                                      "package holds the crawl's WARC files)")  # fmt: skip
        if wacz and not cdxj:
            raise config.SettingError("WARC_WACZ", "True", "WARC_CDXJ = True as well (a WACZ "
                                      "holds the CDXJ index)")  # fmt: skip
        directory, prefix = _checked_output(settings, output)
        return cls(output, directory, prefix, max_size, near, record_max, cdxj, wacz)


def split_output(output: str, default_prefix: str) -> tuple[Path, str]:
    """``(directory, prefix)`` of ``WARC_OUTPUT``: a value ending with ``/`` or naming an
    existing directory is the directory (files prefixed ``default_prefix``); anything else is a
    path prefix (``warcs/run1`` writes ``warcs/run1-<timestamp>-...``)."""
    path = Path(os.path.expanduser(output))
    if output.endswith(("/", os.sep)) or path.is_dir():
        return path, default_prefix
    return path.parent, path.name


def _checked_output(settings: config.SettingsLike, output: str) -> tuple[Path, str]:
    """``(directory, prefix)`` of ``WARC_OUTPUT`` (:func:`split_output`), refused when it names
    no prefix or an existing regular file (it would be a prefix)."""
    bot = str(settings.get("BOT_NAME") or defaults.BOT_NAME)
    directory, prefix = split_output(output, bot) if output else (Path(), bot)
    if output and (not prefix or prefix in (".", "..")):
        raise config.SettingError("WARC_OUTPUT", output, "a directory or a file path prefix")
    if output and (directory / prefix).is_file():  # "write into this file" is not a prefix
        raise config.SettingError("WARC_OUTPUT", output, "a directory (ending with /) or a path "
                                  "prefix that is not an existing file")  # fmt: skip
    return directory, prefix


def check_warc(settings: config.SettingsLike) -> None:
    """Before the crawl starts: the WARC directory exists (created if missing) and accepts a
    new file. Raises :class:`config.SettingError` with the OS error in one line; does nothing
    when ``WARC_OUTPUT`` is empty."""
    options = WarcOptions.from_settings(settings)
    if not options.enabled:
        return
    from crawler.extras import require

    require({"WARC_OUTPUT": "warc"})  # one line naming the extra, before any file is made
    try:
        options.directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=options.directory, prefix=".warc-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        where = exc.filename or options.directory
        raise config.SettingError(
            "WARC_OUTPUT", options.output,
            f"a writable directory or path prefix ({reason}: {where})") from None


class RawCaptureMiddleware:
    """Settings entry of :class:`crawler.outputs.warc.capture.RawCaptureMiddleware`: builds it when
    ``WARC_OUTPUT`` is set, else ``NotConfigured``, without importing warcio."""

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        from scrapy.exceptions import NotConfigured

        if not WarcOptions.from_settings(crawler.settings).enabled:
            raise NotConfigured
        from crawler.outputs.warc.capture import RawCaptureMiddleware as Middleware

        return Middleware.from_crawler(crawler)


class WarcWriter:
    """Settings entry of :class:`crawler.outputs.warc.extension.WarcWriter` (see
    :class:`RawCaptureMiddleware`)."""

    @classmethod
    def from_crawler(cls, crawler: Any) -> Any:
        from scrapy.exceptions import NotConfigured

        if not WarcOptions.from_settings(crawler.settings).enabled:
            raise NotConfigured
        from crawler.outputs.warc.extension import WarcWriter as Writer

        return Writer.from_crawler(crawler)

