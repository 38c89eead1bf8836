"""The ``memmy`` agent: config and providers, the tool-calling loop with memory built in, sessions, the TUI and
``memmy serve`` (an OpenAI-compatible API that remembers). A front end: it talks to the memory daemon over HTTP."""
