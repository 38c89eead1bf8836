"""History import end to end: idempotency, appended turns, truncated files, redaction, watermark, jobs, kill -9."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from memmy.commands.answers import ImportJob, JSONObject
from memmy.commands.imports import StartScan
from memmy.commands.memory import SearchMemory
from memmy.commands.panel import PanelItems
from memmy.namespace import Namespace
from memmy.service import MemoryService
from tests.claude_transcripts import Transcript
from tests.conftest import Daemon, store_query


def sync(service: MemoryService, **body: object) -> ImportJob:
    return service.imports.run_sync(StartScan.from_json({"sources": ["claude_code"], **body}))


def totals(result: ImportJob) -> JSONObject:
    return result["totals"]


def project_transcript(home: Path, cwd: Path, turns: int, start: int = 0) -> Transcript:
    transcript = Transcript(home, str(cwd))
    for i in range(start, start + turns):
        transcript.user(f"step {i}: make the flaky test number {i} deterministic")
        transcript.tool("Bash", {"command": f"pytest tests/test_{i}.py"}, f"FAILED tests/test_{i}.py::test_x")
        transcript.assistant(f"Fixed test {i} by seeding the random generator.")
    return transcript


def test_import_is_idempotent_and_picks_up_appended_turns(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    transcript = project_transcript(isolated_home, repo, 3)
    transcript.write()
    first = sync(importer_service)
    assert totals(first)["turnsAdded"] == 3 and totals(first)["failed"] == 0
    assert first["sources"][0]["watermarkAdvanced"] is True
    again = sync(importer_service)
    assert totals(again)["turnsAdded"] == 0
    transcript.jump_to_now()
    for i in range(3, 5):
        transcript.user(f"step {i}: also check test {i}")
        transcript.assistant(f"Test {i} passes now.")
    transcript.write()
    appended = sync(importer_service)
    assert totals(appended)["turnsAdded"] == 2 and totals(appended)["turnsExisting"] == 3

    items = importer_service.panel.items(PanelItems.from_json({"pageSize": "50"}))["items"]
    assert len(items) == 5 and {i["sourceAgent"] for i in items} == {"claude_code"}
    assert {i["projectId"] for i in items} == {str(repo)}
    first_turn = next(i for i in items if "flaky test number 0" in i["summary"])
    detail = importer_service.get_memory(first_turn["id"])
    raw = detail["refs"]["rawTurn"]
    assert raw["userText"].startswith("step 0") and raw["assistantText"].startswith("Fixed test 0")
    assert raw["toolCalls"][0]["name"] == "Bash" and "FAILED tests/test_0.py" in raw["toolCalls"][0]["output"]


def test_imported_turns_are_recallable_only_once_indexed(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    project_transcript(isolated_home, tmp_path / "p", 1).write()
    sync(importer_service)
    query = {"query": "flaky test number 0 deterministic", "scope": "pooled"}
    assert importer_service.search(SearchMemory.from_json(query), Namespace())["sourceMemoryIds"] == []
    importer_service.indexer.drain()
    assert len(importer_service.search(SearchMemory.from_json(query), Namespace())["sourceMemoryIds"]) == 1


def test_truncated_last_line_waits_then_completes(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    transcript = project_transcript(isolated_home, tmp_path / "p", 2)
    transcript.user("step 2: one more thing")
    transcript.assistant("Done with the last thing.")
    transcript.write(truncate_last=True)  # the answer line is half written
    partial = sync(importer_service)
    assert totals(partial)["turnsAdded"] == 2 and totals(partial)["turnsWaiting"] == 1
    assert partial["sources"][0]["skipped"].get("truncated_line") == 1
    assert partial["sources"][0]["watermarkAdvanced"] is True  # a waiting turn does not hold the cursor back
    transcript.write()  # the answer line is complete now (same timestamp as before)
    complete = sync(importer_service)
    assert totals(complete)["turnsAdded"] == 1 and totals(complete)["turnsWaiting"] == 0
    assert complete["sources"][0]["watermarkAdvanced"] is True


def test_no_secret_reaches_store_fts_or_vectors(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    key = "sk-proj-" + "Q7w8E9r0T1" * 5
    transcript = Transcript(isolated_home, str(tmp_path / "p"))
    transcript.user(f"my key is {key} and 数据库密码是hunter22secret, deploy please")
    transcript.tool("Bash", {"command": f"OPENAI_API_KEY={key} ./deploy.sh"}, "Authorization: Bearer abcdefgh12345678")
    transcript.assistant("Deployed. Remember: never paste keys.")
    transcript.write()
    result = sync(importer_service)
    assert totals(result)["turnsAdded"] == 1
    assert sum(result["sources"][0]["redacted"].values()) >= 3
    importer_service.indexer.drain()
    dump = "\n".join(  # every column of every row, on either backend (the tsvector's lexemes included)
        str(tuple(row))
        for table in ("memories", "raw_turns", "memories_fts", "embedding_retry_queue")
        for row in importer_service.store.query(f"SELECT * FROM {table}")
    )
    for secret in (key, "hunter22secret", "abcdefgh12345678"):
        assert secret not in dump
    assert "[REDACTED:openai_api_key]" in dump


def test_oversized_turn_is_skipped_and_counted(
    importer_service: MemoryService, isolated_home: Path, tmp_path: Path
) -> None:
    transcript = Transcript(isolated_home, str(tmp_path / "p"))
    transcript.user("dump the log")
    transcript.tool("Bash", {"command": "cat big.log"}, "line of log output\n" * 130_000)
    transcript.assistant("That is a big log.")
    transcript.user("thanks, now summarise it")
    transcript.assistant("It is mostly repeated lines.")
    transcript.write()
    result = sync(importer_service)
    assert totals(result)["turnsAdded"] == 1 and totals(result)["skipped"]["turn_over_2mib"] == 1


def test_dry_run_deep_confirm_and_since(importer_service: MemoryService, isolated_home: Path, tmp_path: Path) -> None:
    project_transcript(isolated_home, tmp_path / "p", 2).write()
    dry = sync(importer_service, dryRun=True)
    assert totals(dry)["turnsAdded"] == 2 and importer_service.panel.items(PanelItems.from_json({}))["total"] == 0
    with pytest.raises(Exception, match="confirm"):
        sync(importer_service, mode="full")
    later = sync(importer_service, since="2030-01-01T00:00:00Z")
    assert totals(later)["turnsAdded"] == 0 and later["sources"][0]["skipped"]["before_watermark"] == 1
    deep = sync(importer_service, mode="full", confirm=True)
    assert totals(deep)["turnsAdded"] == 2


def test_import_job_over_http_sse_and_cli(fresh_daemon: Daemon, tmp_path: Path) -> None:
    transcript = project_transcript(fresh_daemon.home, tmp_path / "web", 4)
    transcript.write()
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        listed = client.get("/api/v1/sources").json()
        assert [s["source"] for s in listed["sources"]] == ["claude_code"]
        job = client.post("/api/v1/sources/scan", json={"sources": ["claude_code"]}).json()
        events = []
        with client.stream("GET", f"/api/v1/sources/scan/{job['jobId']}/events") as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1]["state"] in ("done", "stopped", "failed"):
                        break
        assert events[-1]["state"] == "done" and events[-1]["totals"]["turnsAdded"] == 4
        assert client.get(f"/api/v1/sources/scan/{job['jobId']}").json()["totals"]["turnsAdded"] == 4
        assert client.get("/api/v1/sources/scan/import_nope").status_code == 404
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["--url", fresh_daemon.url, "--token", str(fresh_daemon.token), "--json", "import", "--source", "claude_code"],
    )
    assert result.exit_code == 0, result.output
    repeat = json.loads(result.output[result.output.index("{") :])
    assert repeat["state"] == "done" and repeat["totals"]["turnsAdded"] == 0  # a repeat sync adds nothing
    assert repeat["totals"]["skipped"].get("unchanged_conversation") == 1  # the cursor is inclusive
    human = runner.invoke(cli, ["--url", fresh_daemon.url, "--token", str(fresh_daemon.token), "sources"])
    assert "claude_code" in human.output and "4" in human.output
    deep = runner.invoke(cli, ["--url", fresh_daemon.url, "--token", str(fresh_daemon.token), "import", "--deep"])
    assert deep.exit_code == 2 and "--yes" in deep.output


def test_kill_9_during_a_large_import_loses_and_duplicates_nothing(fresh_daemon: Daemon, tmp_path: Path) -> None:
    total = 0
    for n in range(10):
        transcript = Transcript(fresh_daemon.home, str(tmp_path / f"proj{n % 3}"))
        for i in range(520):
            transcript.user(f"conversation {n} request {i}: rename variable v{i} in module m{n}")
            transcript.assistant(f"Renamed v{i} in m{n}.")
            total += 1
        transcript.write()
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        job = client.post("/api/v1/sources/scan", json={"mode": "full", "confirm": True}).json()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = client.get(f"/api/v1/sources/scan/{job['jobId']}").json()
            if 500 <= status["totals"]["turnsAdded"]:
                break
            time.sleep(0.05)
    assert status["state"] == "running", "the import finished before it could be interrupted"
    fresh_daemon.stop(signal.SIGKILL)
    fresh_daemon.start()
    with fresh_daemon.client() as client:
        job = client.post("/api/v1/sources/scan", json={"mode": "full", "confirm": True}).json()  # the same command
        while (status := client.get(f"/api/v1/sources/scan/{job['jobId']}").json())["state"] not in ("done", "failed"):
            time.sleep(0.1)
    assert status["totals"]["failed"] == 0
    [(count, distinct)] = store_query(fresh_daemon.home, "SELECT COUNT(*), COUNT(DISTINCT memory_key) FROM memories")
    assert count == distinct == total
    watermark = store_query(
        fresh_daemon.home, "SELECT latest_seen_created_at FROM source_watermarks WHERE source='claude_code'"
    )
    assert watermark and watermark[0][0] is not None
