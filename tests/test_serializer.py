"""The JSON request serializer's fast path writes exactly what the general encoder writes.

:func:`crawler.cluster.serializer.dumps` encodes the usual request dict (exact built-in types)
without naming where each value sits, and caches the base64 of short byte strings; queued
requests are read by other workers of this version, so its output must be byte for byte the
general encoder's (``_encode`` then ``json.dumps``) on every shape, cached or not.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import pytest
import scrapy

from crawler.cluster import serializer


def general(obj: Any) -> str:
    """The encoding without the fast path (the serializer's output before it had one)."""
    return json.dumps(serializer._encode(obj, "request"), separators=(",", ":"), allow_nan=False)


class Name(str):
    pass


class Count(int):
    pass


SHAPES: list[Any] = [
    {"url": "http://a.example/", "headers": {b"Referer": [b"http://a.example/p"]}},
    {"meta": {"$b": "not bytes", "x": 1}},
    {"meta": {"$d": [1, 2]}},
    {1: "int key", "s": b"\x00\xff"},
    {2.5: "float key", True: "bool key", None: "none key"},
    {Name("sub"): "str-subclass key", "v": Name("str-subclass value"), "n": Count(3)},
    {"t": (1, (2, b"x"), [3.5, None, True]), "e": {}, "l": []},
    {"b": bytearray(b"ba"), "m": memoryview(b"mv"), "long": b"z" * 5000},
    {"nested": {b"k": {"$b": {b"deep": [b"v", {"x": (b"y",)}]}}}},
    "just a string",
    [b"a", b"a", b"b"],
]


@pytest.mark.parametrize("obj", SHAPES, ids=range(len(SHAPES)))
def test_fast_path_writes_what_the_general_encoder_writes(obj: Any) -> None:
    first = serializer.dumps(obj)
    assert first == general(obj)
    assert serializer.dumps(obj) == first  # again, with its byte strings cached


def test_a_real_request_dict_encodes_the_same_and_round_trips() -> None:
    request = scrapy.Request(
        "http://a.example/p?q=1", headers={"Referer": "http://a.example/", b"X": b"\xff"},
        body=b"\x00body", meta={"canonical_url": "http://a.example/p?q=1", "depth": 2},
        priority=-2, flags=["f"], cb_kwargs={"k": [1, "2"]},
    )  # fmt: skip
    data = request.to_dict()
    assert serializer.dumps(data) == general(data)
    assert serializer.loads(serializer.dumps(data)) == serializer.loads(general(data))


def test_the_byte_cache_stays_bounded_and_correct_past_its_size() -> None:
    values = [f"http://h.example/{i}".encode() for i in range(serializer._B64_MAX * 2 + 7)]
    for value in values:
        assert serializer.dumps({"h": value}) == general({"h": value})
        assert len(serializer._B64) <= serializer._B64_MAX
    assert serializer.dumps({"h": values[0]}) == general({"h": values[0]})


def test_refusals_are_unchanged_by_the_fast_path() -> None:
    with pytest.raises(TypeError, match=r"request\['meta'\]\['x'\]\[1\] = object"):
        serializer.dumps({"meta": {"x": [1, object()]}})
    with pytest.raises(TypeError, match=r"request key = object"):
        serializer.dumps({object(): 1})
    with pytest.raises(ValueError, match="Out of range float"):
        serializer.dumps({"meta": {"nan": math.nan}})


def _general_decode(obj: Any) -> Any:
    """The decoder ``loads`` had before it decoded inside the parser: a walk of the parsed
    JSON value (the reference the parser's ``object_hook`` must agree with)."""
    if isinstance(obj, list):
        return [_general_decode(item) for item in obj]
    if isinstance(obj, dict):
        if len(obj) == 1 and "$b" in obj:
            return base64.b64decode(obj["$b"])
        if len(obj) == 1 and "$d" in obj:
            return {_general_decode(k): _general_decode(v) for k, v in obj["$d"]}
        return {key: _general_decode(value) for key, value in obj.items()}
    return obj


@pytest.mark.parametrize("obj", SHAPES, ids=range(len(SHAPES)))
def test_loads_reads_what_the_general_decoder_reads(obj: Any) -> None:
    data = serializer.dumps(obj)
    expected = _general_decode(json.loads(data))
    assert serializer.loads(data) == expected
    assert serializer.loads(data.encode()) == expected
