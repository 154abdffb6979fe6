"""Pigeonhole block-table index of 64-bit fingerprints (Manku, Jain and Das Sarma, WWW 2007).

A fingerprint is cut into ``b`` contiguous blocks (the first ``64 % b`` blocks one bit wider). Two
fingerprints at Hamming distance ``d <= k < b`` differ in at most ``d`` blocks, so at least one of
the ``b`` blocks is identical: looking up the query's own value of every block and checking the
candidates' full distance never misses a fingerprint within ``k`` (the index is exact).

Layout, all numpy arrays (no Python object per entry):

* one table per block: the fingerprints rotated so that block to the top bits, sorted
  (``uint64``), beside the entry position of each (``int32``); a query is one binary search per
  table for the range sharing the query's block, then XOR + popcount over that contiguous range
  (rotation does not change a Hamming distance);
* per entry position (insertion order): the caller's key (``int64``) and a tombstone flag;
* a small buffer of recent fingerprints, scanned linearly and merged into the tables when full.

Memory is ``12 * b + 9`` bytes per fingerprint (57 at k = 3), plus the buffer. The expected
candidates per table are ``n / 2**(64 / b)``: about 150 per table at 10**7 with 16-bit blocks;
with k >= 5 blocks shrink to 10 bits or fewer and queries slow down (linearly in ``n``).
A wider ``b`` than ``k + 1`` only shrinks the blocks: it is allowed, never faster.

Limits: at most 2**31 - 1 entries; keys are any ``int64``; a key may be added twice (both
entries live until ``remove(key)``, which tombstones every live entry with that key). ``remove``
is a binary search while keys are added in non-decreasing order (row ids), otherwise it uses a
sort of the keys rebuilt on demand. Tombstoned entries are compacted away once they are half of
the index. Not thread-safe. Nothing is persisted: the index is rebuilt from storage with
``add_many`` (the layout may change between versions).
"""

from __future__ import annotations

import logging

import numpy as np

from crawler import config, defaults

logger = logging.getLogger(__name__)

BITS = 64
_MASK = (1 << BITS) - 1
BUFFER_SIZE = 4096  # linear scan of 4096 entries costs about what one table lookup does
_MAX_ENTRIES = 2**31 - 1
_UNSORTED_SCAN = 65536  # keys past the sorted order are scanned linearly up to this many


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


def _rotl_array(values: np.ndarray, shift: int) -> np.ndarray:
    if not shift:
        return values
    return (values << np.uint64(shift)) | (values >> np.uint64(BITS - shift))


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
        self._perm = [np.empty(0, np.uint64) for _ in range(blocks)]
        self._rows = [np.empty(0, np.int32) for _ in range(blocks)]
        self._keys = np.empty(BUFFER_SIZE, np.int64)  # by position; capacity grows
        self._dead = np.zeros(BUFFER_SIZE, np.bool_)
        self._buffer = np.empty(BUFFER_SIZE, np.uint64)
        self._merged = 0  # positions [0, merged) are in the tables
        self._buffered = 0  # positions [merged, merged + buffered) are in the buffer
        self._n_dead = 0
        self._keys_sorted = True
        self._order: np.ndarray | None = None  # argsort of keys[:len(order)] when unsorted

    # --- size -------------------------------------------------------------------------------
    @property
    def _total(self) -> int:
        return self._merged + self._buffered

    def __len__(self) -> int:
        return self._total - self._n_dead

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (the process overhead of numpy is not counted)."""
        arrays = [*self._perm, *self._rows, self._keys, self._dead, self._buffer]
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
        rows = np.arange(first, first + len(fps), dtype=np.int32)
        for t, (start, _width) in enumerate(self._layout):
            rotated = _rotl_array(fps, start)
            order = np.argsort(rotated, kind="stable")
            new_perm, new_rows = rotated[order], rows[order]
            perm, old_rows = self._perm[t], self._rows[t]
            if len(perm) == 0:
                self._perm[t], self._rows[t] = new_perm, new_rows
                continue
            # new entries go after equal old ones, so a table stays ordered by (value, position)
            at = perm.searchsorted(new_perm, side="right") + np.arange(len(new_perm))
            keep = np.ones(len(perm) + len(new_perm), np.bool_)
            keep[at] = False
            merged_perm = np.empty(len(keep), np.uint64)
            merged_perm[at], merged_perm[keep] = new_perm, perm
            merged_rows = np.empty(len(keep), np.int32)
            merged_rows[at], merged_rows[keep] = new_rows, old_rows
            self._perm[t], self._rows[t] = merged_perm, merged_rows
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
        k, hits = self.k, {}
        if self._merged:
            for t, (start, width) in enumerate(self._layout):
                self._probe(t, rotl(fp, start), width, hits)
        if self._buffered:
            dist = np.bitwise_count(self._buffer[: self._buffered] ^ np.uint64(fp))
            for i in np.flatnonzero(dist <= k).tolist():
                hits[self._merged + i] = int(dist[i])
        if hits and (self._n_dead or exclude is not None):
            hits = {
                pos: d
                for pos, d in hits.items()
                if not self._dead[pos] and (exclude is None or self._keys[pos] != exclude)
            }
        return hits

    def _probe(self, t: int, rotated: int, width: int, hits: dict[int, int]) -> None:
        low_bits = BITS - width
        lo_val = (rotated >> low_bits) << low_bits
        hi_val = lo_val | ((1 << low_bits) - 1)
        perm = self._perm[t]
        lo = int(perm.searchsorted(np.uint64(lo_val), side="left"))
        hi = int(perm.searchsorted(np.uint64(hi_val), side="right"))
        if hi <= lo:
            return
        dist = np.bitwise_count(perm[lo:hi] ^ np.uint64(rotated))
        found = np.flatnonzero(dist <= self.k)
        if len(found):
            rows = self._rows[t][lo + found].tolist()
            for row, d in zip(rows, dist[found].tolist(), strict=True):
                hits[row] = d

    def contains_many(self, fps: np.ndarray) -> np.ndarray:
        """For each fingerprint, whether some entry (live or tombstoned) holds exactly it.

        Vectorized; used to find, among many new values, the few that need a closer look.
        """
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        found = np.zeros(len(fps), np.bool_)
        if self._merged:
            table = self._perm[0]  # block 0 starts at the top bit: table 0 is not rotated
            at = np.minimum(table.searchsorted(fps), len(table) - 1)
            found |= table[at] == fps
        if self._buffered:
            found |= np.isin(fps, self._buffer[: self._buffered])
        return found

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
            fps[self._rows[0]] = self._perm[0]  # table 0 is not rotated
        fps[self._merged : total] = self._buffer[: self._buffered]
        alive = ~self._dead[:total]
        return fps[alive], self._keys[:total][alive].copy()

    def _compact(self) -> None:
        fps, keys = self.fingerprints()
        logger.debug("SimIndex compaction: %d live of %d entries", len(fps), self._total)
        fresh = SimIndex(self.k, self.blocks)
        fresh.add_many(fps, keys)
        self.__dict__.update(fresh.__dict__)
