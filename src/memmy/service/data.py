"""Data ownership: export the store to one portable archive, import an archive back, wipe the store.

The archive is a zip file: ``manifest.json`` (format, schema version, memmy version, per-table row counts and
SHA-256 checksums) and one ``tables/<name>.jsonl`` per table, each row a JSON object in primary-key order, BLOBs as
``{"$b64": ...}``. It is read from one SQLite snapshot (a second connection in a read transaction; WAL lets the
daemon keep writing meanwhile), so it is consistent while the daemon runs. Derived state (the full-text table,
queues, job rows, idempotency keys) is not exported: import rebuilds the full-text table and the vector index.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memmy import __version__
from memmy.commands.admin import Export, ImportStore, Wipe
from memmy.commands.answers import Exported, Imported, Wiped
from memmy.config import Settings
from memmy.errors import Conflict, InvalidArgument, NotFound
from memmy.namespace import Namespace
from memmy.service.governance import GovernanceOps, brief
from memmy.store.copy import in_key_order, restart_identities, tables
from memmy.store.db import utc_now
from memmy.store.schema import SCHEMA_VERSION, refill_fts
from memmy.store.unit import Store

FORMAT = "memmy-export/1"
#: Tables that are derived or transient: rebuilt or refilled by the daemon, never exported or imported.
SKIPPED_TABLES = frozenset(
    {
        "idempotency_keys",
        "evolution_jobs",
        "embedding_retry_queue",
        "memory_processing_state",
        "schema_migrations",
    }
)
#: Raw conversation text: left out by ``--no-raw``.
RAW_TABLES = frozenset({"raw_turns"})
#: Logs that record the export/wipe/import themselves: exported, but not wiped and not part of "equal".
LOG_TABLES = frozenset({"audit_logs", "api_logs"})
CONFLICT_MODES = ("skip", "replace", "error")


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$b64": base64.b64encode(value).decode("ascii")}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$b64"}:
        return base64.b64decode(value["$b64"])
    return value


def data_tables(conn: sqlite3.Connection, store: Store | None = None) -> list[str]:
    """Ordinary tables worth exporting, in creation order (FTS tables, their shadow tables and internals excluded);
    on PostgreSQL (``store`` given) every table after the tables its foreign keys point at."""
    if store is not None and store.backend == "postgres":
        names = [t for t in tables(store.db) if t not in SKIPPED_TABLES and t != "memories_fts"]
        return in_key_order(store.db, names)
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY rowid").fetchall()
    fts = {str(r[0]) for r in rows if "VIRTUAL TABLE" in str(r[1] or "").upper()}
    names = []
    for row in rows:
        name = str(row[0])
        if name.startswith("sqlite_") or name in fts or any(name.startswith(f + "_") for f in fts):
            continue
        if name in SKIPPED_TABLES:
            continue
        names.append(name)
    return names


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]


def _key_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    keyed = sorted((int(r[5]), str(r[1])) for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall() if r[5])
    return [name for _, name in keyed]


def _serial_key(conn: sqlite3.Connection, table: str) -> str | None:
    """The column of a single ``INTEGER PRIMARY KEY`` (a counter such as a log sequence), if the table has one."""
    keyed = [r for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall() if r[5]]
    if len(keyed) == 1 and str(keyed[0][2]).upper() == "INTEGER":
        return str(keyed[0][1])
    return None


def _order_by(conn: sqlite3.Connection, table: str, backend: str = "sqlite") -> str:
    keys = _key_columns(conn, table)
    if keys:
        return ", ".join(f'"{k}"' for k in keys)
    if backend == "postgres":
        return "rowid"
    without_rowid = conn.execute("SELECT sql FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
    if without_rowid and "WITHOUT ROWID" in str(without_rowid[0]).upper():
        return ", ".join(f'"{c}"' for c in _columns(conn, table))
    return "rowid"


def _insert(table: str, row: dict[str, Any], replace: bool, keys: list[str] | None) -> tuple[str, list[Any]]:
    """The statement that adds ``row`` (keeping, or with ``replace`` overwriting, a row with its key). ``keys``
    given (PostgreSQL, which has no INSERT OR REPLACE): an upsert on them."""
    names = list(row)
    listed = ", ".join(f'"{c}"' for c in names)
    values = [row[c] for c in names]
    marks = ", ".join("?" * len(names))
    if keys is None:
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        return f'{verb} INTO "{table}" ({listed}) VALUES ({marks})', values
    changed = [c for c in names if c not in keys]
    if replace and keys and changed:
        update = ", ".join(f'"{c}" = excluded."{c}"' for c in changed)
        conflict = f"ON CONFLICT ({', '.join(chr(34) + k + chr(34) for k in keys)}) DO UPDATE SET {update}"
    else:
        conflict = "ON CONFLICT DO NOTHING"
    return f'INSERT INTO "{table}" ({listed}) VALUES ({marks}) {conflict}', values


@dataclass
class ArchiveTable:
    """One table read from an archive."""

    name: str
    rows: list[dict[str, Any]]


def read_archive(path: Path) -> tuple[dict[str, Any], list[ArchiveTable]]:
    """Open an export archive, check its format and checksums; return the manifest and its tables."""
    if not path.is_file():
        raise NotFound(f"no export archive at {path}")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise InvalidArgument(f"{path} is not a memmy export (not a zip archive)") from None
    with archive:
        try:
            manifest = json.loads(archive.read("manifest.json"))
        except (KeyError, json.JSONDecodeError):
            raise InvalidArgument(f"{path} is not a memmy export (no valid manifest.json)") from None
        if manifest.get("format") != FORMAT:
            raise InvalidArgument(f"{path}: unknown export format {manifest.get('format')!r} (expected {FORMAT})")
        if int(manifest.get("schemaVersion") or 0) > SCHEMA_VERSION:
            raise InvalidArgument(
                f"{path} was exported from a newer store (schema {manifest['schemaVersion']}, this memmy has "
                f"{SCHEMA_VERSION}); upgrade memmy first"
            )
        tables = []
        for name, info in manifest.get("tables", {}).items():
            data = archive.read(f"tables/{name}.jsonl")
            if hashlib.sha256(data).hexdigest() != info.get("sha256"):
                raise InvalidArgument(f"{path}: table {name} does not match its checksum (the archive is damaged)")
            rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line]
            tables.append(ArchiveTable(name, rows))
    return manifest, tables


class DataOps:
    """Export, import and wipe over the service's one database."""

    def __init__(self, settings: Settings, store: Store, after_restore: Callable[[], None]) -> None:
        self.settings = settings
        self.store = store
        self.after_restore = after_restore

    # -- export -----------------------------------------------------------------------------------
    def default_export_path(self, prefix: str = "memmy-export") -> Path:
        """``<memmy home>/exports/<prefix>-<UTC time>.zip``."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        return self.settings.current.home / "exports" / f"{prefix}-{stamp}.zip"

    def _snapshot_rows(self, include_raw: bool) -> Iterator[tuple[str, list[str], Iterator[sqlite3.Row]]]:
        if self.store.backend == "postgres":  # one transaction, holding the write lock: one consistent state
            with self.store.transaction() as conn:
                for table in data_tables(conn, self.store):
                    if not include_raw and table in RAW_TABLES:
                        continue
                    order = _order_by(conn, table, "postgres")
                    rows = conn.execute(f'SELECT * FROM "{table}" ORDER BY {order}').fetchall()
                    yield table, _columns(conn, table), iter(rows)
            return
        conn = sqlite3.connect(f"file:{self.store.path}?mode=ro", uri=True, isolation_level=None)
        try:
            conn.execute("BEGIN")  # one read transaction: every table from the same snapshot
            for table in data_tables(conn):
                if not include_raw and table in RAW_TABLES:
                    continue
                columns = _columns(conn, table)
                cursor = conn.execute(f'SELECT * FROM "{table}" ORDER BY {_order_by(conn, table)}')
                yield table, columns, iter(cursor)
            conn.execute("COMMIT")
        finally:
            conn.close()

    def export(self, out: Path | None = None, include_raw: bool = True) -> Exported:
        """Write the archive (atomically: a temporary file, then rename); return the manifest and its path."""
        target = out or self.default_export_path()
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        tables: dict[str, dict[str, Any]] = {}
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for table, columns, rows in self._snapshot_rows(include_raw):
                digest = hashlib.sha256()
                count = 0
                # Streamed row by row: a 100k store never sits in memory as one blob.
                with archive.open(f"tables/{table}.jsonl", "w", force_zip64=True) as handle:
                    for row in rows:
                        record = {c: _encode(v) for c, v in zip(columns, row, strict=True)}
                        line = json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
                        handle.write(line)
                        digest.update(line)
                        count += 1
                tables[table] = {"rows": count, "sha256": digest.hexdigest()}
            manifest: dict[str, Any] = {
                "format": FORMAT,
                "schemaVersion": SCHEMA_VERSION,
                "memmyVersion": __version__,
                "createdAt": utc_now(),
                "raw": include_raw,
                "source": str(self.store.path),
                "tables": tables,
            }
            archive.writestr("manifest.json", json.dumps(manifest, indent=2, sort_keys=True))
        tmp.chmod(0o600)  # memories are private
        tmp.replace(target)
        return {
            "path": str(target),
            "bytes": target.stat().st_size,
            "manifest": manifest,
            "counts": {name: info["rows"] for name, info in tables.items()},
        }

    # -- import -----------------------------------------------------------------------------------
    def import_store(self, path: Path, on_conflict: str = "skip", dry_run: bool = False) -> Imported:
        """Merge an archive into the store: per table, rows added and rows whose key already exists.

        ``skip`` keeps the existing row, ``replace`` overwrites it, ``error`` refuses the whole import when any row
        conflicts (nothing is written). ``dry_run`` only counts.
        """
        if on_conflict not in CONFLICT_MODES:
            raise InvalidArgument(f"onConflict: expected one of {', '.join(CONFLICT_MODES)}, got {on_conflict!r}")
        manifest, tables = read_archive(path)
        report: dict[str, dict[str, int]] = {}
        with self.store.transaction() as conn:
            existing_tables = set(data_tables(conn, self.store)) | LOG_TABLES
            plans: list[tuple[str, list[dict[str, Any]]]] = []
            for table in tables:
                if table.name not in existing_tables or table.name in SKIPPED_TABLES:
                    report[table.name] = {"rows": len(table.rows), "new": 0, "conflicts": 0, "ignored": len(table.rows)}
                    continue
                columns = _columns(conn, table.name)
                keys = _key_columns(conn, table.name)
                serial = _serial_key(conn, table.name)
                inserts: list[dict[str, Any]] = []
                renumbered: list[dict[str, Any]] = []
                conflicts = 0
                for raw_row in table.rows:
                    row = {c: _decode(raw_row.get(c)) for c in columns if c in raw_row}
                    if serial is not None and row.get(serial) is not None:
                        # Log-like tables keyed by a counter: the same row is a duplicate, another row with a taken
                        # number is new and gets the next number.
                        found = conn.execute(
                            f'SELECT * FROM "{table.name}" WHERE "{serial}" = ?', (row[serial],)
                        ).fetchone()
                        if found is None:
                            inserts.append(row)
                        elif {c: found[c] for c in row} == row:
                            conflicts += 1
                        else:
                            renumbered.append({c: v for c, v in row.items() if c != serial})
                        continue
                    if keys and all(k in row for k in keys):
                        found = conn.execute(
                            f'SELECT 1 FROM "{table.name}" WHERE ' + " AND ".join(f'"{k}" = ?' for k in keys),
                            [row[k] for k in keys],
                        ).fetchone()
                        if found is not None:
                            conflicts += 1
                            if on_conflict == "replace":
                                inserts.append(row)
                            continue
                    inserts.append(row)
                new = len(inserts) + len(renumbered) - (conflicts if on_conflict == "replace" and serial is None else 0)
                report[table.name] = {"rows": len(table.rows), "new": new, "conflicts": conflicts, "ignored": 0}
                plans.append((table.name, inserts + renumbered))
            # Log rows that already exist are the same rows (kept through a wipe): never a reason to refuse.
            total_conflicts = sum(r["conflicts"] for n, r in report.items() if n not in LOG_TABLES)
            if on_conflict == "error" and total_conflicts and not dry_run:
                per_table = ", ".join(
                    f"{n}: {r['conflicts']}" for n, r in report.items() if r["conflicts"] and n not in LOG_TABLES
                )
                raise Conflict(
                    f"{total_conflicts} rows of {path.name} already exist ({per_table}); "
                    "use --on-conflict skip or replace"
                )
            if not dry_run:
                conn.execute("PRAGMA defer_foreign_keys = ON")
                postgres = self.store.backend == "postgres"
                if postgres:  # no deferred keys there: parents first
                    order = {name: i for i, name in enumerate(data_tables(conn, self.store))}
                    plans.sort(key=lambda plan: order.get(plan[0], len(order)))
                for name, rows in plans:
                    keys = _key_columns(conn, name)
                    for row in rows:
                        conn.execute(*_insert(name, row, on_conflict == "replace", keys if postgres else None))
                if postgres:
                    restart_identities(self.store.db, conn, [name for name, _ in plans])
                self._rebuild_fts(conn)
        if not dry_run:
            self.after_restore()
        return {
            "path": str(path),
            "dryRun": dry_run,
            "onConflict": on_conflict,
            "schemaVersion": manifest.get("schemaVersion"),
            "exportedAt": manifest.get("createdAt"),
            "tables": report,
            "added": sum(r["new"] for r in report.values()),
            "conflicts": sum(r["conflicts"] for r in report.values()),
            "serverTime": utc_now(),
        }

    @staticmethod
    def _rebuild_fts(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM memories_fts")
        refill_fts(conn)  # a replaced memory row may have a new rowid: every index row is written again

    # -- wipe -------------------------------------------------------------------------------------
    def wipe(self, backup: bool = True) -> Wiped:
        """Remove every memory, session, episode, evolution and import record; keep the audit and API logs.

        A backup archive is written first unless ``backup`` is false. Config and tokens (files, not the store)
        are never touched.
        """
        backup_info = self.export(self.default_export_path("memmy-before-wipe")) if backup else None
        removed: dict[str, int] = {}
        with self.store.transaction() as conn:
            conn.execute("PRAGMA defer_foreign_keys = ON")
            for table in reversed(data_tables(conn, self.store)):
                if table in LOG_TABLES:
                    continue
                cursor = conn.execute(f'DELETE FROM "{table}"')
                if cursor.rowcount:
                    removed[table] = int(cursor.rowcount)
            present = set(tables(self.store.db)) if self.store.backend == "postgres" else None
            for table in SKIPPED_TABLES - {"schema_migrations"}:
                if present is not None:
                    if table in present:
                        conn.execute(f'DELETE FROM "{table}"')
                elif conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone():
                    conn.execute(f'DELETE FROM "{table}"')
            conn.execute("DELETE FROM memories_fts")
        self.after_restore()
        return {
            "removed": removed,
            "backup": backup_info["path"] if backup_info else None,
            "kept": ["config.yaml", "tokens", "audit_logs", "api_logs"],
            "serverTime": utc_now(),
        }


class StoreOwnership:
    """The API/CLI/panel entry points for export, import and wipe: validate the body, run, write the audit row."""

    def __init__(self, data: DataOps, governance: GovernanceOps, db_path: Path) -> None:
        self.data = data
        self.governance = governance
        self.db_path = db_path

    def export(self, cmd: Export, ns: Namespace) -> Exported:
        """Write a consistent export archive (``{"out": path, "raw": true}``); audited."""
        out = cmd.out
        result = self.data.export(Path(out).expanduser() if out else None, include_raw=cmd.raw)
        self.governance.record("store.export", "store", result["path"], ns, meta={"counts": result["counts"]})
        return result

    def import_(self, cmd: ImportStore, ns: Namespace) -> Imported:
        """Merge an export archive (``{"path", "onConflict": skip|replace|error, "dryRun", "label"?}``); audited.

        ``label`` names the archive in the audit row when ``path`` is a temporary copy (a panel upload).
        """
        path, dry_run = cmd.path, cmd.dry_run
        result = self.data.import_store(Path(path).expanduser(), cmd.on_conflict, dry_run)
        if not dry_run:
            self.governance.record("store.import", "store", cmd.label or path, ns, meta=brief(result))
        return result

    def wipe(self, cmd: Wipe, ns: Namespace) -> Wiped:
        """Remove all memories and history (``{"confirm": true, "backup": true}``); config and tokens stay."""
        result = self.data.wipe(backup=cmd.backup)
        self.governance.record("store.wipe", "store", str(self.db_path), ns, meta=result)
        return result
