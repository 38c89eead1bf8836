"""The base of every typed request: fields declared once, read from JSON and described as JSON Schema from the
same declaration.

A request is a frozen dataclass deriving :class:`Command`. Each field's JSON name, bounds and description sit in
its :func:`param` metadata; :meth:`Command.from_json` reads a body with :mod:`memmy.commands.validate`'s readers
(so a bad value is an :class:`~memmy.errors.InvalidArgument` naming the field), and :func:`memmy.commands.schema`
turns the same fields into the OpenAPI request schema. A command whose fields depend on each other overrides
``from_json`` and still calls :meth:`Command.read_fields` for the plain ones.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Protocol, Self, get_args, get_origin

from memmy.commands.validate import opt_bool, opt_float, opt_int, opt_list, opt_str, req_str, require_object
from memmy.errors import InvalidArgument

#: Reads one field from a body: ``(body, json_key) -> value`` (raises InvalidArgument).
Reader = Callable[[dict[str, Any], str], Any]


class Redacts(Protocol):
    """What a command needs of :class:`memmy.redact.Redactor` (kept structural: commands sit below redact)."""

    def redact(self, text: str | None) -> str:
        """The text with every secret replaced."""
        ...

    def redact_json(self, value: Any) -> Any:
        """A copy of a JSON value with every secret replaced."""
        ...


def camel(name: str) -> str:
    """``workspace_path`` -> ``workspacePath`` (the API's JSON names)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def param(
    default: Any = dataclasses.MISSING,
    *,
    key: str | None = None,
    schema: Mapping[str, Any] | None = None,
    read: Reader | None = None,
    doc: str = "",
    redact: bool = True,
    factory: Callable[[], Any] | None = None,
    wire: bool = True,
) -> Any:
    """A command field: its JSON ``key`` (default: camelCase of the name), extra JSON Schema, a custom reader.

    ``factory`` makes a fresh default per request (a list); ``wire=False`` marks a field that is not read from
    the body (a path value, something derived from the request): it is left out of the schema and ``to_json``.
    """
    meta = {"key": key, "schema": dict(schema or {}), "read": read, "doc": doc, "redact": redact, "wire": wire}
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or a default_factory-free immutable default")
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def on_wire(field: dataclasses.Field[Any]) -> bool:
    """Whether a command field is read from the request body (see :func:`param`'s ``wire``)."""
    return bool(field.metadata.get("wire", True))


def is_required(field: dataclasses.Field[Any]) -> bool:
    """A field without a default (nor a default factory)."""
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def field_key(field: dataclasses.Field[Any]) -> str:
    """The JSON name of a command field."""
    return str(field.metadata.get("key") or camel(field.name))


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(hint, False)``."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _query_bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
    return opt_bool(body, key, default)


