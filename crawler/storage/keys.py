"""The integer keys the content index loads from storage, as numpy arrays in chunks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

KEY_BATCH = 262_144  # rows per KeyArrays: 9 MB of arrays, about 0.2 s of fetching


@dataclass(frozen=True)
class KeyArrays:
    """A chunk of :meth:`Store.iter_key_arrays`: one entry per document, in id order.

    ``ids`` (int64), ``simhash`` (uint64, 0 where ``has_simhash`` is False), ``has_simhash``
    (bool), ``content_keys`` and ``canonical_keys`` (uint64:
    :func:`crawler.content.simindex.content_key` and :func:`crawler.content.simindex.url_key` of
    the stored strings).
    """

    ids: np.ndarray
    simhash: np.ndarray
    has_simhash: np.ndarray
    content_keys: np.ndarray
    canonical_keys: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[int, int, int, int]]) -> KeyArrays:
        """From ``(tagged_id, signed simhash, signed content_key, signed canonical_key)``."""
        import numpy as np  # once per chunk of KEY_BATCH rows; not loaded until a chunk is read

        flat = np.fromiter(chain.from_iterable(rows), np.int64, 4 * len(rows)).reshape(-1, 4)
        tagged = flat[:, 0]
        has = tagged >= 0
        return cls(
            ids=np.where(has, tagged, -tagged - 1),
            simhash=np.ascontiguousarray(flat[:, 1]).view(np.uint64),
            has_simhash=has,
            content_keys=np.ascontiguousarray(flat[:, 2]).view(np.uint64),
            canonical_keys=np.ascontiguousarray(flat[:, 3]).view(np.uint64),
        )
