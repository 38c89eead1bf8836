"""Typed requests: read at the edge with messages that name the field, redacted before a write, described by the
same fields in the generated schema."""

from __future__ import annotations

import pytest

from memmy.commands.base import Command
from memmy.commands.evolution import Feedback, RunWorker
from memmy.commands.governance import ListLogs
from memmy.commands.memory import AddMemory, SearchMemory
from memmy.commands.schema import query_parameters, request_schema
from memmy.errors import InvalidArgument, NotFound
from memmy.keys.args import RememberBatchArgs, key_args
from memmy.redact import Redactor


def test_bad_fields_are_rejected_with_their_json_name() -> None:
    cases: list[tuple[type[Command], object, str]] = [
        (AddMemory, {"content": "  "}, "content: expected a non-empty string"),
        (AddMemory, {"content": "x", "visibility": "team"}, "visibility: expected one of private, global"),
        (AddMemory, {"content": "x", "createdAt": "2024-01-01"}, "createdAt: the date-time needs a timezone"),
        (SearchMemory, {"query": "q", "limit": 0}, "limit: expected an integer between 1 and 100"),
        (SearchMemory, {"query": "q", "channels": ["telepathy"]}, "channels: unknown ['telepathy']"),
        (SearchMemory, {"query": "q", "scope": "galaxy"}, "scope: expected one of auto, pooled, project, agent"),
        (Feedback, {"id": "trace_1", "polarity": "meh"}, "polarity: expected positive, negative or neutral"),
        (Feedback, {"id": "trace_1", "polarity": "positive", "magnitude": 2}, "magnitude: expected a number"),
    ]
    for command, body, message in cases:
        with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace("]", r"\]")):
            command.from_json(body)
    with pytest.raises(InvalidArgument, match="request body must be a JSON object"):
        AddMemory.from_json(["content"])


def test_values_are_normalised_and_query_strings_read() -> None:
    search = SearchMemory.from_json({"query": "q", "layers": "l1,L2", "tags": "a, b", "channels": ["vec"]})
    assert search.layers == ("L1", "L2") and search.options.tags == ("a", "b") and search.options.channels == ("vec",)
    logs = ListLogs.from_request(None, {"kind": "api", "limit": "7", "after": "12"})
    assert (logs.kind, logs.limit, logs.after) == ("api", 7, 12)
    assert RunWorker.from_request({}, {"limit": "3"}).limit == 3
    assert RunWorker.from_request({"limit": 5}, {"limit": "3"}).limit == 5
    assert Feedback.from_json({"memoryId": "trace_1", "polarity": "NEGATIVE"}).polarity == "negative"


def test_redaction_reaches_nested_and_batched_text() -> None:
    secret = "sk_live_" + "a1b2c3d4" * 4
    redactor = Redactor.from_config(None)
    added = AddMemory.from_json({"content": f"deploy key {secret}", "tags": [secret]}).redacted(redactor)
    assert secret not in added.content and secret not in added.tags[0]
    batch = key_args("remember_batch", {"items": [{"content": f"key {secret}", "keys": ["deploy"]}]})
    assert isinstance(batch, RememberBatchArgs)
    assert secret not in batch.redacted(redactor).items[0].content


def test_key_tools_are_looked_up_by_name() -> None:
    with pytest.raises(NotFound, match="unknown key-graph operation 'telepathy'"):
        key_args("telepathy", {})
    with pytest.raises(InvalidArgument, match=r"items\[1\]\.keys"):
        key_args("remember_batch", {"items": [{"content": "ok", "keys": ["k"]}, {"content": "x"}]})
    assert key_args("correct", {"memory_id": "m", "content": "y"}).to_json() == {"memory_id": "m", "content": "y"}


def test_schema_comes_from_the_same_fields() -> None:
    schema = request_schema(SearchMemory)
    assert schema["required"] == ["query"]
    assert {"query", "limit", "layers", "scope", "channels", "contextHints", "tags"} <= set(schema["properties"])
    assert schema["properties"]["limit"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}
    names = {p["name"]: p for p in query_parameters(ListLogs)}
    assert names["kind"]["schema"]["enum"] == ["audit", "api", "changes", "recalls"]
    assert not any(p["required"] for p in names.values())
