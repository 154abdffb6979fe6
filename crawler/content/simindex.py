"""Pigeonhole block-table index of 64-bit fingerprints (Manku, Jain and Das Sarma, WWW 2007).

A fingerprint is cut into ``b`` contiguous blocks (the first ``64 % b`` blocks one bit wider). Two
fingerprints at Hamming distance ``d <= k < b`` differ in at most ``d`` blocks, so at least one of
the ``b`` blocks is identical: looking up the query's own value of every block and checking the
candidates' full distance never misses a fingerprint within ``k`` (the index is exact).

Layout, all numpy arrays (no Python object per entry), log-structured so that an add costs
the same whatever ``n``:

* levels, each with one table per block: the fingerprints (``uint64``) grouped by bucket (the
  block's value, or its top bits: 16 from 2**19 entries on, fewer in a small level), the entry
  position of each (``int32``), and the offsets of every bucket (``int64``, at most 2**16 + 1
  per table); table 0 is fully sorted by value. The *big* level holds almost everything; the
  *mid* level up to ``MID_CAP`` (2**18) entries; while a full mid level is merged into the big
  one it stays readable as the *frozen* level;
* per entry position (insertion order): the caller's key (``int64``) and a tombstone flag;
* a buffer of the newest ``BUFFER_SIZE`` (4096) fingerprints, scanned linearly.

A full buffer is merged into the mid level: O(MID_CAP) per table, about 5 ms (at most ~15 ms)
once per 4096 adds. A full mid level is frozen (a new one takes its place) and merged into the
big level table after table, ``MERGE_STEP`` (2**17) entries written per step, about 2-5 ms; the
adds run one step every few dozen to few hundred adds, so that the merge ends when the new mid
level is half full. A finished table replaces the big level's and the frozen level's one is
emptied: every entry is in exactly one level per table at any time, so queries stay exact while
a merge is under way. So no add pauses for O(n): in ``bench.simindex`` on a shared 2-core
machine, of 2**20 adds the longest (merges included) took 22 ms at 10**7 and 38 ms at
5 * 10**7 (21 and 7 ms of CPU; p99 4 us), where merging into a single sorted level paused
0.2-0.3 s at 10**7 and 1.1-1.4 s at 5 * 10**7 once per 4096 adds. The merges' total work is
about ``b * n`` entries per ``MID_CAP`` adds: 4-7 us per add on average at 10**7 - 5 * 10**7.
``add_many`` of more than a mid level (a load from storage) sorts the batch once per table and
merges it into the big level at once (O(n)): 10**7 fingerprints in 3.5-5 s, 5 * 10**7 in 23 s.

A query reads the query's bucket in every table of every level (two offsets each; two or three
levels), concatenates those slices and the buffer, and runs one XOR + popcount over them: a
handful of numpy calls whatever ``b``: about 25 us at 10**7 (32 us while a big merge is under
way), 1.2-1.5 times a single level's. Memory is ``12 * b + 9`` bytes per fingerprint (57 at
k = 3) plus the buffer, 0.5 MiB of offsets per table and level, and, during a big merge, one
more table (``12 * n`` bytes). The key and tombstone arrays grow by at most 2**20 entries at a
time, in place (``realloc``, which moves the pages of a large array instead of copying them).
The expected candidates per table are ``n / 2**min(64 / b, 16)``: about 150 per table at 10**7
for k <= 3; with k >= 5 blocks shrink to 10 bits or fewer and queries slow down (linearly in
``n``). A wider ``b`` than ``k + 1`` only shrinks the blocks: allowed, never faster.

The 64-bit keys of the exact tables live here too, so the content index and the storage (which
keeps them in ``documents.content_key`` / ``documents.canonical_key``) agree on them:
:func:`content_key` and :func:`url_key`.

Small indexes: the first :data:`SMALL_MAX` (256) entries are held in three Python lists (the
buffer, the keys, the tombstones) and a query scans them in Python (~20 us at 256, about a numpy
query's time), so a small crawl never imports numpy (~40 ms, ~11 MiB). The entry after them, or
any bulk call (``add_many``, ``contains_many``, ``fingerprints``), turns the lists into the
numpy arrays (:meth:`SimIndex._promote`): the same state as if numpy had held them from the
start, so the answers are the same either way.

Limits: at most 2**31 - 1 entries; keys are any ``int64``; a key may be added twice (both
entries live until ``remove(key)``, which tombstones every live entry with that key). ``remove``
is a binary search while keys are added in non-decreasing order (row ids), otherwise it uses a
sort of the keys rebuilt on demand (O(n log n), in that ``remove``). Tombstoned entries are
compacted away once they are half of the index (a rebuild: O(n log n), in that ``remove``);
``repeated`` merges every level into the big one first (O(n)). Not thread-safe. Nothing is
persisted: the index is rebuilt from storage with ``add_many`` (the layout may change between
versions).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import xxhash

from crawler import config, defaults

if TYPE_CHECKING:
    import numpy as np
else:
    np = None  # numpy, imported by _numpy() when the first index outgrows its lists

logger = logging.getLogger(__name__)

BITS = 64
_MASK = (1 << BITS) - 1
BUFFER_SIZE = 4096  # newest entries, scanned linearly; merged into the mid level when full
SMALL_MAX = 256  # entries held in Python lists (no numpy) before the arrays take over
MID_CAP = 1 << 18  # a mid level this full is frozen and merged into the big level step by step
MERGE_STEP = 1 << 17  # entries written per step of that merge (a few ms)
BUCKET_BITS = 16  # at most 2**16 buckets per table: 0.5 MiB of offsets, ~150 entries at 10**7
_MIN_BUCKET_BITS = 4
_MAX_ENTRIES = 2**31 - 1
_HEX16 = re.compile(r"[0-9a-fA-F]{16}")
_UNSORTED_SCAN = 65536  # keys past the sorted order are scanned linearly up to this many
_GROW_STEP = 1 << 20  # the per-position arrays grow by at most this many entries at a time


def _numpy() -> Any:
    """numpy, imported on first use into this module's ``np``."""
    global np
    if np is None:
        import numpy

        np = numpy
    return np


