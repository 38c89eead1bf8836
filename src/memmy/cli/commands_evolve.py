"""``memmy-memory feedback``, ``memmy-memory episodes`` and ``memmy-memory jobs``: the evolution loop from the shell."""

from __future__ import annotations

import click

from memmy.cli.context import CliContext, pass_ctx, strip_none
from memmy.daemon_client import routes


@click.command()
@click.argument("target")
@click.option("--positive", "polarity", flag_value="positive", help="The memory or episode helped / was right.")
@click.option("--negative", "polarity", flag_value="negative", help="It was wrong or unhelpful.")
@click.option("--note", help="What was right or wrong (e.g. 'use uv instead of pip'); becomes guidance.")
@click.option("--magnitude", type=click.FloatRange(0.0, 1.0), default=1.0, show_default=True)
@pass_ctx
def feedback(obj: CliContext, target: str, polarity: str | None, note: str | None, magnitude: float) -> None:
    """Give feedback on a memory id (trace_/policy_/skill_…) or an episode id (episode_…)."""
    if polarity is None:
        raise click.UsageError("say --positive or --negative")
    result = obj.call(
        routes.FEEDBACK, strip_none({"id": target, "polarity": polarity, "note": note, "magnitude": magnitude})
    )
    scheduled = ", ".join(result.get("scheduled") or []) or "nothing"
    obj.output(result, f"Recorded {polarity} feedback {result['feedback']['id']} on {target} (scheduled: {scheduled})")


@click.command()
@click.option("--status", type=click.Choice(["open", "processing", "closed"]))
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@pass_ctx
def episodes(obj: CliContext, status: str | None, limit: int) -> None:
    """List recent episodes with their reward and the policies they produced."""
    result = obj.call(routes.EPISODES, params=strip_none({"limit": limit, "status": status}))
    lines = []
    for item in result["items"]:
        reward = "-" if item["rTask"] is None else f"{item['rTask']:+.2f}"
        lines.append(
            f"{item['id']}  {item['status']:<7} r={reward:<6} turns={item['turnCount']:<3} "
            f"L2={len(item['policyMemoryIds'])} {(item.get('title') or '')[:60]}"
        )
    obj.output(result, "\n".join(lines) or "No episodes yet.")


@click.command()
@click.option("--status", type=click.Choice(["queued", "leased", "succeeded", "failed", "dead_letter"]))
@click.option("--type", "job_type", help="Only this job type (reward, l2_induction, ...).")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@pass_ctx
def jobs(obj: CliContext, status: str | None, job_type: str | None, limit: int) -> None:
    """Evolution jobs and per-status counts (what the background worker is doing)."""
    result = obj.call(routes.EVOLUTION_JOBS, params=strip_none({"limit": limit, "status": status, "type": job_type}))
    counts = ", ".join(f"{k} {v}" for k, v in result["counts"].items())
    lines = [f"jobs: {counts}"]
    for item in result["items"]:
        error = f"  error: {item['lastError'][:80]}" if item.get("lastError") else ""
        lines.append(f"{item['id']}  {item['jobType']:<22} {item['status']:<11} attempts={item['attempts']}{error}")
    obj.output(result, "\n".join(lines))


@click.group()
def worker() -> None:
    """The background worker (embeddings and evolution jobs)."""


@worker.command("run")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@pass_ctx
def worker_run(obj: CliContext, limit: int) -> None:
    """Run due embeddings and evolution jobs now instead of waiting for the background worker."""
    result = obj.call(routes.WORKER_RUN, {"limit": limit})
    embeddings = result["embeddingRetries"]
    obj.output(
        result,
        f"jobs: {result['succeeded']} succeeded, {result['failed']} failed; "
        f"embeddings: {embeddings['succeeded']} done, {embeddings['failed']} failed",
    )
