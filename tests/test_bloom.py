"""crawler.backends.bloom: sizing, no false negatives, measured error rate, saturation, verify,
snapshots."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler import defaults
from crawler.backends import SeenSet, bloom
from crawler.backends.bloom import (
    BloomSettings,
    LocalSeenSet,
    SnapshotError,
    bloom_size,
    describe,
    read_snapshot,
)
from crawler.config import SettingError


def keys(n: int, salt: str) -> list[bytes]:
    """Deterministic 16-byte keys, as uniform as request fingerprints."""
    return [hashlib.blake2b(f"{salt}{i}".encode(), digest_size=16).digest() for i in range(n)]


# --- sizing ----------------------------------------------------------------------------------

def test_sizing_matches_the_formula_and_the_issue_example() -> None:
    m, k = bloom_size(10_000_000, 0.001)
    assert m == math.ceil(-10_000_000 * math.log(0.001) / math.log(2) ** 2)
    assert k == 10
    assert describe(10_000_000, 0.001) == (
        "Bloom filter for 10,000,000 URLs at p=0.001: 17.1 MiB, 10 hashes")


@given(st.integers(1, 10**9), st.floats(1e-9, 0.5))
def test_sizing_bits_per_key_is_the_optimum(n: int, p: float) -> None:
    m, k = bloom_size(n, p)
    assert m / n == pytest.approx(-math.log(p) / math.log(2) ** 2, rel=1e-6, abs=1 / n)
    assert k >= 1


@pytest.mark.parametrize("n, p", [(0, 0.01), (10, 0.0), (10, 1.0), (10, -0.1)])
def test_sizing_refuses_impossible_arguments(n: int, p: float) -> None:
    with pytest.raises(ValueError):
        bloom_size(n, p)


@pytest.mark.parametrize("name, value", [
    ("BLOOM_CAPACITY", 0), ("BLOOM_CAPACITY", "lots"), ("BLOOM_ERROR_RATE", 0),
    ("BLOOM_ERROR_RATE", 1), ("BLOOM_ERROR_RATE", 1.5), ("BLOOM_ON_FULL", "explode"),
    ("BLOOM_VERIFY", "maybe"),
])
def test_bad_settings_name_the_setting(name: str, value: object) -> None:
    with pytest.raises(SettingError) as err:
        LocalSeenSet.from_settings({name: value})
    assert err.value.name == name
    assert name in str(err.value)


def test_from_settings_reads_the_settings() -> None:
    seen = LocalSeenSet.from_settings({"BLOOM_CAPACITY": "1_000", "BLOOM_ERROR_RATE": "0.01",
                                       "BLOOM_ON_FULL": "STOP"})
    assert (seen.capacity, seen.error_rate, seen.on_full) == (1000, 0.01, "stop")
    assert seen.bits == bloom_size(1000, 0.01)[0]


def test_bloom_settings_are_one_frozen_value_with_the_project_defaults() -> None:
    assert BloomSettings.from_settings({}) == BloomSettings() == BloomSettings(
        defaults.BLOOM_CAPACITY, defaults.BLOOM_ERROR_RATE, defaults.BLOOM_ON_FULL,
        defaults.BLOOM_VERIFY)  # fmt: skip
    read = BloomSettings.from_settings({"BLOOM_CAPACITY": "2_000", "BLOOM_ON_FULL": "Stop",
                                        "BLOOM_VERIFY": "true"})
    assert read == BloomSettings(capacity=2000, on_full="stop", verify=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.capacity = 1  # type: ignore[misc]


# --- the SeenSet protocol ----------------------------------------------------------------------

#: The methods the protocol declares (what ``class SeenSet(Protocol)`` defines in its body).
PROTOCOL_METHODS = [name for name, member in vars(SeenSet).items()
                    if inspect.isfunction(member) and name not in ("__init__", "__subclasshook__")]


def protocol_gaps(seen: object) -> list[str]:
    """What ``seen`` lacks of :class:`crawler.backends.SeenSet`: an attribute it does not have,
    a method its class does not define, or one whose signature (parameter names, kinds,
    defaults and annotations; return annotation) differs from the protocol's."""
    gaps = [f"attribute {name}" for name in SeenSet.__annotations__ if not hasattr(seen, name)]
    for name in PROTOCOL_METHODS:
        method = getattr(type(seen), name, None)
        if not inspect.isfunction(method):
            gaps.append(f"method {name}")
        elif inspect.signature(method) != inspect.signature(getattr(SeenSet, name)):
            gaps.append(f"signature of {name}: {inspect.signature(method)}")
    return gaps


def test_the_protocol_declares_every_capability_the_dupefilter_asks_for() -> None:
    assert set(PROTOCOL_METHODS) == {"add", "__contains__", "contains_many", "__len__", "clear",
                                     "close", "describe", "figures"}
    assert set(SeenSet.__annotations__) == {"capacity", "error_rate", "on_full", "full",
                                            "shared", "url"}


