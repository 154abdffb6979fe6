"""SimIndex: exact against brute force (random and planted near-duplicates, k = 0..6)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawler import config
from crawler.commands.preflight import check_settings
from crawler.content import simindex
from crawler.content.simindex import BUFFER_SIZE, SimIndex, block_layout, rotl, settings_params

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
        check_settings(Settings(values))
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


# --- levels: buffer, mid level, big level and the big merge under way -------------------------
@pytest.fixture
def small_levels(monkeypatch):
    """Levels small enough that a few thousand adds merge every level many times over, and a
    big merge spans many adds (queries run while it is under way)."""
    monkeypatch.setattr(simindex, "BUFFER_SIZE", 16)
    monkeypatch.setattr(simindex, "SMALL_MAX", 0)  # numpy's arrays from the first add
    monkeypatch.setattr(simindex, "MID_CAP", 128)
    monkeypatch.setattr(simindex, "MERGE_STEP", 40)


class Mirror:
    """A SimIndex and the same entries in plain arrays, checked against a numpy scan."""

    def __init__(self, k: int, blocks: int | None = None, seed: int = 0) -> None:
        self.index = SimIndex(k, blocks)
        self.k = k
        self.rng = np.random.default_rng(seed)
        self.fps: list[int] = []
        self.keys: list[int] = []
        self.dead: set[int] = set()
        self.checked_mid_merge = 0

    def add(self, fp: int, key: int) -> None:
        self.index.add(fp, key)
        self.fps.append(fp)
        self.keys.append(key)

    def add_many(self, fps: list[int], keys: list[int]) -> None:
        self.index.add_many(np.array(fps, np.uint64), np.array(keys, np.int64))
        self.fps += fps
        self.keys += keys

    def remove(self, key: int) -> None:
        live = [p for p, kk in enumerate(self.keys) if kk == key and p not in self.dead]
        assert self.index.remove(key) == len(live)
        self.dead.update(live)

    def expected(self, q: int, exclude: int | None = None) -> list[tuple[int, int]]:
        fps, keys = np.array(self.fps, np.uint64), np.array(self.keys, np.int64)
        dist = np.bitwise_count(fps ^ np.uint64(q))
        ok = dist <= self.k
        if self.dead:
            ok[list(self.dead)] = False
        if exclude is not None:
            ok &= keys != exclude
        found = sorted((int(dist[p]), int(p)) for p in np.flatnonzero(ok))
        return [(self.keys[p], d) for d, p in found]

    def near(self, bits: int) -> int:
        """A stored fingerprint with ``bits`` random bits flipped."""
        target = self.fps[int(self.rng.integers(len(self.fps)))]
        return flip(target, self.rng.choice(64, bits, replace=False).tolist())

    def check(self, queries: int = 4) -> None:
        index = self.index
        if index._job is not None:
            self.checked_mid_merge += 1
        for t in range(index.blocks):  # every merged entry in exactly one run per table
            rows = np.concatenate([run.rows[t] for run in index._runs()])
            assert sorted(rows.tolist()) == list(range(index._merged))
        for bits in self.rng.integers(0, self.k + 2, queries).tolist():  # 0..k+1 bits
            q = self.near(bits)
            expected = self.expected(q)
            assert self.index.query_all(q) == expected
            assert self.index.query(q) == (expected[0] if expected else None)
        assert len(self.index) == len(self.fps) - len(self.dead)


@pytest.mark.slow
@pytest.mark.parametrize(("k", "blocks"), [(3, None), (0, 1), (5, 8), (2, 64)])
def test_exact_across_levels_and_during_big_merges(small_levels, k, blocks):
    mirror = Mirror(k, blocks, seed=k)
    for i in range(3000):
        if i % 4 == 3:  # a neighbour of a stored one at 0..k+1 bits
            fp = mirror.near(int(mirror.rng.integers(0, k + 2)))
        else:
            fp = int(mirror.rng.integers(0, 2**64, dtype=np.uint64))
        mirror.add(fp, i)
        if i % 7 == 0:
            mirror.check()
    index = mirror.index
    assert index._big.size > 2000 and mirror.checked_mid_merge > 20
    got_fps, got_keys = index.fingerprints()
    assert got_fps.tolist() == mirror.fps
    assert got_keys.tolist() == mirror.keys
    probe = np.array([*mirror.fps[::50], *(fp ^ 1 << 63 for fp in mirror.fps[::50])], np.uint64)
    stored = set(mirror.fps)
    assert index.contains_many(probe).tolist() == [int(p) in stored for p in probe]


def test_removes_in_every_level(small_levels):
    mirror = Mirror(3, seed=1)
    victims: list[int] = []
    for i in range(2000):
        mirror.add(mirror.near(2) if i % 3 == 2 else int(mirror.rng.integers(0, 2**63)), i)
        if i % 11 == 5:  # in the buffer, mid or big level, or a frozen one mid-merge
            victim = int(mirror.rng.integers(0, i + 1))
            mirror.remove(victim)
            victims.append(victim)
            mirror.check()
    assert victims
    for victim in victims:
        assert mirror.index.remove(victim) == 0
        assert all(key != victim for key, _ in mirror.index.query_all(mirror.fps[victim]))
    for i in range(0, 2000, 37):
        q = mirror.fps[i]
        assert mirror.index.query_all(q, exclude=i) == mirror.expected(q, exclude=i)


def test_ties_across_levels_go_to_the_earliest(small_levels):
    mirror = Mirror(3, seed=2)
    twin, near = 0xDEAD_BEEF_0000_0000, 0xDEAD_BEEF_0000_0003  # distance 2
    twin_keys = []
    for i in range(1500):
        if i in (10, 400, 900, 1490):  # big, big, then mid or frozen, then the buffer
            mirror.add(twin, -i)
            twin_keys.append(-i)
        else:
            mirror.add(int(mirror.rng.integers(0, 2**64, dtype=np.uint64)), i)
    index = mirror.index
    assert index.query(twin) == (-10, 0)
    assert [key for key, d in index.query_all(twin) if d == 0] == twin_keys
    assert index.query(near) == (-10, 2)
    mirror.remove(-10)
    assert index.query(near) == (-400, 2)
    mirror.add(near, 5000)  # newest, nearer: wins over the older ones
    assert index.query(near) == (5000, 0)
    assert index.repeated() == [twin_keys[1:]]
    mirror.check(20)


def test_add_many_into_every_level(small_levels):
    mirror = Mirror(3, seed=3)
    for i in range(700):
        mirror.add(int(mirror.rng.integers(0, 2**64, dtype=np.uint64)), i)
    assert mirror.index._job is not None  # a big merge under way, mid and buffer not empty
    for size in (5, 40, 100, 700):  # into the buffer, the mid level, then the bulk path
        while mirror.index._job is None:
            mirror.add(mirror.near(3), len(mirror.fps))
        first = len(mirror.fps)
        batch = [mirror.near(int(b)) for b in mirror.rng.integers(0, 5, size)]
        mirror.add_many(batch, list(range(first, first + size)))
        mirror.check(20)
        for i in range(first, first + 30):  # and adds after each
            mirror.add(mirror.near(1), 10_000 + i)
        mirror.check(20)
    got_fps, got_keys = mirror.index.fingerprints()
    assert got_fps.tolist() == mirror.fps
    assert got_keys.tolist() == mirror.keys


def test_compaction_across_levels(small_levels):
    mirror = Mirror(3, seed=4)
    for i in range(1200):
        mirror.add(mirror.near(1) if i % 5 == 4 else int(mirror.rng.integers(0, 2**62)), i)
    assert mirror.index._job is not None
    for key in range(0, 1200, 3):
        mirror.remove(key)
    for key in range(1, 1200, 3):
        mirror.remove(key)
    index = mirror.index
    assert index._n_dead < 400  # compacted at least once
    mirror.check(50)
    for i in range(1200, 1600):  # the compacted index goes on growing through its levels
        mirror.add(mirror.near(2), i)
    mirror.check(50)
    got_fps, got_keys = index.fingerprints()
    live = [p for p in range(len(mirror.fps)) if p not in mirror.dead]
    assert got_fps.tolist() == [mirror.fps[p] for p in live]
    assert got_keys.tolist() == [mirror.keys[p] for p in live]


def test_keys_grow_when_a_view_of_them_is_held(small_levels):
    index = SimIndex(3)
    index.add_many(np.arange(100, dtype=np.uint64), np.arange(100))
    view = index._keys[:10]  # resizing in place is refused: the keys are copied instead
    for i in range(100, 20_000):
        index.add(i * 0x9E37_79B9_7F4A_7C15 % 2**64, i)
    assert view.tolist() == list(range(10))
    assert index.query(150 * 0x9E37_79B9_7F4A_7C15 % 2**64) == (150, 0)
    assert len(index) == 20_000


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(5).integers(0, 2**64, 5000, dtype=np.uint64),
        np.repeat(np.random.default_rng(6).integers(0, 2**64, 50, dtype=np.uint64), 3),
        np.arange(5000, dtype=np.uint64)[::-1] * np.uint64(3),  # equal high bits: argsort
        np.array([7, 7 ^ 1 << 20, 7 ^ 1, 2**64 - 1, 0, 7], np.uint64),  # low bits differ
        np.array([], np.uint64),
    ],
)
def test_value_order_sorts_by_value(values):
    order = simindex._value_order(values)
    assert sorted(order.tolist()) == list(range(len(values)))
    assert values[order].tolist() == sorted(values.tolist())


@pytest.mark.parametrize("k", [0, 3])
def test_a_small_index_answers_as_the_numpy_one_and_turns_into_it(k: int) -> None:
    """Up to SMALL_MAX entries the index holds Python lists (no numpy); the same adds, removes
    and queries on an index made numpy from the start give the same answers, and past
    SMALL_MAX the lists become the very arrays the other index holds."""
    rng = random.Random(k)
    small, arrays, twin = SimIndex(k), SimIndex(k), SimIndex(k)  # twin: never asked repeated()
    arrays._promote()
    twin._promote()
    assert small._small and not arrays._small
    fps: list[int] = []
    for i in range(simindex.SMALL_MAX + 40):
        fp = rng.getrandbits(64) if not fps or i % 3 else fps[rng.randrange(len(fps))] ^ (
            1 << rng.randrange(64) if i % 2 else 0)
        key = i if i % 7 else rng.randrange(i + 1)  # keys out of order now and then
        fps.append(fp)
        for index in (small, arrays, twin):
            index.add(fp, key)
        if i % 5 == 4:
            victim = rng.randrange(i + 1)
            assert small.remove(victim) == arrays.remove(victim) == twin.remove(victim)
        probe = fps[rng.randrange(len(fps))] ^ (1 << rng.randrange(64))
        exclude = rng.choice([None, key])
        assert small.query(probe, exclude) == arrays.query(probe, exclude)
        assert small.query_all(probe) == arrays.query_all(probe)
        assert len(small) == len(arrays)
        if i < simindex.SMALL_MAX:
            assert small._small
            assert small.repeated() == arrays.repeated()
    assert not small._small  # past SMALL_MAX: the arrays
    n = small._total
    assert n == twin._total and small._buffered == twin._buffered
    for name in ("_keys", "_dead", "_buffer"):  # np.empty: compared up to what they hold
        held = n if name != "_buffer" else small._buffered
        assert np.array_equal(getattr(small, name)[:held], getattr(twin, name)[:held]), name
    assert small._keys_sorted == twin._keys_sorted and small._n_dead == twin._n_dead
    assert [a.tolist() for a in small.fingerprints()] == [a.tolist()
                                                           for a in arrays.fingerprints()]


def test_a_small_index_never_imports_numpy() -> None:
    import subprocess
    import sys
    import textwrap

    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        from crawler.content.simindex import SMALL_MAX, SimIndex
        index = SimIndex(3)
        for i in range(SMALL_MAX):
            index.add(i * 0x9E3779B97F4A7C15 % 2**64, i)
        index.remove(3)
        hit = index.query(5 * 0x9E3779B97F4A7C15 % 2**64 ^ 1)
        print(hit, len(index), index.repeated(), "numpy" in sys.modules)
        index.add(1, SMALL_MAX)
        print("numpy" in sys.modules)
    """)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split("\n")[:2] == ["(5, 1) 255 [] False", "True"]
