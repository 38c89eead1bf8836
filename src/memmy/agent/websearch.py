"""The ``web_search`` tool: one query to the configured search provider (``tools.web.search``), the top results
as ``title / url / snippet``. Providers: ``ddgs`` (the default, no key: the ``ddgs`` metasearch library, or
DuckDuckGo's HTML endpoint below where that library is not installed), ``duckduckgo`` (its keyless HTML endpoint,
read by memmy's own parser), ``searxng`` (a SearXNG instance's JSON API, ``apiBase`` required), ``brave`` and
``tavily`` (``apiKey`` required); ``none`` turns searching off. Honest offline: an unreachable provider or a
missing key is a clear error the model reads, never an empty result that looks like "nothing found"."""

from __future__ import annotations

import asyncio
import html
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from memmy.agent.config import SEARCH_PROVIDERS as PROVIDERS
from memmy.agent.config import SearchConfig

DEFAULT_BASES = {
    "duckduckgo": "https://html.duckduckgo.com/html/",
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
}


class SearchError(Exception):
    """The search could not be made; the message says why and what to configure."""


@dataclass(frozen=True)
class Hit:
    """One search result."""

    title: str
    url: str
    snippet: str


class _DuckDuckGoPage(HTMLParser):
    """Results of DuckDuckGo's HTML endpoint: ``a.result__a`` (title, link) and ``.result__snippet``."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: list[dict[str, str]] = []
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "a" and "result__a" in classes:
            self.hits.append({"title": "", "url": _ddg_target(dict(attrs).get("href") or ""), "snippet": ""})
            self._field = "title"
        elif "result__snippet" in classes and self.hits:
            self._field = "snippet"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("a", "td", "div"):
            self._field = None

    def handle_data(self, data: str) -> None:
        if self._field and self.hits:
            self.hits[-1][self._field] += data


def _ddg_target(href: str) -> str:
    """DuckDuckGo wraps result links as ``//duckduckgo.com/l/?uddg=<url>``."""
    parts = urlsplit(href)
    target = parse_qs(parts.query).get("uddg")
    return target[0] if target else html.unescape(href)


async def search(config: SearchConfig, query: str, limit: int | None = None) -> list[Hit]:
    """Run one search; raises SearchError with a clear reason."""
    count = max(1, min(int(limit or config.max_results), 20))
    provider = effective_provider(config.provider)
    if provider in ("", "none"):
        raise SearchError(
            "web search is off: no search provider is configured "
            "(set tools.web.search.provider to ddgs, duckduckgo, searxng, brave or tavily)"
        )
    if provider not in PROVIDERS:
        raise SearchError(f"unknown search provider {provider!r} (tools.web.search.provider): {', '.join(PROVIDERS)}")
    if provider in ("brave", "tavily") and not config.api_key:
        raise SearchError(f"the {provider} search provider needs tools.web.search.apiKey")
    if provider == "ddgs":
        return (await _ddgs(config, query, count))[:count]
    base = config.api_base or DEFAULT_BASES.get(provider, "")
    if not base:
        raise SearchError(f"the {provider} search provider needs tools.web.search.apiBase (your instance's URL)")
    try:
        async with httpx.AsyncClient(timeout=config.timeout_s, follow_redirects=True) as client:
            hits = await _ask(client, provider, base, config.api_key, query, count)
    except httpx.TimeoutException:
        raise SearchError(f"{provider} search ({base}) did not answer within {config.timeout_s:g} s") from None
    except httpx.ConnectError:
        raise SearchError(f"cannot reach the {provider} search provider at {base} (offline?)") from None
    except httpx.HTTPStatusError as exc:
        raise SearchError(f"{provider} search answered HTTP {exc.response.status_code}") from None
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise SearchError(f"{provider} search failed: {type(exc).__name__}: {exc}") from None
    return hits[:count]


