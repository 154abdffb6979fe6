"""``PendingMap``: the ``JOBDIR`` pending map (fingerprint -> byte offset of its *scheduled*
record in the journal) in about 30 bytes per URL owed instead of a dict's ~130.

Why: the link-heavy crawl finds nearly every page of a site within its first few percent, so the
map holds about one entry per page of the site at that burst. As a ``dict[bytes, int]`` each
entry cost 133 bytes (a 49-byte ``bytes`` key, a 32-byte int, the table), measured by
``python -m bench.scale --mem-probe``: 127 MiB at 10^6 owed, and Python's allocator keeps the
arenas of the freed keys after the frontier drains.

Layout: 16-byte fingerprints (those of :func:`crawler.urls.fingerprint.fingerprint_url`) live in
three numpy arrays sorted by the key's first 8 bytes (``hi``, ``lo``: the key as two big-endian
64-bit integers; ``off``: the offset, -1 for a removed entry) and are found by binary search; new
entries wait in a small dict (``recent``) until it holds a quarter of the arrays' entries, then
are merged in one vectorized sort (amortized O(log n) per entry, done in numpy). Removed entries
are dropped by the next merge, which also runs once they are half the arrays, so the memory
follows the frontier down as it drains. Keys of another length (a project's own fingerprinter,
Scrapy's 20-byte default) live in a plain dict of their own (``other``), outside the merge count:
counted there, they made every insert past 4,096 of them a merge that moved nothing. The arrays
are made, and numpy imported (~40 ms, ~11 MiB), by the first merge: a map that never held
``MERGE_MIN`` (4,096) new entries at once, the map of a small crawl, is its dicts alone.

Order: :meth:`values` and iteration go by ascending offset, which is file order: a compaction
copies the records in that order and hands the new offsets back to :meth:`renumber`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    np = None  # numpy, imported by the first merge into the arrays (_numpy): a map of fewer
    # than MERGE_MIN entries is its dicts alone

KEY_BYTES = 16
#: ``recent`` merged into the arrays once it holds this many entries at least
MERGE_MIN = 4096
_BIG: Any = None  # dtype(">i8"): a key's halves as signed integers, compared as Python ints


def _numpy() -> None:
    """Import numpy into this module's ``np`` (and make :data:`_BIG`) once."""
    global np, _BIG
    if np is None:
        import numpy

        _BIG = numpy.dtype(">i8")
        np = numpy