def content_key(content_hash: str) -> int:
    """Unsigned 64-bit key of a content hash: its first 16 hex digits, else xxh3-64 of it.

    Stored (signed) in ``documents.content_key``: changing it needs a schema migration that
    recomputes the column.
    """
    head = content_hash[:16]
    if _HEX16.fullmatch(head):  # int(s, 16) alone would take "0x", "_", signs and spaces
        return int(head, 16)
    return xxhash.xxh3_64_intdigest(content_hash.encode("utf-8", "surrogatepass"))


def url_key(url: str) -> int:
    """Unsigned 64-bit key of a (canonical) URL: xxh3-64 of its UTF-8 bytes.

    Stored (signed) in ``documents.canonical_key``; same migration rule as :func:`content_key`.
    """
    return xxhash.xxh3_64_intdigest(url.encode("utf-8", "surrogatepass"))


def settings_params(settings: config.SettingsLike) -> tuple[int, int]:
    """``(k, blocks)`` from ``SIMHASH_MAX_DISTANCE`` and ``SIMHASH_BLOCKS``, validated."""
    lo, hi = defaults.SIMHASH_MAX_DISTANCE_RANGE
    k = config.get_int(settings, "SIMHASH_MAX_DISTANCE", defaults.SIMHASH_MAX_DISTANCE, lo, hi)
    if settings.get("SIMHASH_BLOCKS", defaults.SIMHASH_BLOCKS) in (None, ""):
        return k, k + 1
    blocks = config.get_int(settings, "SIMHASH_BLOCKS", k + 1, k + 1, BITS)
    return k, blocks



def block_layout(blocks: int) -> list[tuple[int, int]]:
    """``(start, width)`` of each block, counted in bits from the most significant bit."""
    base, extra = divmod(BITS, blocks)
    layout, start = [], 0
    for i in range(blocks):
        width = base + (1 if i < extra else 0)
        layout.append((start, width))
        start += width
    return layout


def rotl(value: int, shift: int) -> int:
    """Rotate a 64-bit integer left by ``shift`` bits."""
    return ((value << shift) | (value >> (BITS - shift))) & _MASK if shift else value