async def _ask(client: httpx.AsyncClient, provider: str, base: str, key: str, query: str, count: int) -> list[Hit]:
    headers = {"user-agent": "memmy-agent", "accept": "application/json"}
    if provider == "duckduckgo":
        response = await client.post(base, data={"q": query}, headers={"user-agent": "memmy-agent"})
        response.raise_for_status()
        page = _DuckDuckGoPage()
        page.feed(response.text)
        return [_hit(h["title"], h["url"], h["snippet"]) for h in page.hits if h["url"]]
    if provider == "searxng":
        url = base.rstrip("/") + ("" if base.rstrip("/").endswith("/search") else "/search")
        response = await client.get(url, params={"q": query, "format": "json"}, headers=headers)
        response.raise_for_status()
        return [_hit(r.get("title"), r.get("url"), r.get("content")) for r in response.json().get("results") or []]
    if provider == "brave":
        params: dict[str, Any] = {"q": query, "count": count}
        response = await client.get(base, params=params, headers={**headers, "x-subscription-token": key})
        response.raise_for_status()
        results = (response.json().get("web") or {}).get("results") or []
        return [_hit(r.get("title"), r.get("url"), r.get("description")) for r in results]
    body = {"api_key": key, "query": query, "max_results": count}
    response = await client.post(base, json=body, headers=headers)
    response.raise_for_status()
    return [_hit(r.get("title"), r.get("url"), r.get("content")) for r in response.json().get("results") or []]


def effective_provider(provider: str) -> str:
    """The provider a search uses: ``ddgs`` falls back to ``duckduckgo`` (HTML) where the library is missing."""
    if provider == "ddgs":
        try:
            import ddgs  # noqa: F401 - only whether it is installed
        except ImportError:
            return "duckduckgo"
    return provider


def ddgs_hits(rows: Iterable[Mapping[str, Any]]) -> list[Hit]:
    """``ddgs`` text results (``title``, ``href``, ``body``) as hits; DuckDuckGo's redirect links unwrapped."""
    return [_hit(r.get("title"), _ddg_target(str(r.get("href") or "")), r.get("body")) for r in rows if r.get("href")]


async def _ddgs(config: SearchConfig, query: str, count: int) -> list[Hit]:
    """One ``ddgs`` text search in a worker thread (the library is synchronous). With ``apiBase``, only its
    DuckDuckGo engine asks, at that endpoint (a mirror, or a local server in tests)."""
    from ddgs import DDGS
    from ddgs.engines.duckduckgo import Duckduckgo
    from ddgs.exceptions import DDGSException, TimeoutException

    timeout = max(1, round(config.timeout_s))

    def ask() -> list[dict[str, Any]]:
        if config.api_base:
            engine = type("Endpoint", (Duckduckgo,), {"search_url": config.api_base})(timeout=timeout)
            return [vars(result) for result in engine.search(query) or []]
        return DDGS(timeout=timeout).text(query, max_results=count)

    where = config.api_base or "its search engines"
    try:
        rows = await asyncio.wait_for(asyncio.to_thread(ask), config.timeout_s * 2 + 5)
    except (TimeoutException, TimeoutError):
        raise SearchError(f"ddgs search ({where}) did not answer within {config.timeout_s:g} s") from None
    except DDGSException as exc:
        if str(exc) == "No results found.":
            return []
        raise SearchError(f"cannot reach the ddgs search provider at {where} (offline?): {str(exc)[:200]}") from None
    return ddgs_hits(rows)


def _hit(title: Any, url: Any, snippet: Any) -> Hit:
    def clean(value: Any) -> str:
        return " ".join(html.unescape(str(value or "")).split())

    return Hit(clean(title), clean(url), clean(snippet)[:500])


def render(query: str, hits: list[Hit]) -> str:
    """The tool's answer: numbered results, or an explicit 'no results'."""
    if not hits:
        return f"no results for {query!r}"
    return "\n".join(f"{n}. {h.title}\n   {h.url}\n   {h.snippet}".rstrip() for n, h in enumerate(hits, 1))
