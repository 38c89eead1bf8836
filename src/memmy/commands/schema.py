"""JSON Schema from Python types: a request's schema from its :class:`~memmy.commands.base.Command` fields, an
answer's schema from a ``TypedDict``. The OpenAPI document (``memmy.server.openapi``) is built from these."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections import abc
from typing import Any, Literal, NotRequired, Required, get_args, get_origin, is_typeddict

from memmy.commands.answers import JSONValue
from memmy.commands.base import Command, field_key, is_required, on_wire, type_hints, unwrap_optional

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def _is_json_value(hint: object) -> bool:
    """:data:`~memmy.commands.answers.JSONValue`, also as ``typing.get_type_hints`` rebuilds it (any JSON)."""
    if hint == JSONValue or (isinstance(hint, typing.ForwardRef) and hint.__forward_arg__ == "JSONValue"):
        return True
    args = get_args(hint) if get_origin(hint) in (typing.Union, types.UnionType) else ()
    return len(args) == len(get_args(JSONValue)) and {a for a in args if isinstance(a, type)} >= set(_SCALARS)


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a Python type (scalars, Literal, unions, lists, tuples, dicts, TypedDicts)."""
    if hint is Any or hint is object or _is_json_value(hint):
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Required, NotRequired):
        return type_schema(args[0])
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [type_schema(a) for a in args]}
    if origin in (list, tuple, abc.Sequence) or hint in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        return {"type": "array", "items": type_schema(items[0])} if items else {"type": "array"}
    if origin in (dict, abc.Mapping) or hint is dict:
        return {"type": "object", "additionalProperties": type_schema(args[1])} if args else {"type": "object"}
    if is_typeddict(hint):
        return typeddict_schema(hint)
    if isinstance(hint, type) and issubclass(hint, Command):
        return request_schema(hint)
    raise TypeError(f"no JSON Schema for {hint!r}")


def typeddict_schema(cls: Any) -> dict[str, Any]:
    """An object schema from a ``TypedDict``: its keys, their types and the required ones."""
    hints = typing.get_type_hints(cls)
    schema: dict[str, Any] = {"type": "object", "properties": {k: type_schema(v) for k, v in hints.items()}}
    required = sorted(cls.__required_keys__)
    if required:
        schema["required"] = required
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split())
    return schema


def field_schema(field: dataclasses.Field[Any], hint: Any) -> dict[str, Any]:
    """The schema of one command field: its declared extra schema over the schema of its type."""
    extra: dict[str, Any] = dict(field.metadata.get("schema", {}))
    inner, _optional = unwrap_optional(hint)  # null is read as absent; the document offers the value's type only
    schema = {} if {"enum", "const", "oneOf", "anyOf"} & set(extra) else type_schema(inner)
    schema.update(extra)
    doc = field.metadata.get("doc")
    if doc and "description" not in schema:
        schema["description"] = doc
    if isinstance(field.default, (str, int, float, bool)):
        schema.setdefault("default", field.default)
    return schema


def request_fields(cls: type[Command]) -> list[tuple[str, dict[str, Any], bool]]:
    """``(json key, schema, required)`` for every field of a command, nested commands flattened."""
    hints = type_hints(cls)
    found: list[tuple[str, dict[str, Any], bool]] = []
    for field in dataclasses.fields(cls):
        if not on_wire(field):
            continue
        hint = hints[field.name]
        if isinstance(hint, type) and issubclass(hint, Command):
            found.extend(request_fields(hint))
            continue
        found.append((field_key(field), field_schema(field, hint), is_required(field)))
    return found


def request_schema(cls: type[Command]) -> dict[str, Any]:
    """The object schema of a request body."""
    fields = request_fields(cls)
    schema: dict[str, Any] = {"type": "object", "properties": {key: s for key, s, _req in fields}}
    required = [key for key, _s, req in fields if req]
    if required:
        schema["required"] = required
    schema.update(cls.schema_extra)
    return schema


def query_parameters(cls: type[Command]) -> list[dict[str, Any]]:
    """The OpenAPI ``parameters`` of a request read from the query string."""
    return [{"name": key, "in": "query", "required": req, "schema": s} for key, s, req in request_fields(cls)]
