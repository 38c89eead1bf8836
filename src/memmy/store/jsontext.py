"""JSON text for the store's JSON columns, written by orjson (the write path's hot spot).

The text means what ``json.dumps(value, ensure_ascii=False, default=str)`` meant (same keys in the same order,
non-ASCII kept as is, ``str()`` of what JSON cannot hold), in compact form; every reader parses it. A value orjson
refuses (an integer over 64 bits, a lone surrogate) is written by ``json.dumps`` exactly as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps_json(value: Any, default: Callable[[Any], Any] | None = str) -> str:
    """``value`` as JSON text (see the module docstring); ``default=None`` raises ``TypeError`` for what JSON
    cannot hold, as ``json.dumps`` without ``default`` does."""
    try:
        return orjson.dumps(value, default=default, option=_OPTIONS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, default=default)
