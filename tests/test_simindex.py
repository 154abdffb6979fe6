"""SimIndex: exact against brute force (random and planted near-duplicates, k = 0..6)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawler import config
from crawler.simindex import BUFFER_SIZE, SimIndex, block_layout, rotl, settings_params

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def brute(fps: list[int], keys: list[int], dead: set[int], q: int, k: int) -> list[tuple[int, int]]:
    """Every live (key, distance) within k, nearest first, then by insertion order."""
    found = [
        (bin(fp ^ q).count("1"), pos)
        for pos, fp in enumerate(fps)
        if pos not in dead and bin(fp ^ q).count("1") <= k
    ]
    return [(keys[pos], d) for d, pos in sorted(found)]


def flip(fp: int, bits: list[int]) -> int:
    for b in bits:
        fp ^= 1 << b
    return fp


@st.composite
def planted(draw: st.DrawFn) -> tuple[int, int | None, list[int], list[int]]:
    """(k, blocks, stored fingerprints, queries) where most queries are near a stored one."""
    k = draw(st.integers(0, 6))
    blocks = draw(st.one_of(st.none(), st.integers(k + 1, min(64, k + 4))))
    bases = draw(st.lists(U64, min_size=1, max_size=40))
    fps = []
    for base in bases:  # clusters: a base and a few copies within about k bits
        fps.append(base)
        for _ in range(draw(st.integers(0, 3))):
            bits = draw(st.lists(st.integers(0, 63), max_size=k + 2, unique=True))
            fps.append(flip(base, bits))
    queries = []
    for _ in range(draw(st.integers(1, 15))):
        target = draw(st.sampled_from(fps))
        bits = draw(st.lists(st.integers(0, 63), max_size=k + 1, unique=True))
        queries.append(flip(target, bits))
    queries.append(draw(U64))
    return k, blocks, fps, queries


@settings(max_examples=150, deadline=None)
@given(planted(), st.integers(0, 2), st.randoms(use_true_random=False))
def test_query_all_equals_brute_force(case, mode, rnd):
    k, blocks, fps, queries = case
    index = SimIndex(k, blocks)
    keys = [rnd.randrange(-(2**63), 2**63) for _ in fps]
    if mode == 0:  # one at a time: everything in the buffer
        for fp, key in zip(fps, keys, strict=True):
            index.add(fp, key)
    else:  # bulk, then merged tables plus buffer
        half = len(fps) // 2 if mode == 2 else len(fps)
        index.add_many(np.array(fps[:half], np.uint64), np.array(keys[:half], np.int64))
        index._flush()
        for fp, key in zip(fps[half:], keys[half:], strict=True):
            index.add(fp, key)
    for q in queries:
        expected = brute(fps, keys, set(), q, k)
        assert index.query_all(q) == expected
        assert index.query(q) == (expected[0] if expected else None)


@pytest.mark.parametrize("k", range(7))
def test_large_random_with_planted_near_duplicates(k):
    """Enough entries to cross the buffer, merge several times and fill the tables."""
    rng = np.random.default_rng(k)
    n = 3 * BUFFER_SIZE + 123
    fps = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    index = SimIndex(k)
    index.add_many(fps[: n // 2], np.arange(n // 2))
    for i in range(n // 2, n):
        index.add(int(fps[i]), i)
    for _ in range(200):
        target = int(fps[rng.integers(n)])
        q = flip(target, [int(b) for b in rng.choice(64, rng.integers(0, k + 2), replace=False)])
        dist = np.bitwise_count(fps ^ np.uint64(q))
        within = np.flatnonzero(dist <= k)
        expected = sorted((int(dist[i]), int(i)) for i in within)
        assert index.query_all(q) == [(pos, d) for d, pos in expected]


def test_ties_go_to_the_earliest_added():
    index = SimIndex(3)
    index.add(0b0001, key=10)
    index.add(0b0010, key=5)  # same distance 1 from 0, added later
    assert index.query(0) == (10, 1)
    index.add(0, key=99)
    assert index.query(0) == (99, 0)


def test_remove_tombstones_and_readd():
    index = SimIndex(2)
    for key in range(10):
        index.add(key << 40, key)
    index.remove(3)
    assert len(index) == 9
    assert index.query(3 << 40) != (3, 0)
    index.add(3 << 40, 3)  # the same key again: only the new entry is live
    assert index.query_all(3 << 40)[0] == (3, 0)
    assert index.remove(3) == 1
    assert all(key != 3 for key, _ in index.query_all(3 << 40))


def test_remove_with_unsorted_keys_in_tables_and_buffer():
    rng = np.random.default_rng(7)
    fps = rng.integers(0, 2**64, 2 * BUFFER_SIZE, dtype=np.uint64)
    keys = rng.permutation(2 * BUFFER_SIZE).astype(np.int64)
    index = SimIndex(3)
    index.add_many(fps, keys)
    index.add(12345, -1)
    for victim in (int(keys[0]), int(keys[-1]), -1):
        assert index.remove(victim) == 1
    assert index.remove(-1) == 0
    assert len(index) == 2 * BUFFER_SIZE - 2
    assert index.query(int(fps[0])) is None or index.query(int(fps[0]))[0] != int(keys[0])
    assert index.query(int(fps[5])) == (int(keys[5]), 0)


def test_compaction_keeps_answers():
    n = 3 * BUFFER_SIZE
    rng = np.random.default_rng(3)
    fps = rng.integers(0, 2**64, n, dtype=np.uint64)
    index = SimIndex(3)
    index.add_many(fps, np.arange(n))
    for key in range(0, n, 3):
        index.remove(key)
    for key in range(1, n, 3):
        index.remove(key)
    assert len(index) == n // 3
    assert index._n_dead < n // 2  # compacted
    for i in range(0, n, 97):
        expected = (i, 0) if i % 3 == 2 else None
        hit = index.query(int(fps[i]))
        assert hit == expected or (expected is None and hit is not None and hit[0] % 3 == 2)


def test_exclude_skips_a_key():
    index = SimIndex(3)
    index.add(0, 1)
    index.add(1, 2)
    assert index.query(0, exclude=1) == (2, 1)
    assert index.query(0, exclude=2) == (1, 0)


def test_contains_many_and_fingerprints_round_trip():
    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64, BUFFER_SIZE + 10, dtype=np.uint64)
    index = SimIndex(3)
    index.add_many(fps[: BUFFER_SIZE + 5], np.arange(BUFFER_SIZE + 5))
    index._flush()
    index.add(int(fps[-1]), 99)
    probe = np.array([fps[0], fps[-1], fps[-2]], np.uint64)
    assert index.contains_many(probe).tolist() == [True, True, False]
    got_fps, got_keys = index.fingerprints()
    assert got_fps.tolist() == [*fps[: BUFFER_SIZE + 5].tolist(), int(fps[-1])]
    assert got_keys.tolist() == [*range(BUFFER_SIZE + 5), 99]


def test_memory_is_arrays_not_objects():
    n = 50_000
    index = SimIndex(3)
    index.add_many(np.arange(n, dtype=np.uint64) * 2654435761, np.arange(n))
    per_fp = index.nbytes / n
    assert per_fp <= 64  # 12 bytes per table x 4 + key + tombstone, plus the buffer


@given(U64, st.integers(0, 64))
def test_rotl_is_a_rotation(x, s):
    s %= 64
    assert rotl(rotl(x, s), (64 - s) % 64) == x
    assert bin(rotl(x, s)).count("1") == bin(x).count("1")


@pytest.mark.parametrize("blocks", [1, 2, 3, 4, 7, 13, 64])
def test_block_layout_covers_64_bits(blocks):
    layout = block_layout(blocks)
    assert len(layout) == blocks
    assert sum(width for _, width in layout) == 64
    assert all(layout[i][0] + layout[i][1] == layout[i + 1][0] for i in range(blocks - 1))


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"SIMHASH_MAX_DISTANCE": 3, "SIMHASH_BLOCKS": 3}, "SIMHASH_BLOCKS"),
        ({"SIMHASH_MAX_DISTANCE": 3, "SIMHASH_BLOCKS": 65}, "SIMHASH_BLOCKS"),
        ({"SIMHASH_MAX_DISTANCE": 17}, "SIMHASH_MAX_DISTANCE"),
        ({"SIMHASH_MAX_DISTANCE": -1}, "SIMHASH_MAX_DISTANCE"),
        ({"SIMHASH_MAX_DISTANCE": "three"}, "SIMHASH_MAX_DISTANCE"),
    ],
)
def test_bad_settings_name_setting_value_and_range(values, name):
    with pytest.raises(config.SettingError) as info:
        config.validate_settings(Settings(values))
    assert info.value.name == name
    assert "allowed" in str(info.value)


def test_settings_defaults():
    assert settings_params(Settings({})) == (3, 4)
    assert settings_params(Settings({"SIMHASH_MAX_DISTANCE": 5, "SIMHASH_BLOCKS": 8})) == (5, 8)


@pytest.mark.parametrize(("k", "blocks"), [(3, 3), (3, 65), (64, None), (-1, None)])
def test_constructor_refuses_bad_shapes(k, blocks):
    with pytest.raises(ValueError, match="SimIndex"):
        SimIndex(k, blocks)


def test_refuses_values_outside_64_bits():
    index = SimIndex(3)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        index.add(2**64, 1)
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        index.query(-1)