class _Run:
    """One level: per table the fingerprints grouped by bucket (table 0 sorted by value), the
    entry position of each and the bucket offsets. A table merged into another run is emptied
    (one bucket, ``mask`` 0): its entries are read there."""

    __slots__ = ("buckets", "off", "rows", "size", "tab")

    def __init__(self, layout: list[tuple[int, int]], bits: int) -> None:
        self.buckets = [_bucket(start, width, bits) for start, width in layout]
        self.tab = [np.empty(0, np.uint64) for _ in layout]
        self.rows = [np.empty(0, np.int32) for _ in layout]
        self.off = [np.zeros(mask + 2, np.int64) for _, mask in self.buckets]
        self.size = 0  # entries, counted when the run is complete (not while merged away)

    @property
    def nbytes(self) -> int:
        arrays: list[np.ndarray] = [*self.tab, *self.rows, *self.off]
        return sum(a.nbytes for a in arrays)

    def drop_table(self, t: int) -> None:
        self.tab[t], self.rows[t] = np.empty(0, np.uint64), np.empty(0, np.int32)
        self.off[t], self.buckets[t] = np.zeros(2, np.int64), (0, 0)


class SimIndex:
    """Fingerprints within Hamming distance ``k``, exact, over ``blocks`` sorted tables.

    >>> index = SimIndex(3)
    >>> index.add(0b1011, key=7)
    >>> index.query(0b0011)
    (7, 1)
    """

    def __init__(self, k: int, blocks: int | None = None) -> None:
        blocks = k + 1 if blocks is None else blocks
        if not 0 <= k < BITS:
            raise ValueError(f"SimIndex k={k!r} is invalid: allowed an integer in [0, 63]")
        if not k < blocks <= BITS:
            raise ValueError(
                f"SimIndex blocks={blocks!r} is invalid: allowed an integer in [{k + 1}, {BITS}]"
            )
        self.k = k
        self.blocks = blocks
        self._layout = block_layout(blocks)
        self._frozen: _Run | None = None  # a full mid level, being merged into the big one
        self._job: Iterator[int] | None = None  # the steps of that merge
        self._job_rate = 0.0  # entries of merge work owed per add
        self._job_credit = 0.0
        # small: up to SMALL_MAX entries in lists (keys, tombstones, the buffer's fingerprints)
        # and no runs; _promote() makes the arrays (capacity BUFFER_SIZE, growing) and runs
        self._small = True
        self._keys: Any = []  # by position
        self._dead: Any = []
        self._buffer: Any = []
        self._merged = 0  # positions [0, merged) are in the runs
        self._buffered = 0  # positions [merged, merged + buffered) are in the buffer
        self._n_dead = 0
        self._keys_sorted = True
        self._order: np.ndarray | None = None  # argsort of keys[:len(order)] when unsorted

    def _promote(self) -> None:
        """The lists into numpy arrays: the state numpy would have held from the start (every
        entry still in the buffer, since SMALL_MAX < BUFFER_SIZE)."""
        if not self._small:
            return
        _numpy()
        n = self._buffered
        keys, dead, buffer = self._keys, self._dead, self._buffer
        self._big = _Run(self._layout, _MIN_BUCKET_BITS)
        self._mid = _Run(self._layout, _MIN_BUCKET_BITS)
        self._keys = np.empty(BUFFER_SIZE, np.int64)  # by position; capacity grows
        self._dead = np.zeros(BUFFER_SIZE, np.bool_)
        self._buffer = np.empty(BUFFER_SIZE, np.uint64)
        self._keys[:n], self._dead[:n], self._buffer[:n] = keys, dead, buffer
        self._small = False

    def _runs(self) -> list[_Run]:
        frozen = [] if self._frozen is None else [self._frozen]
        return [self._big, *frozen, self._mid]

    # --- size -------------------------------------------------------------------------------
    @property
    def _total(self) -> int:
        return self._merged + self._buffered

    def __len__(self) -> int:
        return self._total - self._n_dead

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (the process overhead of numpy is not counted); while
        small, the bytes of its entries' values (17 each)."""
        if self._small:
            return 17 * self._buffered
        arrays = [self._keys, self._dead, self._buffer]
        if self._order is not None:
            arrays.append(self._order)
        return sum(a.nbytes for a in arrays) + sum(run.nbytes for run in self._runs())

    # --- adding -----------------------------------------------------------------------------
    def add(self, fp: int, key: int) -> None:
        """Add one fingerprint (unsigned 64-bit) under ``key``; visible to the next query."""
        fp = int(fp)
        if not 0 <= fp <= _MASK:
            raise ValueError(f"fingerprint {fp!r} is not an unsigned 64-bit integer")
        if self._small:
            if self._buffered < SMALL_MAX:
                key = int(key)
                keys = self._keys
                if self._keys_sorted and keys and key < keys[-1]:
                    self._keys_sorted = False
                keys.append(key)
                self._dead.append(False)
                self._buffer.append(fp)
                self._buffered += 1
                return
            self._promote()
        if self._buffered == len(self._buffer):
            self._flush()
        elif self._job is not None:
            self._advance()
        pos = self._total
        self._reserve(pos + 1)
        self._note_key(int(key))
        self._keys[pos] = key
        self._buffer[self._buffered] = fp
        self._buffered += 1

    def add_many(self, fps: np.ndarray, keys: np.ndarray) -> None:
        """Bulk add: ``fps`` (uint64) and ``keys`` (int64), in that insertion order."""
        self._promote()
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if fps.shape != keys.shape or fps.ndim != 1:
            raise ValueError(
                f"add_many needs two 1-d arrays of one length, got {fps.shape} and {keys.shape}"
            )
        if len(fps) == 0:
            return
        if self._buffered + len(fps) <= len(self._buffer):
            for fp, key in zip(fps.tolist(), keys.tolist(), strict=True):
                self.add(fp, key)
            return
        start = self._total
        if start + len(fps) > _MAX_ENTRIES:
            raise OverflowError(f"SimIndex holds at most {_MAX_ENTRIES} entries")
        self._reserve(start + len(fps))
        if self._keys_sorted and (
            np.any(keys[1:] < keys[:-1]) or (start and keys[0] < self._keys[start - 1])
        ):
            self._keys_sorted = False
        self._keys[start : start + len(fps)] = keys
        batch = np.concatenate([self._buffer[: self._buffered], fps])
        self._buffered = 0
        if self._mid.size + len(batch) < MID_CAP:
            self._into_mid(batch, self._merged)
        else:
            self._into_big(batch, self._merged)

    def _note_key(self, key: int) -> None:
        pos = self._total
        if self._keys_sorted and pos and key < self._keys[pos - 1]:
            self._keys_sorted = False

    def _reserve(self, needed: int) -> None:
        if needed > _MAX_ENTRIES:
            raise OverflowError(f"SimIndex holds at most {_MAX_ENTRIES} entries")
        if needed <= len(self._keys):
            return
        # 1.25x growth while small, then steps of _GROW_STEP: an in-place resize is a realloc,
        # which moves the pages of a large array (mremap) instead of copying them, so a step
        # costs O(step) (a few ms), not O(n); the slack stays under 10 MiB
        capacity = needed + min(max(BUFFER_SIZE, len(self._keys) // 4), _GROW_STEP)
        try:
            self._keys.resize(capacity, refcheck=True)
        except ValueError:  # another reference to it exists: copy
            self._keys = _grown(self._keys, capacity)
        try:
            self._dead.resize(capacity, refcheck=True)  # new entries are zero (False)
        except ValueError:
            self._dead = _grown(self._dead, capacity)

    def _flush(self) -> None:
        """Merge the buffer into the mid level (O(MID_CAP))."""
        if self._buffered:
            batch = self._buffer[: self._buffered].copy()
            self._buffered = 0
            self._into_mid(batch, self._merged)

    def _into_mid(self, fps: np.ndarray, first: int) -> None:
        """Merge ``fps`` (positions ``first``...) into the mid level; a full one is frozen and
        its merge into the big level begins (run a step at a time by the next adds)."""
        mid = self._mid
        bits = self._mid_bits(mid.size + len(fps))
        run = self._sorted_run(fps, first, bits)
        if mid.size:
            _drain(self._merge(mid, run, bits))
        else:
            self._mid = mid = run
        self._merged = first + len(fps)
        if mid.size < MID_CAP:
            return
        self._finish_job()  # done long before, unless add_many filled the mid level
        if not self._big.size:
            self._big = mid
            self._mid = _Run(self._layout, _MIN_BUCKET_BITS)
            return
        self._mid = _Run(self._layout, _MIN_BUCKET_BITS)
        size = self._big.size + mid.size
        self._frozen = mid
        self._job = self._merge(self._big, mid, _bucket_bits(size))
        # due by the time the new mid level is half full: the job's steps spread over that
        self._job_rate = self.blocks * size / max(1, MID_CAP // 2)
        self._job_credit = 0.0

    def _into_big(self, fps: np.ndarray, first: int) -> None:
        """Bulk path: one sort per table of ``fps`` plus the mid level, then one merge (O(n))
        into the big level, all now."""
        self._finish_job()
        run = self._sorted_run(fps, first, _bucket_bits(len(fps)))
        if self._mid.size:
            _drain(self._merge(run, self._mid, _bucket_bits(run.size + self._mid.size)))
        if self._big.size:
            _drain(self._merge(self._big, run, _bucket_bits(self._big.size + run.size)))
        else:
            self._big = run
        self._mid = _Run(self._layout, _MIN_BUCKET_BITS)
        self._merged = first + len(fps)

    def _mid_bits(self, size: int) -> int:
        """Bucket bits of a mid level of ``size`` entries: once the big level is large, those
        of the merge of a full one into it (16), so that this merge needs no re-grouping."""
        big = self._big.size
        return _bucket_bits(big + MID_CAP if big >= MID_CAP else size)

    def _advance(self) -> None:
        """Run the steps of the big merge that this add owes."""
        self._job_credit += self._job_rate
        while self._job is not None and self._job_credit > 0:
            try:
                self._job_credit -= next(self._job)
            except StopIteration:
                self._job, self._frozen = None, None

    def _finish_job(self) -> None:
        if self._job is not None:
            _drain(self._job)
            self._job, self._frozen = None, None

    def _settle(self) -> None:
        """Everything in the big level: the buffer, a pending merge, the mid level (O(n))."""
        self._flush()
        self._finish_job()
        mid = self._mid
        if mid.size:
            if self._big.size:
                _drain(self._merge(self._big, mid, _bucket_bits(self._big.size + mid.size)))
            else:
                self._big = mid
            self._mid = _Run(self._layout, _MIN_BUCKET_BITS)

    def _sorted_run(self, fps: np.ndarray, first: int, bits: int) -> _Run:
        """A run of ``fps`` (positions ``first``...): one sort per table."""
        run = _Run(self._layout, bits)
        for t, (shift, mask) in enumerate(run.buckets):
            # uint16 buckets: numpy's stable argsort is a radix sort for 16-bit keys
            buckets = ((fps >> np.uint64(shift)) & np.uint64(mask)).astype(np.uint16)
            # table 0 sorted by value (contains_many, repeated); the others by bucket only
            order = _value_order(fps) if t == 0 else np.argsort(buckets, kind="stable")
            run.tab[t] = fps[order]
            rows = order.astype(np.int32)
            if first:
                rows += first
            run.rows[t] = rows
            run.off[t][1:] = np.cumsum(np.bincount(buckets, minlength=mask + 1))
        run.size = len(fps)
        return run

    def _merge(self, into: _Run, src: _Run, bits: int) -> Iterator[int]:
        """Merge ``src`` into ``into`` (buckets of ``bits``), table after table, in steps of
        about MERGE_STEP entries; yields the entries each step handled. A finished table
        replaces ``into``'s and empties ``src``'s, so that between steps every entry is in
        exactly one run per table: queries stay exact while a merge is under way."""
        size = into.size + src.size
        for t, (start, width) in enumerate(self._layout):
            shift, mask = _bucket(start, width, bits)
            old = yield from _grouped(into, t, shift, mask)
            new = yield from _grouped(src, t, shift, mask)
            off = old[2] + new[2]
            out = np.empty(size, np.uint64), np.empty(size, np.int32)
            for c0, c1 in _cuts(off, MERGE_STEP):
                yield _merge_slice(t == 0, c0, c1, out, old, new)
            into.tab[t], into.rows[t], into.off[t] = *out, off
            into.buckets[t] = (shift, mask)
            src.drop_table(t)
            del old, new, out  # the old table is freed before the next one is built
        into.size = size

    # --- querying ---------------------------------------------------------------------------
    def query(self, fp: int, exclude: int | None = None) -> tuple[int, int] | None:
        """``(key, distance)`` of the nearest live fingerprint within ``k`` (ties: the earliest
        added), or None. Entries whose key is ``exclude`` are skipped."""
        hits = self._hits(int(fp), exclude)
        if not hits:
            return None
        pos, dist = min(hits.items(), key=lambda item: (item[1], item[0]))
        return int(self._keys[pos]), dist

    def query_all(self, fp: int, exclude: int | None = None) -> list[tuple[int, int]]:
        """Every live ``(key, distance)`` within ``k``, nearest first, then by insertion."""
        hits = self._hits(int(fp), exclude)
        ordered = sorted(hits.items(), key=lambda item: (item[1], item[0]))
        return [(int(self._keys[pos]), dist) for pos, dist in ordered]

    def _hits(self, fp: int, exclude: int | None) -> dict[int, int]:
        """position -> distance of every live entry within k."""
        if not 0 <= fp <= _MASK:
            raise ValueError(f"fingerprint {fp!r} is not an unsigned 64-bit integer")
        if self._small:
            k, dead, keys = self.k, self._dead, self._keys
            return {
                pos: d
                for pos, d in enumerate([(fp ^ other).bit_count() for other in self._buffer])
                if d <= k and not dead[pos] and (exclude is None or keys[pos] != exclude)
            }
        spans: list[tuple[np.ndarray | None, int]] = []  # (rows, lo) per part; None: buffer
        parts = []
        for run in self._runs():
            if not run.size:
                continue
            for tab, rows, off, (shift, mask) in zip(
                run.tab, run.rows, run.off, run.buckets, strict=True
            ):
                bucket = (fp >> shift) & mask
                lo, hi = off[bucket], off[bucket + 1]
                if hi > lo:
                    spans.append((rows, int(lo)))
                    parts.append(tab[lo:hi])
        if self._buffered:
            spans.append((None, 0))
            parts.append(self._buffer[: self._buffered])
        if not parts:
            return {}
        candidates = parts[0] if len(parts) == 1 else np.concatenate(parts)
        dist = np.bitwise_count(candidates ^ np.uint64(fp))
        found = np.flatnonzero(dist <= self.k).tolist()
        if not found:
            return {}
        hits = self._positions_of(found, dist, spans, [len(part) for part in parts])
        if self._n_dead or exclude is not None:
            hits = {
                pos: d
                for pos, d in hits.items()
                if not self._dead[pos] and (exclude is None or self._keys[pos] != exclude)
            }
        return hits

    def _positions_of(
        self,
        found: list[int],
        dist: np.ndarray,
        spans: list[tuple[np.ndarray | None, int]],
        sizes: list[int],
    ) -> dict[int, int]:
        """Map indexes into the concatenated candidates back to entry positions."""
        hits: dict[int, int] = {}
        part, base = 0, 0
        for i in found:  # ascending
            while i >= base + sizes[part]:
                base += sizes[part]
                part += 1
            rows, lo = spans[part]
            pos = self._merged + i - base if rows is None else int(rows[lo + i - base])
            hits[pos] = int(dist[i])
        return hits

    def contains_many(self, fps: np.ndarray) -> np.ndarray:
        """For each fingerprint, whether some entry (live or tombstoned) holds exactly it.

        Vectorized; used to find, among many new values, the few that need a closer look.
        """
        self._promote()
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        found = np.zeros(len(fps), np.bool_)
        for run in self._runs():
            table = run.tab[0]  # sorted by value
            if len(table):
                at = np.minimum(table.searchsorted(fps), len(table) - 1)
                found |= table[at] == fps
        if self._buffered:
            found |= np.isin(fps, self._buffer[: self._buffered])
        return found

    def repeated(self) -> list[list[int]]:
        """Keys of the live entries holding the same fingerprint, one list per fingerprint
        held more than once, each in insertion order. O(n) numpy (everything is merged into
        one level, then one pass over its sorted table 0) plus Python work per repeated entry.
        """
        if self._small:
            held: dict[int, list[int]] = {}
            for pos, fp in enumerate(self._buffer):
                if not self._dead[pos]:
                    held.setdefault(fp, []).append(pos)
            return [[self._keys[p] for p in held[fp]] for fp in sorted(held)
                    if len(held[fp]) > 1]  # fmt: skip
        self._settle()
        tab, rows = self._big.tab[0], self._big.rows[0]
        if len(tab) < 2:
            return []
        same = np.flatnonzero(tab[1:] == tab[:-1])
        if len(same) == 0:
            return []
        groups: dict[int, set[int]] = {}
        for i in same.tolist():  # equal fingerprints are adjacent in table 0
            for j in (i, i + 1):
                pos = int(rows[j])
                if not self._dead[pos]:
                    groups.setdefault(int(tab[j]), set()).add(pos)
        return [[int(self._keys[p]) for p in sorted(ps)] for ps in groups.values() if len(ps) > 1]

    # --- removing ---------------------------------------------------------------------------
    def remove(self, key: int) -> int:
        """Tombstone every live entry with ``key``; returns how many were removed."""
        removed = 0
        if self._small:
            key, dead = int(key), self._dead
            for pos, held in enumerate(self._keys):
                if held == key and not dead[pos]:
                    dead[pos] = True
                    removed += 1
            self._n_dead += removed
            return removed
        for pos in self._positions(int(key)):
            if not self._dead[pos]:
                self._dead[pos] = True
                removed += 1
        self._n_dead += removed
        if self._n_dead > BUFFER_SIZE and self._n_dead * 2 > self._total:
            self._compact()
        return removed

    def _positions(self, key: int) -> list[int]:
        total = self._total
        keys = self._keys[:total]
        if self._keys_sorted:
            lo = int(keys.searchsorted(key, side="left"))
            hi = int(keys.searchsorted(key, side="right"))
            return list(range(lo, hi))
        if self._order is None or total - len(self._order) > _UNSORTED_SCAN:
            self._order = np.argsort(keys, kind="stable").astype(np.int32)
        order = self._order
        sorted_keys = keys[: len(order)]
        lo = int(sorted_keys.searchsorted(key, side="left", sorter=order))
        hi = int(sorted_keys.searchsorted(key, side="right", sorter=order))
        found = order[lo:hi].tolist()
        tail = np.flatnonzero(keys[len(order) :] == key) + len(order)
        return found + tail.tolist()

    def fingerprints(self) -> tuple[np.ndarray, np.ndarray]:
        """``(fps, keys)`` of the live entries in insertion order (for rebuilding or saving)."""
        self._promote()
        total = self._total
        fps = np.empty(total, np.uint64)
        for run in self._runs():  # each entry is in table 0 of exactly one run
            fps[run.rows[0]] = run.tab[0]
        fps[self._merged : total] = self._buffer[: self._buffered]
        alive = ~self._dead[:total]
        return fps[alive], self._keys[:total][alive].copy()

    def _compact(self) -> None:
        fps, keys = self.fingerprints()
        logger.debug("SimIndex compaction: %d live of %d entries", len(fps), self._total)
        fresh = SimIndex(self.k, self.blocks)
        fresh.add_many(fps, keys)
        self.__dict__.update(fresh.__dict__)


def _bucket_bits(size: int) -> int:
    """Bucket bits of a run of ``size`` entries: about 8-16 entries per bucket while small, so
    the offsets stay a few bytes per entry, at most 2**BUCKET_BITS buckets."""
    return max(_MIN_BUCKET_BITS, min(BUCKET_BITS, size.bit_length() - 4))


def _bucket(start: int, width: int, bits: int) -> tuple[int, int]:
    """``(shift, mask)``: the bucket of a fingerprint in a table is ``(fp >> shift) & mask``,
    the top ``bits`` bits of the table's block (all of it when narrower)."""
    bits = min(width, bits)
    return BITS - start - bits, (1 << bits) - 1


def _grouped(
    run: _Run, t: int, shift: int, mask: int
) -> Generator[int, None, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(fps, rows, offsets)`` of table ``t`` of ``run`` grouped by the buckets ``(shift,
    mask)``. Finer buckets group coarser ones already (a bucket is the top bits of the block):
    only every other offset is kept. Coarser ones are re-grouped (one step: the run is small,
    since bucket bits stop growing at 2**20 entries)."""
    fps, rows, off = run.tab[t], run.rows[t], run.off[t]
    drop = run.buckets[t][1].bit_length() - mask.bit_length()
    if drop >= 0:
        return fps, rows, off[:: 1 << drop]
    buckets = ((fps >> np.uint64(shift)) & np.uint64(mask)).astype(np.uint16)
    off = np.zeros(mask + 2, np.int64)
    off[1:] = np.cumsum(np.bincount(buckets, minlength=mask + 1))
    if t:  # table 0 is sorted by value: already grouped by any of its buckets
        order = np.argsort(buckets, kind="stable")
        fps, rows = fps[order], rows[order]
    yield len(fps) + 1
    return fps, rows, off


def _value_order(fps: np.ndarray) -> np.ndarray:
    """``np.argsort(fps)`` up to the order of equal values, about 2.5x faster at 10**7: one
    (vectorized) sort of the values with their index in place of their low bits, then the few
    entries equal in the other bits sorted again by value."""
    n = len(fps)
    low = np.uint64((1 << max(1, (n - 1).bit_length())) - 1)
    packed = fps & ~low
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    order = (packed & low).astype(np.intp)
    packed &= ~low
    same = np.flatnonzero(packed[1:] == packed[:-1])
    if len(same):
        members = np.union1d(same, same + 1)  # runs of equal high bits are contiguous
        if len(members) > n // 8:  # values not random enough: the plain argsort
            return np.argsort(fps)
        sub = order[members]
        order[members] = sub[np.lexsort((fps[sub], packed[members]))]
    return order


def _cuts(off: np.ndarray, step: int) -> list[tuple[int, int]]:
    """Ranges of buckets holding about ``step`` entries each (more when one bucket does)."""
    marks = off.searchsorted(np.arange(step, int(off[-1]), step), side="right") - 1
    edges = np.unique(np.concatenate([[0], marks, [len(off) - 1]]))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))


def _merge_slice(
    by_value: bool,
    c0: int,
    c1: int,
    out: tuple[np.ndarray, np.ndarray],
    old: tuple[np.ndarray, np.ndarray, np.ndarray],
    new: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> int:
    """Write buckets ``[c0, c1)`` of the merge of ``old`` and ``new`` (each ``(fps, rows,
    offsets)``) into ``out``; returns the entries written (plus one)."""
    a_fps, a_rows, a_off = old
    b_fps, b_rows, b_off = new
    a0, a1, b0, b1 = int(a_off[c0]), int(a_off[c1]), int(b_off[c0]), int(b_off[c1])
    if by_value:  # table 0: new entries after equal old ones
        at = a_fps[a0:a1].searchsorted(b_fps[b0:b1], side="right")
    else:  # the others: new entries at the end of their bucket
        at = np.repeat(a_off[c0 + 1 : c1 + 1] - a0, np.diff(b_off[c0 : c1 + 1]))
    span = slice(a0 + b0, a1 + b1)
    olds, news = (a_fps[a0:a1], a_rows[a0:a1]), (b_fps[b0:b1], b_rows[b0:b1])
    _interleave(out[0][span], out[1][span], olds, at, news)
    return a1 - a0 + b1 - b0 + 1


def _interleave(
    out_fps: np.ndarray,
    out_rows: np.ndarray,
    old: tuple[np.ndarray, np.ndarray],
    at: np.ndarray,
    new: tuple[np.ndarray, np.ndarray],
) -> None:
    """Write the old ``(fps, rows)`` into the outputs with the new ones inserted before old
    indexes ``at`` (ascending)."""
    (fps, rows), (new_fps, new_rows) = old, new
    if not len(at):
        out_fps[:], out_rows[:] = fps, rows
        return
    final = at + np.arange(len(at))
    keep = np.ones(len(out_fps), np.bool_)
    keep[final] = False
    out_fps[final], out_fps[keep] = new_fps, fps
    out_rows[final], out_rows[keep] = new_rows, rows


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.zeros(capacity, array.dtype)
    grown[: len(array)] = array
    return grown


def _drain(steps: Iterator[int]) -> None:
    for _ in steps:
        pass