def test_local_seen_set_has_the_whole_protocol_with_neutral_answers() -> None:
    seen = LocalSeenSet(capacity=100)
    assert protocol_gaps(seen) == []
    assert (seen.shared, seen.url) == (False, "")
    a, b = keys(2, "p")
    seen.add(a)
    assert seen.contains_many([a, b, a]) == [True, False, True] and seen.contains_many([]) == []
    seen.clear()  # nothing to clear: the set lives and dies with the process
    assert a in seen and len(seen) == 1


def test_a_missing_or_changed_capability_fails_the_protocol_check() -> None:
    body = dict(vars(LocalSeenSet))
    without = {name: type(f"No_{name}", (), {k: v for k, v in body.items() if k != name})
               for name in ("contains_many", "figures", "shared")}
    assert protocol_gaps(without["contains_many"](capacity=10)) == ["method contains_many"]
    assert protocol_gaps(without["figures"](capacity=10)) == ["method figures"]
    assert protocol_gaps(without["shared"](capacity=10)) == ["attribute shared"]

    class Renamed(LocalSeenSet):
        def contains_many(self, fps: Sequence[bytes]) -> list[bool]:  # type: ignore[override]
            return super().contains_many(fps)

    class Wider(LocalSeenSet):
        def add(self, key: bytes, force: bool = False) -> bool:
            return super().add(key)

    assert protocol_gaps(Renamed(capacity=10)) == [
        "signature of contains_many: (self, fps: 'Sequence[bytes]') -> 'list[bool]'"]
    assert protocol_gaps(Wider(capacity=10))[0].startswith("signature of add")


def test_figures_are_the_bloom_stats_in_their_order() -> None:
    seen = LocalSeenSet(capacity=50, on_full="grow")
    for key in keys(120, "f"):
        seen.add(key)
    figures = seen.figures()
    assert list(figures) == ["capacity", "urls", "bits", "hashes", "fill_ratio",
                             "false_positives_avoided", "expected_false_positives", "layers"]
    assert figures["urls"] == len(seen) and figures["layers"] == len(seen.layers) > 1
    assert figures["fill_ratio"] == round(seen.fill_ratio, 6)
    assert figures["expected_false_positives"] == round(seen.expected_false_positives(), 3)


# --- correctness -------------------------------------------------------------------------------

def test_no_false_negative_and_error_rate_at_capacity() -> None:
    n, p = 100_000, 0.01
    seen = LocalSeenSet(n, p, on_full="stop")
    inserted = keys(n, "in")
    for key in inserted:
        seen.add(key)
    assert all(key in seen for key in inserted)  # no false negative
    assert all(seen.add(key) for key in inserted[:1000])  # add of a present key says present
    fresh = keys(100_000, "fresh")
    rate = sum(key in seen for key in fresh) / len(fresh)
    assert p / 1.5 <= rate <= p * 1.5
    assert seen.expected_false_positive_rate == pytest.approx(p, rel=0.2)
    assert seen.fill_ratio == pytest.approx(0.5, abs=0.02)


def test_keys_are_hashed_from_their_bytes_not_their_repr() -> None:
    a, b = LocalSeenSet(1000, 0.01), LocalSeenSet(1000, 0.01)
    key = keys(1, "x")[0]
    a.add(key)
    b.add(key)
    assert a.layers[0].bits == b.layers[0].bits  # no per-process salt
    short = LocalSeenSet(1000, 0.01)
    assert not short.add(b"abc") and short.add(b"abc") and b"abd" not in short


def test_verify_gives_no_false_positive_on_a_tiny_filter(tmp_path) -> None:
    seen = LocalSeenSet(50, 0.2, on_full="stop", verify=True, verify_dir=tmp_path)
    new = keys(3000, "tiny")
    assert [seen.add(key) for key in new] == [False] * len(new)  # every key was new
    assert seen.false_positives_avoided > 100  # the filter itself was wrong that often
    assert all(seen.add(key) for key in new[:500])
    assert len(seen) == len(new)
    seen.close()
    assert (tmp_path / "seen.sqlite").exists()


def test_verify_contains_checks_the_exact_set() -> None:
    seen = LocalSeenSet(20, 0.3, on_full="stop", verify=True)
    for key in keys(500, "a"):
        seen.add(key)
    fresh = keys(2000, "b")
    assert not any(key in seen for key in fresh)
    assert sum(any(key in layer for layer in seen.layers) for key in fresh) > 0
    seen.close()


@pytest.mark.parametrize(("capacity", "rate", "verify"), [
    (10_000_000, 0.001, False), (300, 0.01, False), (20, 0.3, True), (50_000, 1e-6, False)])
def test_a_batch_check_answers_as_one_key_at_a_time(capacity: int, rate: float,
                                                    verify: bool) -> None:
    """contains_many (numpy over the batch) gives each key's ``in`` answer: across grown
    layers, short keys (stretched), a filter dense with false positives, exact verification."""
    seen = LocalSeenSet(capacity, rate, on_full="grow", verify=verify)
    added = keys(2000, "batch")
    for key in added:
        seen.add(key)
    short = [hashlib.blake2b(bytes([i]), digest_size=1 + i % 15).digest() for i in range(40)]
    for key in short[::2]:
        seen.add(key)
    probe = [*added[::3], *keys(3000, "batch-fresh"), *short, b"", *added[1::7]]
    batch = seen.contains_many(probe)
    assert batch == [key in seen for key in probe]
    assert all(batch[:len(added[::3])])  # no false negative
    assert len(seen.layers) > 1 or capacity > 2000
    for layer in seen.layers:
        assert layer.contains_many(probe) == [key in layer for key in probe]
    seen.close()


