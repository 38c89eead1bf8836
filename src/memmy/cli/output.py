"""How the CLI prints: human-readable by default, JSON with ``--json``, errors on stderr."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # rich loads when something is printed through it
    from rich.console import Console

from memmy.domain import readable_text


def make_console(stderr: bool = False) -> Console:
    """A rich console that never cuts ids or paths: at a terminal its width, elsewhere (pipes, logs) unbounded."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=100_000, no_color=True, force_terminal=False)


def emit_json(value: Any) -> None:
    """Pretty JSON on stdout."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def json_mode() -> bool:
    """True when the running command was given ``--json`` (read off the root command's parameters)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("as_json"))


def emit_error(message: str, error_code: str = "error", status: int | None = None, as_json: bool | None = None) -> None:
    """One error on stderr: ``{"error": {"code", "message"[, "status"]}}`` under ``--json`` (``as_json``, by
    default read off the running command), else ``Error: …``."""
    if json_mode() if as_json is None else as_json:
        error: dict[str, Any] = {"code": error_code, "message": message}
        if status is not None:
            error["status"] = status
        click.echo(json.dumps({"error": error}, ensure_ascii=False), err=True)
    else:
        click.echo(f"Error: {message}", err=True)


def fail(message: str, code: int = 1, *, error_code: str = "error", status: int | None = None) -> None:
    """Report the error on stderr (a JSON object under ``--json``: :func:`emit_error`) and exit with ``code``."""
    emit_error(message, error_code, status)
    raise SystemExit(code)


_LABELS = re.compile(r"(?:^|(?<=\s))(?:User|Assistant|Agent):\s*")


def clean_snippet(text: str, width: int = 200) -> str:
    """A hit's preview without memmy's internal labels (``Summary: … RawTurn: raw_… TraceStep: 0 User: …``,
    ``step 1 / … / RELATED_DEFAULT``): see :func:`memmy.domain.readable_text`."""
    cleaned = " ".join(_LABELS.sub("", readable_text(text)).split())
    return cleaned if len(cleaned) <= width else cleaned[: width - 1] + "…"


def format_hits(result: Mapping[str, Any]) -> str:
    """Numbered hits with layer, score, full id and a clean snippet; other projects' hits marked as such."""
    hits = result.get("hits") or []
    here = result.get("projectHits")
    others = result.get("otherProjectHits") or 0
    if not hits:
        return "No matching memories."
    lines = []
    for number, hit in enumerate(hits, start=1):
        if here is not None and number == here + 1:
            lines.append(f"-- from other projects ({others}; --scope project for this one only) --")
        lines.append(f"{number}. [{hit['memoryLayer']}] {hit['title']}  (score {hit['score']}, {hit['id']})")
        lines.append(f"   {clean_snippet(hit['snippet'])}")
    if here is not None:
        shown = len(hits) - here
        more = f", {others - shown} more not shown (--limit)" if others > shown else ""
        lines.append(f"{here} in this project, {others} in other projects{more}.")
    return "\n".join(lines)


def format_debug(debug: Mapping[str, Any]) -> str:
    """The ``--verbose`` block: candidates, per-channel evidence, drops, statuses."""
    lines = [
        "",
        f"searchEventId: {debug.get('searchEventId')}",
        f"candidateMemoryIds ({len(debug.get('candidateMemoryIds', []))}): "
        + ", ".join(debug.get("candidateMemoryIds", [])[:20]),
    ]
    for channel in debug.get("channels", []):
        scores = ", ".join(f"{k}={v}" for k, v in channel["channels"].items())
        lines.append(f"  {channel['id']}: relevance={channel['relevance']} rrf={channel['rrf']} [{scores}]")
    if debug.get("dropped"):
        lines.append("dropped: " + ", ".join(f"{d['id']} ({d['reason']})" for d in debug["dropped"]))
    lines.append(f"status: {', '.join(debug.get('status') or []) or 'ok'}")
    lines.append(f"durationMs: {debug.get('durationMs')}")
    return "\n".join(lines)


def format_episode(detail: Mapping[str, Any]) -> str:
    """An episode (``get episode_…``): header lines, then each raw turn."""
    lines = [
        f"id: {detail['id']}",
        "kind: episode",
        f"title: {detail.get('title') or ''}",
        f"session: {detail.get('sessionId')}",
        f"status: {detail.get('status')}  turns: {detail.get('turnCount')}  reward: {detail.get('rTask')}",
        f"opened: {detail.get('openedAt')}  closed: {detail.get('closedAt') or '-'}",
    ]
    refs = detail.get("refs") or {}
    for label, key in (("traces", "traceMemoryIds"), ("policies", "policyMemoryIds"), ("skills", "skillMemoryIds")):
        if refs.get(key):
            lines.append(f"{label}: {', '.join(refs[key])}")
    for number, turn in enumerate(refs.get("rawTurns") or [], start=1):
        lines += ["", f"Turn {number} ({turn.get('rawTurnId')}):", "User:", turn.get("userText") or ""]
        lines += ["Assistant:", turn.get("assistantText") or ""]
    return "\n".join(lines)


def format_memory(detail: Mapping[str, Any]) -> str:
    """Compact text of one memory: header lines, a blank line, then the body (or the raw turn)."""
    if detail.get("kind") == "episode" or "memoryLayer" not in detail:
        return format_episode(detail) if detail.get("kind") == "episode" else json.dumps(detail, indent=2)
    lines = [
        f"id: {detail['id']}",
        f"kind: {detail['kind']}",
        f"layer: {detail['memoryLayer']}",
        f"title: {detail.get('title') or ''}",
        f"source: {detail.get('sourceAgent')}",
        f"created: {detail.get('createdAt')}",
    ]
    if detail.get("tags"):
        lines.append(f"tags: {', '.join(detail['tags'])}")
    lines.append("")
    raw_turn = (detail.get("refs") or {}).get("rawTurn")
    if raw_turn:
        lines += ["User:", raw_turn.get("userText") or ""]
        calls = raw_turn.get("toolCalls") or []
        if calls:
            lines.append("Tool calls:")
            for call in calls:
                lines.append(f"- {call.get('name')}")
                for key in ("input", "output", "error"):
                    value = call.get(key)
                    if value:
                        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                        if len(text) > 1200:
                            text = text[:1200] + "...[truncated]"
                        lines.append(f"  {key}: {text}")
        lines += ["Assistant:", raw_turn.get("assistantText") or ""]
    else:
        lines += readable_text(detail.get("content") or "").splitlines()
    return "\n".join(lines)


def format_health(health: Mapping[str, Any]) -> str:
    """One screen of health facts."""
    storage = health.get("storage", {})
    embedding = health.get("models", {}).get("embedding", {})
    fingerprint = embedding.get("fingerprint") or {}
    queue = health.get("embeddingQueue", {})
    status = f"{'ok' if health.get('ok') else 'NOT OK'}"
    if "storage" not in health:  # the anonymous answer: {ok, version}
        return f"memmy memory service {health.get('version')}: {status} (details need the service token)"
    lines = [
        f"memmy memory service {health.get('version')}: {status}",
        f"  database:   {storage.get('path')} (schema {storage.get('schemaVersion')})",
        f"  vectors:    {storage.get('vectorCount')} indexed",
        f"  embedding:  {embedding.get('provider')} / {fingerprint.get('model', embedding.get('model'))}"
        + (f" ({fingerprint.get('dim')}-d)" if fingerprint else ""),
        f"  queue:      {queue.get('pending', 0)} pending, {queue.get('failed', 0)} failed",
        f"  uptime:     {round((health.get('uptimeMs') or 0) / 1000)} s",
    ]
    if embedding.get("lastError"):
        lines.append(f"  last embedding error: {embedding['lastError']}")
    if health.get("status") == "degraded":
        lines.append(f"  degraded:   {health.get('reason')}")
    return "\n".join(lines)
