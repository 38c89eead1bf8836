"""``memmy-memory resume``: find earlier work and print it as continuation context (the skill route for agents
without native commands; the hooks offer the same as ``/memmy-resume``)."""

from __future__ import annotations

from typing import Any

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.hook.resume import candidates_message, continuation, rank_sessions


class _Api:
    """Adapts the CLI context to the resume module's ``call(method, path, body)``."""

    def __init__(self, obj: CliContext) -> None:
        self.obj = obj

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.obj.request(method, path, body)


@click.command()
@click.argument("query")
@click.option("--pick", type=click.IntRange(1, 5), help="Print candidate N as continuation context.")
@pass_ctx
def resume(obj: CliContext, query: str, pick: int | None) -> None:
    """List up to five earlier tasks matching QUERY; with --pick N, print that task's turns to continue it."""
    api = _Api(obj)
    found = api.call(
        "POST", "/api/v1/memory/search", {"query": query, "layers": ["L1"], "limit": 20, "scope": "pooled"}
    )
    candidates = rank_sessions(found.get("hits") or [])
    if pick is None:
        obj.output(
            {"candidates": candidates},
            candidates_message(candidates, query).replace(
                "Reply with 1-5 to continue one of them (回复 1-5 继续), or `cancel`.",
                f'Continue one with: memmy-memory resume "{query}" --pick N',
            ),
        )
        return
    if pick > len(candidates):
        raise click.UsageError(f"only {len(candidates)} candidate(s) matched")
    context = continuation(api, candidates[pick - 1])
    obj.output({"candidate": candidates[pick - 1], "context": context}, context)
