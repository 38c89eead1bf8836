"""The OpenAPI 3.1 document of the HTTP API (served at ``/api/v1/openapi.json``), generated from the route table:
request schemas from the rows' commands (:mod:`memmy.commands.schema`), answer schemas from their ``TypedDict``s
(:mod:`memmy.commands.answers`)."""

from __future__ import annotations

import functools
from typing import Any

from memmy import __version__
from memmy.commands.base import Command
from memmy.commands.schema import query_parameters, request_schema, type_schema
from memmy.server.routes import ROUTES, Row

_STR = {"type": "string"}
#: Ids in paths (the daemon's own ids look like ``trace_0a1b…``).
_PATH_ID = {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,200}$"}
#: Session and turn ids in paths are the caller's own: up to 200 characters without NUL, CR or LF.
_CALLER_ID = {"type": "string", "pattern": "^[^\\x00\\n\\r]{1,200}$"}
_CALLER_IDS = ("session_id", "turn_id")
_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": _STR, "message": _STR, "requestId": _STR},
            "required": ["code", "message", "requestId"],
        }
    },
    "required": ["error"],
}
_IDEMPOTENCY = {
    "adapterId": {"type": ["string", "null"], "description": "with requestId: a retry returns the first answer"},
    "requestId": {"type": ["string", "null"]},
}
#: Error answers any operation may give, by status (the body is always the error envelope).
ERROR_STATUSES: dict[str, str] = {
    "400": "Invalid argument, or a body that is not JSON (`invalid_json`: malformed or nested too deep)",
    "401": "Missing or wrong token",
    "403": "Refused: a browser origin not allowed, or an operation disabled by configuration",
    "404": "Unknown id or route",
    "409": "Conflict (idempotency key reuse, closed session, not run by `memmy-memory serve`)",
    "413": "Body over server.maxBodyBytes (2 MiB by default)",
    "415": "A body not sent as `content-type: application/json`",
    "421": "A Host header that does not name this loopback service (DNS rebinding guard)",
    "503": "The store met damage while running (`store_damaged`): a damaged full-text index was rebuilt (retry), "
    "or `memmy-memory doctor` names the damage",
    "507": "The store cannot write (disk full, read-only or I/O error); nothing of the request was saved",
}


def _body_schema(row: Row) -> dict[str, Any] | None:
    if row.request is None or (isinstance(row.request, type) and row.request.in_query):
        return None
    schema = request_schema(row.request) if isinstance(row.request, type) else {"type": "object", **row.request}
    if row.idempotency:
        schema = {**schema, "properties": {**_IDEMPOTENCY, **schema.get("properties", {})}}
    return schema


def _operation(row: Row) -> dict[str, Any]:
    """One operation object from one route row."""
    if row.media == "application/json":
        content = {row.media: {"schema": type_schema(row.response)}}
    elif row.media == "text/event-stream":  # the schema of one event; its data is the answer type as JSON
        data = {"type": "string", "contentMediaType": "application/json", "contentSchema": type_schema(row.response)}
        event = {"type": "object", "properties": {"event": {"type": "string"}, "data": data}, "required": ["data"]}
        content = {row.media: {"schema": event}}
    else:
        content = {row.media: {"schema": {"type": "string"}}}
    responses: dict[str, Any] = {"200": {"description": "OK", "content": content}}
    responses.update({status: {"$ref": f"#/components/responses/E{status}"} for status in ERROR_STATUSES})
    operation: dict[str, Any] = {"summary": row.summary, "responses": responses}
    if row.anonymous:
        operation["security"] = [{}, {"bearer": []}]
    body = _body_schema(row)
    if body is not None:
        operation["requestBody"] = {
            "required": "required" in body,
            "content": {"application/json": {"schema": body}},
        }
    params = [
        {
            "name": part[1:-1],
            "in": "path",
            "required": True,
            "schema": _CALLER_ID if part[1:-1] in _CALLER_IDS else _PATH_ID,
        }
        for part in row.path.split("/")
        if part.startswith("{")
    ]
    if isinstance(row.request, type) and issubclass(row.request, Command) and row.request.in_query:
        params += query_parameters(row.request)
    if params:
        operation["parameters"] = params
    return operation


@functools.cache
def _document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for row in ROUTES:
        if row.documented:
            paths.setdefault(row.path, {})[row.method.lower()] = _operation(row)
    error_content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "memmy memory service", "version": __version__},
        "servers": [{"url": "http://127.0.0.1:18960"}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR},
            "responses": {
                f"E{status}": {"description": text, "content": error_content} for status, text in ERROR_STATUSES.items()
            },
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document, generated once from :data:`memmy.server.routes.ROUTES`."""
    import copy

    return copy.deepcopy(_document())
