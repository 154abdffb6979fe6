"""Pigeonhole block-table index of 64-bit fingerprints (Manku, Jain and Das Sarma, WWW 2007).

A fingerprint is cut into ``b`` contiguous blocks (the first ``64 % b`` blocks one bit wider). Two
fingerprints at Hamming distance ``d <= k < b`` differ in at most ``d`` blocks, so at least one of
the ``b`` blocks is identical: looking up the query's own value of every block and checking the
candidates' full distance never misses a fingerprint within ``k`` (the index is exact).

Layout, all numpy arrays (no Python object per entry):

* one table per block: the fingerprints (``uint64``) grouped by bucket (the block's value, or
  its top 16 bits when the block is wider), the entry position of each (``int32``), and the
  offsets of every bucket (``int64``, at most 2**16 + 1 per table); table 0 is fully sorted;
* per entry position (insertion order): the caller's key (``int64``) and a tombstone flag;
* a small buffer of recent fingerprints, scanned linearly and merged into the tables when full.

A query reads the query's bucket in every table (two offsets each), concatenates those slices
and the buffer, and runs one XOR + popcount over them: a handful of numpy calls whatever ``b``.
Memory is ``12 * b + 9`` bytes per fingerprint (57 at k = 3) plus the buffer and 0.5 MiB of
offsets per table. The expected candidates per table are ``n / 2**min(64 / b, 16)``: about 150
per table at 10**7 for k <= 3; with k >= 5 blocks shrink to 10 bits or fewer and queries slow
down (linearly in ``n``). A wider ``b`` than ``k + 1`` only shrinks the blocks: allowed, never
faster. A merge costs O(n) per table (about 0.2 s at 10**7, once per 4096 adds).

The 64-bit keys of the exact tables live here too, so the content index and the storage (which
keeps them in ``documents.content_key`` / ``documents.canonical_key``) agree on them:
:func:`content_key` and :func:`url_key`.

Limits: at most 2**31 - 1 entries; keys are any ``int64``; a key may be added twice (both
entries live until ``remove(key)``, which tombstones every live entry with that key). ``remove``
is a binary search while keys are added in non-decreasing order (row ids), otherwise it uses a
sort of the keys rebuilt on demand. Tombstoned entries are compacted away once they are half of
the index. Not thread-safe. Nothing is persisted: the index is rebuilt from storage with
``add_many`` (the layout may change between versions).
"""

from __future__ import annotations

import logging
import re

import numpy as np
import xxhash

from crawler import config, defaults

logger = logging.getLogger(__name__)

BITS = 64
_MASK = (1 << BITS) - 1
BUFFER_SIZE = 4096  # scanned with the buckets; merges (O(n)) happen once per BUFFER_SIZE adds
BUCKET_BITS = 16  # at most 2**16 buckets per table: 0.5 MiB of offsets, ~150 entries at 10**7
_MIN_BUCKET_BITS = 4
_MAX_ENTRIES = 2**31 - 1
_HEX16 = re.compile(r"[0-9a-fA-F]{16}")
_UNSORTED_SCAN = 65536  # keys past the sorted order are scanned linearly up to this many


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


