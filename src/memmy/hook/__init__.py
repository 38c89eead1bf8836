"""The lean hook runtime agents execute (standard library only, so it starts fast)."""
