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

#: ``json.dumps(..., separators=(",", ":"), allow_nan=False)``, built once (``dumps`` builds an
#: encoder per call when given options).
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_SCALARS = frozenset({str, int, float, bool, type(None)})
#: Base64 text of recent byte strings (header names and values: the links of one page share
#: their ``Referer``); emptied when it reaches :data:`_B64_MAX` entries.
_B64: dict[bytes, str] = {}
_B64_MAX = 1024
_B64_LONGEST = 512  # longer byte strings (bodies) are not kept: at most ~1.2 MB held


class _Slow(Exception):
    """The fast encoder met something it leaves to :func:`_encode`."""


def dumps(obj: Any) -> str:
    """``obj`` (a request dict) as a JSON string."""
    try:
        encoded = _fast(obj)
    except _Slow:  # a subclass, a dict needing "$d", or a type JSON cannot hold (named there)
        encoded = _encode(obj, "request")
    return _JSON.encode(encoded)


def _fast(obj: Any) -> Any:
    """:func:`_encode` for the exact built-in types a request dict usually holds, without
    naming where each value is (only an error needs that): the same output, or :class:`_Slow`."""
    kind = type(obj)
    if kind in _SCALARS:
        return obj
    if kind is dict:
        plain = True
        for key in obj:
            if type(key) is not str:
                if isinstance(key, str):
                    raise _Slow
                plain = False
            elif key in (_BYTES, _DICT):
                plain = False
        if plain:
            return {key: value if type(value) in _SCALARS else _fast(value)
                    for key, value in obj.items()}  # fmt: skip
        return {_DICT: [[_fast(key), _fast(value)] for key, value in obj.items()]}
    if kind is list or kind is tuple:
        return [item if type(item) in _SCALARS else _fast(item) for item in obj]
    if kind is bytes:
        text = _B64.get(obj)
        if text is None:
            text = base64.b64encode(obj).decode("ascii")
            if len(obj) <= _B64_LONGEST:
                if len(_B64) >= _B64_MAX:
                    _B64.clear()
                _B64[obj] = text
        return {_BYTES: text}
    raise _Slow


def loads(data: str | bytes) -> Any:
    """The object :func:`dumps` wrote."""
    if not isinstance(data, str):
        data = bytes(data).decode(json.detect_encoding(data), "surrogatepass")  # as json.loads
    return _DECODER.decode(data)


def _unescape(obj: dict[str, Any]) -> Any:
    """The decoding of one JSON object whose values are decoded already (the parser's
    ``object_hook`` runs innermost first)."""
    if len(obj) == 1:
        if _BYTES in obj:
            return base64.b64decode(obj[_BYTES])
        if _DICT in obj:
            return dict(obj[_DICT])
    return obj


_DECODER = json.JSONDecoder(object_hook=_unescape)


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
