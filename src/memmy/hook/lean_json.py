"""JSON for the hook without importing :mod:`json`, which pulls in ``re``, ``enum`` and friends at start.

CPython's C accelerator (``_json``) holds the whole scanner and encoder that :mod:`json` itself uses; this module
drives them directly (same output as ``json.dumps`` with default separators, same values as ``json.loads``), and
falls back to :mod:`json` on an interpreter without ``_json``.
"""

TYPE_CHECKING = False  # typing costs milliseconds at hook start; it is only needed by the type checker
if TYPE_CHECKING:
    from typing import Any

try:
    import _json

    _CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}

    class _Context:
        """The attributes ``_json.make_scanner`` reads (those of ``json.JSONDecoder``)."""

        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = _CONSTANTS.__getitem__
        memo: "dict[str, Any]" = {}

    _scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # typeshed names the JSONDecoder shape oddly
    _WHITESPACE = " \t\n\r"

    def _unserializable(value: object) -> object:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    def loads(text: "str | bytes") -> "Any":
        """Parse one JSON document (``text`` as str or UTF-8 bytes); raises ``ValueError`` when it is not JSON."""
        if isinstance(text, bytes | bytearray):
            text = bytes(text).decode("utf-8")
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except StopIteration as stop:
            raise ValueError(f"Expecting value: char {stop.value}") from None
        if text[end:].strip(_WHITESPACE):
            raise ValueError(f"Extra data: char {end}")
        return value

    def dumps(value: object, ensure_ascii: bool = True) -> str:
        """``json.dumps(value, ensure_ascii=...)``."""
        escape = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        encode = _json.make_encoder({}, _unserializable, escape, None, ": ", ", ", False, False, True)
        return "".join(encode(value, 0))

except ImportError:  # pragma: no cover - an interpreter without the C accelerator
    import json as _std

    def loads(text: "str | bytes") -> "Any":
        """Parse one JSON document; raises ``ValueError`` when it is not JSON."""
        return _std.loads(text)

    def dumps(value: object, ensure_ascii: bool = True) -> str:
        """``json.dumps(value, ensure_ascii=...)``."""
        return _std.dumps(value, ensure_ascii=ensure_ascii)
