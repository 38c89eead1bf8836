"""The Memmy workbench: the agent with memory in the browser, served at ``/`` by the long-lived ``memmy serve``
process next to its OpenAI-compatible API. ``running_turns.py`` owns the running turns (stop, restart, queued messages,
shell approvals, an event stream that survives closing the window; uploads become text or image parts through
``memmy.agent.attachments``), ``slash_commands.py`` runs the slash commands, ``channels.py`` is the Channels page,
``routes.py`` is the HTTP edge (cookie sign-in, CSRF, JSON API, Server-Sent Events, pages) and ``static/`` holds
every asset (no build step)."""
