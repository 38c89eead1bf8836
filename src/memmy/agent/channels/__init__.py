"""IM channels: the agent with memory reached from chat apps (Telegram first; Discord, Feishu, DingTalk, WeChat
and iMessage by the same contract).

This package owns the channel contract (:mod:`base`), the channel settings read from ``channels.<name>`` in
config.yaml (:mod:`settings`), who may talk to a bot (:mod:`access`: allow-lists and one-time pairing codes),
turning an answer into messages a platform accepts (:mod:`text`), the per-chat sessions and ordered queues that
run agent turns (:mod:`router`), each platform's adapter on its maintained SDK (:mod:`telegram`), and the
supervisor that keeps every channel running with backoff (:mod:`supervisor`). It runs turns on the agent runtime
(:mod:`memmy.agent.runtime`); nothing else in ``memmy.agent`` imports it but ``serve`` (which hosts the supervisor)
and the CLI.
"""
