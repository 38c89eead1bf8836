"""The OpenAI-compatible chat stub of the tests: it lives in ``bench/llm_stub.py`` (the benchmarks use it too)."""

from __future__ import annotations

from bench.llm_stub import Answer, ChatStub, Reply, run_chat_stub

__all__ = ["Answer", "ChatStub", "Reply", "run_chat_stub"]
