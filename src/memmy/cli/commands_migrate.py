"""``memmy-memory migrate``: copy the whole store to the other engine (SQLite <-> PostgreSQL), compared at the end."""

from __future__ import annotations

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.errors import StoreError


@click.command("migrate")
@click.option("--to", "target", required=True, help="Where to copy the store: postgresql://… or a SQLite file path.")
@click.option(
    "--from",
    "source",
    help="The store to copy (postgresql://… or a SQLite path); default: the configured store.",
)
@pass_ctx
def migrate(obj: CliContext, target: str, source: str | None) -> None:
    """Copy the whole store to PostgreSQL (--to postgresql://…) or back to a SQLite file, compared table by table.

    Every table goes into an empty store on the other engine, then row counts and content hashes are compared
    table by table: nothing is kept unless all agree, and the source is only read. Progress (rows and rows/s per
    table) goes to stderr."""
    from memmy.config import load_config
    from memmy.service.store_copy import migrate_store

    if source is None:
        storage = load_config().storage
        source = storage.postgres_dsn if storage.backend == "postgres" else str(storage.sqlite_path)
    if target == source:
        raise click.UsageError("--to and --from name the same store")
    try:
        results = migrate_store(source, target, progress=lambda line: click.echo(line, err=True))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    rows = sum(r.copied_rows for r in results)
    lines = [f"Copied {rows} rows in {len(results)} tables; every count and content hash matches."]
    lines += [f"  {r.table:<28} {r.copied_rows:>8}  {r.copied_hash[:12]}" for r in results if r.copied_rows]
    obj.output(
        {"rows": rows, "tables": {r.table: {"rows": r.copied_rows, "sha256": r.copied_hash} for r in results}},
        "\n".join(lines),
    )
