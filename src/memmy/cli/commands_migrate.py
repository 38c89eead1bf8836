"""``memmy-memory migrate``: copy the whole store to the other engine (SQLite <-> PostgreSQL), compared at the end."""

from __future__ import annotations

from pathlib import Path

import click

from memmy.cli.context import CliContext, pass_ctx
from memmy.errors import StoreError
from memmy.store.db import Database


def _open(where: str) -> Database:
    """A store at ``where``: a ``postgresql://`` URL, or a SQLite file path (created and migrated when new)."""
    if where.startswith(("postgresql://", "postgres://")):
        from memmy.store.pg import PgDatabase

        return PgDatabase(where)
    return Database(Path(where).expanduser())


@click.command("migrate")
@click.option("--to", "target", required=True, help="Where to copy the store: postgresql://… or a SQLite file path.")
@click.option(
    "--from",
    "source",
    help="The store to copy (postgresql://… or a SQLite path); default: the configured store.",
)
@pass_ctx
def migrate(obj: CliContext, target: str, source: str | None) -> None:
    """Copy every table of the store into an empty one on the other engine, then compare row counts and content
    hashes table by table (nothing is kept unless all agree; the source is only read)."""
    from memmy.config import load_config
    from memmy.store.copy import copy_store

    if source is None:
        storage = load_config().storage
        source = storage.postgres_dsn if storage.backend == "postgres" else str(storage.sqlite_path)
    if target == source:
        raise click.UsageError("--to and --from name the same store")
    try:
        src = _open(source)
        try:
            dst = _open(target)
            try:
                results = copy_store(src, dst)
            finally:
                dst.close()
        finally:
            src.close()
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    rows = sum(r.copied_rows for r in results)
    lines = [f"Copied {rows} rows in {len(results)} tables; every count and content hash matches."]
    lines += [f"  {r.table:<28} {r.copied_rows:>8}  {r.copied_hash[:12]}" for r in results if r.copied_rows]
    obj.output(
        {"rows": rows, "tables": {r.table: {"rows": r.copied_rows, "sha256": r.copied_hash} for r in results}},
        "\n".join(lines),
    )
