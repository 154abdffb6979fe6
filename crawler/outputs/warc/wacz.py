"""A WACZ package of the crawl's WARC files (``WARC_WACZ``): one file a replay tool opens whole.

WACZ 1.1.1 (https://specs.webrecorder.net/wacz/1.1.1/): a ZIP archive, every entry stored
uncompressed (a replay tool reads records at their offsets), holding

* ``archive/NAME.warc.gz``: the WARC files this process closed in this crawl;
* ``indexes/index.cdx``: their CDXJ indexes (:mod:`crawler.outputs.warc.index`) merged in key order
  (each is sorted; ``filename`` is the WARC's name, relative to ``archive/``). The spec's name:
  pywb 2.10 loads ``*.cdx`` and ``*.cdx.gz`` from a package and ignores ``*.cdxj``;
* ``pages/pages.jsonl``: the pages of the crawl (the first ``text/html`` capture answered 200
  of each URL: stored pages and near duplicates alike, as replay shows them), after the
  ``json-pages-1.0`` header line;
* ``datapackage.json``: each entry's path, size and SHA-256 (its ``name`` the file name in the
  Frictionless form, ``[-a-z0-9._/]``: ``~`` and capitals become ``-`` and lower case), the
  WACZ version, the software, the creation time and the title (the crawl's id);
  ``datapackage-digest.json``: the SHA-256 of ``datapackage.json``.

The package is written as ``NAME.wacz.open`` and renamed when whole. Name: the WARC files'
prefix, the time, the process and the host (``{prefix}-{stamp}-{pid}~{host}.wacz``), so two
workers never write the same package.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
import zipfile
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from crawler.outputs.warc.files import name_host, name_stamp
from crawler.state.atomicfile import fsync_dir

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

WACZ_VERSION = "1.1.1"
PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
INDEX_ENTRY = "indexes/index.cdx"
_CHUNK = 1 << 20
_NAME_RE = re.compile(r"[^-a-z0-9._/]")


def wacz_path(directory: Path, prefix: str, pid: int, host: str) -> Path:
    """The package's name in ``directory`` (module docstring)."""
    return directory / f"{prefix}-{name_stamp(datetime.now(UTC))}-{pid}~{name_host(host)}.wacz"


def merged_lines(indexes: Iterable[Path]) -> Iterator[str]:
    """The lines of sorted CDXJ files, merged in order."""
    with ExitStack() as stack:
        files = [stack.enter_context(path.open(encoding="utf-8")) for path in indexes]
        yield from heapq.merge(*files)


def page_of(line: str) -> dict[str, str] | None:
    """The pages.jsonl entry of a CDXJ line that is an HTML capture answered 200, else None."""
    _key, stamp, fields = line.split(" ", 2)
    record = json.loads(fields)
    if record.get("status") != "200" or record.get("mime") != "text/html":
        return None
    ts = datetime.strptime(stamp[:14], "%Y%m%d%H%M%S").strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"id": hashlib.sha1(f"{stamp} {record['url']}".encode()).hexdigest()[:24],
            "url": record["url"], "ts": ts}  # fmt: skip


class _Entries:
    """Entries written into the open ZIP, each hashed as it goes (for ``datapackage.json``)."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self.archive = archive
        self.resources: list[dict[str, object]] = []

    def add(self, name: str, chunks: Iterable[bytes]) -> None:
        digest, size = hashlib.sha256(), 0
        with self.archive.open(_stored(name), "w", force_zip64=True) as out:
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        self.resources.append({"name": resource_name(name), "path": name,
                               "hash": f"sha256:{digest.hexdigest()}", "bytes": size})


def resource_name(path: str) -> str:
    """A Frictionless resource name (``^[-a-z0-9._/]+$``) of an entry's file name."""
    return _NAME_RE.sub("-", path.rsplit("/", 1)[-1].lower())


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def _index_and_pages(indexes: list[Path]) -> tuple[Iterator[bytes], list[bytes]]:
    pages: list[bytes] = [json.dumps(PAGES_HEADER).encode() + b"\n"]

    seen: set[str] = set()

    def lines() -> Iterator[bytes]:
        for line in merged_lines(indexes):
            page = page_of(line)
            if page is not None and page["url"] not in seen:  # a URL's first capture
                seen.add(page["url"])
                pages.append(json.dumps(page).encode() + b"\n")
            yield line.encode("utf-8")

    return lines(), pages


def write_wacz(target: Path, warcs: list[Path], indexes: list[Path], software: str,
               title: str | None) -> Path:
    """Package ``warcs`` and their ``indexes`` as ``target`` (module docstring)."""
    partial = target.with_name(target.name + ".open")
    with zipfile.ZipFile(partial, "x", zipfile.ZIP_STORED, allowZip64=True) as archive:
        entries = _Entries(archive)
        for warc in warcs:
            entries.add(f"archive/{warc.name}", _file_chunks(warc))
        lines, pages = _index_and_pages(indexes)
        entries.add(INDEX_ENTRY, lines)
        entries.add("pages/pages.jsonl", pages)
        package = {
            "profile": "data-package",
            "resources": entries.resources,
            "wacz_version": WACZ_VERSION,
            "software": software,
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "title": title or target.stem,
        }
        data = json.dumps(package, indent=2).encode("utf-8")
        archive.writestr(_stored("datapackage.json"), data)
        digest = {"path": "datapackage.json", "hash": f"sha256:{hashlib.sha256(data).hexdigest()}"}
        archive.writestr(_stored("datapackage-digest.json"), json.dumps(digest, indent=2))
    with partial.open("rb+") as f:
        os.fsync(f.fileno())
    os.replace(partial, target)
    fsync_dir(target.parent)
    return target


def _stored(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=datetime.now(UTC).timetuple()[:6])
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16  # rw-r--r-- once unpacked (zipfile's default: none)
    return info