def _read_literal(body: dict[str, Any], key: str, choices: tuple[Any, ...], default: Any) -> Any:
    value = opt_str(body, key)
    if value is None:
        return default
    if value not in choices:
        raise InvalidArgument(f"{key}: expected one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def _read_strings(body: dict[str, Any], key: str) -> tuple[str, ...]:
    items = opt_list(body, key)
    if not all(isinstance(item, str) for item in items):
        raise InvalidArgument(f"{key}: expected an array of strings")
    return tuple(items)


def _read_object(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{key}: expected an object, got {type(value).__name__}")
    return value


def field_reader(field: dataclasses.Field[Any], hint: Any, *, query: bool) -> Callable[[dict[str, Any]], Any]:
    """How one field is read from a body, by its type and metadata (worked out once per command type)."""
    key = field_key(field)
    reader: Reader | None = field.metadata.get("read")
    if reader is not None:
        custom = reader
        return lambda body: custom(body, key)
    required = is_required(field)
    default: Any = None if required else field.default
    schema: dict[str, Any] = field.metadata.get("schema", {})
    inner, optional = unwrap_optional(hint)
    if inner is str:
        max_len = schema.get("maxLength")
        if required:
            return lambda body: req_str(body, key, max_len=max_len)

        def text(body: dict[str, Any]) -> str | None:
            value = opt_str(body, key)
            if value is not None and max_len is not None and len(value) > max_len:
                raise InvalidArgument(f"{key}: longer than {max_len} characters")
            return value if value is not None else default

        return text
    if get_origin(inner) is Literal:
        choices = get_args(inner)
        return lambda body: _read_literal(body, key, choices, default)
    if inner is bool:
        if query:
            return lambda body: _query_bool(body, key, bool(default))
        return lambda body: opt_bool(body, key, bool(default))
    if inner is int:
        minimum, maximum = int(schema.get("minimum", 0)), schema.get("maximum")

        def integer(body: dict[str, Any]) -> int | None:
            if optional and body.get(key) is None:
                return None
            return opt_int(body, key, int(default or 0), minimum=minimum, maximum=maximum, strings=query)

        return integer
    if inner is float:
        low, high = schema.get("minimum"), schema.get("maximum")

        def number(body: dict[str, Any]) -> float:
            value = opt_float(body, key, float(default or 0.0), strings=query)
            if (low is not None and value < low) or (high is not None and value > high):
                raise InvalidArgument(f"{key}: expected a number between {low} and {high}")
            return value

        return number
    if get_origin(inner) is tuple:
        return lambda body: _read_strings(body, key)
    if inner is dict or get_origin(inner) is dict:
        return lambda body: _read_object(body, key)
    raise TypeError(f"{field.name}: no reader for {hint!r}; give param(read=...)")


def _redact_item(item: Any, redactor: Redacts) -> Any:
    return item.redacted(redactor) if isinstance(item, Command) else redactor.redact_json(item)


_FREE_TEXT: dict[type, list[str]] = {}


def free_text_fields(cls: type[Command]) -> list[str]:
    """The fields redaction reads: text, lists, objects and nested requests (not enums, numbers or flags)."""
    names = _FREE_TEXT.get(cls)
    if names is None:
        hints = type_hints(cls)
        names = []
        for f in dataclasses.fields(cls):
            inner, _optional = unwrap_optional(hints[f.name])
            if not f.metadata.get("redact", True) or inner in (bool, int, float) or get_origin(inner) is Literal:
                continue
            names.append(f.name)
        _FREE_TEXT[cls] = names
    return names


_PLANS: dict[type, list[tuple[str, Callable[[dict[str, Any]], Any]]]] = {}


def read_plan(cls: type[Command]) -> list[tuple[str, Callable[[dict[str, Any]], Any]]]:
    """``(field name, reader)`` for every field of a command type (cached: commands are read on every request)."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = type_hints(cls)
        plan = _PLANS[cls] = [
            (f.name, field_reader(f, hints[f.name], query=cls.in_query))
            for f in dataclasses.fields(cls)
            if f.init and on_wire(f)
        ]
    return plan


def _plain(value: Any) -> Any:
    if isinstance(value, Command):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of a dataclass (cached: commands are parsed on every request)."""
    found = _HINTS.get(cls)
    if found is None:
        found = _HINTS[cls] = typing.get_type_hints(cls)
    return found


_WIRE_KEYS: dict[type, dict[str, bool]] = {}


def wire_keys(cls: type[Command]) -> dict[str, bool]:
    """``{json key: null accepted}`` for every field a body may carry (nested requests flattened, aliases added);
    a field typed ``X | None`` takes ``null`` (read as absent), any other refuses it (cached per type)."""
    keys = _WIRE_KEYS.get(cls)
    if keys is None:
        hints = type_hints(cls)
        keys = {}
        for f in dataclasses.fields(cls):
            if not on_wire(f):
                continue
            hint = hints[f.name]
            if isinstance(hint, type) and issubclass(hint, Command):
                keys.update(wire_keys(hint))
                continue
            keys[field_key(f)] = unwrap_optional(hint)[1]
        keys.update(dict.fromkeys(cls.alias_keys, True))
        _WIRE_KEYS[cls] = keys
    return keys


def check_body(cls: type[Command], body: object, extra: Mapping[str, bool] | None = None) -> dict[str, Any]:
    """The edge's strictness before a body is read: a JSON object (not ``null``), no key the request does not
    have (``extra``: keys the route adds, such as the idempotency pair, with whether they take ``null``), and
    ``null`` only for an optional field. Each refusal is an :class:`InvalidArgument` naming the key."""
    if body is None:
        raise InvalidArgument("request body must be a JSON object, got null (send {} for no fields)")
    data = require_object(body)
    known = {**wire_keys(cls), **(extra or {})}
    unknown = [key for key in data if key not in known]
    if unknown:
        expected = ", ".join(sorted(known)) or "no fields"
        raise InvalidArgument(f"{unknown[0][:60]!r}: unknown field (expected {expected})")
    for key, value in data.items():
        if value is None and not known[key]:
            raise InvalidArgument(f"{key}: null is not a value here (leave the field out for its default)")
    return data


@dataclasses.dataclass(frozen=True)
class Command:
    """A typed request: frozen, read from JSON by :meth:`from_json`, described by :func:`schema.request_schema`."""

    #: A short line for the API document.
    summary: ClassVar[str] = ""
    #: Read from the query string (GET) rather than a JSON body.
    in_query: ClassVar[bool] = False
    #: Extra JSON Schema keywords for the whole request (``anyOf`` between fields, ...).
    schema_extra: ClassVar[dict[str, Any]] = {}
    #: Other names a body may give a field (``{key: schema}``; documented beside the field they stand for).
    alias_keys: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def read_fields(cls, body: object) -> dict[str, Any]:
        """Every field's value from ``body`` (a JSON object, or None for an empty body)."""
        data = require_object(body)
        return {name: read(data) for name, read in read_plan(cls)}

    @classmethod
    def from_json(cls, body: object = None) -> Self:
        """Parse and validate a request body (or the query parameters of a GET)."""
        return cls(**cls.read_fields(body))

    @classmethod
    def from_request(cls, body: object, query: Mapping[str, str], path: Mapping[str, str] | None = None) -> Self:
        """The request of an HTTP call: from the query string for a GET-style request, else from the body
        (``path``: the values of the route's path, for a request that names its target there)."""
        return cls.from_json(dict(query) if cls.in_query else body)

    def to_json(self) -> dict[str, Any]:
        """The request as JSON (its API names; absent values left out), for audit rows."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if not on_wire(f):
                continue
            value = getattr(self, f.name)
            if isinstance(value, Command):
                out.update(value.to_json())
            elif value is not None and value != () and value != {}:
                out[field_key(f)] = _plain(value)
        return out

    def redacted(self, redactor: Redacts) -> Self:
        """A copy with every secret in its free-text fields replaced (before any write, log or job sees it)."""
        changes: dict[str, Any] = {}
        for name in free_text_fields(type(self)):
            value = getattr(self, name)
            if value is None or value == "" or value == ():
                continue
            redacted: Any
            if isinstance(value, Command):
                redacted = value.redacted(redactor)
            elif isinstance(value, tuple):
                redacted = tuple(_redact_item(item, redactor) for item in value)
            else:
                redacted = redactor.redact_json(value)
            if redacted != value:
                changes[name] = redacted
        return dataclasses.replace(self, **changes) if changes else self
