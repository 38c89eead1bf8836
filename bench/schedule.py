"""Scheduled tasks across a kill and a restart (issue 32: "a schedule set for one minute ahead fires once, also
across a restart of the process that runs it"), with a real ``memmy serve`` and the fake provider:

1. a schedule one minute ahead; how long after its due time the provider is asked;
2. ``memmy serve`` SIGKILLed while that turn runs, started again: how many firings and provider requests;
3. a one-off that comes due while no server runs: how long after the next start it fires, and how often.

Run:  python bench/schedule.py [--ahead 60]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agent_stubs import ModelStub, Reply, last_user_text, run_model_stub, write_agent_config  # noqa: E402
from tests.conftest import free_port  # noqa: E402

from memmy.agent.schedule import ScheduleStore  # noqa: E402


def brain(body: dict[str, Any]) -> Reply:
    return Reply(text="done: " + last_user_text(body), delay_s=5.0)  # a turn long enough to be killed in


def asked(stub: ModelStub, task: str) -> int:
    return sum(1 for r in stub.requests if last_user_text(r["body"]) == task)


def start(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-c", "from memmy.agent.cli import main; main()", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("memmy serve did not start")


def wait(check: Any, deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ahead", type=float, default=60.0, help="seconds ahead of now (default 60)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="memmy-schedule-"))
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "HOME": str(home), "MEMMY_HOME": str(home / ".memmy"), "PYTHONPATH": src}
    with run_model_stub(brain) as stub:
        port = free_port()
        write_agent_config(home, stub, extra=f"serve: {{port: {port}, token: bench}}\n", memory=False)
        store = ScheduleStore(home / ".memmy")
        first = start(env, port)
        item = store.add("the scheduled task", at=time.time() + args.ahead)
        wait(lambda: asked(stub, "the scheduled task"), args.ahead + 60)
        print(f"1. due in {args.ahead:g} s; the provider was asked {time.time() - (item.next_at or 0):.2f} s after it")
        first.send_signal(signal.SIGKILL)
        first.wait()
        second = start(env, port)
        time.sleep(5)  # a refiring would have been claimed at the first poll
        fired = store.get(item.id)
        count = fired.fired_count if fired else -1
        print(f"2. SIGKILL mid-turn, restart: {count} firing recorded, {asked(stub, 'the scheduled task')} request")
        missed = store.add("missed while down", at=time.time() + 1)
        second.terminate()
        second.wait()
        time.sleep(2)
        started = time.time()
        third = start(env, port)
        wait(lambda: asked(stub, "missed while down"))
        took = time.time() - started
        time.sleep(3)
        print(f"3. missed while down: fired {took:.2f} s after the restart began, {asked(stub, missed.task)} request")
        third.terminate()
        third.wait()


if __name__ == "__main__":
    main()