# --- saturation --------------------------------------------------------------------------------

def test_grow_keeps_the_rate_and_never_raises(caplog) -> None:
    n, p = 2000, 0.01
    seen = LocalSeenSet(n, p, on_full="grow")
    inserted = keys(10 * n, "grow")
    with caplog.at_level(logging.WARNING, logger="crawler.backends.bloom"):
        for key in inserted:
            seen.add(key)
    assert len(seen.layers) >= 3
    assert not seen.full
    assert all(key in seen for key in inserted)
    rates = [layer.error_rate for layer in seen.layers]
    assert sum(rates) <= p
    fresh = keys(100_000, "grow-fresh")
    assert sum(key in seen for key in fresh) / len(fresh) <= p * 1.5
    messages = [r.getMessage() for r in caplog.records]
    assert any("80%" in m for m in messages) and any("full" in m for m in messages)
    assert any("layer 1 added" in m for m in messages)


def test_stop_marks_full_at_capacity_and_keeps_answering(caplog) -> None:
    seen = LocalSeenSet(1000, 0.01, on_full="stop")
    inserted = keys(1500, "stop")
    with caplog.at_level(logging.WARNING, logger="crawler.backends.bloom"):
        for i, key in enumerate(inserted):
            seen.add(key)
            if i < 900:
                assert not seen.full
    assert seen.full and len(seen.layers) == 1
    assert all(key in seen for key in inserted)
    assert sum("BLOOM_ON_FULL=stop" in r.getMessage() for r in caplog.records) == 1


# --- snapshots ---------------------------------------------------------------------------------

def test_snapshot_round_trip(tmp_path) -> None:
    seen = LocalSeenSet(500, 0.01, on_full="grow")
    inserted = keys(1800, "snap")
    for key in inserted:
        seen.add(key)
    path = tmp_path / "bloom.snapshot"
    seen.save(path)
    assert not (tmp_path / "bloom.snapshot.tmp").exists()
    other = LocalSeenSet(10, 0.1, on_full="grow")
    other.load(path)
    assert (other.capacity, other.error_rate, len(other)) == (500, 0.01, len(seen))
    assert [layer.bits for layer in other.layers] == [layer.bits for layer in seen.layers]
    assert all(key in other for key in inserted)


def _saved(tmp_path) -> tuple:
    seen = LocalSeenSet(1000, 0.01)
    for key in keys(300, "bad"):
        seen.add(key)
    path = tmp_path / "bloom.snapshot"
    seen.save(path)
    return path, path.read_bytes()


@pytest.mark.parametrize("damage, problem", [
    (lambda data: data[:20], "truncated"),
    (lambda data: data[:-7], "truncated"),
    (lambda data: b"", "truncated"),
    (lambda data: b"NOTBLOOM" + data[8:], "bad magic"),
    (lambda data: data[:200] + bytes([data[200] ^ 0xFF]) + data[201:], "checksum"),
    (lambda data: data[:8] + b"\x09\x00" + data[10:], "version"),
])
def test_damaged_snapshot_names_the_file(tmp_path, damage, problem) -> None:
    path, data = _saved(tmp_path)
    path.write_bytes(damage(data))
    with pytest.raises(SnapshotError) as err:
        read_snapshot(path)
    assert str(path) in str(err.value) and problem in str(err.value)
    with pytest.raises(SnapshotError):
        LocalSeenSet(1000, 0.01).load(path)


def test_missing_snapshot_names_the_file(tmp_path) -> None:
    with pytest.raises(SnapshotError, match="cannot be read"):
        read_snapshot(tmp_path / "nope")


def test_layer_rates_sum_to_at_most_p() -> None:
    grow, stop = LocalSeenSet(10, 0.001, "grow"), LocalSeenSet(10, 0.001, "stop")
    assert sum(grow._layer_rate(i) for i in range(40)) <= 0.001 * (1 + 1e-12)
    assert stop.layers[0].error_rate == 0.001  # one layer, never grown: exactly p
    assert grow.layers[0].error_rate == pytest.approx(0.001 * (1 - bloom.TIGHTEN))


def test_a_full_stop_filter_resumes_with_grow(tmp_path) -> None:
    seen = LocalSeenSet(50, 0.01, on_full="stop")
    for key in keys(60, "full"):
        seen.add(key)
    assert seen.full
    seen.save(tmp_path / "s")
    again = LocalSeenSet(50, 0.01, on_full="stop")
    again.load(tmp_path / "s")
    assert again.full  # still full under the same policy
    grown = LocalSeenSet(50, 0.01, on_full="grow")
    grown.load(tmp_path / "s")
    assert not grown.full
    for key in keys(200, "more"):
        grown.add(key)
    assert len(grown.layers) > 1 and all(k in grown for k in keys(60, "full"))
