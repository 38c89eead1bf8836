"""``memmy-memory keys ...`` (the associative key graph), ``correct``, ``confirm``, ``forget``, ``history`` and
``tombstones``: thin wrappers over ``POST /api/v1/keys/<op>``, ``/memory/<id>/history`` and ``/tombstones``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import click

from memmy.cli.context import CliContext, list_option, pass_ctx, strip_none
from memmy.daemon_client import routes
from memmy.domain import readable_text

DECAY_CHOICES = click.Choice(["transient", "standard", "stable", "permanent"])


def _key_line(key: Mapping[str, Any]) -> str:
    aliases = f" (aka {', '.join(key['aliases'])})" if key.get("aliases") else ""
    hub = " hub" if key.get("is_hub") else ""
    score = f" score {key['score']}" if "score" in key else ""
    return f"[{key['key_id']}] {key['concept']}{aliases} - {key['memory_count']} memories{hub}{score}"


def _validity(view: Mapping[str, Any]) -> str:
    validity = view.get("validity") or {}
    return f"{validity.get('status', '?')} (freshness {validity.get('freshness', '?')})"


def _key_types(values: tuple[str, ...]) -> dict[str, str] | None:
    found: dict[str, str] = {}
    for value in values:
        key, sep, kind = value.rpartition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=TYPE, got {value!r}", param_hint="--key-type")
        found[key] = kind
    return found or None


def _keys(keys: tuple[str, ...], keys_csv: str | None) -> list[str] | None:
    found = [*keys, *(list_option(keys_csv) or [])]
    return found or None


@click.group("keys")
def keys() -> None:
    """The associative key graph: recall by key clusters, walk Key -> Memory -> Key, remember under keys."""


@keys.command("recall")
@click.argument("query")
@click.option("--top-k", type=click.IntRange(1, 50))
@click.option("--namespace")
@click.option("--context", help="The raw sentence the lookup serves (ranks the Top-1 memory).")
@click.option("--explain", is_flag=True, help="Also report the namespace's memory count.")
@pass_ctx
def keys_recall(
    obj: CliContext, query: str, top_k: int | None, namespace: str | None, context: str | None, explain: bool
) -> None:
    """Ranked key clusters plus one passive Top-1 memory."""
    body = strip_none(
        {"query": query, "top_k": top_k, "namespace": namespace, "context": context, "explain": explain or None}
    )
    result = obj.call(routes.KEYS_RECALL, body)
    lines = [f"status: {result['status']}"]
    lines += [_key_line(k) for k in result.get("keys", [])]
    for memory in result.get("memories", []):
        lines.append(f"\nTop-1 {memory['id']} via {memory['matched_key']['concept']} - {_validity(memory)}")
        lines.append(f"  {readable_text(memory['content'])[:500]}")
        lines.append("  connected: " + ", ".join(f"{k['concept']} [{k['key_id']}]" for k in memory["connected_keys"]))
    if result.get("nearest_keys"):
        lines.append("nearest: " + ", ".join(f"{k['concept']} ({k['score']})" for k in result["nearest_keys"]))
    obj.output(result, "\n".join(lines))


@keys.command("browse")
@click.option("--namespace")
@click.option("--hubs-only", is_flag=True)
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0)
@pass_ctx
def keys_browse(obj: CliContext, namespace: str | None, hubs_only: bool, limit: int, offset: int) -> None:
    """The key vocabulary, hubs first."""
    body = strip_none({"namespace": namespace, "hubs_only": hubs_only or None, "limit": limit, "offset": offset})
    result = obj.call(routes.KEYS_BROWSE_KEYS, body)
    lines = [_key_line(k) for k in result["keys"]] or ["No keys."]
    obj.output(result, "\n".join(lines))


@keys.command("read")
@click.argument("key_id")
@click.option("--query", help="The original focused query (ranks the handles by relevance).")
@click.option("--namespace")
@click.option("--limit", type=click.IntRange(1, 200), default=10, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0)
@pass_ctx
def keys_read(obj: CliContext, key_id: str, query: str | None, namespace: str | None, limit: int, offset: int) -> None:
    """Ranked memory handles under one key (no content)."""
    body = strip_none({"key_id": key_id, "query": query, "namespace": namespace, "limit": limit, "offset": offset})
    result = obj.call(routes.KEYS_READ_KEY, body)
    lines = [_key_line(result["key"])]
    for handle in result["memories"]:
        lines.append(f"  {handle['rank']}. {handle['id']} score {handle['score']} - {_validity(handle)}")
    obj.output(result, "\n".join(lines))


@keys.command("read-memory")
@click.argument("memory_id")
@click.option("--via-key", "via_key_id", help="The key you came through (its edge is reinforced).")
@click.option("--namespace")
@pass_ctx
def keys_read_memory(obj: CliContext, memory_id: str, via_key_id: str | None, namespace: str | None) -> None:
    """Full content and connected keys of one memory."""
    body = strip_none({"memory_id": memory_id, "via_key_id": via_key_id, "namespace": namespace})
    result = obj.call(routes.KEYS_READ_MEMORY, body)
    lines = [
        f"{result['id']} - {_validity(result)}",
        result["content"],
        "keys: " + ", ".join(f"{k['concept']} [{k['key_id']}] w={k['weight']}" for k in result["connected_keys"]),
    ]
    obj.output(result, "\n".join(lines))


@keys.command("remember")
@click.argument("content")
@click.option("--key", "key_list", multiple=True, help="One key (repeat); 'apple|사과' adds an alias.")
@click.option("--keys", "keys_csv", help="Comma-separated keys or a JSON array.")
@click.option("--key-type", "key_types", multiple=True, help="KEY=concept|name|proper_noun (repeat).")
@click.option("--namespace")
@click.option("--ttl", "ttl_seconds", type=click.FloatRange(min=0, min_open=True), help="Expire after N seconds.")
@click.option("--decay-profile", type=DECAY_CHOICES)
@click.option("--related-to", multiple=True, help="A related memory id (repeat).")
@pass_ctx
def keys_remember(
    obj: CliContext,
    content: str,
    key_list: tuple[str, ...],
    keys_csv: str | None,
    key_types: tuple[str, ...],
    namespace: str | None,
    ttl_seconds: float | None,
    decay_profile: str | None,
    related_to: tuple[str, ...],
) -> None:
    """Save a memory under 3-6 atomic keys."""
    chosen = _keys(key_list, keys_csv)
    if not chosen:
        raise click.UsageError('give keys: memmy-memory keys remember "fact" --key apple --key fruit')
    body = strip_none(
        {
            "content": content,
            "keys": chosen,
            "key_types": _key_types(key_types),
            "namespace": namespace,
            "ttl_seconds": ttl_seconds,
            "decay_profile": decay_profile,
            "related_to": list(related_to) or None,
        }
    )
    result = obj.call(routes.KEYS_REMEMBER, body)
    if result.get("tombstoned"):
        _refuse_forgotten(obj, result["tombstone_id"])
    obj.output(result, ("Already stored as " if result.get("deduplicated") else "Saved ") + str(result["saved"]))


@keys.command("stats")
@pass_ctx
def keys_stats(obj: CliContext) -> None:
    """Counts of keys, memories and links."""
    result = obj.call(routes.KEYS_MEMORY_STATS, {})
    obj.output(
        result,
        f"keys: {result['keys']}  memories: {result['memories']}  links: {result['links']}  "
        f"aliases: {result['aliases']}  tombstones: {result['tombstones']}",
    )


@click.command("correct")
@click.argument("memory_id")
@click.argument("content")
@click.option("--key", "key_list", multiple=True, help="New keys (default: keep the old ones).")
@click.option("--keys", "keys_csv", help="Comma-separated keys or a JSON array.")
@click.option("--ttl", "ttl_seconds", type=click.FloatRange(min=0, min_open=True))
@click.option("--decay-profile", type=DECAY_CHOICES)
@pass_ctx
def correct(
    obj: CliContext,
    memory_id: str,
    content: str,
    key_list: tuple[str, ...],
    keys_csv: str | None,
    ttl_seconds: float | None,
    decay_profile: str | None,
) -> None:
    """Replace a fact with a new version; the old one stays in the history but is no longer recalled."""
    body = strip_none(
        {
            "memory_id": memory_id,
            "content": content,
            "keys": _keys(key_list, keys_csv),
            "ttl_seconds": ttl_seconds,
            "decay_profile": decay_profile,
        }
    )
    result = obj.call(routes.KEYS_CORRECT, body)
    if result.get("tombstoned"):
        _refuse_forgotten(obj, result["tombstone_id"])
    obj.output(result, f"{result['superseded']} -> {result['new_id']}")


def _refuse_forgotten(obj: CliContext, tombstone: str) -> NoReturn:
    message = (
        f"not saved: this content was forgotten (tombstone {tombstone}); "
        f"`memmy-memory tombstones restore {tombstone}` allows it again"
    )
    obj.refuse("tombstoned", message, tombstoneId=tombstone)


@click.command("confirm")
@click.argument("memory_id")
@click.option("--evidence", required=True, help="What shows the fact is still current (user, source, observation).")
@pass_ctx
def confirm(obj: CliContext, memory_id: str, evidence: str) -> None:
    """Confirm a fact is still current (refreshes its freshness)."""
    result = obj.call(routes.KEYS_CONFIRM_MEMORY, {"memory_id": memory_id, "evidence": evidence})
    obj.output(result, f"Confirmed {memory_id}: {_validity(result)}")


@click.command("forget")
@click.argument("memory_id")
@click.option("--reason", help="Why (kept with the tombstone).")
@pass_ctx
def forget(obj: CliContext, memory_id: str, reason: str | None) -> None:
    """Forget a memory for good: it is deleted and a tombstone keeps its text out (adds, captures, re-imports are
    refused) until `tombstones restore`. Works on a deleted memory too."""
    result = obj.call(routes.KEYS_FORGET, strip_none({"memory_id": memory_id, "reason": reason}))
    obj.output(result, f"Forgot {memory_id} (tombstone {result['tombstone_id']})")


@click.command("history")
@click.argument("memory_id")
@pass_ctx
def history(obj: CliContext, memory_id: str) -> None:
    """The version chain of a memory, oldest first."""
    result = obj.call(routes.MEMORY_HISTORY, memory_id=memory_id)
    lines = []
    for item in result["chain"]:
        mark = "*" if item["current"] else " "
        until = item["validTo"] or "now"
        lines.append(f"{mark} {item['position']}. {item['id']} [{item['validFrom']} .. {until}] {item['status']}")
        lines.append(f"     {readable_text(item['content'])[:200]}")
    obj.output(result, "\n".join(lines))


@click.group("tombstones", invoke_without_command=True)
@click.pass_context
def tombstones(ctx: click.Context) -> None:
    """Forgotten values: list them (the default), or restore one so it may come back."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(tombstones_list)


@tombstones.command("list")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@pass_ctx
def tombstones_list(obj: CliContext, limit: int) -> None:
    """Tombstones, newest first."""
    result = obj.call(routes.TOMBSTONES, params={"limit": limit})
    lines = [
        f"{t['id']}  {t['createdAt']}  {t.get('reason') or ''}  {t.get('preview') or t.get('memoryKey') or ''}"
        for t in result["tombstones"]
    ]
    obj.output(result, "\n".join(lines) or "No tombstones.")


@tombstones.command("restore")
@click.argument("tombstone_id")
@click.option("--reason")
@pass_ctx
def tombstones_restore(obj: CliContext, tombstone_id: str, reason: str | None) -> None:
    """Remove a tombstone (the next import or write may bring the value back)."""
    result = obj.call(routes.TOMBSTONES_RESTORE, strip_none({"reason": reason}), tombstone_id=tombstone_id)
    obj.output(result, f"Restored {tombstone_id}")


COMMANDS = (keys, correct, confirm, forget, history, tombstones)
