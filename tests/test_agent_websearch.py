"""The ``web_search`` tool against local search servers in the shapes of DuckDuckGo's HTML endpoint, SearXNG's
JSON API, Brave and Tavily, and honest failures: no provider, no key, provider unreachable (offline)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from memmy.agent.config import SearchConfig, ToolsConfig, load_agent_config
from memmy.agent.tools import ToolBox
from tests.conftest import refused_endpoint

DDG_LINK = "//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.python.org%2F3%2Flibrary%2Fasyncio.html&amp;rut=x"
DDG_PAGE = f"""<html><body>
<div class="result results_links"><h2 class="result__title">
<a rel="nofollow" class="result__a" href="{DDG_LINK}">asyncio &mdash; Asynchronous I/O</a>
</h2><a class="result__snippet" href="#">asyncio is a library to write <b>concurrent</b> code.</a></div>
<div class="result"><h2><a class="result__a" href="https://realpython.com/async-io-python/">Async IO in Python</a></h2>
<div class="result__snippet">A complete walkthrough.</div></div>
</body></html>"""
# DuckDuckGo's HTML endpoint as it answers today (the shape ddgs's DuckDuckGo engine reads: div.result__body,
# its h2 title, the snippet link's href).
DDGS_PAGE = """<html><body><div class="serp__results"><div id="links" class="results">
<div class="result results_links results_links_deep web-result "><div class="links_main links_deep result__body">
<h2 class="result__title"><a rel="nofollow" class="result__a" href="https://peps.python.org/pep-0492/">PEP 492 &ndash;
Coroutines with async and await syntax</a></h2>
<div class="result__extras"><div class="result__extras__url"><a class="result__url"
href="https://peps.python.org/pep-0492/">peps.python.org/pep-0492/</a></div></div>
<a class="result__snippet" href="https://peps.python.org/pep-0492/">This PEP introduces <b>async</b> and await.</a>
<div class="clear"></div></div></div>
<div class="result results_links results_links_deep web-result "><div class="links_main links_deep result__body">
<h2 class="result__title"><a rel="nofollow" class="result__a" href="https://trio.readthedocs.io/">Trio</a></h2>
<a class="result__snippet" href="https://trio.readthedocs.io/">A friendly async library.</a>
<div class="clear"></div></div></div>
</div></div></body></html>"""


@pytest.fixture
def search_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def _send(self, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server API
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            seen.append({"path": parts.path, "query": query, "headers": dict(self.headers.items())})
            if parts.path == "/searxng/search":
                results = [{"title": "SearXNG hit", "url": "https://example.org/a", "content": "about " + query["q"]}]
                self._send(json.dumps({"results": results}))
            else:  # brave
                results = [{"title": "Brave hit", "url": "https://example.org/b", "description": "brave &amp; co"}]
                self._send(json.dumps({"web": {"results": results}}))

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
            seen.append({"path": self.path, "body": raw, "headers": dict(self.headers.items())})
            if self.path == "/ddg/html/":
                self._send(DDG_PAGE, "text/html")
            elif self.path == "/ddgs/html/":
                self._send(DDGS_PAGE, "text/html")
            else:  # tavily
                self._send(json.dumps({"results": [{"title": "Tavily hit", "url": "https://example.org/t"}]}))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def run_search(tmp_path: Path, search: SearchConfig, query: str = "python asyncio") -> tuple[str, bool]:
    box = ToolBox(ToolsConfig(web_search=search), tmp_path)
    return asyncio.run(box.call("web_search", json.dumps({"query": query})))


def test_duckduckgo_html_results(search_server: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    base, seen = search_server
    output, ok = run_search(tmp_path, SearchConfig(provider="duckduckgo", api_base=base + "/ddg/html/"))
    assert ok, output
    assert output.splitlines() == [
        "1. asyncio — Asynchronous I/O",
        "   https://docs.python.org/3/library/asyncio.html",
        "   asyncio is a library to write concurrent code.",
        "2. Async IO in Python",
        "   https://realpython.com/async-io-python/",
        "   A complete walkthrough.",
    ]
    assert seen[-1]["body"] == "q=python+asyncio"


def test_ddgs_reads_a_duckduckgo_page_through_its_own_engine(
    search_server: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    # ddgs asks real search sites; with apiBase its DuckDuckGo engine (its HTTP client and parser) asks the local
    # server instead, which is how this test reaches it offline
    base, seen = search_server
    output, ok = run_search(tmp_path, SearchConfig(provider="ddgs", api_base=base + "/ddgs/html/", max_results=1))
    assert ok, output
    assert output.splitlines() == [
        "1. PEP 492 – Coroutines with async and await syntax",
        "   https://peps.python.org/pep-0492/",
        "   This PEP introduces async and await.",
    ]
    assert seen[-1]["path"] == "/ddgs/html/" and "q=python+asyncio" in seen[-1]["body"]


def test_ddgs_result_mapping_and_the_fallback(
    tmp_path: Path, search_server: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memmy.agent import websearch

    recorded = [  # DDGS().text() rows as the library returns them
        {"title": "asyncio &mdash; docs", "href": "https://docs.python.org/3/library/asyncio.html", "body": " a  b "},
        {"title": "wrapped", "href": "//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.org%2Fx&rut=1", "body": ""},
        {"title": "no link", "href": "", "body": "dropped"},
    ]
    assert websearch.ddgs_hits(recorded) == [
        websearch.Hit("asyncio — docs", "https://docs.python.org/3/library/asyncio.html", "a b"),
        websearch.Hit("wrapped", "https://example.org/x", ""),
    ]
    assert SearchConfig().provider == "ddgs" and websearch.effective_provider("ddgs") == "ddgs"
    # without the library, ddgs falls back to memmy's own DuckDuckGo HTML reader (same endpoint setting)
    base, seen = search_server
    monkeypatch.setitem(sys.modules, "ddgs", None)  # what `import ddgs` meets where it is not installed
    assert websearch.effective_provider("ddgs") == "duckduckgo"
    output, ok = run_search(tmp_path, SearchConfig(provider="ddgs", api_base=base + "/ddg/html/"))
    assert ok and output.splitlines()[0] == "1. asyncio — Asynchronous I/O" and seen[-1]["path"] == "/ddg/html/"


def test_json_providers(search_server: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    base, seen = search_server
    output, ok = run_search(tmp_path, SearchConfig(provider="searxng", api_base=base + "/searxng"))
    assert ok and "SearXNG hit" in output and "about python asyncio" in output
    assert seen[-1]["query"] == {"q": "python asyncio", "format": "json"}
    output, ok = run_search(tmp_path, SearchConfig(provider="brave", api_base=base + "/brave", api_key="bk-1"))
    assert ok and "Brave hit" in output and "brave & co" in output
    assert seen[-1]["headers"]["x-subscription-token"] == "bk-1" and seen[-1]["query"]["count"] == "5"
    output, ok = run_search(tmp_path, SearchConfig(provider="tavily", api_base=base + "/tavily", api_key="tk"))
    assert ok and "Tavily hit" in output
    assert json.loads(seen[-1]["body"]) == {"api_key": "tk", "query": "python asyncio", "max_results": 5}


def test_honest_errors(tmp_path: Path) -> None:
    output, ok = run_search(tmp_path, SearchConfig(provider="none"))
    assert not ok and "no search provider is configured" in output and "tools.web.search.provider" in output
    output, ok = run_search(tmp_path, SearchConfig(provider="brave"))
    assert not ok and "needs tools.web.search.apiKey" in output
    output, ok = run_search(tmp_path, SearchConfig(provider="searxng"))
    assert not ok and "needs tools.web.search.apiBase" in output
    offline = refused_endpoint()
    output, ok = run_search(tmp_path, SearchConfig(provider="duckduckgo", api_base=offline, timeout_s=3))
    assert not ok and f"cannot reach the duckduckgo search provider at {offline} (offline?)" in output
    output, ok = run_search(tmp_path, SearchConfig(provider="ddgs", api_base=offline, timeout_s=3))
    assert not ok and f"cannot reach the ddgs search provider at {offline} (offline?)" in output


def test_config_keys_and_toggle(isolated_home: Path, tmp_path: Path) -> None:
    path = isolated_home / ".memmy" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(
        "tools:\n  web:\n    search: {provider: searxng, maxResults: 3, apiBase: 'http://127.0.0.1:8888'}\n",
        encoding="utf-8",
    )
    search = load_agent_config().tools.web_search
    assert (search.provider, search.max_results, search.api_base) == ("searxng", 3, "http://127.0.0.1:8888")
    assert load_agent_config().tools.web_enabled
    path.write_text("tools:\n  web: {enabled: false}\n", encoding="utf-8")
    box = ToolBox(load_agent_config().tools, tmp_path)
    assert "web_search" not in box.tools and "web_fetch" not in box.tools
    assert "web_search" in ToolBox(ToolsConfig(), tmp_path).tools  # on by default, DuckDuckGo (the docs' default)
