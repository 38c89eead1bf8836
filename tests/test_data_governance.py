"""Data ownership and governance: export/import/wipe, correct of any memory, the review queue, audit rows."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import cast

import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from memmy.cli.main import cli
from memmy.commands.admin import Export, ImportStore, ReloadConfig, Wipe
from memmy.commands.answers import KeyCorrected, KeyForgotten
from memmy.commands.dream import DreamRestore, DreamRun
from memmy.commands.evolution import Feedback, RunWorker
from memmy.commands.governance import ListLogs, RestoreTombstone, ReviewDecision, ReviewQueue
from memmy.commands.memory import AddMemory, DeleteMemory, SearchMemory
from memmy.commands.panel import PanelItems
from memmy.commands.turn_requests import CompleteTurn, OpenSession, StartTurn
from memmy.config import load_config
from memmy.embed import Embedder
from memmy.errors import Conflict
from memmy.jobs.writer import LayerWrite, LayerWriter
from memmy.keys.args import key_args
from memmy.namespace import Namespace
from memmy.service import MemoryService
from tests.answers import must
from tests.conftest import Daemon, only_sqlite

PANEL = Namespace(source="panel")


def _data_checksums(manifest: Mapping[str, object]) -> dict[str, object]:
    tables = manifest["tables"]
    assert isinstance(tables, dict)
    return {name: info for name, info in tables.items() if name not in ("audit_logs", "api_logs")}


def _populate(service: MemoryService) -> list[str]:
    ids = []
    for text in ("Use pnpm, not npm, in the web repo.", "数据库迁移前先备份。", "Deploys go through make release."):
        ids.append(must(service.add_memory(AddMemory.from_json({"content": text}), Namespace(source="codex"))["id"]))
    agent = Namespace(source="claude_code")
    sid = service.open_session(OpenSession.from_json({}), agent)["sessionId"]
    started = service.start_turn(StartTurn.from_json({"sessionId": sid, "query": "how do we deploy?"}), agent)
    service.complete_turn(
        CompleteTurn.from_json(
            {"sessionId": sid, "query": "how do we deploy?", "answer": "Run make release."}, started["turnId"]
        ),
        agent,
    )
    service.run_worker(RunWorker.from_json({}))
    return ids


def test_export_wipe_import_gives_an_equal_export(service: MemoryService, tmp_path: Path) -> None:
    ids = _populate(service)
    first = service.ownership.export(Export.from_json({"out": str(tmp_path / "one.zip")}), PANEL)
    assert first["counts"]["memories"] >= 3
    with zipfile.ZipFile(first["path"]) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        assert manifest["format"] == "memmy-export/1"
        assert {"memories", "raw_turns", "memory_vector_entries"} <= set(archive.namelist()) | {
            n.removeprefix("tables/").removesuffix(".jsonl") for n in archive.namelist()
        }

    wiped = service.ownership.wipe(Wipe.from_json({"confirm": True}), PANEL)
    assert wiped["removed"]["memories"] >= 3
    assert wiped["backup"] and Path(wiped["backup"]).is_file()
    assert service.panel.items(PanelItems.from_json({}))["total"] == 0

    dry = service.ownership.import_(ImportStore.from_json({"path": first["path"], "dryRun": True}), PANEL)
    assert dry["tables"]["memories"] == {"rows": 4, "new": 4, "conflicts": 0, "ignored": 0}
    assert service.memories.get(ids[0]) is None  # a dry run writes nothing

    service.ownership.import_(ImportStore.from_json({"path": first["path"]}), PANEL)
    again = service.ownership.export(Export.from_json({"out": str(tmp_path / "two.zip")}), PANEL)
    assert _data_checksums(again["manifest"]) == _data_checksums(first["manifest"])
    hits = service.search(SearchMemory.from_json({"query": "pnpm"}), Namespace())["hits"]
    assert [h["id"] for h in hits][:1] == [ids[0]]

    with pytest.raises(Conflict, match="already exist"):
        service.ownership.import_(ImportStore.from_json({"path": first["path"], "onConflict": "error"}), PANEL)
    skipped = service.ownership.import_(ImportStore.from_json({"path": first["path"], "onConflict": "skip"}), PANEL)
    assert skipped["added"] == 0 and skipped["conflicts"] > 0

    actions = [
        row["action"]
        for row in service.governance.logs_page(ListLogs.from_json({"kind": "audit", "limit": 50}))["items"]
    ]
    assert {"store.export", "store.wipe", "store.import"} <= set(actions)
    wipe_row = next(
        r
        for r in service.governance.logs_page(ListLogs.from_json({"kind": "audit"}))["items"]
        if r["action"] == "store.wipe"
    )
    assert wipe_row["actor"]["source"] == "panel"


def test_export_without_raw_turns(service: MemoryService, tmp_path: Path) -> None:
    _populate(service)
    result = service.ownership.export(Export.from_json({"out": str(tmp_path / "noraw.zip"), "raw": False}), PANEL)
    assert "raw_turns" not in result["counts"]
    assert result["manifest"]["raw"] is False


def test_correct_works_on_a_memory_made_by_add(service: MemoryService) -> None:
    made = service.add_memory(
        AddMemory.from_json({"content": "The staging database is on port 5433."}), Namespace(source="cursor")
    )
    result = cast(
        KeyCorrected,
        service.keys_call(
            key_args("correct", {"memory_id": made["id"], "content": "The staging database is on port 6543."}), PANEL
        ),
    )
    assert result["superseded"] == made["id"]
    chain = service.memory_history(must(result["new_id"]))["chain"]
    assert [c["id"] for c in chain][-2:] == [made["id"], result["new_id"]]
    service.run_worker(RunWorker.from_json({}))
    hits = service.search(SearchMemory.from_json({"query": "staging database port"}), Namespace())["hits"]
    assert [h["id"] for h in hits][:1] == [result["new_id"]]
    audit = service.governance.logs_page(ListLogs.from_json({"kind": "audit", "action": "memory.correct"}))["items"]
    assert audit and audit[0]["targetId"] == made["id"] and audit[0]["actor"]["source"] == "panel"


def _review_service(home: Path, embedder: Embedder) -> MemoryService:
    config_file = home / ".memmy" / "config.yaml"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(yaml.safe_dump({"memmyMemory": {"evolution": {"review": "required"}}}))
    svc = MemoryService.open(load_config(), embedder=embedder)
    svc.indexer.load_index()
    return svc


def _writer(svc: MemoryService) -> LayerWriter:
    writers = [g.writer for g in svc.evolution_groups if isinstance(getattr(g, "writer", None), LayerWriter)]
    assert writers
    return writers[0]


def test_review_queue_holds_new_policies_until_approved(isolated_home: Path, embedder: Embedder) -> None:
    svc = _review_service(isolated_home, embedder)
    try:
        write = LayerWrite(
            layer="L2",
            key="policy:pytest-xdist",
            title="Run the test suite with pytest -n auto",
            content="When running the Python test suite, use pytest -n auto to parallelise the tests.",
            tags=["policy"],
            properties={"policy": {"status": "active"}},
        )
        memory = _writer(svc).upsert(write)
        assert memory.status == "resolving"
        queue = svc.governance.review_queue(ReviewQueue.from_json({}))["items"]
        assert [item["id"] for item in queue] == [memory.id]
        svc.run_worker(RunWorker.from_json({}))
        sid = svc.open_session(OpenSession.from_json({}), Namespace())["sessionId"]
        turn = svc.start_turn(
            StartTurn.from_json({"sessionId": sid, "query": "how should I run the python test suite?"}), Namespace()
        )
        assert memory.id not in json.dumps(turn)

        # Evolution re-deriving it cannot activate it behind the reviewer's back.
        again = _writer(svc).upsert(write)
        assert again.status == "resolving"

        approved = svc.governance.review(
            memory.id,
            ReviewDecision.from_json(
                {"decision": "approve", "content": write.content + " Keep -p no:cacheprovider off."}
            ),
            PANEL,
        )
        assert approved["status"] == "activated" and approved["review"]["edited"] is True
        svc.run_worker(RunWorker.from_json({}))
        turn = svc.start_turn(
            StartTurn.from_json({"sessionId": sid, "query": "how should I run the python test suite?"}), Namespace()
        )
        assert memory.id in json.dumps(turn)

        rejected = _writer(svc).upsert(
            LayerWrite(
                layer="L3",
                key="world:bad",
                title="A wrong world model",
                content="The repo has no tests.",
                tags=[],
                properties={},
            )
        )
        svc.governance.review(rejected.id, ReviewDecision.from_json({"decision": "reject", "reason": "wrong"}), PANEL)
        proposed_again = _writer(svc).upsert(
            LayerWrite(layer="L3", key="world:bad", title="t", content="The repo has no tests.", tags=[], properties={})
        )
        assert proposed_again.id == rejected.id and proposed_again.status == "archived"
        assert svc.governance.review_queue(ReviewQueue.from_json({}))["items"] == []
        actions = {row["action"] for row in svc.governance.logs_page(ListLogs.from_json({"kind": "audit"}))["items"]}
        assert {"review.approve", "review.reject"} <= actions
    finally:
        svc.close()


def test_feedback_dream_and_reload_are_audited(service: MemoryService) -> None:
    made = service.add_memory(AddMemory.from_json({"content": "Prefer ripgrep over grep."}), Namespace())
    service.give_feedback(Feedback.from_json({"id": made["id"], "polarity": "negative"}), PANEL)
    service.dream_run(DreamRun.from_json({}), PANEL)
    service.reload_config(ReloadConfig.from_json({}), PANEL)
    service.delete_memory(must(made["id"]), DeleteMemory.from_json({}), PANEL)
    actions = {row["action"] for row in service.governance.logs_page(ListLogs.from_json({"kind": "audit"}))["items"]}
    assert {"feedback", "dream.run", "config.reload", "memory.delete"} <= actions


def test_audit_retention_prunes_only_when_configured_and_says_so(service: MemoryService) -> None:
    service.logs.audit("memory.delete", "trace", "x", user_id=None, actor={"source": "cli"})
    assert service.governance.prune_if_due() == 0  # retentionDays 0: kept forever
    service.db.conn.execute("UPDATE audit_logs SET created_at = '2000-01-01T00:00:00.000Z'")
    service.settings.current = replace(service.config, tree={**service.config.tree, "audit": {"retentionDays": 30}})
    assert service.governance.prune_if_due() == 1
    rows = service.governance.logs_page(ListLogs.from_json({"kind": "audit"}))["items"]
    assert [r["action"] for r in rows] == ["audit.prune"] and rows[0]["meta"]["removed"] == 1


def _cli(daemon: Daemon, *args: str, input_text: str | None = None) -> Result:
    base = ["--url", daemon.url, "--token", daemon.token or ""]
    return CliRunner().invoke(cli, [*base, *args], input=input_text, catch_exceptions=False)


def test_cli_export_wipe_import_logs_and_panel_link(daemon: Daemon, tmp_path: Path) -> None:
    with daemon.client() as client:
        client.post("/api/v1/memory/add", json={"content": "Run make lint before pushing."}).raise_for_status()
    daemon.drain()
    archive = tmp_path / "backup.zip"
    exported = _cli(daemon, "export", "--out", str(archive))
    assert exported.exit_code == 0 and f"to {archive}" in exported.output and archive.is_file()

    dry = _cli(daemon, "import-store", str(archive), "--dry-run")
    assert dry.exit_code == 0 and dry.output.startswith("Dry run: would add 0 rows")

    declined = _cli(daemon, "wipe", input_text="n\n")
    assert declined.exit_code == 1 and "Aborted" in declined.output
    wiped = _cli(daemon, "wipe", "--yes", "--no-backup")
    assert wiped.exit_code == 0 and "memories" in wiped.output and "No backup was written." in wiped.output

    restored = _cli(daemon, "import-store", str(archive), "--on-conflict", "error")
    assert restored.exit_code == 0 and "memories" in restored.output
    refused = _cli(daemon, "import-store", str(archive), "--on-conflict", "error")
    assert refused.exit_code == 1 and "already exist" in refused.output

    audit = _cli(daemon, "logs")
    assert audit.exit_code == 0
    lines = [line for line in audit.output.splitlines() if "store." in line]
    assert [line.split()[1] for line in lines][-3:] == ["store.export", "store.wipe", "store.import"]
    assert all(line.split()[2] == "cli" for line in lines)
    assert "create" in _cli(daemon, "logs", "--changes").output

    link = _cli(daemon, "panel", "--no-open").output.splitlines()[-1]
    assert link.startswith(f"{daemon.url}/panel/login?code=")
    with httpx.Client(follow_redirects=False) as browser:
        signed_in = browser.get(link)
        assert signed_in.status_code == 303 and "HttpOnly" in signed_in.headers["set-cookie"]
        assert browser.get(f"{daemon.url}/panel").status_code == 200
        assert browser.get(link).status_code == 401
    with httpx.Client() as anonymous:
        assert anonymous.post(f"{daemon.url}/api/v1/panel/sign-in").status_code == 401  # needs the API token


def test_every_governance_action_writes_an_audit_row(isolated_home: Path, embedder: Embedder, tmp_path: Path) -> None:
    svc = _review_service(isolated_home, embedder)
    try:
        fact = svc.add_memory(AddMemory.from_json({"content": "The release branch is called main."}), Namespace())
        doomed = svc.add_memory(AddMemory.from_json({"content": "The build server is ci-old.example."}), Namespace())
        svc.keys_call(
            key_args("correct", {"memory_id": fact["id"], "content": "The release branch is called trunk."}), PANEL
        )
        forgotten = cast(
            KeyForgotten, svc.keys_call(key_args("forget", {"memory_id": doomed["id"], "reason": "moved"}), PANEL)
        )
        svc.restore_tombstone(must(forgotten["tombstone_id"]), RestoreTombstone.from_json({"reason": "back"}), PANEL)
        svc.give_feedback(Feedback.from_json({"id": fact["id"], "polarity": "positive"}), PANEL)
        pending = [
            _writer(svc).upsert(LayerWrite("L2", f"policy:{n}", f"Policy {n}", f"Always do {n} first.", [], {}))
            for n in ("lint", "format")
        ]
        svc.governance.review(pending[0].id, ReviewDecision.from_json({"decision": "approve"}), PANEL)
        svc.governance.review(pending[1].id, ReviewDecision.from_json({"decision": "reject"}), PANEL)
        dream = svc.dream_run(DreamRun.from_json({}), PANEL)
        svc.dream_restore(str(dream["id"]), DreamRestore.from_json({"force": True}), PANEL)
        svc.reload_config(ReloadConfig.from_json({}), PANEL)
        archive = tmp_path / "all.zip"
        svc.ownership.export(Export.from_json({"out": str(archive)}), PANEL)
        svc.ownership.wipe(Wipe.from_json({"confirm": True, "backup": False}), PANEL)
        svc.ownership.import_(ImportStore.from_json({"path": str(archive)}), PANEL)
        svc.delete_memory(must(fact["id"]), DeleteMemory.from_json({}), PANEL)

        rows = svc.governance.logs_page(ListLogs.from_json({"kind": "audit", "limit": "200"}))["items"]
        expected = {
            "memory.correct",
            "memory.forget",
            "tombstone.restore",
            "feedback",
            "review.approve",
            "review.reject",
            "dream.run",
            "dream.restore",
            "config.reload",
            "store.export",
            "store.wipe",
            "store.import",
            "memory.delete",
        }
        by_action = {row["action"]: row for row in rows}
        assert expected <= set(by_action), expected - set(by_action)
        for action in expected:  # who, what and when on every row
            row = by_action[action]
            assert row["actor"]["source"] == "panel" and row["createdAt"] and row["targetKind"], row
    finally:
        svc.close()


def test_logs_follow_prints_new_audit_rows(daemon: Daemon) -> None:
    follower = subprocess.Popen(
        [sys.executable, "-m", "memmy", "--url", daemon.url, "--token", daemon.token or "", "logs", "--follow"],
        env=daemon.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(60, follower.kill)  # never hang the suite if the row does not come
    watchdog.start()
    try:
        assert follower.stdout is not None
        with daemon.client() as client:
            made = client.post("/api/v1/memory/add", json={"content": "Follow me into the audit log."}).json()
            time.sleep(1.5)  # let the follower print the existing rows and start polling
            client.request("DELETE", f"/api/v1/memory/{made['id']}").raise_for_status()
        seen = []
        for line in follower.stdout:
            seen.append(line)
            if "memory.delete" in line and made["id"] in line:
                break
        assert any(made["id"] in line for line in seen)
    finally:
        watchdog.cancel()
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=30)


def test_doctor_checks_config_daemon_token_hooks_vectors_and_model(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in daemon.env().items():  # the CLI runs in-process: give it the daemon's home, token and store
        if name in ("HOME", "MEMMY_HOME", "MEMMY_MEMORY_TOKEN", "MEMMY_MEMORY_BACKEND", "MEMMY_POSTGRES_DSN"):
            monkeypatch.setenv(name, value)
    with daemon.client() as client:
        client.post("/api/v1/memory/add", json={"content": "Doctor: the docs live in docs/."}).raise_for_status()
    daemon.drain()
    healthy = _cli(daemon, "--json", "doctor")
    assert healthy.exit_code == 0, healthy.output
    assert json.loads(healthy.output)["findings"] == []

    wrong_token = CliRunner().invoke(cli, ["--url", daemon.url, "--token", "not-the-token", "doctor"])
    assert wrong_token.exit_code == 1 and "token_refused" in wrong_token.output
    assert "fix: put the daemon's token in" in wrong_token.output

    down = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "--token", "x", "doctor"])
    assert "daemon_down" in down.output and "fix: memmy-memory serve" in down.output

    hook_json = daemon.home / ".memmy" / "hook.json"
    hook_json.parent.mkdir(exist_ok=True)  # a daemon on PostgreSQL writes no store file under it
    hook_json.write_text(json.dumps({"endpoint": "http://127.0.0.1:9", "token": daemon.token}))
    try:
        misdirected = _cli(daemon, "doctor")
        assert misdirected.exit_code == 1 and "sends hooks to http://127.0.0.1:9" in misdirected.output
        assert f"fix: memmy-memory init --endpoint {daemon.url}" in misdirected.output
    finally:
        hook_json.unlink()

    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("memmyMemory:\n  server:\n    port: not-a-port\n")
    invalid = CliRunner().invoke(cli, ["--config", str(bad_config), "doctor"])
    assert invalid.exit_code == 1 and "config_invalid" in invalid.output and f"fix: edit {bad_config}" in invalid.output


@only_sqlite
def test_doctor_on_a_sqlite_file_reports_missing_vectors_and_a_missing_model(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.add_memory(AddMemory.from_json({"content": "Not embedded yet: the worker has not run."}), Namespace())
    db = Path(service.config.storage.sqlite_path)
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "doctor", "--db", str(db)])
    assert "vectors_missing" in result.output and "1 live memories" in result.output
    assert "fix: memmy-memory worker run" in result.output
    monkeypatch.setenv("MEMMY_MODEL_DIR", str(db.parent / "no-model-here"))
    missing = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "doctor", "--db", str(db)])
    assert (
        missing.exit_code == 1
        and "model_missing" in missing.output
        and "fix: memmy-memory model fetch" in missing.output
    )
