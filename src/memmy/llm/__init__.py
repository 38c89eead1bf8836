"""LLM clients (OpenAI-compatible) for optional, time-boxed steps; everything works without one."""
