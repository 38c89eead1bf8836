"""No internal labels in a user-facing view: the panel's pages and the CLI's search/get show what a memory says,
never memmy's bookkeeping (``Summary:``, ``RawTurn: raw_…``, ``TraceStep: 0``, ``step 1 / … / RELATED_DEFAULT``)."""

from __future__ import annotations

import re

import httpx
import pytest
from click.testing import CliRunner

from memmy.cli.main import cli
from tests.conftest import Daemon

#: What no person should have to read.
INTERNAL = re.compile(r"RawTurn|TraceStep|Summary: |step \d+ /|RELATED_DEFAULT|IRRELEVANT|PIVOTAL")
TURNS = [
    ("fix the flaky redis lock test", "The redis lock test was flaky because of a 1s TTL; raised it to 5s."),
    ("now the redis lock test times out in CI", "Raised the CI timeout for the redis lock test to 30s."),
]


@pytest.fixture(scope="module")
def captured(daemon: Daemon) -> dict[str, str]:
    """Two captured turns of one closed session (two traces and their episode roll-up), as an agent makes them."""
    ids: dict[str, str] = {}
    with daemon.client(**{"x-memmy-source": "claude_code"}) as client:
        session = client.post("/api/v1/sessions/open", json={}).json()["sessionId"]
        for query, answer in TURNS:
            turn = client.post("/api/v1/turns/start", json={"sessionId": session, "query": query}).json()
            body = {"sessionId": session, "query": query, "answer": answer}
            done = client.post(f"/api/v1/turns/{turn['turnId']}/complete", json=body).json()
            ids.setdefault("trace", done["l1MemoryId"])
        client.post(f"/api/v1/sessions/{session}/close", json={}).raise_for_status()
    daemon.drain()
    return ids


def cli_output(daemon: Daemon, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--url", daemon.url, "--token", str(daemon.token), *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_stored_text_does_carry_the_labels(daemon: Daemon, captured: dict[str, str]) -> None:
    with daemon.client() as client:
        content = client.get(f"/api/v1/memory/{captured['trace']}").json()["content"]
    assert "RawTurn: raw_" in content and "TraceStep: 0" in content  # so the checks below can fail


def test_cli_search_and_get_show_no_internal_labels(daemon: Daemon, captured: dict[str, str]) -> None:
    found = cli_output(daemon, "search", "redis lock test")
    assert "redis lock test" in found and INTERNAL.search(found) is None, found
    episode = re.search(r"\bepisode_\w+", found)
    assert episode, found  # the roll-up of the session's two steps is among the hits
    for memory_id in (captured["trace"], episode.group(0)):
        shown = cli_output(daemon, "get", memory_id)
        assert "redis lock test" in shown and INTERNAL.search(shown) is None, shown


def test_panel_pages_show_no_internal_labels(daemon: Daemon, captured: dict[str, str]) -> None:
    with daemon.client() as client:
        link = client.post("/api/v1/panel/sign-in").json()["url"]
    with httpx.Client(base_url=daemon.url, follow_redirects=True) as browser:
        browser.get(link).raise_for_status()
        for path in (
            "/panel/memories",
            "/panel/memories/results?q=redis+lock+test",
            f"/panel/memories/{captured['trace']}",
            "/panel/recalls",
            "/panel/tasks",
            "/panel",
        ):
            page = browser.get(path)
            assert page.status_code == 200, path
            assert INTERNAL.search(page.text) is None, (path, INTERNAL.search(page.text))
        assert "redis lock test" in browser.get("/panel/memories/results?q=redis+lock+test").text


def test_readable_text_keeps_what_the_memory_says() -> None:
    from memmy.domain import readable_text  # (here, so the tests above run, and fail, on code without it)

    trace = "Summary: fix it\nRawTurn: raw_0123\nTraceStep: 0\nUser:\nfix it\nAgent:\ndone"
    assert readable_text(trace) == "fix it\nUser:\nfix it\nAgent:\ndone"
    rollup = "step 1 / run the tests / RELATED_DEFAULT\nstep 2 / pin the version / tried latest first"
    assert readable_text(rollup) == "1. run the tests\n2. pin the version / tried latest first"
    plain = "The step 1 / 2 ratio; Priority: high; Summary of the plan"
    assert readable_text(plain) == plain
