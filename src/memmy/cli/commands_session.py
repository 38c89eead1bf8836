"""``memmy-memory session ...`` and ``memmy-memory turn ...``."""

from __future__ import annotations

import click

from memmy.cli.context import CliContext, list_option, pass_ctx, strip_none
from memmy.daemon_client import routes

STATUS_CHOICES = [
    "succeeded",
    "failed",
    "cancelled",
    "ok",
    "success",
    "error",
    "failure",
    "timeout",
    "killed",
    "reset",
    "deleted",
]


@click.group()
def session() -> None:
    """Open and close agent sessions."""


@session.command("open")
@click.option("--session-id", help="Resume or create this id.")
@click.option("--workspace-path", help="Project directory (default: the current directory).")
@pass_ctx
def session_open(obj: CliContext, session_id: str | None, workspace_path: str | None) -> None:
    """Open (or resume) a session; prints its id."""
    result = obj.call(routes.SESSIONS_OPEN, strip_none({"sessionId": session_id, "workspacePath": workspace_path}))
    obj.output(result, f"{result['sessionId']}{' (resumed)' if result.get('resumed') else ''}")


@session.command("close")
@click.argument("session_id", required=False)
@click.option("--session-id", "session_opt")
@pass_ctx
def session_close(obj: CliContext, session_id: str | None, session_opt: str | None) -> None:
    """Close a session."""
    target = session_opt or session_id
    if not target:
        raise click.UsageError("give a session id: memmy-memory session close <id>")
    result = obj.call(routes.SESSIONS_CLOSE, {}, session_id=target)
    obj.output(result, f"Closed {result['sessionId']}")


@click.group()
def turn() -> None:
    """Record turn start (recall) and turn completion (capture)."""


@turn.command("start")
@click.argument("query", required=False)
@click.option("--query", "query_opt")
@click.option("--session-id", required=True)
@click.option("--turn-id")
@pass_ctx
def turn_start(obj: CliContext, query: str | None, query_opt: str | None, session_id: str, turn_id: str | None) -> None:
    """Start a turn; prints the recalled context (markdown)."""
    text = query_opt or query
    if not text:
        raise click.UsageError('give the user\'s request: memmy-memory turn start --session-id S "request"')
    result = obj.call(routes.TURNS_START, strip_none({"sessionId": session_id, "query": text, "turnId": turn_id}))
    markdown = result["injectedContext"]["markdown"]
    obj.output(result, f"turn: {result['turnId']}\n\n{markdown or '(no relevant memory)'}")


@turn.command("complete")
@click.argument("turn_id", required=False)
@click.argument("answer", required=False)
@click.option("--turn-id", "turn_opt")
@click.option("--session-id", required=True)
@click.option("--query", required=True, help="The user's request.")
@click.option("--answer", "answer_opt", help="The agent's final answer.")
@click.option("--status", type=click.Choice(STATUS_CHOICES, case_sensitive=False), default="succeeded")
@click.option("--tags", help="Comma-separated or JSON array.")
@pass_ctx
def turn_complete(
    obj: CliContext,
    turn_id: str | None,
    answer: str | None,
    turn_opt: str | None,
    session_id: str,
    query: str,
    answer_opt: str | None,
    status: str,
    tags: str | None,
) -> None:
    """Complete a turn: stores the raw turn and its L1 trace."""
    target = turn_opt or turn_id
    text = answer_opt or answer
    if not target or not text:
        raise click.UsageError("usage: memmy-memory turn complete <turnId> --session-id S --query Q --answer A")
    body = strip_none(
        {"sessionId": session_id, "query": query, "answer": text, "status": status, "tags": list_option(tags)}
    )
    result = obj.call(routes.TURNS_COMPLETE, body, turn_id=target)
    if not result.get("captured", True):
        obj.output(result, "Not captured: memory writes are disabled (algorithm.enableMemoryAdd: false)")
        return
    obj.output(result, f"Captured {result['l1MemoryId']} (raw turn {result['rawTurnId']})")
