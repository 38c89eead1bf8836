"""Scheduled tasks: ``memmy schedule add|list|remove``, the schedules file's claims (a firing is recorded before it
runs, so it runs once), and a real ``memmy serve`` that fires a schedule as a turn in its own session, unread in
the task list, once, also across a restart of the process (a one-off missed while it was down fires at start)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memmy.agent.cli import cli
from memmy.agent.schedule import ScheduleStore, next_cron, parse_at
from memmy.errors import ConfigError
from tests.agent_stubs import ModelStub, last_user_text, run_model_stub
from tests.workbench_client import Bench, serve_process


def _schedule(home: Path, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["schedule", *args], env={"HOME": str(home), "MEMMY_HOME": str(home / ".memmy")})
    assert result.exit_code == 0, result.output
    return json.loads(result.output) if "--json" in args else result.output


def _until(check: Callable[[], Any], what: str, deadline_s: float = 60) -> Any:
    """Poll ``check`` until it returns something true; the deadline is generous, never the thing measured."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _asked(stub: ModelStub, task: str) -> int:
    return sum(1 for r in stub.requests if last_user_text(r["body"]) == task)


def test_a_firing_is_claimed_once_and_a_missed_cron_fires_once(tmp_path: Path) -> None:
    store = ScheduleStore(tmp_path)
    now = time.time()
    once = store.add("water the plants", at=now - 5)
    cron = store.add("weekly report", cron="0 9 * * 1")
    assert store.claim_due(now) == [once]
    assert store.claim_due(now) == []  # a second server (or a restart after a kill) finds nothing to run
    fired = store.get(once.id)
    assert fired is not None and fired.next_at is None and fired.fired_count == 1
    assert cron.next_at is not None
    later = cron.next_at + 3 * 7 * 86400  # three missed Mondays
    assert [s.id for s in ScheduleStore(tmp_path).claim_due(later)] == [cron.id]
    moved = store.get(cron.id)
    assert moved is not None and moved.fired_count == 1 and moved.next_at == next_cron("0 9 * * 1", later)
    assert datetime.fromtimestamp(moved.next_at).weekday() == 0
    assert store.remove(cron.id) and not store.remove(cron.id)


def test_parsing_times_and_refusals(tmp_path: Path) -> None:
    now = datetime(2026, 12, 5, 10, 0).timestamp()
    assert parse_at("+90s", now) == now + 90 and parse_at("+2h", now) == now + 7200
    assert parse_at("09:30", now) == datetime(2026, 12, 6, 9, 30).timestamp()  # passed today: tomorrow
    assert parse_at("2026-12-05T11:15", now) == datetime(2026, 12, 5, 11, 15).timestamp()
    with pytest.raises(ConfigError):
        parse_at("soon", now)
    store = ScheduleStore(tmp_path)
    for bad in ({"cron": "every day"}, {"cron": "61 * * * *"}, {}, {"at": now, "cron": "* * * * *"}):
        with pytest.raises(ConfigError):
            store.add("x", **bad)
    with pytest.raises(ConfigError):
        store.add("  ", at=now)
    assert store.all() == []


def test_the_cli(isolated_home: Path) -> None:
    added = _schedule(isolated_home, "add", "tidy the inbox", "--cron", "0  9 * * 1-5", "--json")
    assert added["cron"] == "0 9 * * 1-5" and added["kind"] == "cron" and added["next"] > time.time()
    once = _schedule(isolated_home, "add", "call mum", "--at", "+1h", "--json")
    listed = _schedule(isolated_home, "list", "--json")
    assert [s["id"] for s in listed] == [once["id"], added["id"]] or [s["id"] for s in listed] == [
        added["id"],
        once["id"],
    ]
    assert "call mum" in _schedule(isolated_home, "list")
    said = _schedule(isolated_home, "add", "stretch", "--at", "+2h")
    assert "scheduled " in said and "memmy serve is not running" in said  # nothing listens on serve.port here
    _schedule(isolated_home, "remove", said.split()[1].rstrip(":"))
    assert "removed" in _schedule(isolated_home, "remove", once["id"])
    env = {"HOME": str(isolated_home), "MEMMY_HOME": str(isolated_home / ".memmy")}
    missing = CliRunner().invoke(cli, ["schedule", "remove", once["id"]], env=env)
    assert missing.exit_code != 0 and "no schedule" in missing.output
    bad = CliRunner().invoke(cli, ["schedule", "add", "x", "--cron", "whenever"], env=env)
    assert bad.exit_code == 2 and "cron" in bad.output
    assert [s["id"] for s in _schedule(isolated_home, "list", "--json")] == [added["id"]]


def test_serve_fires_a_schedule_once_also_across_a_restart(tmp_path: Path) -> None:
    home = tmp_path
    with run_model_stub() as stub:
        with serve_process(home, stub) as base:
            bench = Bench(base)
            dropped = _schedule(home, "add", "never mind", "--cron", "0 3 * * *", "--json")
            first = _schedule(home, "add", "summarise my day", "--at", "+2s", "--json")
            upcoming = {s["id"] for s in bench.state()["schedules"]}
            assert upcoming == {first["id"], dropped["id"]}  # upcoming, in the task list
            assert bench.post(f"/api/schedules/{dropped['id']}/remove").json() == {"ok": True}
            assert bench.post(f"/api/schedules/{dropped['id']}/remove").status_code == 404
            assert bench.http.post(f"/api/schedules/{first['id']}/remove").status_code == 403  # no CSRF token

            def fired_row() -> Any:
                rows = [t for t in bench.state()["sessions"] if t["name"].startswith(f"schedule:{first['id']}-")]
                return rows[0] if rows and rows[0]["unread"] else None

            row = _until(fired_row, "the first schedule's turn")
            assert row["title"] == "summarise my day" and row["group"] == "today"
            task = bench.task(row["id"])
            assert [m["content"] for m in task["messages"]] == ["summarise my day", "echo: summarise my day"]
            assert bench.state()["schedules"] == []  # done: no longer upcoming
            done = _schedule(home, "list", "--json")[0]
            assert done["fired"] == 1 and done["next"] is None and done["session"] == row["id"]
            second = _schedule(home, "add", "check the backups", "--at", "+1s", "--json")
        # memmy serve is down: the second schedule comes due without a process to run it
        _until(lambda: time.time() > second["next"] + 0.5, "the second schedule to come due")
        with serve_process(home, stub) as base:
            bench = Bench(base)
            _until(
                lambda: [t for t in bench.state()["sessions"] if t["name"].startswith(f"schedule:{second['id']}-")],
                "the missed schedule to fire at start",
            )
            _until(lambda: _asked(stub, "check the backups") == 1, "the missed schedule's request")
            assert _asked(stub, "summarise my day") == 1  # the first one did not fire again after the restart
            sessions = [t for t in bench.state()["sessions"] if t["name"].startswith("schedule:")]
            assert len(sessions) == 2