class PendingMap:
    """Fingerprint -> journal offset, compact (module docstring). The dict operations the
    journal uses: ``m[fp] = offset``, ``m.pop(fp, None)``, ``m[fp]``, ``in``, ``len``,
    iteration and :meth:`values` in file order, and :meth:`renumber` after a compaction."""

    def __init__(self) -> None:
        # the arrays, made (and numpy imported) by the first merge: None until then
        self._hi: Any = None
        self._lo: Any = None
        self._off: Any = None
        self._live = 0  # entries of the arrays not removed
        self._recent: dict[bytes, int] = {}  # 16-byte keys not merged yet
        self._other: dict[bytes, int] = {}  # keys of another length: never merged

    @classmethod
    def build(cls, fps: Sequence[bytes], offsets: Sequence[int]) -> PendingMap:
        """A map of ``fps[i] -> offsets[i]`` (distinct keys), built in one sort."""
        pending = cls()
        if len(fps) < MERGE_MIN:  # as many adds would leave them: in the dicts, no numpy
            for fp, offset in zip(fps, offsets, strict=True):
                (pending._recent if len(fp) == KEY_BYTES else pending._other)[fp] = offset
            return pending
        if all(len(fp) == KEY_BYTES for fp in fps):  # the common case, without index lists
            pending._merge(fps, offsets)
            return pending
        wide = [i for i, fp in enumerate(fps) if len(fp) == KEY_BYTES]
        if len(wide) < len(fps):
            narrow = set(range(len(fps))) - set(wide)
            pending._other = {fps[i]: offsets[i] for i in sorted(narrow)}
        pending._merge([fps[i] for i in wide], [offsets[i] for i in wide])
        return pending

    def __len__(self) -> int:
        return self._live + len(self._recent) + len(self._other)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _find(self, fp: bytes) -> int:
        """The index of ``fp``'s live entry in the arrays, or -1 (a binary search, then Python
        ints: a numpy scalar per step would cost several times more)."""
        if len(fp) != KEY_BYTES or not self._live:
            return -1
        hi = int.from_bytes(fp[:8], "big", signed=True)
        i, n = int(self._hi.searchsorted(hi)), len(self._hi)
        his, los, offs = self._hi.item, self._lo.item, self._off.item
        lo = int.from_bytes(fp[8:], "big", signed=True)
        while i < n and his(i) == hi:
            if los(i) == lo and offs(i) >= 0:
                return i
            i += 1
        return -1

    def __contains__(self, fp: object) -> bool:
        return isinstance(fp, bytes) and (fp in self._recent or fp in self._other
                                          or self._find(fp) >= 0)

    def __getitem__(self, fp: bytes) -> int:
        if len(fp) != KEY_BYTES:
            return self._other[fp]
        if fp in self._recent:
            return self._recent[fp]
        i = self._find(fp)
        if i < 0:
            raise KeyError(fp)
        return int(self._off[i])

    def get(self, fp: bytes, default: int | None = None) -> int | None:
        try:
            return self[fp]
        except KeyError:
            return default

    def __setitem__(self, fp: bytes, offset: int) -> None:
        if len(fp) != KEY_BYTES:
            self._other[fp] = offset
            return
        i = self._find(fp)
        if i >= 0:
            self._off[i] = offset
            return
        self._recent[fp] = offset
        if len(self._recent) >= max(MERGE_MIN, self._live // 4):
            self._merge()

    def pop(self, fp: bytes, default: int | None = None) -> int | None:
        """Remove ``fp``; its offset, or ``default`` when it was not held."""
        if len(fp) != KEY_BYTES:
            return self._other.pop(fp, default)
        if fp in self._recent:
            return self._recent.pop(fp)
        i = self._find(fp)
        if i < 0:
            return default
        offset = int(self._off[i])
        self._off[i] = -1
        self._live -= 1
        if self._live < len(self._off) // 2 and len(self._off) >= MERGE_MIN:
            self._merge()  # half the arrays removed: give the memory back
        return offset

    def _merge(self, fps: Sequence[bytes] = (), offsets: Sequence[int] = ()) -> None:
        """Move ``fps`` (16 bytes each) and the 16-byte keys of ``recent`` into the arrays, and
        drop removed entries. The new keys are sorted alone and inserted where they belong,
        one array at a time: the arrays are copied once, never all at once."""
        if self._off is None:
            _numpy()
            self._hi, self._lo, self._off = (np.empty(0, np.int64) for _ in range(3))
        wide, moved = list(self._recent), list(self._recent.values())
        self._recent.clear()
        keys = np.frombuffer(b"".join([*fps, *wide]), _BIG).reshape(-1, 2).astype(np.int64)
        offs = np.array([*offsets, *moved], np.int64)
        order = np.argsort(keys[:, 0], kind="stable")
        keep = self._off >= 0
        if not keep.all():
            self._hi, self._lo, self._off = self._hi[keep], self._lo[keep], self._off[keep]
        del keep
        at = self._hi.searchsorted(keys[order, 0])
        self._hi = np.insert(self._hi, at, keys[order, 0])
        self._lo = np.insert(self._lo, at, keys[order, 1])
        self._off = np.insert(self._off, at, offs[order])
        self._live = len(self._off)

    def _ordered(self) -> tuple[Any, list[bytes]]:
        """Every entry's offset (ascending: an array, a list before the first merge) and key,
        in that order."""
        if self._off is None:
            entries = sorted([*self._recent.items(), *self._other.items()], key=lambda e: e[1])
            return [offset for _, offset in entries], [fp for fp, _ in entries]
        keep = self._off >= 0
        keys = np.empty((int(keep.sum()), 2), _BIG)
        keys[:, 0], keys[:, 1] = self._hi[keep], self._lo[keep]
        blob = keys.tobytes()
        fps = [blob[i:i + KEY_BYTES] for i in range(0, len(blob), KEY_BYTES)]
        fps += [*self._recent, *self._other]
        offs = np.concatenate([self._off[keep], self._dict_offsets()])
        order = np.argsort(offs, kind="stable")
        return offs[order], [fps[i] for i in order.tolist()]

    def values(self) -> list[int]:
        """The offsets, ascending (file order)."""
        if self._off is None:
            return sorted([*self._recent.values(), *self._other.values()])
        offs = np.concatenate([self._off[self._off >= 0], self._dict_offsets()])
        return np.sort(offs).tolist()  # type: ignore[no-any-return]

    def _dict_offsets(self) -> np.ndarray:
        """The offsets of ``recent`` then ``other``, in their keys' order."""
        count = len(self._recent) + len(self._other)
        return np.fromiter([*self._recent.values(), *self._other.values()], np.int64, count)

    def __iter__(self) -> Iterator[bytes]:
        """The keys in file order (of their offsets)."""
        return iter(self._ordered()[1])

    def items(self) -> Iterable[tuple[bytes, int]]:
        offs, fps = self._ordered()
        return zip(fps, offs if isinstance(offs, list) else offs.tolist(), strict=True)

    def renumber(self, moved: Sequence[int]) -> None:
        """Give the entries, in file order, the offsets ``moved`` (ascending): where a
        compaction wrote their records."""
        if self._off is None:  # the dicts alone
            _, fps = self._ordered()
            if len(moved) != len(fps):
                raise ValueError(f"{len(moved)} offsets for {len(fps)} pending entries")
            for fp, offset in zip(fps, moved, strict=True):
                (self._recent if len(fp) == KEY_BYTES else self._other)[fp] = int(offset)
            return
        self._merge()  # the arrays hold every 16-byte key, none removed
        odd = list(self._other)
        offs = np.concatenate([self._off, np.array([self._other[fp] for fp in odd], np.int64)])
        if len(moved) != len(offs):
            raise ValueError(f"{len(moved)} offsets for {len(offs)} pending entries")
        new = np.empty(len(offs), np.int64)
        new[np.argsort(offs, kind="stable")] = np.asarray(moved, np.int64)
        self._off = new[:len(self._off)]
        self._other = dict(zip(odd, new[len(self._off):].tolist(), strict=True))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (the dict of recent entries not counted)."""
        if self._off is None:
            return 0
        return int(self._hi.nbytes + self._lo.nbytes + self._off.nbytes)
