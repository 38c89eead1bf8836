"""The key graph: memories reachable by typed keys (entities, topics, files, commands) with weighted links.

``args`` turns a tool's arguments into typed, validated values; ``core`` reads and scores the graph;
``write`` remembers, corrects, forgets and dismisses (versioned through ``revise``); ``graph`` is the
dispatcher the service calls with one operation name (``KeyOps.call``). It never imports the service layer.
"""
