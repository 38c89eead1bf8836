"""Agent integrations: installers (hooks, plugins, skills) and the lean hook runtime's install side."""
