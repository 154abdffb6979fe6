"""JSON serializer for the scrapy-redis request queue (``SCHEDULER_SERIALIZER``).

scrapy-redis 0.9.1 pickles queued requests unless ``SCHEDULER_SERIALIZER`` names a module with
``dumps`` and ``loads``; it imports that module by name (``importlib.import_module``). Loading a
pickle runs code, so a shared Redis server would let anyone who can write to it run code in
every crawler: this module stores ``Request.to_dict()`` as JSON instead.

Encoding: JSON types as themselves, tuples as lists, ``bytes`` (body, headers) as
``{"$b": "<base64>"}``, and a dict whose keys are not all strings (headers) as
``{"$d": [[key, value], ...]}``. Anything else (an object in ``request.meta``) raises
``TypeError`` naming where it is: keep ``meta`` and ``cb_kwargs`` JSON-friendly in the
distributed profile. The format may change between versions; a queue is not meant to outlive
an upgrade.
"""

from __future__ import annotations

import base64
import json
from typing import Any

_BYTES, _DICT = "$b", "$d"


def dumps(obj: Any) -> str:
    """``obj`` (a request dict) as a JSON string."""
    return json.dumps(_encode(obj, "request"), separators=(",", ":"), allow_nan=False)


def loads(data: str | bytes) -> Any:
    """The object :func:`dumps` wrote."""
    return _decode(json.loads(data))


def _encode(obj: Any, where: str) -> Any:
    if obj is None or isinstance(obj, str | bool | int | float):
        return obj
    if isinstance(obj, bytes | bytearray | memoryview):
        return {_BYTES: base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, list | tuple):
        return [_encode(item, f"{where}[{i}]") for i, item in enumerate(obj)]
    if isinstance(obj, dict):
        plain = all(isinstance(key, str) for key in obj) and not ({_BYTES, _DICT} & obj.keys())
        if plain:
            return {key: _encode(value, f"{where}[{key!r}]") for key, value in obj.items()}
        pairs = [
            [_encode(k, f"{where} key"), _encode(v, f"{where}[{k!r}]")] for k, v in obj.items()
        ]
        return {_DICT: pairs}
    raise TypeError(
        f"cannot queue {where} = {type(obj).__name__!s} in Redis as JSON: the distributed "
        "profile never pickles; keep request.meta and cb_kwargs to str, numbers, lists, dicts "
        "and bytes"
    )


def _decode(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_decode(item) for item in obj]
    if isinstance(obj, dict):
        if len(obj) == 1 and _BYTES in obj:
            return base64.b64decode(obj[_BYTES])
        if len(obj) == 1 and _DICT in obj:
            return {_decode(k): _decode(v) for k, v in obj[_DICT]}
        return {key: _decode(value) for key, value in obj.items()}
    return obj
