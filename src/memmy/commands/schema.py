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
from memmy.commands.validate import MAX_INT

#: Keywords that describe a schema without constraining it.
_ANNOTATIONS = frozenset({"description", "default", "title", "examples"})
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


def field_schema(field: dataclasses.Field[Any], hint: Any, *, body: bool = False) -> dict[str, Any]:
    """The schema of one command field: its declared extra schema over the schema of its type.

    An integer gets the bounds its reader enforces (``minimum`` 0, ``maximum`` :data:`MAX_INT` unless the field
    names its own). In a JSON ``body`` an optional field (``X | None``) also takes ``null``; a query string
    cannot send one.
    """
    extra: dict[str, Any] = dict(field.metadata.get("schema", {}))
    inner, optional = unwrap_optional(hint)
    schema = {} if {"enum", "const", "oneOf", "anyOf"} & set(extra) else type_schema(inner)
    schema.update(extra)
    if schema.get("type") == "integer" and field.metadata.get("read") is None:
        schema.setdefault("minimum", 0)
        schema.setdefault("maximum", MAX_INT)
    doc = field.metadata.get("doc")
    if doc and "description" not in schema:
        schema["description"] = doc
    if isinstance(field.default, (str, int, float, bool)):
        schema.setdefault("default", field.default)
    if body and optional:
        schema = nullable(schema)
    return schema


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also takes ``null``."""
    if set(schema) <= _ANNOTATIONS or isinstance(schema.get("type"), list):
        return schema  # any value already, or a type list the field chose
    combined = {"not", "anyOf", "oneOf", "allOf"} & set(schema)  # (a ``not`` would refuse null: wrap it)
    if isinstance(schema.get("type"), str) and not combined:
        return {**schema, "type": [schema["type"], "null"]}
    if "enum" in schema and not combined:
        return {**schema, "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def request_fields(cls: type[Command], *, body: bool = False) -> list[tuple[str, dict[str, Any], bool]]:
    """``(json key, schema, required)`` for every field of a command, nested commands flattened (``body``: as
    a JSON body carries them, see :func:`field_schema`)."""
    hints = type_hints(cls)
    found: list[tuple[str, dict[str, Any], bool]] = []
    for field in dataclasses.fields(cls):
        if not on_wire(field):
            continue
        hint = hints[field.name]
        if isinstance(hint, type) and issubclass(hint, Command):
            found.extend(request_fields(hint, body=body))
            continue
        found.append((field_key(field), field_schema(field, hint, body=body), is_required(field)))
    return found


def request_schema(cls: type[Command]) -> dict[str, Any]:
    """The object schema of a request body: its fields (and their aliases), nothing else."""
    fields = request_fields(cls, body=True)
    properties = {key: s for key, s, _req in fields}
    properties.update({key: nullable(s) for key, s in cls.alias_keys.items()})
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    required = [key for key, _s, req in fields if req]
    if required:
        schema["required"] = required
    schema.update(cls.schema_extra)
    return schema


def query_parameters(cls: type[Command]) -> list[dict[str, Any]]:
    """The OpenAPI ``parameters`` of a request read from the query string."""
    return [{"name": key, "in": "query", "required": req, "schema": s} for key, s, req in request_fields(cls)]
