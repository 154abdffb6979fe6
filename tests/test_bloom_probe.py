"""A Bloom layer's probes in C (``crawler/backends/_bloomprobe.c``) against their
specification, :class:`crawler.backends.bloom.BloomLayer`'s Python loops (``__contains__``,
``_add``) and its numpy batch: the same bits set and read at many sizes (``m`` not a multiple
of 8, below ``k``, past 2**32 bits), with 16-byte and longer keys; short keys left to Python;
bad arguments refused; the package works without the module."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.backends import _bloomprobe, bloom
from crawler.backends.bloom import BloomLayer, ZeroBits
from tests.conftest import python_without


def _keys(n: int, tag: str, size: int = 16) -> list[bytes]:
    return [hashlib.blake2b(f"{tag}{i}".encode(), digest_size=size).digest() for i in range(n)]


def test_the_layer_runs_on_the_c_probes_here() -> None:
    """Built by the install (setup.py); a silent fall back would cost numpy's batch."""
    assert bloom._c_add is _bloomprobe.add
    assert bloom._c_contains_many is _bloomprobe.contains_many


#: (m, k): tiny filters whose probes wrap many times, m not a multiple of 8, m below k, an
#: odd large m, and m past 2**32 bits (ZeroBits: only touched pages are resident).
_LAYERS = [(1, 3), (7, 5), (9, 10), (64, 1), (1000, 0), (1001, 7), (65_537, 10),
           (14_377_588, 10), (2**33 + 5, 10), (2**34 - 3, 17)]  # fmt: skip


@pytest.mark.parametrize(("m", "k"), _LAYERS)
def test_the_c_probes_set_and_read_the_bits_python_does(m: int, k: int) -> None:
    in_c = BloomLayer(1000, 0.01, m=m, k=k)
    in_python = BloomLayer(1000, 0.01, m=m, k=k)  # its own ZeroBits, set by _add
    added = _keys(300, "added") + _keys(100, "long", 24)
    assert added
    for key in added:
        assert in_c.add(key) == in_python._add(key)
    assert (in_c.ones, in_c.count) == (in_python.ones, in_python.count)
    if m < 2**24:  # the big ones: compared through every probe of the keys below
        assert in_c.bits == in_python.bits
    assert all(key in in_c for key in added)  # Python's reading of the bits C set
    probe = added[::3] + _keys(500, "fresh") + _keys(50, "fresh-long", 20)
    answers = _bloomprobe.contains_many(in_c.bits, m, k, probe)
    assert answers == [key in in_python for key in probe]
    assert answers == in_c.contains_many(probe) == in_python._contains_many(probe)
    assert all(answers[:len(added[::3])])  # no false negative


@given(st.integers(1, 5000), st.integers(0, 24), st.lists(st.binary(min_size=16, max_size=40),
                                                           max_size=40))  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_the_c_probes_answer_as_python_for_any_layer(m: int, k: int, added: list[bytes]) -> None:
    in_c = BloomLayer(10, 0.1, m=m, k=k)
    in_python = BloomLayer(10, 0.1, m=m, k=k, bits=bytearray((m + 7) // 8))
    for key in added:
        assert in_c.add(key) == in_python._add(key)
    assert in_c.bits == in_python.bits
    probe = added + _keys(20, f"{m}-{k}")
    assert in_c.contains_many(probe) == [key in in_python for key in probe]


def test_a_key_shorter_than_16_bytes_is_left_to_python() -> None:
    layer = BloomLayer(1000, 0.01)
    short = [hashlib.blake2b(bytes([i]), digest_size=1 + i % 15).digest() for i in range(30)]
    for key in short[::2]:
        layer.add(key)  # stretched by Python (_add)
    probe = short + _keys(20, "x")
    assert _bloomprobe.contains_many(layer.bits, layer.m, layer.k, probe) is None
    answers = layer.contains_many(probe)
    assert answers == [key in layer for key in probe]
    assert all(answers[:30:2])


def test_a_dense_layer_reads_its_false_positives_as_python_does() -> None:
    """So full that most fresh keys read as present: both readings agree key by key."""
    layer = BloomLayer(20, 0.3, m=200, k=3)
    for key in _keys(400, "dense"):
        layer.add(key)
    fresh = _keys(2000, "dense-fresh")
    answers = layer.contains_many(fresh)
    assert 0 < sum(answers) < len(fresh)
    assert answers == [key in layer for key in fresh]


def test_the_c_probes_refuse_bad_arguments() -> None:
    bits = ZeroBits(16)
    with pytest.raises(ValueError, match="shorter than m"):
        _bloomprobe.contains_many(bits, 200, 3, _keys(1, "a"))
    with pytest.raises(ValueError, match="m >= 1"):
        _bloomprobe.add(bits, 0, 3, _keys(1, "a")[0])
    with pytest.raises(TypeError, match="at least 16 bytes"):
        _bloomprobe.add(bits, 100, 3, b"short")
    with pytest.raises(TypeError, match="a key is bytes, not str"):
        _bloomprobe.contains_many(bits, 100, 3, ["a" * 16])
    with pytest.raises(TypeError, match="takes 4 arguments"):
        _bloomprobe.add(bits, 100, 3)  # type: ignore[call-arg]
    with pytest.raises(BufferError):  # read-only bits cannot take a key
        _bloomprobe.add(bytes(16), 100, 3, _keys(1, "a")[0])


def test_many_layers_in_random_order_agree() -> None:
    """Keys added to a C layer and a Python layer in one random order, probed in another."""
    rng = random.Random(7)
    keys = _keys(3000, "order")
    rng.shuffle(keys)
    in_c, in_python = BloomLayer(3000, 0.001), BloomLayer(3000, 0.001)
    for key in keys[:1500]:
        in_c.add(key)
        in_python._add(key)
    rng.shuffle(keys)
    assert in_c.contains_many(keys) == in_python._contains_many(keys)
    assert in_c.bits == in_python.bits


def test_the_package_works_without_the_c_probes() -> None:
    """As in the scrapyd egg: the import fails, the Python loops and numpy run, the same
    answers."""
    out = python_without("crawler.backends._bloomprobe", (
        "import hashlib\n"
        "from crawler.backends import bloom\n"
        "assert bloom._c_add is None and bloom._c_contains_many is None\n"
        "layer = bloom.BloomLayer(1000, 0.01)\n"
        "keys = [hashlib.blake2b(str(i).encode(), digest_size=16).digest() for i in range(60)]\n"
        "print([layer.add(k) for k in keys[:30]].count(False), sum(layer.contains_many(keys)))\n"
    ))
    added, found = map(int, out)
    assert added == 30 and 30 <= found < 60
