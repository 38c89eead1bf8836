"""``GET /docs``: a browsable page of the HTTP API, rendered from the OpenAPI document.

The page, its script and its stylesheet ship in the package (``memmy/server/static``) and are inlined into one
response together with the document, so it works offline and needs no CDN.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from memmy.server.openapi import openapi_document


def _asset(name: str) -> str:
    return (resources.files("memmy.server") / "static" / name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def docs_html() -> str:
    """The complete page (template + CSS + JS + the OpenAPI document)."""
    document = json.dumps(openapi_document(), ensure_ascii=True).replace("</", "<\\/")
    return (
        _asset("docs.html")
        .replace("/*CSS*/", _asset("docs.css"))
        .replace("/*JS*/", _asset("docs.js"))
        .replace("/*OPENAPI*/", document)
    )


async def docs_page(request: Request) -> Response:
    """Serve the API page."""
    return HTMLResponse(docs_html())