config.register(settings_params)


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
        self._bucket_bits = 0
        self._reset_tables(_MIN_BUCKET_BITS)
        self._keys = np.empty(BUFFER_SIZE, np.int64)  # by position; capacity grows
        self._dead = np.zeros(BUFFER_SIZE, np.bool_)
        self._buffer = np.empty(BUFFER_SIZE, np.uint64)
        self._merged = 0  # positions [0, merged) are in the tables
        self._buffered = 0  # positions [merged, merged + buffered) are in the buffer
        self._n_dead = 0
        self._keys_sorted = True
        self._order: np.ndarray | None = None  # argsort of keys[:len(order)] when unsorted

    def _reset_tables(self, bucket_bits: int) -> None:
        """Empty tables whose buckets are the top ``bucket_bits`` bits of each block (at most)."""
        self._bucket_bits = bucket_bits
        # bucket of fp in table t: (fp >> shift) & mask
        self._buckets = []
        for start, width in self._layout:
            bits = min(width, bucket_bits)
            self._buckets.append((BITS - start - bits, (1 << bits) - 1))
        self._tab = [np.empty(0, np.uint64) for _ in range(self.blocks)]
        self._rows = [np.empty(0, np.int32) for _ in range(self.blocks)]
        self._off = [np.zeros(mask + 2, np.int64) for _, mask in self._buckets]

    # --- size -------------------------------------------------------------------------------
    @property
    def _total(self) -> int:
        return self._merged + self._buffered

    def __len__(self) -> int:
        return self._total - self._n_dead

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (the process overhead of numpy is not counted)."""
        arrays: list[np.ndarray] = [*self._tab, *self._rows, *self._off]
        arrays += [self._keys, self._dead, self._buffer]
        if self._order is not None:
            arrays.append(self._order)
        return sum(a.nbytes for a in arrays)

    # --- adding -----------------------------------------------------------------------------
    def add(self, fp: int, key: int) -> None:
        """Add one fingerprint (unsigned 64-bit) under ``key``; visible to the next query."""
        fp = int(fp)
        if not 0 <= fp <= _MASK:
            raise ValueError(f"fingerprint {fp!r} is not an unsigned 64-bit integer")
        if self._buffered == BUFFER_SIZE:
            self._flush()
        pos = self._total
        self._reserve(pos + 1)
        self._note_key(int(key))
        self._keys[pos] = key
        self._buffer[self._buffered] = fp
        self._buffered += 1

    def add_many(self, fps: np.ndarray, keys: np.ndarray) -> None:
        """Bulk add: ``fps`` (uint64) and ``keys`` (int64), in that insertion order."""
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if fps.shape != keys.shape or fps.ndim != 1:
            raise ValueError(
                f"add_many needs two 1-d arrays of one length, got {fps.shape} and {keys.shape}"
            )
        if len(fps) == 0:
            return
        if self._buffered + len(fps) <= BUFFER_SIZE:
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
        self._merge(batch, self._merged)

    def _note_key(self, key: int) -> None:
        pos = self._total
        if self._keys_sorted and pos and key < self._keys[pos - 1]:
            self._keys_sorted = False

    def _reserve(self, needed: int) -> None:
        if needed > _MAX_ENTRIES:
            raise OverflowError(f"SimIndex holds at most {_MAX_ENTRIES} entries")
        if needed <= len(self._keys):
            return
        # 1.25x growth keeps the slack under 3 bytes per entry at 10**7
        capacity = max(needed + BUFFER_SIZE, int(len(self._keys) * 1.25))
        keys = np.empty(capacity, np.int64)
        keys[: self._total] = self._keys[: self._total]
        dead = np.zeros(capacity, np.bool_)
        dead[: self._total] = self._dead[: self._total]
        self._keys, self._dead = keys, dead

    def _flush(self) -> None:
        if self._buffered:
            batch = self._buffer[: self._buffered].copy()
            self._buffered = 0
            self._merge(batch, self._merged)

    def _merge(self, fps: np.ndarray, first: int) -> None:
        """Merge ``fps`` (positions ``first``...) into every table; O(n) per table."""
        # about 8-16 entries per bucket while small, so offsets stay a few bytes per entry;
        # re-bucketing rebuilds every table, which happens only below 2**20 entries
        bits = max(_MIN_BUCKET_BITS, min(BUCKET_BITS, (first + len(fps)).bit_length() - 4))
        if bits != self._bucket_bits:
            if first:
                old = np.empty(first, np.uint64)
                old[self._rows[0]] = self._tab[0]
                fps, first = np.concatenate([old, fps]), 0
            self._reset_tables(bits)
        for t, (shift, mask) in enumerate(self._buckets):
            # uint16 buckets: numpy's stable argsort is a radix sort for 16-bit keys
            buckets = ((fps >> np.uint64(shift)) & np.uint64(mask)).astype(np.uint16)
            counts = np.bincount(buckets, minlength=mask + 1)
            # table 0 stays sorted by value (contains_many); the others need only bucket order
            # (table 0's buckets are its top bits, so value order is bucket order too)
            order = np.argsort(fps) if t == 0 else np.argsort(buckets, kind="stable")
            new_fps = fps[order]
            new_rows = order.astype(np.int32)  # the batch's positions are first + index
            if first:
                new_rows += first
            # sorted buckets without a random gather: each bucket value repeated count times
            new_buckets = np.repeat(np.arange(mask + 1, dtype=np.uint16), counts)
            off, tab = self._off[t], self._tab[t]
            if len(tab) == 0:
                self._tab[t], self._rows[t] = new_fps, new_rows
            else:
                # table 0 by value; the others at the end of the bucket (positions ascending)
                at = (
                    tab.searchsorted(new_fps, side="right")
                    if t == 0
                    else off[new_buckets.astype(np.int64) + 1]
                )
                self._tab[t], self._rows[t] = _insert(tab, self._rows[t], at, new_fps, new_rows)
            off[1:] += np.cumsum(counts)
        self._merged = first + len(fps)

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
        spans, parts = [], []  # (table, lo) per part; the buffer is table -1
        if self._merged:
            for t, (shift, mask) in enumerate(self._buckets):
                off = self._off[t]
                bucket = (fp >> shift) & mask
                lo, hi = off[bucket], off[bucket + 1]
                if hi > lo:
                    spans.append((t, int(lo)))
                    parts.append(self._tab[t][lo:hi])
        if self._buffered:
            spans.append((-1, 0))
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
        self, found: list[int], dist: np.ndarray, spans: list[tuple[int, int]], sizes: list[int]
    ) -> dict[int, int]:
        """Map indexes into the concatenated candidates back to entry positions."""
        hits: dict[int, int] = {}
        part, base = 0, 0
        for i in found:  # ascending
            while i >= base + sizes[part]:
                base += sizes[part]
                part += 1
            t, lo = spans[part]
            pos = self._merged + i - base if t < 0 else int(self._rows[t][lo + i - base])
            hits[pos] = int(dist[i])
        return hits

    def contains_many(self, fps: np.ndarray) -> np.ndarray:
        """For each fingerprint, whether some entry (live or tombstoned) holds exactly it.

        Vectorized; used to find, among many new values, the few that need a closer look.
        """
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        found = np.zeros(len(fps), np.bool_)
        if self._merged:
            table = self._tab[0]  # sorted by value
            at = np.minimum(table.searchsorted(fps), len(table) - 1)
            found |= table[at] == fps
        if self._buffered:
            found |= np.isin(fps, self._buffer[: self._buffered])
        return found

    def repeated(self) -> list[list[int]]:
        """Keys of the live entries holding the same fingerprint, one list per fingerprint
        held more than once, each in insertion order. O(n) numpy (one pass over the sorted
        table 0) plus Python work per repeated entry only."""
        self._flush()
        tab, rows = self._tab[0], self._rows[0]
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
        total = self._total
        fps = np.empty(total, np.uint64)
        if self._merged:
            fps[self._rows[0]] = self._tab[0]
        fps[self._merged : total] = self._buffer[: self._buffered]
        alive = ~self._dead[:total]
        return fps[alive], self._keys[:total][alive].copy()

    def _compact(self) -> None:
        fps, keys = self.fingerprints()
        logger.debug("SimIndex compaction: %d live of %d entries", len(fps), self._total)
        fresh = SimIndex(self.k, self.blocks)
        fresh.add_many(fps, keys)
        self.__dict__.update(fresh.__dict__)


def _insert(
    tab: np.ndarray, rows: np.ndarray, at: np.ndarray, new_fps: np.ndarray, new_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``tab``/``rows`` with the new entries inserted before old indexes ``at`` (ascending)."""
    final = at + np.arange(len(at))
    keep = np.ones(len(tab) + len(at), np.bool_)
    keep[final] = False
    merged_tab = np.empty(len(keep), np.uint64)
    merged_tab[final], merged_tab[keep] = new_fps, tab
    merged_rows = np.empty(len(keep), np.int32)
    merged_rows[final], merged_rows[keep] = new_rows, rows
    return merged_tab, merged_rows
