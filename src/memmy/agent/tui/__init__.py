"""The full-screen TUI (Textual): input line, slash menu, queue, streaming output, status line."""
