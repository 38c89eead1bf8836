"""The workbench's figures (issue 32), measured in Debian's chromium (Playwright) against a real ``memmy serve``
process and the local fake provider (``tests/agent_stubs.py``) streaming 50 tokens/s (one word every 20 ms):

- first token on screen: from the moment the provider wrote the first text chunk to the moment the page put it in
  the DOM (a MutationObserver reading ``performance.timeOrigin + performance.now()``; same machine, same clock).
  Target <= 150 ms.
- a 500-message session opens: from the click on the task to 500 messages in the stream (measured in the page).
  Target <= 300 ms.
- page weight: the workbench page and every asset it loads, without images. Target <= 300 KB.

Run:  python bench/workbench.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import Page, sync_playwright  # noqa: E402
from tests.agent_stubs import Reply, last_user_text, run_model_stub  # noqa: E402
from tests.test_panel_browser import CHROMIUM, LAUNCH_ARGS  # noqa: E402
from tests.workbench_client import serve_process, sign_in_link  # noqa: E402

from memmy.agent.sessions import Session, SessionStore  # noqa: E402

WORDS = 60
OBSERVE = """() => {
  window.__first = null;
  const stream = document.querySelector('#stream');
  if (window.__observer) window.__observer.disconnect();
  window.__observer = new MutationObserver(() => {
    const last = [...stream.querySelectorAll('.msg.assistant .md')].pop();
    if (window.__first === null && last && last.textContent.length > 0)
      window.__first = performance.timeOrigin + performance.now();
  });
  window.__observer.observe(stream, {subtree: true, childList: true, characterData: true});
}"""
OPEN = """async (id) => {
  const t0 = performance.now();
  document.querySelector(`.task[data-id="${id}"]`).click();
  await new Promise((done) => {
    const check = () => document.querySelectorAll('#stream .msg').length >= 500 ? done() : requestAnimationFrame(check);
    check();
  });
  return performance.now() - t0;
}"""


def brain(body: dict[str, Any]) -> Reply:
    """50 tokens/s: one word every 20 ms."""
    return Reply(text=" ".join(f"w{i}" for i in range(WORDS)) + " " + last_user_text(body)[-20:], chunk_delay_s=0.02)


def long_session(home: Path) -> str:
    """A saved session of 500 messages (Markdown with code blocks, like a real one)."""
    messages: list[dict[str, Any]] = []
    for n in range(250):
        messages.append({"role": "user", "content": f"Question {n}: how do I rotate the logs of service {n}?"})
        messages.append(
            {
                "role": "assistant",
                "content": f"Use **logrotate** for service {n}:\n\n- weekly\n- keep 4\n\n```conf\n/var/log/s{n}.log "
                "{\n  weekly\n  rotate 4\n}\n```\nThen run `logrotate -f` once.",
            }
        )
    session = Session(name="bench:500", messages=messages, title="Five hundred messages")
    SessionStore(home / ".memmy").save(session)
    return session.id


def first_tokens(page: Page, stub: Any, runs: int) -> list[float]:
    """Milliseconds from the provider's first text chunk to the page's DOM, per run."""
    found = []
    for run in range(runs):
        page.evaluate(OBSERVE)
        stub.sent.clear()
        page.locator("#input").fill(f"measure run {run}")
        page.locator("#input").press("Enter")
        page.wait_for_function("() => window.__first !== null", timeout=30_000)
        shown = float(page.evaluate("window.__first"))
        sent = next(t for t, chunk in stub.sent if chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
        found.append(shown - sent * 1000)
        page.locator("#stop").wait_for(state="hidden", timeout=30_000)
    return found


def page_weight(base: str, cookies: dict[str, str]) -> dict[str, int]:
    """Bytes of the page and each asset it loads (no images)."""
    with httpx.Client(base_url=base, cookies=cookies) as client:
        html = client.get("/").text
        sizes = {"/": len(html.encode())}
        for asset in ("/static/workbench.css", "/static/markdown.js", "/static/workbench.js"):
            assert asset in html, asset
            sizes[asset] = len(client.get(asset).content)
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    assert CHROMIUM, "chromium is not installed (apt-get install -y chromium)"
    home = Path(tempfile.mkdtemp(prefix="memmy-workbench-bench-"))
    with run_model_stub(brain) as stub, serve_process(home, stub) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        sid = long_session(home)
        page = browser.new_context(viewport={"width": 1280, "height": 820}).new_page()
        page.goto(sign_in_link(base))
        page.locator("#composer").wait_for()
        latencies = first_tokens(page, stub, args.runs)
        opens = []
        for _ in range(max(3, args.runs // 2)):
            page.locator("#new-task").click()
            page.wait_for_function(f"() => document.querySelector('.task[data-id=\"{sid}\"]') !== null")
            opens.append(float(page.evaluate(OPEN, sid)))
        started = time.perf_counter()
        httpx.get(f"{base}/api/sessions/{sid}", cookies={c["name"]: c["value"] for c in page.context.cookies()})
        api_ms = (time.perf_counter() - started) * 1000
        weights = page_weight(base, {c["name"]: c["value"] for c in page.context.cookies()})
        browser.close()
    total = sum(weights.values())
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"first token on screen after the provider sent it ({args.runs} runs, 50 tokens/s):")
    print(f"  median {statistics.median(latencies):.1f} ms · max {max(latencies):.1f} ms   (target <= 150 ms)")
    print(
        f"500-message session opens ({len(opens)} runs): median {statistics.median(opens):.0f} ms · "
        f"max {max(opens):.0f} ms   (target <= 300 ms; the API answer alone: {api_ms:.0f} ms)"
    )
    print(f"page weight without images: {total / 1024:.1f} KB   (target <= 300 KB)")
    for name, size in weights.items():
        print(f"  {name:<24} {size / 1024:6.1f} KB")


if __name__ == "__main__":
    main()
