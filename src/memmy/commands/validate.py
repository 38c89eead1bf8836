"""Small request validators shared by every service method: clear messages that name the field."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from memmy.domain import Layer, normalise_layer, normalise_tags
from memmy.errors import InvalidArgument

#: The largest integer a request may carry where its field names no bound of its own (JavaScript's safe integer:
#: JSON clients, Python and SQLite's 64-bit integers all hold every value up to it).
MAX_INT = 2**53 - 1
#: A number as a query string spells it: ASCII digits only (``int("²")`` fails, ``int("١٢")`` is 12: neither is
#: a number the API documents).
_INTEGER = re.compile(r"-?[0-9]{1,30}")
_NUMBER = re.compile(r"-?[0-9]{1,30}(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?")


def require_object(body: Any) -> dict[str, Any]:
    """The request body must be a JSON object."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidArgument(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def req_str(body: dict[str, Any], name: str, *, max_len: int | None = None) -> str:
    """A required non-empty string field."""
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None else repr(value)[:60]
        raise InvalidArgument(f"{name}: expected a non-empty string, got {got}")
    if max_len is not None and len(value) > max_len:
        raise InvalidArgument(f"{name}: longer than {max_len} characters")
    return value


def opt_str(body: dict[str, Any], name: str) -> str | None:
    """An optional string field (None when absent or null)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{name}: expected a string, got {type(value).__name__}")
    return value


def opt_int(
    body: dict[str, Any],
    name: str,
    default: int,
    *,
    minimum: int = 0,
    maximum: int | None = None,
    strings: bool = False,
) -> int:
    """An optional integer within bounds (at most :data:`MAX_INT` when no ``maximum`` is given).

    ``strings``: digits in a string count (a query string's values are all strings); a JSON body's ``"10"`` is
    refused, as a ``null`` is (absent is the default, ``null`` is not a number).
    """
    if name not in body:
        return default
    value = body[name]
    if strings and isinstance(value, str) and _INTEGER.fullmatch(value):
        value = int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:  # JSON's 10.0 is an integer too
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}: expected an integer, got {_kind(value)}")
    high = MAX_INT if maximum is None else maximum
    if value < minimum or value > high:
        shown = str(value) if len(str(value)) <= 30 else f"a {len(str(value))}-digit number"
        raise InvalidArgument(f"{name}: expected an integer between {minimum} and {high}, got {shown}")
    return value


def _kind(value: Any) -> str:
    """How a wrong value is named in a message: ``null``, ``a string ('10')``, ``an array``..."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    names = {bool: "a boolean", list: "an array", dict: "an object", float: "a number with a fraction"}
    return names.get(type(value), type(value).__name__)


def opt_float(body: dict[str, Any], name: str, default: float, *, strings: bool = False) -> float:
    """An optional finite number (``strings``: numeric strings count, for a query string)."""
    if name not in body:
        return default
    value = body[name]
    if strings and isinstance(value, str):
        if not _NUMBER.fullmatch(value):
            raise InvalidArgument(f"{name}: expected a number, got {value[:40]!r}")
        value = float(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidArgument(f"{name}: expected a number, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidArgument(f"{name}: the number is too large") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidArgument(f"{name}: expected a finite number")
    return number


def opt_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    """An optional boolean."""
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name}: expected true or false, got {value!r}")
    return value


def opt_list(body: dict[str, Any], name: str) -> list[Any]:
    """An optional JSON array."""
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidArgument(f"{name}: expected an array, got {type(value).__name__}")
    return value


def opt_tags(body: dict[str, Any], name: str = "tags") -> list[str]:
    """Tags as a list of strings or a comma-separated string (an array holding anything else is refused)."""
    value = body.get(name)
    if isinstance(value, list) and not all(isinstance(tag, str) for tag in value):
        raise InvalidArgument(f"{name}: expected an array of strings (a nested array or object is not a tag)")
    try:
        return normalise_tags(value)
    except ValueError as exc:
        raise InvalidArgument(f"{name}: {exc}") from None


def layer_of(value: Any, name: str = "layer") -> Layer:
    """A memory layer (L1, L2, L3, Skill; case-insensitive)."""
    if (value is not None and not isinstance(value, str)) or value == "":
        raise InvalidArgument(f"{name}: expected one of L1, L2, L3, Skill, got {value!r}"[:120])
    try:
        return normalise_layer(value)
    except ValueError as exc:
        raise InvalidArgument(f"{name}: {exc}") from None


def layers_of(body: dict[str, Any], name: str = "layers") -> list[Layer]:
    """A list of layers (array or comma-separated string); empty means all."""
    value = body.get(name)
    if value is None or value == "":
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise InvalidArgument(f"{name}: expected an array of layers")
    return list(dict.fromkeys(layer_of(item, name) for item in items if item != ""))


def opt_iso_time(body: dict[str, Any], name: str) -> str | None:
    """An optional ISO-8601 timestamp, normalised to UTC ``...Z``."""
    value = opt_str(body, name)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{name}: expected an ISO-8601 date-time, got {value!r}") from None
    if parsed.tzinfo is None:
        raise InvalidArgument(f"{name}: the date-time needs a timezone (e.g. 2026-01-31T09:00:00Z)")
    return parsed.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
